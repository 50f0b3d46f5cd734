//! SQEs made by hand (`OPENAT`, `STATX`, `UNLINKAT`, `WRITE`), submitted to a ring while a
//! kernel runs, their results taken from the CQ: what the sandbox must refuse or allow,
//! whatever a device would put in a request.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::protocol::context::Context;
use gpuio::device::protocol::ring::Ring;
use gpuio::device::protocol::uapi::*;
use gpuio::Runtime;

pub(crate) fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Runs `f` while a kernel runs, so that the runtime's waker keeps SQPOLL awake (or, on
/// rings without it, submits) for the requests `f` submits by hand.
pub(crate) fn while_a_kernel_runs<R>(rt: &Runtime, f: impl FnOnce(&Context) -> R) -> R {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    rt.launch(1, 1, move || {
        while !d.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
    .unwrap();
    let r = f(rt.context().expect("CPU backend"));
    done.store(true, Ordering::Release);
    r
}

/// Submits `sqe` to ring 0 and returns its CQE's result (the caller's `user_data`; nothing
/// else is in flight).
pub(crate) fn run(ctx: &Context, sqe: Sqe) -> i32 {
    run_on(&ctx.rings[0], sqe)
}

/// [`run`] on `ring`.
pub(crate) fn run_on(ring: &Ring, sqe: Sqe) -> i32 {
    ring.submit(&sqe, &mut || {});
    let until = Instant::now() + Duration::from_secs(20);
    let mut res = None;
    while res.is_none() {
        assert!(Instant::now() < until, "no completion for {sqe:?}");
        ring.reap(|cqes| {
            for cqe in cqes {
                assert_eq!(cqe.user_data, sqe.user_data, "a completion of another request");
                res = Some(cqe.res);
            }
            false // nothing published: the head store keeps its own release
        });
        std::thread::yield_now();
    }
    res.unwrap()
}

pub(crate) fn openat_create(path: &CString, user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_OPENAT,
        fd: libc::AT_FDCWD,
        addr: path.as_ptr() as u64,
        len: 0o644,
        rw_flags: (libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC) as u32,
        user_data,
        ..Sqe::default()
    }
}

pub(crate) fn read_only(path: &CString, user_data: u64) -> Sqe {
    Sqe {
        rw_flags: (libc::O_RDONLY | libc::O_CLOEXEC) as u32,
        ..openat_create(path, user_data)
    }
}

/// `STATX` of `path` into `buf` (256 bytes): a write to an address the SQE names, which no
/// sandbox allows.
pub(crate) fn statx(path: &CString, buf: &mut [u8; 256], user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_STATX,
        fd: libc::AT_FDCWD,
        addr: path.as_ptr() as u64,
        len: 0x7ff, // STATX_BASIC_STATS
        off: buf.as_mut_ptr() as u64,
        user_data,
        ..Sqe::default()
    }
}

pub(crate) fn unlinkat(path: &CString, user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_UNLINKAT,
        fd: libc::AT_FDCWD,
        addr: path.as_ptr() as u64,
        user_data,
        ..Sqe::default()
    }
}

pub(crate) fn write(fd: i32, flags: u8, bytes: &[u8], user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_WRITE,
        flags,
        fd,
        off: 0,
        addr: bytes.as_ptr() as u64,
        len: bytes.len() as u32,
        user_data,
        ..Sqe::default()
    }
}
