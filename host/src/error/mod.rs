//! Errors of the host runtime: [`Error`] and the reports it carries, what was lost or
//! refused (`lost`: [`PrintErrors`], [`Refused`]) and why a synchronize gave up (`hang`:
//! [`HangReport`]).

use std::fmt;
use std::io;

mod hang;
mod lost;

pub use hang::*;
pub use lost::*;

/// Everything the host runtime can report. New variants may come in minor releases
/// (`#[non_exhaustive]`): match the ones you handle and keep a `_` arm.
///
/// Failed prints are reported as [`Error::Print`], after the rest went out, so a caller
/// can report them and go on:
///
/// ```
/// use gpuio_host::{Backend, Error, Runtime};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// rt.launch(1, 4, || gpuio_device::println!("thread {}", gpuio_device::thread_idx()))?;
/// match rt.synchronize() {
///     Ok(()) => {}
///     Err(Error::Print(failed)) => {
///         for o in &failed.outputs {
///             eprintln!("fd {}: {} lines lost", o.fd, o.lost_lines);
///         }
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
#[non_exhaustive]
pub enum Error {
    /// io_uring cannot be used here; the message names the cause.
    UringUnavailable(String),
    /// A system call failed.
    Os {
        /// What was being done, e.g. `mmap of the print logs`.
        what: &'static str,
        /// The error it returned.
        source: io::Error,
    },
    /// A backend was asked for (by `GPUIO_BACKEND` or the builder) but cannot run here.
    BackendUnavailable {
        /// The backend asked for, or that the call needs, e.g. `hsa`.
        backend: &'static str,
        /// Why it cannot run.
        reason: String,
    },
    /// A configuration value is out of range.
    Config(String),
    /// Prints that were fire-and-forget failed; nothing hung, the rest went out.
    Print(PrintErrors),
    /// A CUDA driver call failed (its `CUresult` in [`DriverError::code`]).
    Cuda(DriverError),
    /// An HSA runtime call failed (its `hsa_status_t` in [`DriverError::code`]).
    Hsa(DriverError),
    /// A HIP runtime call failed (the `hip` feature: modules the host loaded with HIP; its
    /// `hipError_t` in [`DriverError::code`]).
    Hip(DriverError),
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
    /// [`Runtime::synchronize`](crate::Runtime::synchronize) gave up: nothing it can observe
    /// moved for the hang timeout ([`Builder::hang_timeout`](crate::Builder::hang_timeout)).
    /// The kernels and their I/O may still be running: the runtime stays as it was, and a
    /// later `synchronize` waits for them again (and succeeds if they finish).
    Hang(Box<HangReport>),
    /// A call that waits for kernels, or starts one, was made from inside a CPU kernel
    /// thread, where it would wait for itself.
    InsideKernel {
        /// The call, e.g. `Runtime::synchronize`.
        call: &'static str,
    },
    /// A call that needs the kernels done ([`Output::read`](crate::Output::read)) was made
    /// while kernels launched since the last successful synchronize may still run.
    KernelsRunning {
        /// The call, e.g. `Output::read`.
        call: &'static str,
    },
    /// The kernel set `IORING_SQ_CQ_OVERFLOW`: completions did not fit the completion queue
    /// and wait in the kernel. The device keeps no more requests in flight than the CQ
    /// holds, so this is a gpuio bug.
    CqOverflow {
        /// The SQ flags word, as read.
        sq_flags: u32,
    },
}

/// A GPU driver or runtime call that failed ([`Error::Cuda`], [`Error::Hsa`],
/// [`Error::Hip`]): the driver's own code and name, for a program to match on, and the text
/// a person reads.
///
/// ```
/// use gpuio_host::{DriverError, Error};
/// fn missing_kernel(e: &Error) -> bool {
///     matches!(e, Error::Cuda(DriverError { code: Some(500), .. })) // CUDA_ERROR_NOT_FOUND
/// }
/// # assert!(!missing_kernel(&Error::Config("x".into())));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverError {
    /// The call's result code (`CUresult`, `hsa_status_t`, `hipError_t`); `None` for a
    /// failure gpuio found itself around a call that succeeded.
    pub code: Option<i64>,
    /// The code's name, e.g. `CUDA_ERROR_NOT_FOUND` (empty without a code).
    pub name: String,
    /// What failed and why, as displayed: `cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND
    /// (500)`.
    pub message: String,
}

