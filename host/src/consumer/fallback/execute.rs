//! Performing one SQE with ordinary syscalls, as the kernel would.

use std::os::fd::RawFd;
use std::sync::RwLock;

use gpuio_device::protocol::uapi::*;

/// `IORING_FSYNC_DATASYNC`: `gpuio_device::protocol::uapi` does not export it (the device keeps a
/// private copy in `io.rs`).
pub(super) const IORING_FSYNC_DATASYNC: u32 = 1 << 0;

/// The result of a syscall that returned `r`: itself, or `-errno`. Retries `EINTR` (no
/// signal reaches this thread, but a debugger's may).
fn retry(mut call: impl FnMut() -> isize) -> i32 {
    loop {
        let r = call();
        if r >= 0 {
            return r.min(i32::MAX as isize) as i32;
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        if errno != libc::EINTR {
            return -errno;
        }
    }
}

/// What the ring's owner registered, as `io_uring_register(2)` would: fixed files, fixed
/// buffers, and the restrictions (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Registered {
    /// `IOSQE_FIXED_FILE` index -> fd.
    pub(super) files: Vec<RawFd>,
    /// `buf_index` -> (address, length).
    pub(super) buffers: Vec<(u64, u64)>,
    /// The restrictions, where any were registered: the opcodes allowed, and the SQE flags
    /// allowed and required.
    pub(super) restrictions: Option<Restricted>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        close_files(&self.files);
    }
}

/// Closes a file table's descriptors (the ring's own duplicates) and its empty slots' -1s
/// not at all.
pub(super) fn close_files(files: &[RawFd]) {
    for &fd in files.iter().filter(|&&fd| fd >= 0) {
        // SAFETY: the ring's own duplicates (`HostRing::register_files`), each closed once:
        // by the table that replaces it, or as the table drops.
        unsafe { libc::close(fd) };
    }
}

/// `IORING_REGISTER_RESTRICTIONS`, as the kernel keeps them.
#[derive(Debug, Default)]
pub(super) struct Restricted {
    /// Bit `op` for each allowed opcode.
    pub(super) ops: [u64; 4],
    pub(super) flags_allowed: u8,
    pub(super) flags_required: u8,
}

impl Restricted {
    /// The kernel's reading of a restriction array (`io_register_restrictions`): SQE opcode
    /// and flag entries; register opcodes mean nothing here (the fallback has no
    /// `io_uring_register`).
    pub(super) fn new(r: &[Restriction]) -> std::io::Result<Restricted> {
        let mut out = Restricted::default();
        for e in r {
            match e.opcode {
                IORING_RESTRICTION_SQE_OP => out.ops[e.arg as usize / 64] |= 1 << (e.arg % 64),
                IORING_RESTRICTION_SQE_FLAGS_ALLOWED => out.flags_allowed = e.arg,
                IORING_RESTRICTION_SQE_FLAGS_REQUIRED => out.flags_required = e.arg,
                IORING_RESTRICTION_REGISTER_OP => {}
                _ => return Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
            }
        }
        Ok(out)
    }

    /// Whether the kernel would let `sqe` through (`io_check_restriction`): its opcode
    /// allowed, every required flag set, and no flag neither allowed nor required.
    pub(super) fn permits(&self, sqe: &Sqe) -> bool {
        self.ops[sqe.opcode as usize / 64] & (1 << (sqe.opcode % 64)) != 0
            && sqe.flags & self.flags_required == self.flags_required
            && sqe.flags & !(self.flags_allowed | self.flags_required) == 0
    }
}

/// Performs one request with ordinary syscalls; returns the CQE's `res`. A request the
/// restrictions forbid completes with `-EACCES` without being performed, as through
/// io_uring.
///
/// Addresses in the SQE are used as the kernel would use them: the syscalls read and write
/// them (a bad one gives `-EFAULT`); Rust code never dereferences them. A `*_FIXED`
/// request's range must lie inside its registered buffer (`-EFAULT` otherwise, as the
/// kernel's `io_import_fixed`).
pub(super) fn execute(sqe: &Sqe, registered: &RwLock<Registered>) -> i32 {
    match admit(sqe, registered) {
        Ok((sqe, fd)) => perform(&sqe, fd),
        Err(errno) => -errno,
    }
}

