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
//! `read`; otherwise `pwrite`/`pread`, or `write`/`read` on a file without offsets, a pipe
//! or a terminal, as io_uring does; a write with `RWF_APPEND`, the only `rw_flags` taken:
//! `pwritev2`), `WRITE_FIXED`/`READ_FIXED` (the same, once the range is found inside the
//! registered buffer `buf_index`, `-EFAULT` otherwise), `OPENAT`, `CLOSE`, `FSYNC`
//! (`IORING_FSYNC_DATASYNC`: `fdatasync`), `FTRUNCATE`, `UNLINKAT`, `MKDIRAT`, `RENAMEAT`
//! (`renameat2`) and `NOP`. Results are what the kernel would put
//! in the CQE: the syscall's return value, or `-errno`; short reads and writes are returned
//! as they are (the device resubmits the rest). Unknown opcodes, and SQE flags other than
//! `IOSQE_FIXED_FILE`, `IOSQE_IO_DRAIN` and `IOSQE_ASYNC` (requests run one at a time, in
//! SQ order, so drain and async hold trivially), complete with `-EINVAL`.
//!
//! **Registration, as `io_uring_register(2)`.** `IOSQE_FIXED_FILE` looks the fd up in a
//! table set with [`HostRing::register_files`] (`-EBADF` when it is not there); an
//! `OPENAT` or `CLOSE` with a `file_index` opens into or closes a slot of that table, as the
//! kernel does (`-ENXIO` where none was registered, `-EINVAL` past its end), never a
//! descriptor of the process; buffers come from [`HostRing::register_buffers`]. A ring created disabled consumes nothing until
//! [`HostRing::enable`]; before that, [`HostRing::register_restrictions`] takes the same
//! restriction array the kernel takes, and from then on a request whose opcode or flags
//! it forbids completes with `-EACCES` without being performed, exactly as through
//! io_uring: the sandbox holds on both paths.

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
//! **Inline** ([`HostRing::new_inline`], the CPU backend's default): no thread. Whoever
//! calls [`HostRing::consume`] performs what the SQ holds, one caller at a time (a
//! try-lock: a caller that finds another at it returns, and that one reads the tail again
//! after it lets go, so nothing published before a call is left behind). The CPU backend's
//! kernel threads call it after they publish a request and while they wait
//! (`arch::host::install_performer`), and the waker at each look. No thread of gpuio's
//! hands a request to another, and none sleeps and wakes per request: the kernel threads
//! make the syscalls themselves, as a plain program's threads do. That is the point. A
//! consumer thread (or io_uring's workers) woken tens of thousands of times a second beside
//! kernel threads that yield while they wait stalled other sessions' processes for up to
//! seconds (`bench_neighbour`), and every request paid two thread hand-offs. Kernel threads
//! block `SIGPIPE` (`backend/cpu.rs`), so a write to a pipe whose reader is gone returns
//! `EPIPE` there too.
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
//!
//! Here: the ring's memory and its face to the runtime (`HostRing`); the thread's loop and
//! its back-off in `drain.rs`; each SQE's syscall in `execute.rs`.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, TryLockError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use gpuio_device::protocol::uapi::*;

use crate::consumer::uring::{UringConfig, MAX_CQ_ENTRIES, MAX_SQ_ENTRIES};
use crate::consumer::waker::Look;
use crate::error::{Error, Result};
use crate::memory::{page_size, round_up, Mapping};
use drain::{Consumer, Drained};
use execute::{Restricted, Tables};

mod drain;
mod execute;
#[cfg(test)]
mod tests;

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

/// The most passes over the SQ one [`HostRing::consume`] call makes.
const PASSES: u32 = 4;

/// Sleep between polls once spinning and yielding found nothing.
const POLL: Duration = Duration::from_micros(20);
/// How long a parked thread waits before it looks anyway (the waker normally unparks it).
const PARKED: Duration = Duration::from_millis(100);

/// A ring in host memory, consumed by a host thread (see the module docs).
pub struct HostRing {
    /// The fallback kernel; joined before the memory below is unmapped. None inline.
    thread: Option<JoinHandle<()>>,
    /// Inline: the consuming side, for whoever calls [`HostRing::consume`].
    inline: Option<Mutex<Consumer>>,
    state: Arc<RingState>,
    /// The geometry, in `io_uring_setup`'s terms (our offsets; `features` has `NODROP`).
    pub params: Params,
    /// SQE array.
    pub sqes: Mapping,
    /// Heads, tails, flags and CQEs.
    pub rings: Mapping,
}

