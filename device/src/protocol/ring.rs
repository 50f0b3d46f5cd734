//! The io_uring rings, seen from the device: submission and completion.
//!
//! Read this module top to bottom; it is the whole submission protocol.
//!
//! # Memory
//! The host creates the ring with `IORING_SETUP_SQPOLL | NO_MMAP | NO_SQARRAY` on memory it
//! allocated and made GPU-visible, and fills a [`Ring`] with pointers into it:
//!
//! | word / array | written by | read by |
//! |---|---|---|
//! | `sq_head` | kernel (`smp_store_release`) | submitters: is my slot free? |
//! | `sq_tail` | the publisher (below), `Release` | kernel (`smp_load_acquire`) |
//! | `sq_flags` | kernel (`NEED_WAKEUP`) | the host's waker |
//! | `sqes[]` | the submitter that owns the slot | kernel, after it sees the tail |
//! | `cq_tail` | kernel (`smp_store_release`) | the reaper |
//! | `cq_head` | the reaper, `Release` (or after its release fence) | kernel |
//! | `cqes[]` | kernel | the reaper |
//! | `ready[]`, `tickets`, `published` | submitters / publisher | submitters / publisher |
//! | `reaped` (our copy of `cq_head`) | the reaper, `Release` | reaper; submitters: credits |
//!
//! Every atomic here is a `crate::protocol::sync` atomic: **system scope** on every target. The
//! invariants cited here are listed, numbered, in `docs/PROTOCOL.md`.
//!
//! # Submitting one SQE ([`Ring::submit`])
//! 1. **Ticket.** `tickets.fetch_add(1)` gives the SQ position `t` the SQE will occupy.
//!    Tickets are handed out in one total order; nothing else is ordered by it (Relaxed).
//! 2. **Wait for the slot and a credit** (backpressure, invariants 2 and 4):
//!    - the slot `t & mask` last held SQE `t - sq_entries`; it is free once the kernel's
//!      head has passed it: `t - sq_head < sq_entries`. (Acquire on `sq_head`: the kernel
//!      read the old SQE before it released the head; our writes come after.)
//!    - every SQE makes exactly one CQE, so `t + 1 - cq_head` bounds the requests in flight
//!      plus unreaped CQEs once `t` is published. Waiting for `t - cq_head < cq_entries`
//!      means the CQ can never overflow; flushing an overflowed CQ takes a syscall that a
//!      GPU cannot make. (Submitters read the head from `reaped`, the reaper's own copy
//!      in our memory, not from the kernel's word: on a GPU that is a read across PCIe.)
//!      While waiting, the submitter *helps*: it reaps completions, which frees credits.
//!      Steps 3 to 5 happen in the round of the wait that finds the slot and the credit
//!      (the lockstep rule of `arch/mod.rs`: a lane never leaves a wait holding an
//!      unpublished ticket, since a sibling's later ticket may wait for it).
//! 3. **Write** the SQE with plain stores. The slot is ours alone.
//! 4. **Ready.** `ready[t & mask].store(t + 1, Release)`: the SQE bytes, and the payload the
//!    caller wrote before submitting, happen-before anyone who acquires this flag.
//! 5. **Publish** (invariant 1 and 2). The tail may only move over fully written SQEs, in
//!    order. Whoever gets the publisher [`Combiner`] walks `ready[]` from `published`
//!    (Acquire per flag) and stores the new tail with Release. The kernel's acquire of the
//!    tail then sees every SQE below it, and the payloads they point at: happens-before is
//!    transitive through the flag's release/acquire and the tail's release/acquire. A
//!    submitter that finds the publisher busy leaves a request, and the busy publisher walks
//!    again before it leaves, so no ready SQE is stranded.
//!
//! # Waking the kernel
//! SQPOLL sleeps after `sq_thread_idle` ms without work and sets `IORING_SQ_NEED_WAKEUP`.
//! A GPU cannot make the `io_uring_enter` syscall, so the device never does: the host's
//! waker watches the flag (see `host/src/consumer/waker.rs`).
//!
//! # Completions ([`Ring::reap`])
//! Whoever gets the reaper lock (a try-lock: the others leave at once) reads CQEs from
//! `reaped` to the kernel's `cq_tail` (Acquire: the kernel wrote the CQE, and finished with
//! the request's buffers, before it released the tail), hands them, in batches, to a
//! dispatch function, then stores the kernel's `cq_head` (Release, or Relaxed right after
//! the dispatch's own release fence: our reads of those CQE slots happen-before the kernel
//! refills them) and then `reaped` (Release: the credits it frees are seen only after the
//! dispatch that recycled their buffers, and after the kernel's head moved), then releases
//! the lock behind one more release fence, which also releases what the caller stores after
//! the reap. A reap that finds no CQE stores neither.