/// What the kernel checks before it performs `sqe`: the restrictions, the flags, a fixed
/// buffer's range (the request becomes a plain transfer once checked) and a fixed file's
/// slot. The request to perform and the fd it names, or the errno it fails with.
fn admit(sqe: &Sqe, registered: &RwLock<Registered>) -> Result<(Sqe, i32), i32> {
    // Not held past this check, nor across the syscall, which may block (a pipe nobody
    // writes): a host buffer made or dropped meanwhile updates the buffer table. What was
    // checked stays valid: the fixed files change only before the ring is enabled, and a
    // dropped host buffer's memory stays mapped while a kernel may use it (`HostBuffer`'s
    // drop).
    let registered = registered.read().unwrap_or_else(|e| e.into_inner());
    if registered.restrictions.as_ref().is_some_and(|r| !r.permits(sqe)) {
        return Err(libc::EACCES);
    }
    if sqe.flags & !(IOSQE_FIXED_FILE | IOSQE_IO_DRAIN | IOSQE_ASYNC) != 0 {
        return Err(libc::EINVAL);
    }
    let mut sqe = *sqe;
    if matches!(sqe.opcode, IORING_OP_READ_FIXED | IORING_OP_WRITE_FIXED) {
        let inside = registered
            .buffers
            .get(sqe.buf_index as usize)
            .is_some_and(|&(base, len)| {
                // In range, without an overflow: `addr - base` is known not to wrap first. An
                // empty slot (0, 0) holds nothing.
                len > 0
                    && sqe.addr >= base
                    && (sqe.addr - base)
                        .checked_add(sqe.len as u64)
                        .is_some_and(|end| end <= len)
            });
        if !inside {
            return Err(libc::EFAULT);
        }
        sqe.opcode = if sqe.opcode == IORING_OP_READ_FIXED {
            IORING_OP_READ
        } else {
            IORING_OP_WRITE
        };
    }
    if sqe.flags & IOSQE_FIXED_FILE == 0 {
        return Ok((sqe, sqe.fd));
    }
    match usize::try_from(sqe.fd).ok().and_then(|i| registered.files.get(i)) {
        Some(&fd) => Ok((sqe, fd)),
        None => Err(libc::EBADF),
    }
}

/// Performs an admitted `sqe` on `fd` (the fixed file's, if it names one): its result as
/// a CQE's `res`.
fn perform(sqe: &Sqe, fd: i32) -> i32 {
    let fixed = sqe.flags & IOSQE_FIXED_FILE != 0;
    // Every call below is a plain syscall on the fd and buffer the SQE names, as io_uring
    // would make it: the kernel checks the fd and faults on a bad address (EFAULT) rather
    // than letting the host touch it; the submitter keeps the buffer alive until the
    // completion, as io_uring requires.
    match sqe.opcode {
        IORING_OP_NOP => 0,
        IORING_OP_WRITE | IORING_OP_READ => transfer(sqe, fd),
        // Opening into, or closing, a fixed-file slot is not supported (-EBADF, as for
        // a direct descriptor the kernel cannot find); the path operations take none.
        IORING_OP_OPENAT | IORING_OP_CLOSE | IORING_OP_UNLINKAT | IORING_OP_MKDIRAT | IORING_OP_RENAMEAT if fixed => {
            -libc::EBADF
        }
        IORING_OP_UNLINKAT | IORING_OP_MKDIRAT | IORING_OP_RENAMEAT | IORING_OP_OPENAT => at_path(sqe, fd),
        // SAFETY: ftruncate(2) touches no memory.
        IORING_OP_FTRUNCATE => retry(|| unsafe { libc::ftruncate(fd, sqe.off as libc::off_t) as isize }),
        // close is not retried: after EINTR the fd is gone on Linux.
        // SAFETY: close(2) of the fd the device named: the device owns it (it opened it
        // through the ring), as with io_uring's CLOSE.
        IORING_OP_CLOSE => match unsafe { libc::close(fd) } {
            0 => 0,
            _ => -std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO),
        },
        IORING_OP_FSYNC if sqe.rw_flags & !IORING_FSYNC_DATASYNC != 0 => -libc::EINVAL,
        IORING_OP_FSYNC if sqe.rw_flags & IORING_FSYNC_DATASYNC != 0 => {
            // SAFETY: fdatasync(2) touches no memory.
            retry(|| unsafe { libc::fdatasync(fd) as isize })
        }
        // SAFETY: fsync(2) touches no memory.
        IORING_OP_FSYNC => retry(|| unsafe { libc::fsync(fd) as isize }),
        _ => -libc::EINVAL,
    }
}

