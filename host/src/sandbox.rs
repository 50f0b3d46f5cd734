//! The sandbox: the ring accepts only the requests the runtime's features need.
//!
//! Device code writes SQEs straight into the ring, so a bug (or a hostile kernel) on the GPU
//! could otherwise ask the host's kernel for anything io_uring does: open, unlink, connect,
//! ... on behalf of the host process, or a write from any host address. The kernel can
//! refuse that itself:
//!
//! 1. the ring is created disabled (`IORING_SETUP_R_DISABLED`: SQPOLL's thread exists but
//!    consumes nothing);
//! 2. `PrintOnly` (and `Off`): the print outputs (stdout, stderr) are registered as fixed
//!    files (`IORING_REGISTER_FILES`, slots 0 and 1), and print writes name them by index
//!    with `IOSQE_FIXED_FILE`. `FileIo` registers no file on any ring: its prints name the
//!    raw fds (see "gpuio's own slots" below);
//! 3. gpuio's memory is registered as the rings' buffers (`IORING_REGISTER_BUFFERS`, laid
//!    out as `gpuio_device::protocol::arena::buffer` says), and prints and transfers are
//!    `IORING_OP_WRITE_FIXED`/`READ_FIXED` naming it: the kernel fails one whose range
//!    leaves its buffer with `EFAULT`. `PrintOnly`: ring 0, which carries the prints,
//!    registers the two print logs, the other rings nothing (a `WRITE_FIXED` there finds
//!    no buffer). `FileIo`: every ring registers the arena and the solo ring's buffer too
//!    (ring 0 the logs), with empty slots for the host buffers, each filled while its
//!    `HostBuffer` lives (`IORING_REGISTER_BUFFERS_UPDATE`);
//! 4. `IORING_REGISTER_RESTRICTIONS` allows only the policy's opcodes and SQE flags
//!    (`PrintOnly`: `WRITE_FIXED` alone, `IOSQE_FIXED_FILE` required), and no
//!    `io_uring_register` opcode but `FileIo`'s buffer updates (the host's own calls: the
//!    device makes none);
//! 5. `IORING_REGISTER_ENABLE_RINGS` starts the ring (and wakes its SQPOLL thread).
//!
//! The host-thread fallback takes the same five steps (`consumer::restrictions::Register` for
//! the host thread's ring, `consumer::fallback`) and checks each SQE against the same
//! restrictions and buffers before it performs it, as the kernel would.
//!
//! A request the policy forbids completes at once with `-EACCES` and is never executed. The
//! device counts such completions (`Context::refusals`: the requests no stream or call
//! made, and its own calls' refusals) and [`Runtime::synchronize`](crate::Runtime::synchronize) returns
//! [`crate::Error::Refused`]. The counts are the device's: they report honest mistakes; a
//! hostile kernel can hide its refusals from the report, not get past them.
//!
//! Registered files are the files `stdout_fd`/`stderr_fd` referred to when the runtime was
//! built: a later `dup2` onto those numbers does not redirect device prints (build the
//! runtime after redirecting, or turn fixed files off). A closed fd is left as an empty
//! slot: prints to it fail with `EBADF` and `synchronize` reports them, as without fixed
//! files.
//!
//! **gpuio's own slots.** No device SQE changes a fixed-file slot gpuio registered, and the
//! kernel enforces it. The restrictions see an SQE's opcode and flags only, not the
//! `file_index` with which an `OPENAT` opens a file into slot `file_index - 1` (replacing
//! what is there) or a `CLOSE` empties one. `PrintOnly` allows neither opcode. `FileIo`
//! allows both, so none of its rings (the solo ring included) holds a file table: such a
//! request gets the kernel's `ENXIO` (`ENFILE` for `IORING_FILE_INDEX_ALLOC`), after its
//! open, if any, has opened the file and let it go. Its prints then name the raw fds,
//! which costs them what fixed files gave: a later `dup2` onto stdout's number redirects
//! them, and a device `CLOSE` of it stops them. Neither was safe under `FileIo` anyway: a
//! raw `CLOSE` of fd 1 (and an `OPENAT` that takes the number back) reaches the process's
//! own stdout, which `FileIo` does not confine. Under `Off` a device request may replace or
//! close the registered slots, as it may do anything else. The fallback performs a
//! `file_index` as the kernel does, on its own table, never on a descriptor of the process.
//!
//! What the kernel does not take: files not registrable (prints name raw fds, with a
//! notice); memory not registrable, as when the locked-memory limit is lower than the logs
//! (or, under `FileIo`, than the logs, the arena and the solo buffer on every ring: each
//! ring's registration counts against the limit) or a buffer is over the 1 GiB io_uring
//! takes: prints and transfers are plain `WRITE`s and `READ`s, which may use any address,
//! with a notice and [`Stats::fixed_logs`](crate::Stats::fixed_logs) /
//! [`Stats::fixed_transfers`](crate::Stats::fixed_transfers) false. A kernel that cannot create a
//! ring disabled or refuses the restrictions cannot enforce the policy at all: that is an
//! error at build, never a silent `Off`.