use crate::protocol::combine::{Combiner, Left};
use crate::protocol::sync::{fence, AtomicU32, Ordering, Padded, SharedCell};
use crate::protocol::uapi::{Cqe, Sqe};
use crate::protocol::wait::until;

/// The most CQEs [`Ring::reap`] hands to its dispatch at once.
pub const REAP_BATCH: usize = 16;

/// The device's view of one io_uring instance (see the module docs).
#[repr(C)]
pub struct Ring {
    /// Kernel: SQ head.
    pub sq_head: *const AtomicU32,
    /// Kernel: SQ tail (we store it).
    pub sq_tail: *const AtomicU32,
    /// Kernel: SQ flags (`IORING_SQ_NEED_WAKEUP`).
    pub sq_flags: *const AtomicU32,
    /// Kernel: the SQE array (`sq_entries` slots).
    pub sqes: *const SharedCell<Sqe>,
    /// Kernel: CQ head (we store it).
    pub cq_head: *const AtomicU32,
    /// Kernel: CQ tail.
    pub cq_tail: *const AtomicU32,
    /// Kernel: the CQE array (`cq_entries` slots).
    pub cqes: *const SharedCell<Cqe>,
    /// Ours: one ready flag per SQ slot; slot `t & mask` is ready for ticket `t` when it
    /// holds `t + 1`. Zero-initialised.
    pub ready: *const AtomicU32,
    /// SQ size (a power of two).
    pub sq_entries: u32,
    /// CQ size (a power of two, at least `sq_entries`).
    pub cq_entries: u32,
    /// Next ticket (SQ position) to hand out.
    pub tickets: Padded<AtomicU32>,
    /// The tail as last published; written only by the publisher.
    pub published: Padded<AtomicU32>,
    /// The kernel's SQ head as some submitter last read it (our memory): submitters read
    /// the kernel's word only when this copy says the slot may still be occupied (on a GPU
    /// that read crosses PCIe).
    pub sq_head_seen: Padded<AtomicU32>,
    /// Lets one submitter at a time read the kernel's SQ head into `sq_head_seen`.
    pub head_reader: Combiner,
    /// Serialises tail publication.
    pub publisher: Combiner,
    /// Serialises CQ consumption.
    pub reaper: Combiner,
    /// The CQ head as the reaper last stored it: written only by the reaper, read by
    /// submitters for credits. (The kernel's `cq_head` is written, never read: on a GPU a
    /// read of it crosses PCIe.)
    pub reaped: Padded<AtomicU32>,
}