/// What the thread and its owner share.
struct RingState {
    stop: AtomicBool,
    /// The thread is parked (or about to park).
    sleeping: AtomicBool,
    /// Requests completed.
    completed: AtomicU64,
    /// Times the CQ was full when an SQE waited (the device broke invariant 4).
    cq_full: AtomicU64,
    /// Files, buffers and restrictions, as registered.
    registered: RwLock<Tables>,
    /// The thread consumes SQEs (a ring created disabled does not until enabled, as
    /// `IORING_SETUP_R_DISABLED`).
    enabled: AtomicBool,
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
        HostRing::make(cfg, false)
    }

    /// Maps the rings, with no thread: the callers of [`HostRing::consume`] perform the
    /// requests (see the module docs). Sizes as for [`HostRing::new`].
    pub fn new_inline(cfg: UringConfig) -> Result<HostRing> {
        HostRing::make(cfg, true)
    }

    fn make(cfg: UringConfig, inline: bool) -> Result<HostRing> {
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
        let p = params(cfg, &sqes, &rings);
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
        let state = Arc::new(RingState {
            stop: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            cq_full: AtomicU64::new(0),
            registered: RwLock::new(Tables::default()),
            enabled: AtomicBool::new(!cfg.start_disabled),
        });
        if inline {
            return Ok(HostRing {
                thread: None,
                // The lock's first taker acquires the words stored above through the
                // `Arc` that publishes this ring to it.
                inline: Some(Mutex::new(Consumer::new(words))),
                state,
                params: p,
                sqes,
                rings,
            });
        }
        let st = state.clone();
        // The spawn happens-before the thread's first access to the words stored above.
        let thread = thread::Builder::new()
            .name("gpuio-fallback".into())
            .spawn(move || drain::run(words, &st))
            .map_err(os("starting the fallback thread"))?;
        Ok(HostRing {
            thread: Some(thread),
            inline: None,
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

    /// Unparks the thread if it sleeps while SQEs wait. Reads only the SQ head and tail
    /// (and the thread's `sleeping` flag): it never touches data. Says what it saw and
    /// whether it woke it.
    ///
    /// Inline, it performs what waits itself ([`HostRing::consume`]); `woke` is then false.
    pub fn wake_if_needed(&self) -> Look {
        // Acquire: pairs with the releases of the tail (device) and head (this thread).
        let tail = self.word(SQ_TAIL).load(Ordering::Acquire);
        let waiting = tail != self.word(SQ_HEAD).load(Ordering::Acquire);
        if self.inline.is_some() {
            if waiting {
                self.consume();
            }
            return Look {
                tail,
                waiting,
                woke: false,
            };
        }
        // SeqCst: pairs with the thread's SeqCst store of `sleeping` and re-check of the
        // tail before it parks; a wakeup missed here is caught at the next look (the waker
        // looks again within 50 µs while SQEs wait) or by the park's timeout.
        let woke = waiting && self.state.sleeping.load(Ordering::SeqCst);
        if woke {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
        Look { tail, waiting, woke }
    }

    /// Whether SQEs wait unconsumed (a hint: Relaxed, nothing is read through it).
    pub fn sq_waiting(&self) -> bool {
        self.word(SQ_TAIL).load(Ordering::Relaxed) != self.word(SQ_HEAD).load(Ordering::Relaxed)
    }

    /// Whether the ring is consumed inline ([`HostRing::new_inline`]).
    pub fn is_inline(&self) -> bool {
        self.inline.is_some()
    }

    /// Inline: performs every request published so far, in SQ order, on the calling thread,
    /// unless another thread is at it; then returns at once, and that one reads the tail
    /// again after it lets go. Does nothing on a ring with a thread of its own, or one not
    /// enabled yet.
    pub fn consume(&self) {
        let Some(consumer) = &self.inline else { return };
        // Cheap when there is nothing to do (a waiting thread calls this every round):
        // Relaxed, a hint. A caller that published reads its own tail store; one whose SQE
        // another thread is publishing returns here, and that publisher performs (or, for a
        // print stream's write, the next thread to wait, or the waker).
        if !self.sq_waiting() {
            return;
        }
        // At most a few passes a call: while other threads keep publishing, one caller must
        // not become their consumer for good (it may hold a protocol role). What it leaves
        // goes to the next caller, or to the waker's next look.
        for _ in 0..PASSES {
            // SeqCst fence, here and after the unlock below: our caller published its SQEs
            // (a Release store of the tail) before this try; a holder that we fail against
            // unlocks, fences, then reads the tail. With the two fences at least one of us
            // sees the other's store: it sees our tail, or we take the lock.
            std::sync::atomic::fence(Ordering::SeqCst);
            let mut c = match consumer.try_lock() {
                Ok(c) => c,
                Err(TryLockError::WouldBlock) => return,
                // A panic while performing (none is expected): the consumer's head and CQ
                // tail are still its own, each stored with its word.
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
            };
            // Acquire: pairs with `enable`'s release; a disabled ring consumes nothing.
            if !self.state.enabled.load(Ordering::Acquire) {
                return;
            }
            let drained = c.drain(&self.state);
            let head = c.head;
            drop(c);
            std::sync::atomic::fence(Ordering::SeqCst);
            // A pass that stopped at a full CQ leaves the rest to the next caller (a waiter,
            // after it reaped): looping here would hold this thread from reaping.
            if matches!(drained, Drained::Nothing { cq_full: true })
                || self.word(SQ_TAIL).load(Ordering::Acquire) == head
            {
                return;
            }
        }
    }

    /// Sets the files that SQEs with `IOSQE_FIXED_FILE` name by index, like
    /// `IORING_REGISTER_FILES`: the ring keeps its own reference to each (a duplicate, at
    /// descriptor 64 or above, clear of the numbers programs `dup2` onto), so a later `close`
    /// or `dup2` onto the program's number does not change which file a slot names; -1 is an
    /// empty slot. Unlike the kernel's, the duplicates are descriptors of the process: code
    /// that closes every descriptor (`close_range`) closes them too. Fails, registering
    /// nothing, if one cannot be made (as the kernel's registration fails). Takes effect for
    /// SQEs consumed after the call.
    pub fn register_files(&self, fds: &[RawFd]) -> std::io::Result<()> {
        let mut dups = Vec::with_capacity(fds.len());
        for &fd in fds {
            if fd < 0 {
                dups.push(-1);
                continue;
            }
            // SAFETY: F_DUPFD_CLOEXEC only creates a new descriptor (or fails: -1).
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 64) };
            if dup < 0 {
                let e = std::io::Error::last_os_error();
                execute::close_files(&dups);
                return Err(e);
            }
            dups.push(dup);
        }
        let mut reg = self.registered();
        let old = std::mem::replace(&mut reg.files, dups);
        // As the kernel sets the allocation range over the new table.
        reg.alloc_hint = 0;
        drop(reg);
        execute::close_files(&old);
        Ok(())
    }

    /// Says that the ring's requests run under a file root (`Builder::file_root`: its
    /// creator, and so this thread, is confined by Landlock): the thread then also refuses,
    /// with `-EACCES`, the opens that Landlock does not check (`O_PATH`, and creating a
    /// file with a set-id bit; `execute::beyond_landlock`). Before the ring is enabled.
    pub fn confine_to_root(&self) {
        self.registered().file_root = true;
    }

    fn registered(&self) -> std::sync::RwLockWriteGuard<'_, Tables> {
        self.state.registered.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the ring was created disabled and is not enabled yet.
    pub fn is_disabled(&self) -> bool {
        !self.state.enabled.load(Ordering::Acquire)
    }

    /// Sets the buffers that `*_FIXED` requests name by index, like
    /// `IORING_REGISTER_BUFFERS`: (address, length) pairs.
    pub fn register_buffers(&self, bufs: &[(u64, u64)]) {
        self.registered().buffers = bufs.to_vec();
    }

    /// Replaces buffers `offset..` with `bufs`, like `IORING_REGISTER_BUFFERS_UPDATE`
    /// (`EINVAL` past the table's end; (0, 0) empties a slot). Waits for the request being
    /// performed, which holds the table.
    pub fn update_buffers(&self, offset: u32, bufs: &[(u64, u64)]) -> std::io::Result<()> {
        let mut reg = self.registered();
        let at = offset as usize;
        match reg.buffers.get_mut(at..at.saturating_add(bufs.len())) {
            Some(slots) => {
                slots.copy_from_slice(bufs);
                Ok(())
            }
            None => Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }

    /// Restricts the SQEs the thread performs, like `IORING_REGISTER_RESTRICTIONS`: only on
    /// a ring created disabled (`EBADFD` otherwise), once (`EBUSY`).
    pub fn register_restrictions(&self, r: &[Restriction]) -> std::io::Result<()> {
        let err = |e| Err(std::io::Error::from_raw_os_error(e));
        if !self.is_disabled() {
            return err(libc::EBADFD);
        }
        let mut reg = self.registered();
        if reg.restrictions.is_some() {
            return err(libc::EBUSY);
        }
        reg.restrictions = Some(Restricted::new(r)?);
        Ok(())
    }

    /// Lets the thread consume SQEs, like `IORING_REGISTER_ENABLE_RINGS`.
    pub fn enable(&self) {
        // Release: the registrations above happen-before the thread's first SQE (it loads
        // `enabled` with Acquire).
        self.state.enabled.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Requests completed so far.
    #[cfg(test)]
    pub fn completed(&self) -> u64 {
        self.state.completed.load(Ordering::Relaxed)
    }

    /// Times an SQE waited because the CQ was full (zero unless the device overcommits).
    #[cfg(test)]
    pub fn cq_full_waits(&self) -> u64 {
        self.state.cq_full.load(Ordering::Relaxed)
    }
}

/// The geometry `io_uring_setup` would report for rings of `cfg`'s sizes, at our offsets
/// (the kernel's `struct io_rings` layout) over `sqes` and `rings`.
fn params(cfg: UringConfig, sqes: &Mapping, rings: &Mapping) -> Params {
    let mut p = Params {
        sq_entries: cfg.sq_entries,
        cq_entries: cfg.cq_entries,
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
    p
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
