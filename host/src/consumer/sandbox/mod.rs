//! The io_uring sandbox: the ring accepts only the requests the runtime's features need.
//!
//! Device code writes SQEs straight into the ring, so a bug (or a hostile kernel) on the GPU
//! could otherwise ask the host's kernel for anything io_uring does: open, unlink, connect,
//! ... on behalf of the host process. The kernel can refuse that itself:
//!
//! 1. the ring is created disabled (`IORING_SETUP_R_DISABLED`: SQPOLL's thread exists but
//!    consumes nothing);
//! 2. the print outputs (stdout, stderr) are registered as fixed files
//!    (`IORING_REGISTER_FILES`, slots 0 and 1), and print writes name them by index with
//!    `IOSQE_FIXED_FILE`;
//! 3. `IORING_REGISTER_RESTRICTIONS` allows only the policy's opcodes and SQE flags, and no
//!    `io_uring_register` opcode at all (nothing can be registered or changed afterwards);
//! 4. `IORING_REGISTER_ENABLE_RINGS` starts the ring (and wakes its SQPOLL thread).
//!
//! A request the policy forbids completes at once with `-EACCES` and is never executed.
//! Such a completion matches no print, so the device context counts it
//! (`Context::refused_requests`) and [`Runtime::synchronize`](crate::Runtime::synchronize)
//! returns [`crate::Error::Refused`].
//!
//! Registered files are the files `stdout_fd`/`stderr_fd` referred to when the runtime was
//! built: a later `dup2` onto those numbers does not redirect device prints (build the
//! runtime after redirecting, or turn fixed files off). A closed fd is left as an empty
//! slot: prints to it fail with `EBADF` and `synchronize` reports them, as without fixed
//! files.
//!
//! Where the kernel cannot do this (no `R_DISABLED`, restrictions refused, files not
//! registrable), the runtime still works: it prints a one-line notice (unless
//! `GPUIO_QUIET` is set) and [`Stats`](crate::Stats) reports the policy actually in force
//! (`Sandbox::Off`, `fixed_files: false`).

use gpuio_device::uapi::{IORING_OP_CLOSE, IORING_OP_FSYNC, IORING_OP_OPENAT, IORING_OP_READ, IORING_OP_WRITE};

pub(crate) mod restrictions;

/// Which io_uring requests the runtime's ring accepts ([`Builder::sandbox`](crate::Builder::sandbox)).
///
/// ```
/// use gpuio_host::{Backend, Runtime, Sandbox};
/// let rt = Runtime::builder().backend(Backend::Cpu).sandbox(Sandbox::PrintOnly).build()?;
/// // PrintOnly is in force, unless the kernel could not do it (then Off, with a notice).
/// assert!(matches!(rt.stats().sandbox, Sandbox::PrintOnly | Sandbox::Off));
/// # Ok::<(), gpuio_host::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Sandbox {
    /// What `print!`/`println!` need and nothing more: `IORING_OP_WRITE` only and, with
    /// fixed files (the default), only to the registered stdout/stderr: every SQE must
    /// carry `IOSQE_FIXED_FILE`, and no other flag. The default.
    #[default]
    PrintOnly,
    /// File I/O: `READ`, `WRITE`, `OPENAT`, `CLOSE`, `FSYNC`, on any file descriptor
    /// (`IOSQE_FIXED_FILE` allowed, not required: `OPENAT` refuses it). For device code
    /// that opens, reads and writes files.
    FileIo,
    /// No restrictions: the ring accepts every opcode the kernel has.
    Off,
}

/// [`Sandbox::PrintOnly`]'s opcodes.
const PRINT_ONLY: &[u8] = &[IORING_OP_WRITE];
/// [`Sandbox::FileIo`]'s opcodes.
const FILE_IO: &[u8] = &[
    IORING_OP_READ,
    IORING_OP_WRITE,
    IORING_OP_OPENAT,
    IORING_OP_CLOSE,
    IORING_OP_FSYNC,
];

impl Sandbox {
    /// The SQE opcodes the policy allows (`IORING_OP_*`); `None`: any.
    pub fn opcodes(self) -> Option<&'static [u8]> {
        match self {
            Sandbox::PrintOnly => Some(PRINT_ONLY),
            Sandbox::FileIo => Some(FILE_IO),
            Sandbox::Off => None,
        }
    }

    /// Whether the policy allows SQE opcode `opcode`.
    pub fn allows(self, opcode: u8) -> bool {
        self.opcodes().is_none_or(|ops| ops.contains(&opcode))
    }

    /// What the policy allows, in words (for error messages).
    pub fn describe(self, fixed_files: bool) -> &'static str {
        match (self, fixed_files) {
            (Sandbox::PrintOnly, true) => "only writes to the registered stdout/stderr (IOSQE_FIXED_FILE)",
            (Sandbox::PrintOnly, false) => "only writes",
            (Sandbox::FileIo, _) => "only READ, WRITE, OPENAT, CLOSE and FSYNC",
            (Sandbox::Off, _) => "every request",
        }
    }
}

/// Merges the device's count of file-I/O requests the kernel denied into the refusals a
/// synchronize reports. Under [`Sandbox::PrintOnly`] the kernel refuses every device
/// file-I/O request with `-EACCES`: the device counts those apart from other refusals
/// (`Context::denied_requests`), as they are the sandbox at work, not a protocol fault;
/// the host reports them as refused with `EACCES`. Under the other policies nothing is
/// denied by the sandbox, and the count is dropped. Returns `(requests, errno)`.
pub(crate) fn merge_denied(policy: Sandbox, requests: u32, errno: i32, denied: u32) -> (u32, i32) {
    if denied != 0 && policy == Sandbox::PrintOnly {
        (requests + denied, libc::EACCES)
    } else {
        (requests, errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuio_device::uapi::{IORING_OP_NOP, IORING_OP_UNLINKAT};

    #[test]
    fn policies_allow_their_opcodes_only() {
        assert!(Sandbox::PrintOnly.allows(IORING_OP_WRITE));
        for op in [
            IORING_OP_READ,
            IORING_OP_OPENAT,
            IORING_OP_CLOSE,
            IORING_OP_FSYNC,
            IORING_OP_UNLINKAT,
        ] {
            assert!(!Sandbox::PrintOnly.allows(op), "PrintOnly allows {op}");
        }
        for op in [
            IORING_OP_READ,
            IORING_OP_WRITE,
            IORING_OP_OPENAT,
            IORING_OP_CLOSE,
            IORING_OP_FSYNC,
        ] {
            assert!(Sandbox::FileIo.allows(op), "FileIo refuses {op}");
        }
        assert!(!Sandbox::FileIo.allows(IORING_OP_UNLINKAT));
        assert!(!Sandbox::FileIo.allows(IORING_OP_NOP));
        assert!((0..=u8::MAX).all(|op| Sandbox::Off.allows(op)));
        assert_eq!(Sandbox::default(), Sandbox::PrintOnly);
    }

    #[test]
    fn print_only_reports_denied_file_io_as_eacces() {
        assert_eq!(merge_denied(Sandbox::PrintOnly, 1, libc::EBADF, 2), (3, libc::EACCES));
        assert_eq!(merge_denied(Sandbox::PrintOnly, 1, libc::EBADF, 0), (1, libc::EBADF));
        assert_eq!(merge_denied(Sandbox::FileIo, 1, libc::EBADF, 2), (1, libc::EBADF));
    }
}
