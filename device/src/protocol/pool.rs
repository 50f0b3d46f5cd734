//! A fixed set of numbered slots that threads take and give back, lock-free.
//!
//! Used for the completion slots of device requests ([`crate::protocol::request`]) and for the
//! arena's staging blocks ([`crate::protocol::arena`]). A slot is free when its state word is
//! [`FREE`]; taking it is one compare-and-swap from `FREE`. A rotating hint spreads takers
//! over the slots, so that thousands of GPU threads do not all fight over slot 0.
//!
//! A thread that needs several slots at once takes them all or none in one attempt
//! ([`with_taken`], `io::Pending`), and holds slots only for requests in flight, which the
//! kernel finishes whatever other threads do. That rules out hold-and-wait deadlocks between
//! threads, and, with the lockstep rule (`arch/mod.rs`), between the lanes of a wavefront.

use crate::protocol::sync::{AtomicU32, Ordering, Padded};
use crate::protocol::wait::until;

/// A slot's state word when nobody holds it.
pub const FREE: u32 = 0;
/// The state a successful [`Pool::try_take`] leaves.
pub const TAKEN: u32 = 1;

/// How many slots one [`Pool::try_take`] looks at.
pub const PROBES: u32 = 32;

/// A pool of `count` slots whose state words live at `states` (see the module docs).
#[repr(C)]
pub struct Pool {
    /// One state word per slot; zeroed (all free) at start.
    pub states: *const AtomicU32,
    /// Number of slots: a power of two.
    pub count: u32,
    /// Where the next taker starts looking.
    pub hint: Padded<AtomicU32>,
}

impl Pool {
    /// A pool over `count` zeroed state words.
    ///
    /// # Safety
    /// `states` points to `count` state words that stay valid while the pool is used;
    /// `count` is a power of two.
    pub unsafe fn new(states: *const AtomicU32, count: u32) -> Pool {
        Pool {
            states,
            count,
            hint: Padded(AtomicU32::new(0)),
        }
    }

    /// Slot `i`'s state word.
    pub fn state(&self, i: u32) -> &AtomicU32 {
        // SAFETY: `Pool::new`'s contract; the index is masked to the pool's size.
        unsafe { &*self.states.add((i & (self.count - 1)) as usize) }
    }

    /// Takes a free slot, if one of the [`PROBES`] slots this attempt looks at is free;
    /// `None` otherwise. Successive attempts (by anyone) look at successive windows of the
    /// shared hint, so the windows rotate over every slot; a taker that keeps trying alone
    /// sees every slot within `count / PROBES` attempts.
    ///
    /// One read-modify-write of the shared hint per attempt, then plain loads, and a CAS
    /// only on a slot seen free: thousands of threads waiting for a slot while all are
    /// taken cost the hint word one atomic each per round, not one per slot (which, with
    /// thousands of slots, saturated the GPU's atomic units and slowed every other atomic
    /// in the protocol with them).
    pub fn try_take(&self) -> Option<u32> {
        if self.count == 0 {
            return None;
        }
        let probes = PROBES.min(self.count);
        // Relaxed: the hint only spreads takers; correctness comes from the CAS.
        let start = self.hint.fetch_add(probes, Ordering::Relaxed);
        for k in 0..probes {
            let i = start.wrapping_add(k) & (self.count - 1);
            let s = self.state(i);
            // Acquire, system scope: pairs with the release in `give_back`; everything the
            // previous holder did with the slot (its last reads of the slot's memory)
            // happens-before our use of it.
            if s.load(Ordering::Relaxed) == FREE
                && s.compare_exchange(FREE, TAKEN, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Some(i);
            }
        }
        None
    }

    /// Gives slot `i` back.
    pub fn give_back(&self, i: u32) {
        // Release, system scope: our uses of the slot happen-before the next taker's.
        self.state(i).store(FREE, Ordering::Release);
    }
}

/// Runs `work` with what `try_take` takes (a slot, or several slots taken together),
/// waiting while it takes nothing and calling `reap` meanwhile (completions are what free
/// slots and blocks: the caller passes the context's reaper, as `Context::with_taken`
/// does); returns what `work` returns. `work` gives back what it took.
///
/// `work` runs in the round of the wait that took the slots (the lockstep rule,
/// `arch/mod.rs`): a lane of a lockstep wavefront never sits masked off holding a slot
/// while its siblings spin for one. So `try_take` must take all it needs or nothing.
pub fn with_taken<T, R>(
    mut try_take: impl FnMut() -> Option<T>,
    mut work: impl FnMut(T) -> R,
    reap: impl FnMut(),
) -> R {
    until(|| try_take().map(&mut work), reap)
}

// SAFETY: the state words are atomics in memory shared by design (`Pool::new`'s contract
// keeps it valid), and every access to them is atomic. So shared references from many
// threads are sound.
unsafe impl Sync for Pool {}
// SAFETY: a Pool owns nothing thread-bound: moving it moves only the pointer, whose validity
// `Pool::new`'s contract ties to the memory, not to a thread.
unsafe impl Send for Pool {}
