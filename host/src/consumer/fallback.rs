//! The host-thread fallback: the same ring, consumed by a host thread with ordinary syscalls.
//!
//! Where io_uring is unavailable (`ENOSYS`; `EPERM` from `kernel.io_uring_disabled` or from
//! a seccomp filter, as under Docker's default profile), the device protocol does not
//! change: the host maps the same memory layout itself (SQ head/tail/flags words, the SQE
//! array, CQ head/tail, the CQE array, each head and tail on its own cache line like the
//! kernel's `struct io_rings`), and a host thread, *the fallback kernel*, does what SQPOLL
//! does:
//!
//! | step | access | pairs with |
//! |---|---|---|
//! | read the SQ tail | `Acquire` | the device publisher's `Release` store of the tail (`Ring::publish`): the SQEs below it and their payloads are visible (invariant 1) |
//! | check for a free CQE slot | `Acquire` load of the CQ head | the reaper's `Release` store of the head after it read the CQEs (`Ring::reap`) |
//! | read the SQE, then store the SQ head + 1 | `Release` | the submitter's `Acquire` load of the head before it reuses the slot (`Ring::submit`, step 2) |
//! | perform the request | a blocking syscall | |
//! | write the CQE, then store the CQ tail + 1 | `Release` | the reaper's `Acquire` load of the tail: the CQE, and the syscall's last use of the buffers, happen-before the reaper recycles them (invariant 3) |
//!
//! All of it is plain CPU memory, and on GPU backends the same GPU-registered anonymous
//! pages that the kernel would read: the GPU's system-scope releases order its writes for
//! this thread exactly as for the kernel.
//!
//! Operations: `IORING_OP_WRITE`/`READ` (`off == -1`: the current file position, `write`/
//! `read`; otherwise `pwrite`/`pread`), `OPENAT`, `CLOSE`, `FSYNC` (`IORING_FSYNC_DATASYNC`:
//! `fdatasync`) and `NOP`. Results are what the kernel would put in the CQE: the syscall's
//! return value, or `-errno`; short reads and writes are returned as they are (the device
//! resubmits the rest). Unknown opcodes, and SQE flags other than `IOSQE_FIXED_FILE`,
//! `IOSQE_IO_DRAIN` and `IOSQE_ASYNC` (requests run one at a time, in SQ order, so drain
//! and async hold trivially), complete with `-EINVAL`. `IOSQE_FIXED_FILE` looks the fd up
//! in a table set with [`HostRing::register_files`] (`-EBADF` when it is not there).
//!
//! **The CQ never overflows.** The device keeps requests in flight within the CQ's size
//! (invariant 4), so there is always a free CQE slot. Should there not be, the thread does
//! not consume the next SQE until the reaper frees one (it counts those waits): nothing is
//! dropped or overwritten.
//!
//! **Idling.** After work, the thread polls with a backoff (spin, then yield, then sleep
//! 20 µs) for `sq_thread_idle` ms, as SQPOLL spins; then it parks. The runtime's waker,
//! which watches the ring while kernels run, unparks it when SQEs wait
//! ([`HostRing::wake_if_needed`]): the analogue of `IORING_ENTER_SQ_WAKEUP`, without a
//! syscall on a ring fd (there is none). `IORING_SQ_NEED_WAKEUP` is never set.
//!
//! **Signals and shutdown.** The thread blocks every signal, so a write to a pipe whose
//! reader is gone returns `EPIPE` (as through io_uring) instead of raising `SIGPIPE` in a
//! host program that did not ignore it, and process signals go to the program's own
//! threads. Writes block: a slow pipe delays this thread (and the SQEs behind the write),
//! never a kernel beyond the usual backpressure. Dropping the ring stops the thread after
//! the request it is performing; the runtime drops it only after `synchronize`, when no
//! request is left. A write to a pipe that nobody reads blocks that synchronize, exactly as
//! through io_uring, until the hang timeout ends it with `Error::Hang`; a runtime whose
//! drop gives up so leaks the ring (and this thread) rather than join a blocked thread.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use gpuio_device::uapi::*;

use crate::consumer::uring::{UringConfig, MAX_CQ_ENTRIES, MAX_SQ_ENTRIES};
use crate::error::{Error, Result};
use crate::memory::{page_size, round_up, Mapping};

