//! What a synchronize reports as lost or refused: print writes that failed, per output
//! ([`PrintErrors`]), and device requests the sandbox refused ([`Refused`]).

use std::fmt;
use std::io;

use crate::sandbox::Sandbox;

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
    /// Lines whose `Display` returned an error: each went out cut where it failed and
    /// marked with `gpuio_device::protocol::print::FORMAT_ERROR` (std's `println!` panics
    /// there). They were written; they are not among the lost ones.
    pub format_errors: u32,
}

impl fmt::Display for PrintErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device prints failed:")?;
        for (i, o) in self.outputs.iter().enumerate() {
            write!(f, "{} fd {}:", if i == 0 { "" } else { ";" }, o.fd)?;
            if o.failed_writes > 0 {
                write!(
                    f,
                    " {} write(s) failed, last error: {}; {} bytes / {} lines lost",
                    o.failed_writes,
                    io::Error::from_raw_os_error(o.errno),
                    o.lost_bytes,
                    o.lost_lines
                )?;
            }
            if o.format_errors > 0 {
                write!(
                    f,
                    "{} {} line(s) whose Display returned an error, cut there and marked {}",
                    if o.failed_writes > 0 { "," } else { "" },
                    o.format_errors,
                    gpuio_device::protocol::print::FORMAT_ERROR
                )?;
            }
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
        let last = io::Error::from_raw_os_error(self.errno);
        if self.errno == libc::EACCES {
            write!(
                f,
                "the sandbox refused {} device request(s) without running them (last error: {last})",
                self.requests
            )?;
        } else {
            write!(
                f,
                "{} device request(s) that no print made failed (last error: {last})",
                self.requests
            )?;
        }
        write!(
            f,
            "; the sandbox is {:?}: it allows {}",
            self.sandbox,
            self.sandbox.describe(self.fixed_files)
        )?;
        if self.errno == libc::EACCES && self.sandbox == Sandbox::PrintOnly {
            write!(
                f,
                "; for device file I/O, build the runtime with .sandbox(Sandbox::FileIo)"
            )?;
        }
        Ok(())
    }
}