impl Ring {
    /// A ring over kernel memory at the given addresses. All counters start at zero, as the
    /// kernel's do on a new ring.
    ///
    /// # Safety
    /// Every pointer must stay valid, and be accessed only through this protocol, for as
    /// long as the ring is used. `cqes` is 16-byte aligned, as the kernel places the CQE
    /// array. `ready` must point to `sq_entries` zeroed words.
    /// `sq_entries` and `cq_entries` are powers of two with `cq_entries >= sq_entries`;
    /// or both are 0 and every pointer null ([`Ring::unused`]).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn new(
        sq_head: *const AtomicU32,
        sq_tail: *const AtomicU32,
        sq_flags: *const AtomicU32,
        sqes: *const SharedCell<Sqe>,
        cq_head: *const AtomicU32,
        cq_tail: *const AtomicU32,
        cqes: *const SharedCell<Cqe>,
        ready: *const AtomicU32,
        sq_entries: u32,
        cq_entries: u32,
    ) -> Ring {
        debug_assert!(
            (cqes as usize).is_multiple_of(16),
            "the CQE array must be 16-byte aligned"
        );
        Ring {
            sq_head,
            sq_tail,
            sq_flags,
            sqes,
            cq_head,
            cq_tail,
            cqes,
            ready,
            sq_entries,
            cq_entries,
            tickets: Padded(AtomicU32::new(0)),
            published: Padded(AtomicU32::new(0)),
            sq_head_seen: Padded(AtomicU32::new(0)),
            head_reader: Combiner::new(),
            publisher: Combiner::new(),
            reaper: Combiner::new(),
            reaped: Padded(AtomicU32::new(0)),
        }
    }

    /// A ring with no memory behind it, for the context's slots past its live rings: its
    /// pointers are null and its sizes zero. Reaping it finds nothing; submitting to it
    /// panics; `idle` and `submitted` read only its own counters, which stay zero.
    pub fn unused() -> Ring {
        let (null, sqes, cqes) = (core::ptr::null(), core::ptr::null(), core::ptr::null());
        // SAFETY: a ring of no entries with every pointer null, which `Ring::new` allows: no
        // operation on it dereferences a pointer (`submit` panics, `reap` returns first).
        unsafe { Ring::new(null, null, null, sqes, null, null, cqes, null, 0, 0) }
    }

    // The accessors below turn the pointers `Ring::new` was given into references. Shared
    // references are sound: every word is an atomic or a `SharedCell`, written by other
    // agents only through atomic operations or through the protocol's ownership of a slot.
    fn sq_head(&self) -> &AtomicU32 {
        // SAFETY: `Ring::new`'s contract keeps the kernel's SQ head valid while the ring is used.
        unsafe { &*self.sq_head }
    }
    fn sq_tail(&self) -> &AtomicU32 {
        // SAFETY: `Ring::new`'s contract keeps the kernel's SQ tail valid while the ring is used.
        unsafe { &*self.sq_tail }
    }
    fn cq_head(&self) -> &AtomicU32 {
        // SAFETY: `Ring::new`'s contract keeps the kernel's CQ head valid while the ring is used.
        unsafe { &*self.cq_head }
    }
    fn cq_tail(&self) -> &AtomicU32 {
        // SAFETY: `Ring::new`'s contract keeps the kernel's CQ tail valid while the ring is used.
        unsafe { &*self.cq_tail }
    }
    fn ready(&self, t: u32) -> &AtomicU32 {
        // SAFETY: `ready` points to `sq_entries` words (`Ring::new`), a power of two, and the
        // index is masked below it.
        unsafe { &*self.ready.add((t & (self.sq_entries - 1)) as usize) }
    }
    fn sqe(&self, t: u32) -> &SharedCell<Sqe> {
        // SAFETY: `sqes` points to `sq_entries` SQEs (`Ring::new`), a power of two, and the
        // index is masked below it.
        unsafe { &*self.sqes.add((t & (self.sq_entries - 1)) as usize) }
    }
    fn cqe(&self, h: u32) -> &SharedCell<Cqe> {
        // SAFETY: `cqes` points to `cq_entries` CQEs (`Ring::new`), a power of two, and the
        // index is masked below it.
        unsafe { &*self.cqes.add((h & (self.cq_entries - 1)) as usize) }
    }

    /// Reads CQE slot `h & mask` with one 16-byte load (`arch::read_published`: plain from
    /// sm_70 on NVIDIA GPUs). On a GPU each load of host memory crosses PCIe; a volatile
    /// read of the struct is split by field (three loads, each a PCIe round trip, and under
    /// thousands of waiting threads each waits behind their traffic: a batch of CQEs then
    /// took several times as long to reach the reaper).
    ///
    /// # Safety
    /// The kernel published the slot (the caller acquired the CQ tail past it) and the
    /// caller has not moved the head past it.
    unsafe fn read_cqe(&self, h: u32) -> Cqe {
        // SAFETY: our caller's contract; the CQE array is 16-byte aligned in the ring.
        unsafe { load_cqe(self.cqe(h)) }
    }

    /// Submits one SQE; returns its ticket. Waits (helping with `help`, which should reap)
    /// while the SQ slot is occupied or the CQ has no credit.
    ///
    /// Whatever the SQE points at must be fully written before the call.
    ///
    /// Then it rings the doorbell (`arch::ring_doorbell`: on the CPU backend's rings without
    /// SQPOLL the host's waker submits; nothing on a GPU).
    pub fn submit(&self, sqe: &Sqe, help: &mut dyn FnMut()) -> u32 {
        let t = self.submit_unrung(sqe, help);
        crate::protocol::arch::ring_doorbell();
        t
    }

    /// [`Ring::submit`] without the doorbell after it (it still rings while it waits for an
    /// SQ slot), for a thread that holds a role others wait for (the stream's flusher): it
    /// rings once it has let go (`Stream::flush`). A thread that wakes a thread with a
    /// shorter slice (the CPU backend's waker) can be preempted by it at once, and one that
    /// rang inside its flush then held the stream, and every later line, for its next turn
    /// among the computing threads of its core. Meanwhile the waker's own looks see the SQE.
    pub fn submit_unrung(&self, sqe: &Sqe, help: &mut dyn FnMut()) -> u32 {
        // An unused ring (`Ring::unused`) has no SQ: its pointers are null.
        assert!(self.sq_entries != 0, "submit to an unused ring");
        // 1. Ticket. Relaxed, system scope: uniqueness is all it provides.
        let t = self.tickets.fetch_add(1, Ordering::Relaxed);

        // 2. Slot free and a CQ credit; then 3-5 in the same round (the lockstep rule,
        // arch/mod.rs: a lane of a lockstep wavefront must not leave the wait with its
        // ticket unpublished, since a sibling whose ticket is a lap later waits for exactly
        // that SQE to be consumed).
        until(
            || {
                if !self.may_write(t) {
                    // A full SQ may hold SQEs that only the waker submits (the CPU backend
                    // without SQPOLL): tell it, each round. (Relaxed: a hint only; a CQ
                    // without credit waits for reaping, which the doorbell cannot speed.)
                    if t.wrapping_sub(self.sq_head_seen.load(Ordering::Relaxed)) >= self.sq_entries {
                        crate::protocol::arch::ring_doorbell();
                    }
                    return None;
                }
                // 3. Write. SAFETY: slot `t & mask` belongs to ticket `t` alone: its previous
                // occupant was consumed (acquire in `may_write`) and no one reads it before
                // step 4.
                unsafe { self.sqe(t).write(*sqe) };

                // 4. Ready. Release, system scope: the SQE and the caller's payload
                // happen-before the publisher's acquire of this flag.
                self.ready(t).store(t.wrapping_add(1), Ordering::Release);

                // 5. Publish. (A submitter whose SQE another publisher moves the tail over
                // rings the doorbell after its own publish, which comes after that one's
                // or in the same combined round.)
                self.publish();
                Some(t)
            },
            help,
        )
    }

    /// Whether ticket `t`'s slot is free and a CQ credit is there for it (step 2).
    fn may_write(&self, t: u32) -> bool {
        // Acquire, system scope: pairs with the release of the submitter that stored it,
        // after its own acquire of the kernel's head: write-after-read on the slot through
        // that chain (or a value that only sends us to the kernel's word).
        let mut sq_head = self.sq_head_seen.load(Ordering::Acquire);
        if t.wrapping_sub(sq_head) >= self.sq_entries {
            // One submitter at a time reads the kernel's word (a try-lock: the others go on
            // with the copy). With hundreds of submitters waiting for SQ slots, one read of
            // host memory across PCIe each, every round, flooded the link that the reaper's
            // reads and the staging copies use.
            self.head_reader.try_run(|| {
                // Acquire, system scope: pairs with the kernel's smp_store_release of the
                // head after it consumed SQE `t - sq_entries` (write-after-read on the slot).
                let head = self.sq_head().load(Ordering::Acquire);
                // Release: passes that acquire on to submitters that read the copy (the
                // lock orders the readers, so the copy never moves back).
                self.sq_head_seen.store(head, Ordering::Release);
                Left::Writes
            });
            // Acquire: pairs with the release above, ours or the reader's that holds the lock.
            sq_head = self.sq_head_seen.load(Ordering::Acquire);
        }
        // Acquire, system scope: pairs with the reaper's release of `reaped`, which it
        // stored after the kernel's `cq_head`; so the kernel sees that head before it sees
        // this SQE (through our publication), and the CQ cannot overflow.
        let cq_head = self.reaped.load(Ordering::Acquire);
        t.wrapping_sub(sq_head) < self.sq_entries && t.wrapping_sub(cq_head) < self.cq_entries
    }

    /// Moves the SQ tail over every ready SQE, in order.
    fn publish(&self) {
        self.publisher.run_fast(|| {
            // Only the publisher writes `published`; the combiner's lock orders holders.
            let start = self.published.load(Ordering::Relaxed);
            let mut tail = start;
            // Acquire, system scope: pairs with the submitters' release in step 4. The walk
            // cannot run past a lap: SQE `t >= start + sq_entries` cannot have been
            // written, since the kernel's head is at most `start`.
            while self.ready(tail).load(Ordering::Acquire) == tail.wrapping_add(1) {
                tail = tail.wrapping_add(1);
            }
            if tail != start {
                // Relaxed (one system-scope release per publication, not two: on a GPU
                // each is a fence): the next publisher reads it after the combiner lock's
                // release/acquire, and `idle` only once no one submits.
                self.published.store(tail, Ordering::Relaxed);
                // Release, system scope: every SQE below `tail` (and its payload) happens-
                // before the kernel's smp_load_acquire of the tail. Invariant 1.
                self.sq_tail().store(tail, Ordering::Release);
            }
        });
    }

    /// Consumes every CQE present, passing them to `dispatch` in order, in batches of at
    /// most [`REAP_BATCH`], exclusively. If another agent is reaping, returns `false` at
    /// once: only the reaper reads the CQ, so waiting GPU threads never flood PCIe with
    /// reads of host memory. A CQE that lands after the reaper looked is taken by the next
    /// call (waiters and flushers keep calling; the drain calls until everything completed).
    /// Returns whether it consumed any.
    ///
    /// Batches are there for the GPU: the loads of a batch's CQEs (across PCIe) are issued
    /// before any of them is used, and the dispatch publishes a batch's results behind one
    /// system-scope fence (`Context::dispatch`). `dispatch` returns whether it issued a
    /// release fence (system scope): for the last batch, that fence comes after our reads
    /// of every CQE slot, so the head store needs no release of its own.
    ///
    /// A reap that finds no CQE writes nothing (and releases the lock without a fence,
    /// [`Left::Nothing`]): on a GPU a waiter polls the CQ this way, and each system-scope
    /// release there costs about a PCIe round trip. A reap that consumed CQEs ends with a
    /// release fence (system scope), after its last write: it releases the lock, and any
    /// relaxed store the caller makes after the call (`Requests::give_back_mine`).
    pub fn reap(&self, mut dispatch: impl FnMut(&[Cqe]) -> bool) -> bool {
        if self.cq_entries == 0 {
            return false; // an unused ring (`Ring::unused`): nothing behind its null pointers
        }
        let mut any = false;
        self.reaper.try_run(|| {
            // Only the reaper writes the head; the lock orders reapers.
            let mut head = self.reaped.load(Ordering::Relaxed);
            // Acquire, system scope: pairs with the kernel's smp_store_release of the CQ
            // tail; the CQEs, and the kernel's last use of each request's buffers,
            // happen-before our reads.
            let tail = self.cq_tail().load(Ordering::Acquire);
            if head == tail {
                return Left::Nothing; // nothing taken, nothing to publish
            }
            any = true;
            let mut fenced = false;
            while head != tail {
                let n = (tail.wrapping_sub(head) as usize).min(REAP_BATCH);
                let batch: [Cqe; REAP_BATCH] = core::array::from_fn(|i| {
                    if i < n {
                        // SAFETY: the kernel published this CQE (acquire above) and will
                        // not rewrite the slot until we move the head past it.
                        unsafe { self.read_cqe(head.wrapping_add(i as u32)) }
                    } else {
                        Cqe::default()
                    }
                });
                fenced = dispatch(&batch[..n]);
                head = head.wrapping_add(n as u32);
            }
            // Our reads of the slots happen-before the kernel reuses them: through the
            // dispatch's release fence after the last of them if it made one (then Relaxed,
            // system scope), or through this store's own release.
            self.cq_head()
                .store(head, if fenced { Ordering::Relaxed } else { Ordering::Release });
            // Release, system scope: the dispatch's recycling and the kernel's head
            // happen-before submitters use the credits.
            self.reaped.store(head, Ordering::Release);
            // Release fence, system scope: releases the lock (`Left::Fenced`: the unlock is
            // a relaxed store, so this costs what a release store would) and, beyond it,
            // the caller's relaxed stores after the reap: a waiter whose request the
            // dispatch completed gives its slot back that way (`Requests::give_back_mine`).
            fence(Ordering::Release);
            Left::Fenced
        });
        any
    }

    /// Whether every submitted SQE has been published, consumed and reaped.
    pub fn idle(&self) -> bool {
        let tickets = self.tickets.load(Ordering::Acquire);
        tickets == self.published.load(Ordering::Acquire) && tickets == self.reaped.load(Ordering::Acquire)
    }

    /// SQEs submitted so far (tickets handed out).
    pub fn submitted(&self) -> u32 {
        self.tickets.load(Ordering::Relaxed)
    }
}

