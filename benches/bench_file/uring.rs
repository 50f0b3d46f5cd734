//! Host io_uring with raw system calls, for the host's side of the latency and random-read
//! workloads: a ring with SQPOLL, mapped the classic way (three `mmap`s), on the layouts of
//! `gpuio_device::protocol::uapi`.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, Ordering};

use gpuio_device::protocol::uapi::{
    Cqe, Params, Sqe, IORING_ENTER_GETEVENTS, IORING_ENTER_SQ_WAKEUP, IORING_SETUP_SQPOLL, IORING_SQ_NEED_WAKEUP,
};

/// `IORING_OFF_SQ_RING`: the `mmap` offset of the SQ ring.
const IORING_OFF_SQ_RING: libc::off_t = 0;
/// `IORING_OFF_CQ_RING`: the `mmap` offset of the CQ ring.
const IORING_OFF_CQ_RING: libc::off_t = 0x800_0000;
/// `IORING_OFF_SQES`: the `mmap` offset of the SQE array.
const IORING_OFF_SQES: libc::off_t = 0x1000_0000;

/// SQPOLL idle time of the host rings, as the gpuio runtime's default.
pub(crate) const SQ_IDLE_MS: u32 = 50;

/// One shared mapping of a ring's memory.
struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    /// Maps `len` bytes of ring `fd` at `offset` (one of the `IORING_OFF_*`).
    fn new(fd: i32, len: usize, offset: libc::off_t) -> io::Result<Map> {
        // SAFETY: a fresh shared mapping of the ring fd; the kernel checks `offset` and
        // `len`; we own the result until Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map { ptr: ptr.cast(), len })
    }

    /// The field at byte offset `off` (from `io_uring_params`, inside the mapping).
    fn at<T>(&self, off: u32) -> *mut T {
        debug_assert!(off as usize + std::mem::size_of::<T>() <= self.len);
        self.ptr.wrapping_add(off as usize).cast()
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our mapping; no pointer into it outlives the Ring that owns it.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// An io_uring instance with a kernel SQPOLL thread, used by one thread.
pub struct Ring {
    /// The SQ ring's head (the kernel's), tail (ours) and flags word (the kernel's).
    sq_head: *const AtomicU32,
    sq_tail: *const AtomicU32,
    sq_flags: *const AtomicU32,
    sq_mask: u32,
    sq_entries: u32,
    sqes: *mut Sqe,
    /// The CQ ring's head (ours) and tail (the kernel's), and its entries.
    cq_head: *const AtomicU32,
    cq_tail: *const AtomicU32,
    cq_mask: u32,
    cqes: *const Cqe,
    /// SQEs written, published or not (our copy of the SQ tail).
    tail: u32,
    /// CQEs reaped (our copy of the CQ head).
    head: u32,
    // Dropped in this order, after the pointers into them are gone: the mappings, then
    // the fd.
    _maps: [Map; 3],
    fd: OwnedFd,
}

impl Ring {
    /// A ring of `entries` SQEs (rounded up to a power of two; the CQ gets twice as
    /// many) whose SQPOLL thread sleeps after `idle_ms` without work.
    pub fn new(entries: u32, idle_ms: u32) -> io::Result<Ring> {
        let mut p = Params {
            flags: IORING_SETUP_SQPOLL,
            sq_thread_idle: idle_ms,
            ..Params::default()
        };
        // SAFETY: io_uring_setup(2) with a valid, writable `struct io_uring_params`.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, entries, &mut p as *mut Params) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let raw = fd.as_raw_fd();
        let sq = Map::new(
            raw,
            p.sq_off.array as usize + p.sq_entries as usize * 4,
            IORING_OFF_SQ_RING,
        )?;
        let cq = Map::new(
            raw,
            p.cq_off.cqes as usize + p.cq_entries as usize * std::mem::size_of::<Cqe>(),
            IORING_OFF_CQ_RING,
        )?;
        let sqes = Map::new(raw, p.sq_entries as usize * std::mem::size_of::<Sqe>(), IORING_OFF_SQES)?;
        let (so, co) = (p.sq_off, p.cq_off);
        // SAFETY: the kernel wrote the masks and the initial head and tail into the
        // mappings at these offsets; no request is in flight yet, so nothing writes them.
        let (sq_mask, cq_mask, tail, head) = unsafe {
            (
                *sq.at::<u32>(so.ring_mask),
                *cq.at::<u32>(co.ring_mask),
                *sq.at::<u32>(so.tail),
                *cq.at::<u32>(co.head),
            )
        };
        // SQ slot `i` always names SQE `i`: the index array is written once, before any
        // SQE is published (the Release store of the tail publishes it with the first).
        let array = sq.at::<u32>(so.array);
        for i in 0..p.sq_entries {
            // SAFETY: `sq_entries` u32s at `array`, inside the SQ mapping.
            unsafe { array.add(i as usize).write(i) };
        }
        Ok(Ring {
            sq_head: sq.at(so.head),
            sq_tail: sq.at(so.tail),
            sq_flags: sq.at(so.flags),
            sq_mask,
            sq_entries: p.sq_entries,
            sqes: sqes.at(0),
            cq_head: cq.at(co.head),
            cq_tail: cq.at(co.tail),
            cq_mask,
            cqes: cq.at(co.cqes),
            tail,
            head,
            _maps: [sq, cq, sqes],
            fd,
        })
    }

    /// Writes `sqe` into the next free SQ slot, unpublished (see [`Ring::submit`]);
    /// returns false if the SQ is full.
    pub fn push(&mut self, sqe: &Sqe) -> bool {
        // Acquire: orders the kernel's reading of the SQEs before the head it stores
        // after, before our overwriting those slots below.
        // SAFETY: the head word lives in the SQ mapping, which lives as long as `self`.
        let head = unsafe { &*self.sq_head }.load(Ordering::Acquire);
        if self.tail.wrapping_sub(head) >= self.sq_entries {
            return false;
        }
        // SAFETY: slot `tail & mask` of the SQE mapping; the kernel is done with it (the
        // head is past it) and reads it only after we publish it.
        unsafe { self.sqes.add((self.tail & self.sq_mask) as usize).write(*sqe) };
        self.tail = self.tail.wrapping_add(1);
        true
    }

    /// Publishes the SQEs pushed so far to the SQPOLL thread, and wakes it if it sleeps.
    pub fn submit(&mut self) -> io::Result<()> {
        // Release: orders our SQE writes (and the index array's) before the new tail,
        // which the SQPOLL thread loads with Acquire before it reads them.
        // SAFETY: the tail word lives in the SQ mapping, as long as `self`.
        unsafe { &*self.sq_tail }.store(self.tail, Ordering::Release);
        // SeqCst fence: orders the tail store before the flags load (liburing's
        // io_uring_smp_mb()). The SQPOLL thread sets NEED_WAKEUP, fences and looks at
        // the tail once more before it sleeps: one of us sees the other.
        fence(Ordering::SeqCst);
        // SAFETY: the flags word lives in the SQ mapping, as long as `self`.
        if unsafe { &*self.sq_flags }.load(Ordering::Relaxed) & IORING_SQ_NEED_WAKEUP != 0 {
            self.enter(0, IORING_ENTER_SQ_WAKEUP)?;
        }
        Ok(())
    }

    /// Waits in the kernel until at least one completion is posted.
    pub fn wait(&mut self) -> io::Result<()> {
        self.enter(1, IORING_ENTER_GETEVENTS)
    }

    /// Hands every posted completion to `f`, oldest first; returns how many.
    pub fn reap(&mut self, mut f: impl FnMut(Cqe)) -> usize {
        // Acquire: orders the kernel's CQE writes, before the tail it stores after,
        // before our reads of those CQEs.
        // SAFETY: the tail word lives in the CQ mapping, as long as `self`.
        let tail = unsafe { &*self.cq_tail }.load(Ordering::Acquire);
        let n = tail.wrapping_sub(self.head) as usize;
        while self.head != tail {
            // SAFETY: a posted CQE (between our head and the kernel's tail), inside the
            // CQ mapping; the kernel does not overwrite it before we move the head past.
            f(unsafe { self.cqes.add((self.head & self.cq_mask) as usize).read() });
            self.head = self.head.wrapping_add(1);
        }
        if n > 0 {
            // Release: orders our reads of the CQEs before the head that lets the
            // kernel overwrite them.
            // SAFETY: the head word lives in the CQ mapping, as long as `self`.
            unsafe { &*self.cq_head }.store(self.head, Ordering::Release);
        }
        n
    }

    /// `io_uring_enter(2)` submitting nothing (SQPOLL submits), retried on EINTR.
    fn enter(&self, min_complete: u32, flags: u32) -> io::Result<()> {
        loop {
            // SAFETY: io_uring_enter(2) on our ring with no argument structure.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_enter,
                    self.fd.as_raw_fd(),
                    0u32,
                    min_complete,
                    flags,
                    std::ptr::null::<libc::c_void>(),
                    0usize,
                )
            };
            if r >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}