impl DriverError {
    /// A call that returned `code`, named `name`: "`what` failed: `name` (`code`)", with
    /// `shown` the code as the driver's tools print it (decimal for CUDA, hex for HSA).
    pub fn call(what: &str, code: i64, name: &str, shown: &str) -> DriverError {
        DriverError {
            code: Some(code),
            name: name.to_string(),
            message: if name.is_empty() {
                format!("{what} failed: code {shown}")
            } else {
                format!("{what} failed: {name} ({shown})")
            },
        }
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DriverError {}

/// Its text, where a backend's setup collects reasons as strings.
impl From<DriverError> for String {
    fn from(e: DriverError) -> String {
        e.message
    }
}

/// A failure without a driver code, in the driver's words.
impl From<String> for DriverError {
    fn from(message: String) -> DriverError {
        DriverError {
            code: None,
            name: String::new(),
            message,
        }
    }
}

/// `Debug` is the `Display` text: a `main` that returns `Result<(), gpuio::Error>` prints
/// what went wrong and the way out, as a person should read it (the variants' fields are
/// public for programs that want them).
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
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
            Error::Hip(why) => write!(f, "HIP: {why}"),
            Error::NoCodeObject { gpu, available } if available.is_empty() => write!(
                f,
                "no code object for this GPU, {gpu}: the program holds none (a build where no GPU \
                 was found builds none); build it where this GPU is, or with GPUIO_GPU_TARGETS=all, \
                 with this GPU's target among those its build script asks for \
                 (gpuio_linker::KernelCrate::nvptx or ::amdgcn)"
            ),
            Error::NoCodeObject { gpu, available } => write!(
                f,
                "no code object for this GPU, {gpu}: there are code objects for [{}]; this GPU's \
                 target must be among those the build script asks for (gpuio_linker::KernelCrate::nvptx \
                 or ::amdgcn) and be built (GPUIO_GPU_TARGETS naming it, or all)",
                available.join(", ")
            ),
            Error::Kernel(why) => write!(f, "kernel failed: {why}"),
            Error::Refused(r) => write!(f, "{r}"),
            Error::Hang(r) => write!(
                f,
                "synchronize gave up (hang timeout): {r}; the kernels and their I/O may still be \
                 running, and a later synchronize waits for them again"
            ),
            Error::InsideKernel { call } => write!(
                f,
                "{call} was called from inside a CPU kernel thread, where it would wait for the \
                 kernel it runs in: call it from a host thread"
            ),
            Error::KernelsRunning { call } => write!(
                f,
                "{call} while kernels launched since the last synchronize may still run: call \
                 Runtime::synchronize first"
            ),
            Error::CqOverflow { sq_flags } => write!(
                f,
                "the io_uring completion queue overflowed (IORING_SQ_CQ_OVERFLOW; SQ flags {sq_flags:#x}): \
                 the device keeps no more requests in flight than the CQ holds, so this is a gpuio bug"
            ),
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

#[cfg(test)]
mod tests {
    use super::Error;

    /// A program with no code object for its GPU is told how to build one, whether it holds
    /// none (built where no GPU was found) or others.
    #[test]
    fn no_code_object_names_the_way_out() {
        let none = Error::NoCodeObject {
            gpu: "NVIDIA H200 (sm_90)".into(),
            available: Vec::new(),
        }
        .to_string();
        assert!(none.contains("the program holds none"), "{none}");
        assert!(none.contains("GPUIO_GPU_TARGETS=all"), "{none}");
        assert!(none.contains("gpuio_linker::KernelCrate::nvptx or ::amdgcn"), "{none}");
        let others = Error::NoCodeObject {
            gpu: "gfx942 (amdgcn-amd-amdhsa--gfx942)".into(),
            available: vec!["gfx90a".into()],
        }
        .to_string();
        assert!(others.contains("there are code objects for [gfx90a]"), "{others}");
        assert!(others.contains("among those the build script asks for"), "{others}");
        assert!(others.contains("GPUIO_GPU_TARGETS naming it, or all"), "{others}");
    }
}
