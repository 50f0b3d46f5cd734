//! Errors of the host runtime.

use std::fmt;
use std::io;

use crate::sandbox::Sandbox;

/// Everything the host runtime can report.
#[derive(Debug)]
pub enum Error {
    /// io_uring cannot be used here; the message names the cause.
    UringUnavailable(String),
    /// A system call failed.
    Os { what: &'static str, source: io::Error },
    /// A backend was asked for (by `GPUIO_BACKEND` or the builder) but cannot run here.
    BackendUnavailable { backend: &'static str, reason: String },
    /// A configuration value is out of range.
    Config(String),
    /// Prints that were fire-and-forget failed; nothing hung, the rest went out.
    Print(PrintErrors),
    /// A CUDA driver call failed.
    Cuda(String),
    /// An HSA runtime call failed.
    Hsa(String),
    /// None of the code objects offered is for this runtime's GPU.
    NoCodeObject {
        /// The GPU, e.g. `gfx1030 (amdgcn-amd-amdhsa--gfx1030)`.
        gpu: String,
        /// The processors there were code objects for.
        available: Vec<String>,
    },
    /// Kernel threads panicked (CPU backend) or a kernel faulted.
    Kernel(String),
    /// The kernel refused (or failed) device requests that no print made: under the
    /// io_uring sandbox, forbidden opcodes or flags, never executed.
    Refused(Refused),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UringUnavailable(why) => write!(f, "io_uring is unavailable: {why}"),
            Error::Os { what, source } => write!(f, "{what} failed: {source}"),
            Error::BackendUnavailable { backend, reason } => {
                write!(f, "the {backend} backend is unavailable: {reason}")
            }
            Error::Config(why) => write!(f, "invalid configuration: {why}"),
            Error::Print(p) => write!(f, "{p}"),
            Error::Cuda(why) => write!(f, "CUDA: {why}"),
            Error::Hsa(why) => write!(f, "HSA: {why}"),
            Error::NoCodeObject { gpu, available } => write!(
                f,
                "no code object for this GPU, {gpu}: there are code objects for [{}]",
                available.join(", ")
            ),
            Error::Kernel(why) => write!(f, "kernel failed: {why}"),
            Error::Refused(r) => write!(f, "{r}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Failed print writes, per output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrintErrors {
    /// One entry per output that had failures.
    pub outputs: Vec<OutputErrors>,
}

/// Failed writes to one file descriptor since the last report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputErrors {
    /// The file descriptor.
    pub fd: i32,
    /// Write requests that failed.
    pub failed_writes: u32,
    /// The errno of the latest failure.
    pub errno: i32,
    /// Bytes not written.
    pub lost_bytes: u64,
    /// Lines (newlines) among them.
    pub lost_lines: u64,
}

impl fmt::Display for PrintErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device prints failed:")?;
        for o in &self.outputs {
            write!(
                f,
                " fd {}: {} write(s) failed, last error {} ({}), {} bytes / {} lines lost;",
                o.fd,
                o.failed_writes,
                o.errno,
                io::Error::from_raw_os_error(o.errno),
                o.lost_bytes,
                o.lost_lines
            )?;
        }
        Ok(())
    }
}

/// Device requests the kernel refused or failed, that no print made (so nobody else
/// reports them), since the last report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// How many.
    pub requests: u32,
    /// The errno of the latest: `EACCES` when the sandbox refused it.
    pub errno: i32,
    /// The sandbox in force.
    pub sandbox: Sandbox,
    /// Whether print outputs are registered files.
    pub fixed_files: bool,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.errno == libc::EACCES {
            "refused"
        } else {
            "failed"
        };
        write!(
            f,
            "the kernel {verb} {} device io_uring request(s), last error {} ({}); the sandbox is {:?}: it allows {}",
            self.requests,
            self.errno,
            io::Error::from_raw_os_error(self.errno),
            self.sandbox,
            self.sandbox.describe(self.fixed_files),
        )
    }
}