// The ring words, at the offsets the kernel's `struct io_rings` has on x86-64 and arm64:
// each head and tail on its own 64-byte line, the masks, counts and flags after them, the
// CQE array cache-line aligned.
const SQ_HEAD: u32 = 0;
const SQ_TAIL: u32 = 64;
const CQ_HEAD: u32 = 128;
const CQ_TAIL: u32 = 192;
const SQ_RING_MASK: u32 = 256;
const CQ_RING_MASK: u32 = 260;
const SQ_RING_ENTRIES: u32 = 264;
const CQ_RING_ENTRIES: u32 = 268;
const SQ_DROPPED: u32 = 272;
const SQ_FLAGS: u32 = 276;
const CQ_FLAGS: u32 = 280;
const CQ_OVERFLOW: u32 = 284;
const CQES: u32 = 320;

/// `IOSQE_IO_DRAIN` (the SQE flags the fallback knows besides `IOSQE_FIXED_FILE` and
/// `IOSQE_ASYNC`, which `gpuio_device::uapi` defines): the device never sets it, and
/// `uapi` does not define it.
const IOSQE_IO_DRAIN: u8 = 1 << 1;
/// `IORING_FSYNC_DATASYNC`: `gpuio_device::uapi` does not export it (the device keeps a
/// private copy in `io.rs`).
const IORING_FSYNC_DATASYNC: u32 = 1 << 0;

/// Sleep between polls once spinning and yielding found nothing.
const POLL: Duration = Duration::from_micros(20);
/// How long a parked thread waits before it looks anyway (the waker normally unparks it).
const PARKED: Duration = Duration::from_millis(100);

/// A ring in host memory, consumed by a host thread (see the module docs).
pub struct HostRing {
    /// The fallback kernel; joined before the memory below is unmapped.
    thread: Option<JoinHandle<()>>,
    state: Arc<State>,
    /// The geometry, in `io_uring_setup`'s terms (our offsets; `features` has `NODROP`).
    pub params: Params,
    /// SQE array.
    pub sqes: Mapping,
    /// Heads, tails, flags and CQEs.
    pub rings: Mapping,
}

/// What the thread and its owner share.
struct State {
    stop: AtomicBool,
    /// The thread is parked (or about to park).
    sleeping: AtomicBool,
    /// Requests completed.
    completed: AtomicU64,
    /// Times the CQ was full when an SQE waited (the device broke invariant 4).
    cq_full: AtomicU64,
    /// `IOSQE_FIXED_FILE` index -> fd.
    files: RwLock<Vec<RawFd>>,
}

/// The ring's memory, as the thread sees it.
#[derive(Clone, Copy)]
struct Words {
    sqes: *const Sqe,
    rings: *mut u8,
    sq_entries: u32,
    cq_entries: u32,
    idle: Duration,
}

// SAFETY: the pointers point into the HostRing's mappings, which outlive the thread (Drop
// joins it first); every access follows the protocol in the module docs.
unsafe impl Send for Words {}

impl Words {
    fn word(&self, off: u32) -> &AtomicU32 {
        // SAFETY: `off` is one of the constants above, inside the rings mapping, 4-aligned.
        unsafe { &*(self.rings.add(off as usize) as *const AtomicU32) }
    }
}

