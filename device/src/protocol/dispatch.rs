//! Completions back to their threads: reaping a ring's CQ and routing each completion to
//! the print flight or request it finishes ([`Context::reap`], [`Context::dispatch`]), a
//! batch at a time around one release fence.

use crate::protocol::context::{Context, SANDBOX_REFUSAL, STREAMS};
use crate::protocol::request::{Prepared, Ticket};
use crate::protocol::ring::{Ring, REAP_BATCH};
use crate::protocol::sync::{fence, Ordering};
use crate::protocol::uapi::Cqe;
use crate::user_data::{self, KIND_REQUEST, KIND_STREAM};

/// Where [`Context::dispatch_timed`] spent its time: ns per step, summed over its batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchTimes {
    /// Loading the requests' slot states and tags, until the last load completed.
    pub looks: u64,
    /// Checking each CQE against its slot and storing the results.
    pub prepare: u64,
    /// The batch's release fence.
    pub fence: u64,
    /// Storing `DONE` in each completed slot.
    pub finish: u64,
}

impl DispatchTimes {
    /// When timing, adds the time since `*since` to the step `step` picks, and restarts
    /// the clock.
    #[inline(always)]
    fn lap(times: &mut Option<&mut DispatchTimes>, since: &mut u64, step: fn(&mut DispatchTimes) -> &mut u64) {
        if let Some(t) = times.as_deref_mut() {
            let now = crate::protocol::arch::clock_ns();
            *step(t) += now.wrapping_sub(*since);
            *since = now;
        }
    }
}

impl Context {
    /// Consumes the completions available on every live ring and routes each to its stream
    /// or request. Returns whether it consumed any.
    pub fn reap(&self) -> bool {
        let mut any = false;
        for ring in self.rings() {
            any |= self.reap_ring(ring);
        }
        any
    }

    /// Consumes the completions available on `ring` (one of ours) and routes each.
    #[inline] // on the print path (see `Stream::write_part`)
    pub fn reap_ring(&self, ring: &Ring) -> bool {
        ring.reap(|cqes| self.dispatch(cqes))
    }

    /// [`Context::reap_ring`] by the waiter of `mine`: if the reap takes `mine`'s CQE, the
    /// result comes back from here and the slot is given back, with no `DONE` stored or
    /// acquired (`Requests::give_back_mine`).
    #[inline]
    pub(super) fn reap_ring_for(&self, ring: &Ring, mine: Ticket) -> Option<i32> {
        let mut got = None;
        ring.reap(|cqes| self.dispatch_for(cqes, Some(mine), &mut got, None));
        // `Ring::reap` returned after its release fence (it took our CQE, so it took one).
        let res = got?;
        self.requests.give_back_mine(mine);
        Some(res)
    }

    /// Routes CQEs to the stream flights and requests they complete (their `user_data`
    /// names which), or counts them: what [`Context::reap_ring`] does with each batch.
    /// Returns whether it issued a system-scope release fence in its last batch (after
    /// which it stores only `DONE`, relaxed): that fence follows the reaper's reads of
    /// the CQ slots, so [`Ring::reap`] needs no release of its own for the head.
    ///
    /// Public for diagnostics that wrap a ring's reap. Only the holder of the ring's reaper
    /// lock may call it, with CQEs it took from that ring; it is safe to call otherwise, but
    /// then requests complete with results that no CQE gave them.
    pub fn dispatch(&self, cqes: &[Cqe]) -> bool {
        self.dispatch_for(cqes, None, &mut None, None)
    }

    /// [`Context::dispatch`], adding the time of each of its steps to `times`: a diagnostic
    /// (bench_file's phases of random reads). The steps are timed on the calling thread's
    /// clock, which costs a few clock reads per batch.
    pub fn dispatch_timed(&self, cqes: &[Cqe], times: &mut DispatchTimes) -> bool {
        self.dispatch_for(cqes, None, &mut None, Some(times))
    }

    /// [`Context::dispatch`] by a reaper that waits for `mine`: its CQE's result goes to
    /// `got` instead of its slot (the first such CQE; a second is a stray). `times` is
    /// [`Context::dispatch_timed`]'s.
    fn dispatch_for(
        &self,
        cqes: &[Cqe],
        mine: Option<Ticket>,
        got: &mut Option<i32>,
        mut times: Option<&mut DispatchTimes>,
    ) -> bool {
        let mut fenced = false;
        for batch in cqes.chunks(REAP_BATCH) {
            fenced = self.dispatch_batch(batch, mine, got, times.as_deref_mut());
        }
        fenced
    }