// SAFETY: a Ring's fields are atomics and pointers to memory shared by design with the
// kernel and every agent (`Ring::new`'s contract keeps it valid); every access through them
// is atomic, or to an SQE slot that the protocol gives one submitter (or a CQE slot that it
// gives the one reaper) at a time. So shared references from many threads are sound.
unsafe impl Sync for Ring {}
// SAFETY: a Ring owns nothing thread-bound: moving it moves only the pointers, whose
// validity `Ring::new`'s contract ties to the memory, not to a thread.
unsafe impl Send for Ring {}

/// Reads the CQE in `cell` with one 16-byte load on GPUs (`arch::read_published`: plain from
/// sm_70 on NVIDIA GPUs): each load of host memory crosses PCIe there, and a volatile read
/// of the struct is split by field (three loads). The fields are those of `struct
/// io_uring_cqe`, little-endian (every target of this crate).
///
/// # Safety
/// The kernel published the slot (the caller acquired the CQ tail past it) and does not
/// rewrite it before the caller moves the head past it; `cell` is 16-byte aligned (the
/// kernel's CQE array is).
#[inline(always)]
pub unsafe fn load_cqe(cell: *const SharedCell<Cqe>) -> Cqe {
    /// A CQE's 16 bytes, aligned as the kernel places them.
    #[cfg(not(loom))]
    #[repr(C, align(16))]
    #[derive(Clone, Copy)]
    struct Bits([u64; 2]);
    #[cfg(loom)]
    // SAFETY: the caller's contract; loom's cell checks the ordering.
    return unsafe { (*cell).read() };
    #[cfg(not(loom))]
    {
        // SAFETY: the caller's contract; 16 bytes, aligned; `SharedCell` is
        // `repr(transparent)` over the CQE.
        let Bits([user_data, rest]) = unsafe { crate::protocol::arch::read_published(cell as *const Bits) };
        Cqe {
            user_data,
            res: rest as u32 as i32,
            flags: (rest >> 32) as u32,
        }
    }
}