/// A WRITE or a READ: `len` bytes at `addr`, at offset `off` or the fd's position.
fn transfer(sqe: &Sqe, fd: i32) -> i32 {
    let (buf, len) = (sqe.addr as usize, sqe.len as usize);
    let current = sqe.off == OFF_CURRENT_POSITION;
    match sqe.opcode {
        // SAFETY: pwritev2(2) reads `len` bytes at `buf`, as write(2) below; `RWF_APPEND`
        // puts them at the file's end (the offset then only says whether to move the fd's).
        IORING_OP_WRITE if sqe.rw_flags == RWF_APPEND => retry(|| unsafe {
            let iov = libc::iovec {
                iov_base: buf as *mut _,
                iov_len: len,
            };
            libc::pwritev2(fd, &iov, 1, sqe.off as libc::off_t, libc::RWF_APPEND)
        }),
        IORING_OP_WRITE | IORING_OP_READ if sqe.rw_flags != 0 => -libc::EOPNOTSUPP,
        // SAFETY: write(2) reads `len` bytes at `buf`, which the submitter keeps alive.
        IORING_OP_WRITE if current => retry(|| unsafe { libc::write(fd, buf as *const _, len) }),
        // SAFETY: pwrite(2), as write(2) above. A file without offsets (a pipe, a socket, a
        // terminal) is written as io_uring writes it: at its current position, ignoring
        // `off` (pwrite(2) would refuse it with ESPIPE).
        IORING_OP_WRITE => match retry(|| unsafe { libc::pwrite(fd, buf as *const _, len, sqe.off as libc::off_t) }) {
            // SAFETY: as write(2) above.
            r if r == -libc::ESPIPE => retry(|| unsafe { libc::write(fd, buf as *const _, len) }),
            r => r,
        },
        // SAFETY: read(2) writes up to `len` bytes at `buf`, the submitter's buffer for it.
        IORING_OP_READ if current => retry(|| unsafe { libc::read(fd, buf as *mut _, len) }),
        // SAFETY: pread(2), as read(2) above; a file without offsets is read as io_uring
        // reads it, as pwrite above.
        IORING_OP_READ => match retry(|| unsafe { libc::pread(fd, buf as *mut _, len, sqe.off as libc::off_t) }) {
            // SAFETY: as read(2) above.
            r if r == -libc::ESPIPE => retry(|| unsafe { libc::read(fd, buf as *mut _, len) }),
            r => r,
        },
        _ => -libc::EINVAL,
    }
}

/// An operation on a NUL-terminated path at `addr` relative to the directory fd `fd`:
/// UNLINKAT, MKDIRAT, RENAMEAT (the second path at `off`), OPENAT.
fn at_path(sqe: &Sqe, fd: i32) -> i32 {
    let buf = sqe.addr as usize;
    match sqe.opcode {
        IORING_OP_UNLINKAT => {
            let (path, flags) = (buf as *const libc::c_char, sqe.rw_flags as libc::c_int);
            // SAFETY: unlinkat(2) reads the NUL-terminated path at `buf`, kept alive by the
            // submitter; the kernel faults on a bad one.
            retry(|| unsafe { libc::unlinkat(fd, path, flags) as isize })
        }
        IORING_OP_MKDIRAT => {
            let (path, mode) = (buf as *const libc::c_char, sqe.len as libc::mode_t);
            // SAFETY: mkdirat(2), as unlinkat(2) above; the mode is in `len`.
            retry(|| unsafe { libc::mkdirat(fd, path, mode) as isize })
        }
        // SAFETY: renameat2(2) reads the two NUL-terminated paths at `addr` and `addr2`
        // (`off`), as the kernel's RENAMEAT does; the new path's directory fd is in `len`.
        IORING_OP_RENAMEAT => retry(|| unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                fd,
                buf as *const libc::c_char,
                sqe.len as i32,
                sqe.off as *const libc::c_char,
                sqe.rw_flags,
            ) as isize
        }),
        // SAFETY: openat(2) reads the NUL-terminated path at `buf`, kept alive by the
        // submitter; the kernel faults on a bad one.
        IORING_OP_OPENAT => retry(|| unsafe {
            libc::openat(
                fd,
                buf as *const libc::c_char,
                sqe.rw_flags as libc::c_int,
                sqe.len as libc::c_uint,
            ) as isize
        }),
        _ => -libc::EINVAL,
    }
}