    /// [`Context::dispatch`] for at most [`REAP_BATCH`] CQEs; returns whether it issued
    /// the release fence (it does when the batch completed a request).
    ///
    /// Requests complete in two steps around one release fence for the whole batch
    /// (`Requests::prepare`, then `Requests::finish`): on a GPU a system-scope fence costs
    /// about a PCIe round trip. With a fence and two dependent loads per CQE, a reaper
    /// under thousands of waiting threads spent microseconds per CQE, and every waiter of
    /// its ring waited behind it.
    ///
    /// `times` is [`Context::dispatch_timed`]'s; `None` (every other caller) compiles the
    /// clock reads away.
    fn dispatch_batch(
        &self,
        cqes: &[Cqe],
        mine: Option<Ticket>,
        got: &mut Option<i32>,
        mut times: Option<&mut DispatchTimes>,
    ) -> bool {
        debug_assert!(cqes.len() <= REAP_BATCH);
        let mut since = if times.is_some() {
            crate::protocol::arch::clock_ns()
        } else {
            0
        };
        // The requests' slot states and tags, all loaded before any is checked, so that
        // the loads can be in flight together (a GPU thread waits for a load only where it
        // uses the value). Past the batch, and for stream CQEs, nothing is loaded.
        let looks: [(u32, u32); REAP_BATCH] = core::array::from_fn(|i| match cqes.get(i) {
            Some(cqe) if user_data::kind(cqe.user_data) == KIND_REQUEST => self.requests.look(cqe.user_data),
            _ => (0, 0),
        });
        if times.is_some() {
            // Uses every look (folded into one word, so that nothing is copied), so that the
            // clock reads after their loads completed.
            core::hint::black_box(looks.iter().fold(0, |a, &(state, tag)| a ^ state ^ tag));
        }
        DispatchTimes::lap(&mut times, &mut since, |t| &mut t.looks);
        let mut prepared: [Option<u32>; REAP_BATCH] = [None; REAP_BATCH];
        let mut any = false;
        for (i, cqe) in cqes.iter().enumerate() {
            prepared[i] = self.take_cqe(cqe, looks[i], &prepared[..i], mine, got);
            any |= prepared[i].is_some();
        }
        DispatchTimes::lap(&mut times, &mut since, |t| &mut t.prepare);
        if any {
            // Release, system scope: the results stored above, and the kernel's work for
            // their requests (acquired with the CQ tail), happen-before any waiter's
            // acquire of a DONE stored below (`Requests::finish`).
            fence(Ordering::Release);
            DispatchTimes::lap(&mut times, &mut since, |t| &mut t.fence);
            for slot in prepared.iter().flatten() {
                self.requests.finish(*slot);
            }
            DispatchTimes::lap(&mut times, &mut since, |t| &mut t.finish);
        }
        any
    }

    /// One CQE of [`Context::dispatch_batch`]'s batch, whose request's slot state and tag
    /// were loaded as `look`: a stream's completion is given to its stream; a request's is
    /// prepared (returns its slot, for `Requests::finish` after the batch's fence) or is
    /// our own (`got`); anything else is counted as unclaimed or stray. `earlier` holds the
    /// slots the batch prepared before this CQE.
    #[inline(always)]
    fn take_cqe(
        &self,
        cqe: &Cqe,
        look: (u32, u32),
        earlier: &[Option<u32>],
        mine: Option<Ticket>,
        got: &mut Option<i32>,
    ) -> Option<u32> {
        let kind = user_data::kind(cqe.user_data);
        let index = user_data::index(cqe.user_data);
        if kind == KIND_STREAM
            && (index as usize) < STREAMS
            && self.streams[index as usize].complete(user_data::low(cqe.user_data), cqe.res)
        {
            return None;
        }
        // A second CQE for a slot already prepared in this batch (its look is from
        // before the first) is a stray, as it would be one at a time: checked before
        // `prepare`, which stores the result.
        if kind == KIND_REQUEST && !earlier.contains(&Some(index)) {
            let (slot, taken) = match self.requests.prepare(cqe.user_data, cqe.res, look, mine) {
                Prepared::Slot(s) => (Some(s), true),
                // Our own request's (a second CQE for it is a stray, as above).
                Prepared::Mine if got.is_none() => {
                    *got = Some(cqe.res);
                    (None, true)
                }
                Prepared::Mine | Prepared::Stray => (None, false),
            };
            if taken {
                if cqe.res == SANDBOX_REFUSAL {
                    // The sandbox's refusal. Relaxed: a count (reapers and solo ring
                    // holders add to it) that the host reads after a drain.
                    self.refusals.denied.fetch_add(1, Ordering::Relaxed);
                }
                return slot;
            }
        }
        if cqe.res < 0 {
            // Only the reaper writes these; the host reads them after a drain.
            self.refusals.unclaimed.fetch_add(1, Ordering::Relaxed);
            self.refusals.errno.store(-cqe.res, Ordering::Relaxed);
        } else {
            self.stray_completions.fetch_add(1, Ordering::Relaxed);
        }
        None
    }
}
