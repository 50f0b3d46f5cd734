//! Device requests and completion routing: how the result of an `open`, `pread` or
//! `pwrite` reaches the GPU thread that waits for it, with no host thread involved.
//!
//! # Completion slots
//! Every request in flight owns one *completion slot*: a state word (in a [`Pool`]), a tag
//! and a result, in the context's memory (device memory on GPUs). The request's
//! `user_data` names the slot and the tag:
//!
//! ```text
//!   user_data = KIND_REQUEST << 56 | slot << 32 | tag
//!   state:  FREE --take--> PENDING --reaper--> DONE --waiter--> FREE
//!                             PENDING --the waiter's own reap------> FREE
//! ```
//!
//! 1. **Take** a slot (`Pool::try_take`: a CAS from `FREE`), bump its tag (Relaxed: only
//!    the holder writes it; the reaper reads it after the CQE, which is ordered after our
//!    submission through the ring's release/acquire chain), and submit the SQE.
//! 2. **Who reaps: whoever waits.** A waiting thread looks at its slot; while it is not
//!    `DONE`, it tries to become the reaper (`Ring::reap`, a try-lock: when another thread
//!    reaps, it leaves at once and looks at its slot again). The reaper hands every CQE
//!    present to the context's dispatch, which routes a request's CQE here, a batch of CQEs
//!    at a time: the slots' states and tags are loaded first (`Requests::look`); then for
//!    each, `Requests::prepare` checks that the slot was `PENDING` with the CQE's tag and
//!    stores the result (Relaxed); then one release fence (system scope) for the
//!    batch; then `Requests::finish` stores `DONE` in each slot (Relaxed, after the fence).
//!    On a GPU a system-scope fence costs about a PCIe round trip: one per batch, not one
//!    per CQE.
//! 3. **Wake.** The waiter's load of `DONE` (Relaxed, then Acquire once it reads `DONE`)
//!    synchronises with that fence: it sees the result, and everything the kernel
//!    did for the request (the bytes a read put into our buffer: the reaper acquired those
//!    with the CQ tail, and happens-before is transitive). It reads the result and gives
//!    the slot back (Release).
//! 4. **Or reap it yourself.** When the waiter's own reap takes its CQE, the dispatch hands
//!    it the result instead (`Prepared::Mine`): nothing is stored in the slot, no `DONE` is
//!    acquired (the waiter acquired the CQ tail itself), and the waiter gives the slot back
//!    with a Relaxed store after the release fence that ends the reap
//!    (`Requests::give_back_mine`). For a lone thread that saves a system-scope acquire and
//!    a release on every round trip.
//!
//! # Why no waiter starves
//! A waiter's CQE, once the kernel posted it, is dispatched by the first reap that *starts*
//! afterwards: a reap takes every CQE up to the tail it reads. Reaps keep starting as
//! long as anyone waits, because every waiter that finds its slot not `DONE` tries to reap
//! (when the try-lock is free, which it is between any two reaps), or has a sibling of its
//! warp try for it while it waits at a barrier (`arch::by_one_lane`: of the lanes waiting
//! together, one goes round for all). So after its CQE arrives, a waiter waits at most for
//! the reap in progress, plus one more. No waiter depends on a particular other thread:
//! the reaper is whoever is there.
//!
//! The kernel, in turn, completes every request it was given: the ring's credits bound
//! requests in flight by the CQ's size (so the CQ cannot overflow), and the host's waker
//! wakes SQPOLL when it sleeps.
//!
//! # Stray completions
//! A CQE whose slot is not `PENDING` with its tag matches nothing; the dispatch counts it
//! (`Context::stray_completions`) instead of corrupting another request's result.

use crate::protocol::pool::{Pool, FREE};
use crate::protocol::sync::{AtomicI32, AtomicU32, Ordering};
use crate::protocol::wait::until;
use crate::user_data;

/// A slot's state: taken, its request submitted or about to be.
const PENDING: u32 = crate::protocol::pool::TAKEN;
/// A slot's state: the result is in.
const DONE: u32 = 2;

/// The completion slots (see the module docs).
#[repr(C)]
pub struct Requests {
    /// Slot states.
    pub pool: Pool,
    /// One tag per slot (incremented on every take).
    pub tags: *const AtomicU32,
    /// One result per slot (the CQE's `res`).
    pub results: *const AtomicI32,
}