impl HostRing {
    /// Maps the rings and starts the fallback kernel. Sizes as for io_uring: powers of two,
    /// `cq_entries >= sq_entries`, at most 32768 SQ and 65536 CQ entries.
    pub fn new(cfg: UringConfig) -> Result<HostRing> {
        let (sq, cq) = (cfg.sq_entries, cfg.cq_entries);
        if !sq.is_power_of_two() || !cq.is_power_of_two() || cq < sq || sq > MAX_SQ_ENTRIES || cq > MAX_CQ_ENTRIES {
            return Err(Error::Config(format!(
                "ring sizes must be powers of two with cq >= sq, sq <= {MAX_SQ_ENTRIES}, cq <= {MAX_CQ_ENTRIES} \
                 (sq {sq}, cq {cq})"
            )));
        }
        let os = |what| move |e| Error::Os { what, source: e };
        let sqes = Mapping::new(sq as usize * size_of::<Sqe>()).map_err(os("mmap of the SQE array"))?;
        let rings = Mapping::new(round_up(CQES as usize + cq as usize * size_of::<Cqe>(), page_size()))
            .map_err(os("mmap of the rings"))?;
        let mut p = Params {
            sq_entries: sq,
            cq_entries: cq,
            flags: IORING_SETUP_NO_MMAP | IORING_SETUP_NO_SQARRAY | IORING_SETUP_CQSIZE,
            sq_thread_idle: cfg.sq_thread_idle_ms,
            features: IORING_FEAT_NODROP,
            ..Params::default()
        };
        p.sq_off = SqringOffsets {
            head: SQ_HEAD,
            tail: SQ_TAIL,
            ring_mask: SQ_RING_MASK,
            ring_entries: SQ_RING_ENTRIES,
            flags: SQ_FLAGS,
            dropped: SQ_DROPPED,
            user_addr: sqes.as_ptr() as u64,
            ..SqringOffsets::default()
        };
        p.cq_off = CqringOffsets {
            head: CQ_HEAD,
            tail: CQ_TAIL,
            ring_mask: CQ_RING_MASK,
            ring_entries: CQ_RING_ENTRIES,
            overflow: CQ_OVERFLOW,
            cqes: CQES,
            flags: CQ_FLAGS,
            user_addr: rings.as_ptr() as u64,
            ..CqringOffsets::default()
        };
        let words = Words {
            sqes: sqes.as_ptr() as *const Sqe,
            rings: rings.as_ptr(),
            sq_entries: sq,
            cq_entries: cq,
            idle: Duration::from_millis(cfg.sq_thread_idle_ms.into()),
        };
        // As the kernel fills them; nobody else sees the ring yet (Relaxed).
        for (off, v) in [
            (SQ_RING_MASK, sq - 1),
            (CQ_RING_MASK, cq - 1),
            (SQ_RING_ENTRIES, sq),
            (CQ_RING_ENTRIES, cq),
        ] {
            words.word(off).store(v, Ordering::Relaxed);
        }
        let state = Arc::new(State {
            stop: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            cq_full: AtomicU64::new(0),
            files: RwLock::new(Vec::new()),
        });
        let st = state.clone();
        // The spawn happens-before the thread's first access to the words stored above.
        let thread = thread::Builder::new()
            .name("gpuio-fallback".into())
            .spawn(move || run(words, &st))
            .map_err(os("starting the fallback thread"))?;
        Ok(HostRing {
            thread: Some(thread),
            state,
            params: p,
            sqes,
            rings,
        })
    }

    /// Address of a u32 in the rings region at `off`.
    pub fn ring_word(&self, off: u32) -> *mut u32 {
        assert!(off as usize + 4 <= CQES as usize, "not a ring word: {off}");
        // SAFETY: checked to lie in the ring header, inside the mapping.
        unsafe { self.rings.as_ptr().add(off as usize) as *mut u32 }
    }

    fn word(&self, off: u32) -> &AtomicU32 {
        // SAFETY: a ring word in our mapping, which lives as long as `self`.
        unsafe { &*(self.ring_word(off) as *const AtomicU32) }
    }

    /// Unparks the thread if it sleeps while SQEs wait. Reads only the SQ head and tail:
    /// it never touches data. Returns whether it woke it.
    pub fn wake_if_needed(&self) -> bool {
        // Acquire: pairs with the releases of the tail (device) and head (this thread).
        let waiting = self.word(SQ_TAIL).load(Ordering::Acquire) != self.word(SQ_HEAD).load(Ordering::Acquire);
        // SeqCst: pairs with the thread's SeqCst store of `sleeping` and re-check of the
        // tail before it parks; a wakeup missed here is caught at the next look (the waker
        // looks every 50 µs while kernels run) or by the park's timeout.
        if waiting && self.state.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
            return true;
        }
        false
    }

    /// Sets the fds that SQEs with `IOSQE_FIXED_FILE` name by index, like
    /// `IORING_REGISTER_FILES`. Takes effect for SQEs consumed after the call.
    pub fn register_files(&self, fds: &[RawFd]) {
        *self.state.files.write().unwrap_or_else(|e| e.into_inner()) = fds.to_vec();
    }

    /// Requests completed so far.
    pub fn completed(&self) -> u64 {
        self.state.completed.load(Ordering::Relaxed)
    }

    /// Times an SQE waited because the CQ was full (zero unless the device overcommits).
    pub fn cq_full_waits(&self) -> u64 {
        self.state.cq_full.load(Ordering::Relaxed)
    }
}

