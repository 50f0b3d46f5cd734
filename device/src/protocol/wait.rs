//! The one way device code waits: [`until`].
//!
//! Every wait of the protocol that GPU threads run (a ring slot and a CQ credit, room in a
//! print log, an arena block or completion slot, a request's result) is a call of
//! [`until`], so that each obeys
//! the lockstep rule of `arch/mod.rs`: the work that depends on what was waited for is done
//! in the round that got it, and the lanes that entered the wait together leave it
//! together.

use crate::protocol::group::Group;
use crate::protocol::sync::Backoff;

/// Calls `attempt` once per round until it returns `Some`, and returns that value. After
/// each round in which it returned `None`, calls `idle` (help the protocol along: reap,
/// flush) and backs off.
///
/// `attempt` must not block, except through nested calls of `until`: it tries its step, and
/// when the step succeeds it also does the work that depends on it (see the module docs).
/// The loop ends for the lanes of the calling `arch::WaitGroup` together, when `attempt`
/// has succeeded on each of them: a lane that is done takes no more attempts, and waits
/// (without backing off) only for its siblings. On independently scheduled targets the
/// wait group is the lane alone (though `idle` may be a round that one lane goes for the
/// lanes that call it together: `arch::by_one_lane`).
#[inline(always)]
pub fn until<R>(mut attempt: impl FnMut() -> Option<R>, mut idle: impl FnMut()) -> R {
    let group = crate::protocol::arch::WaitGroup::default();
    let mut backoff = Backoff::new();
    let mut out = None;
    loop {
        if out.is_none() {
            out = attempt();
            if out.is_none() {
                idle();
                backoff.snooze();
            }
        }
        // A vote, not this lane's own test: the exit is the same for every lane of the
        // group, so no lane leaves (and waits, masked off, at the loop's end) while a
        // sibling still waits; and the attempt's work stays inside the loop.
        if group.all(out.is_some()) {
            // SAFETY: `all` is true only if it is true on this lane (the `Group` contract, which
            // `arch::WaitGroup`, one of this crate's groups, keeps).
            return unsafe { out.unwrap_unchecked() };
        }
    }
}