use gpuio_device::protocol::uapi::{
    IORING_OP_CLOSE, IORING_OP_FSYNC, IORING_OP_FTRUNCATE, IORING_OP_MKDIRAT, IORING_OP_OPENAT, IORING_OP_READ,
    IORING_OP_READ_FIXED, IORING_OP_RENAMEAT, IORING_OP_UNLINKAT, IORING_OP_WRITE, IORING_OP_WRITE_FIXED,
};

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
    /// What `print!`/`println!` need and nothing more: `IORING_OP_WRITE_FIXED` from the
    /// print logs, registered as the ring's buffers (plain `IORING_OP_WRITE` where the
    /// locked-memory limit refused them: [`crate::Stats::fixed_logs`]), and with fixed files
    /// (the default) only to the registered stdout/stderr: every SQE must carry
    /// `IOSQE_FIXED_FILE`, and no flag but `IOSQE_IO_DRAIN`. The default.
    #[default]
    PrintOnly,
    /// File I/O: `READ_FIXED`, `WRITE_FIXED`, `OPENAT`, `CLOSE`, `FSYNC`, `FTRUNCATE`,
    /// `UNLINKAT`, `MKDIRAT`, `RENAMEAT`, on any file descriptor. For device code that
    /// opens, reads, writes, removes and renames files; `Builder::file_root` confines the
    /// paths it names.
    ///
    /// No ring registers a file (whatever [`Builder::fixed_files`](crate::Builder::fixed_files)
    /// says; [`crate::Stats::fixed_files`] is false): an `OPENAT` or `CLOSE` may name a
    /// fixed-file slot by its `file_index`, which io_uring's restrictions cannot see, so
    /// the rings hold no slot for it to replace or empty, and the kernel answers `ENXIO`
    /// (the fallback alike). `IOSQE_FIXED_FILE` is allowed and names no file (`EBADF`).
    /// Prints therefore name the raw fds: a later `dup2` onto them redirects device prints,
    /// and a device `CLOSE` of them stops them (it already reached the process's own
    /// stdout, which no sandbox of descriptors guards: see below).
    /// Not `STATX`, which writes to an address the device names. Every ring registers
    /// gpuio's memory (the logs, the arena, the solo ring's buffer, each host buffer while
    /// it lives) as its buffers, so the kernel refuses a transfer's buffer at any other host
    /// address (`EFAULT`). Where the locked-memory limit refuses that registration,
    /// transfers are plain `READ`/`WRITE` that may use any host address, said at build and
    /// in [`crate::Stats::fixed_transfers`]. `FTRUNCATE` needs Linux 6.9 (refused before).
    ///
    /// What it does not confine, so it is for kernels you trust with the process's memory:
    /// the descriptors a kernel reads, writes or closes (any the process holds: its stdout
    /// and stderr, a file it opened), the files a kernel opens (without a `file_root`,
    /// `/proc/self/mem`, whose file offset
    /// reaches any host address through a transfer from or into gpuio's own buffers), and
    /// the paths of `OPENAT`, `UNLINKAT`, `MKDIRAT` and `RENAMEAT`, which the kernel reads
    /// from whatever address the request names (a created file's name can carry host
    /// memory out, even under a `file_root`). The buffer confinement turns a wild pointer
    /// into `EFAULT` rather than a write over host memory.
    FileIo,
    /// No restrictions: the ring accepts every opcode the kernel has.
    Off,
}