/// A request in flight: its slot and tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    slot: u32,
    tag: u32,
}

impl Ticket {
    /// The `user_data` its SQE must carry.
    pub fn user_data(self) -> u64 {
        user_data::for_request(self.slot, self.tag)
    }
}

impl Requests {
    /// Completion slots over the given arrays.
    ///
    /// # Safety
    /// `states`, `tags` and `results` each point to `count` zeroed words that stay valid
    /// while the slots are used; `count` is a power of two.
    pub unsafe fn new(states: *const AtomicU32, tags: *const AtomicU32, results: *const AtomicI32, count: u32) -> Self {
        Requests {
            // SAFETY: forwarded from our caller.
            pool: unsafe { Pool::new(states, count) },
            tags,
            results,
        }
    }

    fn tag(&self, slot: u32) -> &AtomicU32 {
        // SAFETY: `tags` points to `count` atomics (`Requests::new`), a power of two, and
        // the index is masked below it.
        unsafe { &*self.tags.add((slot & (self.pool.count - 1)) as usize) }
    }
    fn result(&self, slot: u32) -> &AtomicI32 {
        // SAFETY: `results` points to `count` atomics (`Requests::new`), a power of two, and
        // the index is masked below it.
        unsafe { &*self.results.add((slot & (self.pool.count - 1)) as usize) }
    }

    /// Takes a completion slot if one is free.
    pub fn try_take(&self) -> Option<Ticket> {
        let slot = self.pool.try_take()?;
        // Relaxed: only the holder writes the tag; the reaper reads it after our SQE's
        // publication (Release) and the kernel's CQE (Acquire), so it sees this value.
        let tag = self.tag(slot).load(Ordering::Relaxed).wrapping_add(1);
        self.tag(slot).store(tag, Ordering::Relaxed);
        Some(Ticket { slot, tag })
    }

    /// What [`Requests::prepare`] checks for a CQE with this `user_data`: its slot's state
    /// and tag (of the slot its index names modulo the slot count, so any `user_data` may
    /// be looked at). Called only by the reaper, for a batch of CQEs before any is
    /// prepared: on a GPU each load is a round trip to L2, and a batch's are in flight
    /// together.
    pub(crate) fn look(&self, user_data: u64) -> (u32, u32) {
        let slot = user_data::index(user_data) & (self.pool.count - 1);
        // Relaxed: the holder's take (and tag) happen-before the CQE we hold (see above);
        // no one else moves a PENDING slot, and only its holder writes the tag.
        (
            self.pool.state(slot).load(Ordering::Relaxed),
            self.tag(slot).load(Ordering::Relaxed),
        )
    }

    /// Stores a CQE's result in its slot, the first of the two steps that complete a
    /// request; [`Requests::finish`] is the second. `look` is what [`Requests::look`]
    /// returned for this CQE in the reaper's current batch; `mine` is the request the
    /// reaper itself waits for, if any. Called only by the reaper.
    ///
    /// Returns [`Prepared::Mine`], storing nothing, when the CQE completes `mine`: the
    /// reaper takes the result from the CQE and gives the slot back itself
    /// (`Requests::give_back_mine`). Returns [`Prepared::Stray`], changing nothing, when
    /// the slot is not pending with this tag.
    pub(crate) fn prepare(&self, user_data: u64, res: i32, look: (u32, u32), mine: Option<Ticket>) -> Prepared {
        let slot = user_data::index(user_data);
        if slot >= self.pool.count || look != (PENDING, user_data::low(user_data)) {
            return Prepared::Stray;
        }
        if mine.is_some_and(|t| t.user_data() == user_data) {
            return Prepared::Mine;
        }
        // Relaxed: published by the caller's release fence before `finish`.
        self.result(slot).store(res, Ordering::Relaxed);
        Prepared::Slot(slot)
    }