impl Drop for HostRing {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// The fallback kernel's loop.
fn run(w: Words, st: &State) {
    // SAFETY: changes only this thread's signal mask and timer slack.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        // Sleep precisely: the default 50 µs slack would make every poll cost 70 µs.
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64);
    }
    let (sq_mask, cq_mask) = (w.sq_entries - 1, w.cq_entries - 1);
    // Only this thread writes the SQ head and the CQ tail: it keeps them here.
    let (mut head, mut cq_tail) = (0u32, 0u32);
    let mut last_work = Instant::now();
    let mut idle_rounds = 0u32;
    while !st.stop.load(Ordering::Acquire) {
        // Acquire, system scope: pairs with the device publisher's Release store of the
        // tail: every SQE below it, and the payload it points at, is visible.
        let tail = w.word(SQ_TAIL).load(Ordering::Acquire);
        let mut did = false;
        let mut cq_full = false;
        while head != tail && !st.stop.load(Ordering::Relaxed) {
            // Acquire: pairs with the reaper's Release store of the CQ head; its reads
            // of the CQE slots below the head happen-before we overwrite them.
            let cq_head = w.word(CQ_HEAD).load(Ordering::Acquire);
            if cq_tail.wrapping_sub(cq_head) >= w.cq_entries {
                // Invariant 4 broken by the device: wait for the reaper rather than
                // overflow. The SQE stays unconsumed.
                cq_full = true;
                st.cq_full.fetch_add(1, Ordering::Relaxed);
                break;
            }
            // SAFETY: slot `head & mask` holds a published SQE (acquire of the tail
            // above) that no submitter rewrites until we move the head past it.
            let sqe = unsafe { w.sqes.add((head & sq_mask) as usize).read() };
            head = head.wrapping_add(1);
            // Release: our read of the slot happens-before a submitter's reuse of it
            // (pairs with the Acquire load of the SQ head in `Ring::submit`).
            w.word(SQ_HEAD).store(head, Ordering::Release);
            let res = execute(&sqe, &st.files);
            let cqe = Cqe {
                user_data: sqe.user_data,
                res,
                flags: 0,
            };
            // SAFETY: the slot is free (the CQ check above) and only we write CQEs.
            unsafe {
                (w.rings.add(CQES as usize) as *mut Cqe)
                    .add((cq_tail & cq_mask) as usize)
                    .write(cqe)
            };
            cq_tail = cq_tail.wrapping_add(1);
            // Release: the CQE, and the syscall's last use of the request's buffers,
            // happen-before the reaper's Acquire load of the tail (invariant 3).
            w.word(CQ_TAIL).store(cq_tail, Ordering::Release);
            st.completed.fetch_add(1, Ordering::Relaxed);
            did = true;
        }
        if did {
            last_work = Instant::now();
            idle_rounds = 0;
            continue;
        }
        // Nothing to do (or a full CQ): back off like SQPOLL's idle spin, then park.
        idle_rounds = idle_rounds.saturating_add(1);
        if idle_rounds < 64 {
            std::hint::spin_loop();
        } else if idle_rounds < 128 {
            thread::yield_now();
        } else if cq_full || last_work.elapsed() < w.idle {
            thread::sleep(POLL);
        } else {
            // SeqCst: the flag is set before the re-check of the tail below, and the
            // waker reads the tail before the flag (see `wake_if_needed`).
            st.sleeping.store(true, Ordering::SeqCst);
            if w.word(SQ_TAIL).load(Ordering::SeqCst) == head && !st.stop.load(Ordering::SeqCst) {
                thread::park_timeout(PARKED);
            }
            st.sleeping.store(false, Ordering::SeqCst);
            idle_rounds = 0;
            last_work = Instant::now();
        }
    }
}

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
fn execute(sqe: &Sqe, files: &RwLock<Vec<RawFd>>) -> i32 {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(sq: u32, cq: u32) -> HostRing {
        HostRing::new(UringConfig {
            sq_entries: sq,
            cq_entries: cq,
            sq_thread_idle_ms: 1,
            start_disabled: false,
        })
        .unwrap()
    }

    /// Drives a HostRing as the device would, one SQE at a time.
    struct Driver<'a> {
        r: &'a HostRing,
        tail: u32,
        cq_head: u32,
    }

    impl Driver<'_> {
        fn push(&mut self, sqe: Sqe) {
            let p = self.r.params;
            let slot = (self.tail & (p.sq_entries - 1)) as usize;
            // SAFETY: the tests never push more than the SQ holds unconsumed.
            unsafe { (self.r.sqes.as_ptr() as *mut Sqe).add(slot).write(sqe) };
            self.tail += 1;
            // Release: as the device publisher.
            self.r.word(p.sq_off.tail).store(self.tail, Ordering::Release);
        }

        /// Waits for the CQE at the current head, consumes it, returns (user_data, res).
        fn pop(&mut self) -> (u64, i32) {
            let p = self.r.params;
            let until = Instant::now() + Duration::from_secs(10);
            while self.r.word(p.cq_off.tail).load(Ordering::Acquire) == self.cq_head {
                assert!(Instant::now() < until, "no completion");
                self.r.wake_if_needed();
                thread::sleep(Duration::from_micros(100));
            }
            let slot = (self.cq_head & (p.cq_entries - 1)) as usize;
            // SAFETY: published by the acquire above.
            let cqe = unsafe {
                (self.r.rings.as_ptr().add(p.cq_off.cqes as usize) as *const Cqe)
                    .add(slot)
                    .read()
            };
            self.cq_head += 1;
            self.r.word(p.cq_off.head).store(self.cq_head, Ordering::Release);
            (cqe.user_data, cqe.res)
        }

        fn run(&mut self, sqe: Sqe) -> i32 {
            let ud = sqe.user_data;
            self.push(sqe);
            let (got, res) = self.pop();
            assert_eq!(got, ud);
            res
        }
    }

    fn sqe(opcode: u8, fd: i32, addr: *const u8, len: u32, off: u64, user_data: u64) -> Sqe {
        Sqe {
            opcode,
            fd,
            addr: addr as u64,
            len,
            off,
            user_data,
            ..Sqe::default()
        }
    }

    #[test]
    fn performs_each_operation_like_the_kernel() {
        let r = ring(4, 8);
        let mut d = Driver {
            r: &r,
            tail: 0,
            cq_head: 0,
        };
        let dir = std::env::temp_dir().join(format!("gpuio-fallback-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = std::ffi::CString::new(dir.join("ops.txt").to_str().unwrap()).unwrap();
        let mut open = sqe(
            IORING_OP_OPENAT,
            libc::AT_FDCWD,
            path.as_ptr() as *const u8,
            0o600,
            0,
            1,
        );
        open.rw_flags = (libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC) as u32;
        let fd = d.run(open);
        assert!(fd >= 0, "openat: {fd}");
        let cur = OFF_CURRENT_POSITION;
        assert_eq!(d.run(sqe(IORING_OP_WRITE, fd, b"hello ".as_ptr(), 6, cur, 2)), 6);
        assert_eq!(d.run(sqe(IORING_OP_WRITE, fd, b"world\n".as_ptr(), 6, cur, 3)), 6);
        assert_eq!(d.run(sqe(IORING_OP_WRITE, fd, b"W".as_ptr(), 1, 6, 4)), 1, "pwrite");
        let mut fsync = sqe(IORING_OP_FSYNC, fd, std::ptr::null(), 0, 0, 5);
        assert_eq!(d.run(fsync), 0);
        fsync.rw_flags = IORING_FSYNC_DATASYNC;
        assert_eq!(d.run(fsync), 0);
        let mut buf = [0u8; 16];
        assert_eq!(d.run(sqe(IORING_OP_READ, fd, buf.as_mut_ptr(), 16, 0, 6)), 12, "pread");
        assert_eq!(&buf[..12], b"hello World\n");
        // The current position is after the two writes (pwrite/pread do not move it).
        assert_eq!(
            d.run(sqe(IORING_OP_READ, fd, buf.as_mut_ptr(), 16, cur, 7)),
            0,
            "read at EOF"
        );
        assert_eq!(d.run(sqe(IORING_OP_NOP, -1, std::ptr::null(), 0, 0, 8)), 0);
        assert_eq!(
            d.run(sqe(200, fd, std::ptr::null(), 0, 0, 9)),
            -libc::EINVAL,
            "unknown opcode"
        );
        let mut linked = sqe(IORING_OP_NOP, -1, std::ptr::null(), 0, 0, 10);
        linked.flags = 1 << 2; // IOSQE_IO_LINK: not supported
        assert_eq!(d.run(linked), -libc::EINVAL);
        let mut fixed = sqe(IORING_OP_WRITE, 0, b"!".as_ptr(), 1, 12, 11);
        fixed.flags = IOSQE_FIXED_FILE;
        assert_eq!(d.run(fixed), -libc::EBADF, "no registered files");
        r.register_files(&[fd]);
        assert_eq!(d.run(fixed), 1, "fixed file 0");
        // Closed twice, then written: EBADF. On a high fd number of its own: once closed, a
        // low number is soon taken by another test of this binary (run in parallel), and a
        // write to that would fail otherwise.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct; dup2 onto a number no other test uses (tests
        // take the lowest free numbers).
        let high = unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
            let high = (limit.rlim_cur.saturating_sub(1)).min(4095) as i32;
            assert_eq!(libc::dup2(fd, high), high, "dup2 to {high}");
            high
        };
        assert_eq!(d.run(sqe(IORING_OP_CLOSE, fd, std::ptr::null(), 0, 0, 12)), 0);
        assert_eq!(d.run(sqe(IORING_OP_CLOSE, high, std::ptr::null(), 0, 0, 13)), 0);
        assert_eq!(
            d.run(sqe(IORING_OP_CLOSE, high, std::ptr::null(), 0, 0, 14)),
            -libc::EBADF
        );
        let bad = b"x".as_ptr();
        assert_eq!(d.run(sqe(IORING_OP_WRITE, high, bad, 1, cur, 15)), -libc::EBADF);
        assert_eq!(std::fs::read(dir.join("ops.txt")).unwrap(), b"hello World\n!");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_pipe_without_reader_is_epipe_not_sigpipe() {
        let r = ring(2, 4);
        let mut d = Driver {
            r: &r,
            tail: 0,
            cq_head: 0,
        };
        let mut fds = [0; 2];
        // SAFETY: pipe fills two fds that we own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: our own read end.
        unsafe { libc::close(fds[0]) };
        // SIGPIPE is ignored in Rust test binaries anyway; with the default disposition the
        // blocked signal would stay pending on the fallback thread, harmlessly.
        let res = d.run(sqe(IORING_OP_WRITE, fds[1], b"x".as_ptr(), 1, OFF_CURRENT_POSITION, 1));
        assert_eq!(res, -libc::EPIPE);
        // SAFETY: our own write end.
        unsafe { libc::close(fds[1]) };
    }

    #[test]
    fn a_full_cq_holds_sqes_back_instead_of_overflowing() {
        // The device must never have more in flight than the CQ holds; if it does, the
        // fallback waits for the reaper rather than overwrite a CQE.
        let r = ring(2, 2);
        let p = r.params;
        let mut d = Driver {
            r: &r,
            tail: 0,
            cq_head: 0,
        };
        let nop = |ud| sqe(IORING_OP_NOP, -1, std::ptr::null(), 0, 0, ud);
        d.push(nop(1));
        d.push(nop(2));
        let until = Instant::now() + Duration::from_secs(10);
        while r.word(p.sq_off.head).load(Ordering::Acquire) != 2 {
            assert!(Instant::now() < until);
            thread::sleep(Duration::from_millis(1));
        }
        d.push(nop(3)); // the SQ has room, the CQ has none
                        // Until the thread has seen the full CQ (however slowly it is scheduled; wake it if
                        // it parked, as the waker would).
        let until = Instant::now() + Duration::from_secs(10);
        while r.cq_full_waits() == 0 {
            assert!(Instant::now() < until, "the thread never looked at the SQE");
            r.wake_if_needed();
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(r.word(p.cq_off.tail).load(Ordering::Acquire), 2, "the CQ overflowed");
        assert_eq!(
            r.word(p.sq_off.head).load(Ordering::Acquire),
            2,
            "consumed an SQE it could not complete"
        );
        assert_eq!(d.pop(), (1, 0));
        assert_eq!(d.pop(), (2, 0));
        assert_eq!(d.pop(), (3, 0), "the held-back SQE completes once the CQ has room");
        assert_eq!(r.completed(), 3);
    }

    #[test]
    fn a_parked_thread_is_woken_and_drop_does_not_hang() {
        let r = ring(2, 4);
        let mut d = Driver {
            r: &r,
            tail: 0,
            cq_head: 0,
        };
        // sq_thread_idle_ms is 1: the thread parks soon after start.
        let until = Instant::now() + Duration::from_secs(10);
        while !r.state.sleeping.load(Ordering::SeqCst) {
            assert!(Instant::now() < until, "never parked");
            thread::sleep(Duration::from_millis(1));
        }
        assert!(!r.wake_if_needed(), "woken with nothing to do");
        d.push(sqe(IORING_OP_NOP, -1, std::ptr::null(), 0, 0, 7));
        assert_eq!(d.pop(), (7, 0));
        drop(r); // stops and joins the parked thread
    }

    #[test]
    fn rejects_sizes_io_uring_would() {
        for (sq, cq) in [(3, 8), (16, 8), (65536, 131072)] {
            let e = HostRing::new(UringConfig {
                sq_entries: sq,
                cq_entries: cq,
                sq_thread_idle_ms: 1,
                start_disabled: false,
            });
            assert!(matches!(e, Err(Error::Config(_))), "sq {sq} cq {cq}");
        }
    }
}