/// [`Sandbox::PrintOnly`]'s opcodes, with the logs registered as the ring's buffers.
const PRINT_ONLY: &[u8] = &[IORING_OP_WRITE_FIXED];
/// [`Sandbox::PrintOnly`]'s opcodes where the logs could not be registered.
const PRINT_ONLY_UNFIXED: &[u8] = &[IORING_OP_WRITE];
/// [`Sandbox::FileIo`]'s opcodes on paths and whole files, whatever its transfers are.
const FILE_OPS: [u8; 7] = [
    IORING_OP_OPENAT,
    IORING_OP_CLOSE,
    IORING_OP_FSYNC,
    IORING_OP_FTRUNCATE,
    IORING_OP_UNLINKAT,
    IORING_OP_MKDIRAT,
    IORING_OP_RENAMEAT,
];
/// [`Sandbox::FileIo`]'s opcodes, with gpuio's memory registered as every ring's buffers:
/// prints and transfers are `*_FIXED` from and into it.
const FILE_IO: &[u8] = &with_file_ops::<2, 9>([IORING_OP_READ_FIXED, IORING_OP_WRITE_FIXED]);
/// [`Sandbox::FileIo`]'s opcodes where that memory could not be registered: transfers are
/// plain `READ`/`WRITE` (prints `WRITE_FIXED` if ring 0 took the logs).
const FILE_IO_UNFIXED: &[u8] = &with_file_ops::<3, 10>([IORING_OP_READ, IORING_OP_WRITE, IORING_OP_WRITE_FIXED]);

/// `transfers` followed by [`FILE_OPS`] (`N` is their count together).
const fn with_file_ops<const T: usize, const N: usize>(transfers: [u8; T]) -> [u8; N] {
    assert!(T + FILE_OPS.len() == N);
    let mut all = [0; N];
    let mut i = 0;
    while i < N {
        all[i] = if i < T { transfers[i] } else { FILE_OPS[i - T] };
        i += 1;
    }
    all
}

impl Sandbox {
    /// The SQE opcodes the policy allows (`IORING_OP_*`) where gpuio's memory is the rings'
    /// registered buffers (the default; [`crate::Stats::fixed_logs`],
    /// [`crate::Stats::fixed_transfers`]); `None`: any.
    pub fn opcodes(self) -> Option<&'static [u8]> {
        self.opcodes_with(true)
    }

    /// The SQE opcodes the policy allows with its buffers registered or not (`PrintOnly`:
    /// the logs, `FileIo`: the whole table): without them, prints and transfers are plain
    /// `IORING_OP_WRITE`s and `READ`s.
    pub(crate) fn opcodes_with(self, fixed_buffers: bool) -> Option<&'static [u8]> {
        match (self, fixed_buffers) {
            (Sandbox::PrintOnly, true) => Some(PRINT_ONLY),
            (Sandbox::PrintOnly, false) => Some(PRINT_ONLY_UNFIXED),
            (Sandbox::FileIo, true) => Some(FILE_IO),
            (Sandbox::FileIo, false) => Some(FILE_IO_UNFIXED),
            (Sandbox::Off, _) => None,
        }
    }

    /// Whether the policy allows SQE opcode `opcode` (with the logs registered).
    pub fn allows(self, opcode: u8) -> bool {
        self.opcodes().is_none_or(|ops| ops.contains(&opcode))
    }

    /// The device context's [`allowed_ops`](gpuio_device::protocol::context::Context::allowed_ops)
    /// word for this policy: bit `op` for each opcode it allows, all bits for none.
    pub(crate) fn allowed_ops(self, fixed_buffers: bool) -> u64 {
        self.opcodes_with(fixed_buffers)
            .map_or(u64::MAX, |ops| ops.iter().fold(0, |m, &op| m | 1 << op))
    }

    /// What the policy allows, in words (for error messages).
    pub fn describe(self, fixed_files: bool) -> &'static str {
        match (self, fixed_files) {
            (Sandbox::PrintOnly, true) => {
                "only writes of the print logs to the registered stdout/stderr (IOSQE_FIXED_FILE)"
            }
            (Sandbox::PrintOnly, false) => "only writes of the print logs",
            (Sandbox::FileIo, _) => {
                "only reads, writes, OPENAT, CLOSE, FSYNC, FTRUNCATE, UNLINKAT, MKDIRAT and RENAMEAT"
            }
            (Sandbox::Off, _) => "every request",
        }
    }
}

