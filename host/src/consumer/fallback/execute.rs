//! Performing one SQE with ordinary syscalls, as the kernel would.

use std::os::fd::RawFd;
use std::sync::RwLock;

use gpuio_device::uapi::*;

/// `IORING_FSYNC_DATASYNC`: `gpuio_device::uapi` does not export it (the device keeps a
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

/// Performs one request with ordinary syscalls; returns the CQE's `res`.
///
/// Addresses in the SQE are used as the kernel would use them: the syscalls read and write
/// them (a bad one gives `-EFAULT`); Rust code never dereferences them.
pub(super) fn execute(sqe: &Sqe, files: &RwLock<Vec<RawFd>>) -> i32 {
    if sqe.flags & !(IOSQE_FIXED_FILE | IOSQE_IO_DRAIN | IOSQE_ASYNC) != 0 {
        return -libc::EINVAL;
    }
    let fixed = sqe.flags & IOSQE_FIXED_FILE != 0;
    let fd = if fixed {
        let files = files.read().unwrap_or_else(|e| e.into_inner());
        match usize::try_from(sqe.fd).ok().and_then(|i| files.get(i)) {
            Some(&fd) => fd,
            None => return -libc::EBADF,
        }
    } else {
        sqe.fd
    };
    let (buf, len) = (sqe.addr as usize, sqe.len as usize);
    let current = sqe.off == OFF_CURRENT_POSITION;
    // Every call below is a plain syscall on the fd and buffer the SQE names, as io_uring
    // would make it: the kernel checks the fd and faults on a bad address (EFAULT) rather
    // than letting the host touch it; the submitter keeps the buffer alive until the
    // completion, as io_uring requires.
    match sqe.opcode {
        IORING_OP_NOP => 0,
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
        // SAFETY: pwrite(2), as write(2) above.
        IORING_OP_WRITE => retry(|| unsafe { libc::pwrite(fd, buf as *const _, len, sqe.off as libc::off_t) }),
        // SAFETY: read(2) writes up to `len` bytes at `buf`, the submitter's buffer for it.
        IORING_OP_READ if current => retry(|| unsafe { libc::read(fd, buf as *mut _, len) }),
        // SAFETY: pread(2), as read(2) above.
        IORING_OP_READ => retry(|| unsafe { libc::pread(fd, buf as *mut _, len, sqe.off as libc::off_t) }),
        // Opening into, or closing, a fixed-file slot is not supported (-EBADF, as for
        // a direct descriptor the kernel cannot find).
        IORING_OP_OPENAT | IORING_OP_CLOSE if fixed => -libc::EBADF,
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