    /// Marks `slot` (returned by [`Requests::prepare`]) `DONE`. The caller must have issued
    /// a `fence(Release)` (system scope) after the `prepare` and after its acquire of the CQ
    /// tail: one fence publishes a whole batch.
    pub(crate) fn finish(&self, slot: u32) {
        // Relaxed after the caller's release fence: that fence synchronises with the
        // waiter's acquire of DONE, so the result, and the kernel's work for the request
        // (which the reaper acquired with the CQ tail), happen-before the waiter's reads.
        self.pool.state(slot).store(DONE, Ordering::Relaxed);
    }

    /// Gives back the slot of `ticket`, whose CQE the caller's own reap took
    /// ([`Prepared::Mine`]): the waiter's shortcut past `DONE`. Its result came with the
    /// CQE, which the reaper acquired with the CQ tail, so nothing is stored and nothing
    /// acquired: on a GPU that saves the waiter a system-scope acquire and a release.
    ///
    /// Only after that reap returned: it issued a release fence (system scope) after its
    /// dispatch (`Ring::reap`'s contract), so the reaper's looks at the slot happen-before
    /// the next holder's take (Acquire) of this Relaxed store. (The request's buffers are
    /// not the slot's: an arena block goes back on its own, with a release.)
    pub(crate) fn give_back_mine(&self, ticket: Ticket) {
        self.pool.state(ticket.slot).store(FREE, Ordering::Relaxed);
    }

    /// Whether `ticket`'s result is in; if so, what the reaper published with it (the
    /// result, the kernel's work) is visible to the caller.
    pub fn is_done(&self, ticket: Ticket) -> bool {
        let state = self.pool.state(ticket.slot);
        // Relaxed, system scope, and only once it reads DONE an acquire: a waiter asks every
        // round, and on a GPU a system-scope acquire costs about a fence.
        if state.load(Ordering::Relaxed) != DONE {
            return false;
        }
        // Acquire, system scope: reads DONE again (only this waiter moves the slot on from
        // DONE) and synchronises with the reaper's release fence before its store of DONE.
        // (A load, not an acquire fence: the fence also waits for this thread's earlier
        // stores, across PCIe, which a lone thread's round trip would pay each time.)
        state.load(Ordering::Acquire) == DONE
    }

    /// `ticket`'s result if it is in, giving the slot back; `None` (changing nothing) if
    /// not yet.
    pub fn try_result(&self, ticket: Ticket) -> Option<i32> {
        if !self.is_done(ticket) {
            return None;
        }
        // Relaxed: ordered after the reaper's store by the acquire in `is_done`.
        let res = self.result(ticket.slot).load(Ordering::Relaxed);
        // Release: our read of the result happens-before the next holder's request.
        self.pool.state(ticket.slot).store(FREE, Ordering::Release);
        Some(res)
    }

    /// Waits for `ticket`'s completion, calling `waiting` between rounds (it reaps for
    /// everyone: `Context::wait` passes `Context::waiting`); returns the CQE's result and
    /// gives the slot back. `waiting` returns the result when its reap took `ticket`'s
    /// CQE itself, having given the slot back (`Requests::give_back_mine`).
    ///
    /// Crate-private: a `waiting` that returned a result it did not get from the dispatch
    /// would leak the slot.
    #[inline(never)] // one copy in a code object
    pub(crate) fn wait(&self, ticket: Ticket, mut waiting: impl FnMut() -> Option<i32>) -> i32 {
        // What `waiting` got in one round, taken in the next: the result is in either way,
        // so that round's attempt succeeds.
        let mine = core::cell::Cell::new(None);
        until(
            || mine.take().or_else(|| self.try_result(ticket)),
            || mine.set(waiting()),
        )
    }
}

/// What [`Requests::prepare`] made of a CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prepared {
    /// Its result is stored in this slot, which [`Requests::finish`] marks `DONE`.
    Slot(u32),
    /// It completes the reaper's own request: nothing stored.
    Mine,
    /// It matches no pending request.
    Stray,
}

// SAFETY: the slots' states, tags and results are atomics in memory shared by design
// (`Requests::new`'s contract keeps it valid); every access to them is atomic. So shared
// references from many threads are sound.
unsafe impl Sync for Requests {}
// SAFETY: Requests owns nothing thread-bound: moving it moves only the pointers, whose
// validity `Requests::new`'s contract ties to the memory, not to a thread.
unsafe impl Send for Requests {}