/// Merges the sandbox's refusals the device counted into the refusals a synchronize
/// reports. Under [`Sandbox::PrintOnly`] the kernel refuses every device file-I/O request
/// with `-EACCES` (`denied`: `Refusals::denied`). Under the others, a request comes
/// back `-EACCES` from the sandbox only if its opcode is outside the policy (`forbidden`:
/// `Refusals::forbidden`, made through `Context::call`); any other `EACCES` is a
/// plain permission error that its caller got, not a refusal. Returns `(requests, errno)`.
pub(crate) fn merge_denied(policy: Sandbox, requests: u32, errno: i32, denied: u32, forbidden: u32) -> (u32, i32) {
    // Under PrintOnly the forbidden requests are among the denied ones.
    let refused = if policy == Sandbox::PrintOnly {
        denied
    } else {
        forbidden
    };
    if refused != 0 {
        (requests + refused, libc::EACCES)
    } else {
        (requests, errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuio_device::protocol::uapi::{IORING_OP_NOP, IORING_OP_UNLINKAT};

    #[test]
    fn policies_allow_their_opcodes_only() {
        assert!(Sandbox::PrintOnly.allows(IORING_OP_WRITE_FIXED));
        assert_eq!(Sandbox::PrintOnly.opcodes_with(false), Some(&[IORING_OP_WRITE][..]));
        assert!(Sandbox::FileIo.allows(IORING_OP_READ_FIXED) && !Sandbox::FileIo.allows(IORING_OP_READ));
        assert!(Sandbox::FileIo.opcodes_with(false).unwrap().contains(&IORING_OP_READ));
        assert_eq!(Sandbox::PrintOnly.allowed_ops(true), 1 << IORING_OP_WRITE_FIXED);
        assert_eq!(Sandbox::Off.allowed_ops(true), u64::MAX);
        for op in [
            IORING_OP_WRITE,
            IORING_OP_READ,
            IORING_OP_OPENAT,
            IORING_OP_CLOSE,
            IORING_OP_FSYNC,
            IORING_OP_UNLINKAT,
        ] {
            assert!(!Sandbox::PrintOnly.allows(op), "PrintOnly allows {op}");
        }
        for op in [
            IORING_OP_READ_FIXED,
            IORING_OP_WRITE_FIXED,
            IORING_OP_OPENAT,
            IORING_OP_CLOSE,
            IORING_OP_FSYNC,
        ] {
            assert!(Sandbox::FileIo.allows(op), "FileIo refuses {op}");
        }
        assert!(Sandbox::FileIo.allows(IORING_OP_UNLINKAT));
        assert!(!Sandbox::FileIo.allows(gpuio_device::protocol::uapi::IORING_OP_STATX));
        assert!(!Sandbox::FileIo.allows(IORING_OP_NOP));
        assert!((0..=u8::MAX).all(|op| Sandbox::Off.allows(op)));
        assert_eq!(Sandbox::default(), Sandbox::PrintOnly);
    }

    #[test]
    fn print_only_reports_denied_file_io_as_eacces() {
        assert_eq!(
            merge_denied(Sandbox::PrintOnly, 1, libc::EBADF, 2, 1),
            (3, libc::EACCES)
        );
        assert_eq!(merge_denied(Sandbox::PrintOnly, 1, libc::EBADF, 0, 0), (1, libc::EBADF));
        // FileIo: a permission error is no refusal; a forbidden opcode is.
        assert_eq!(merge_denied(Sandbox::FileIo, 1, libc::EBADF, 2, 0), (1, libc::EBADF));
        assert_eq!(merge_denied(Sandbox::FileIo, 1, libc::EBADF, 2, 1), (2, libc::EACCES));
        assert_eq!(merge_denied(Sandbox::FileIo, 0, 0, 0, 1), (1, libc::EACCES));
    }
}
