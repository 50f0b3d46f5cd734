//! A combining try-lock: "run this exclusively, now or by whoever holds the lock".
//!
//! Nobody ever blocks on it. A caller that finds the lock held leaves a *request* and
//! returns; the holder, before it leaves, sees the request and runs the work once more.
//! Every pending request has an agent answerable for it (its maker, or the holder it
//! saw), which is what lets a caller that finds a request pending leave at once.
//! This is how the SQ tail is published and how a print stream is flushed: the work is
//! idempotent ("advance as far as is ready"), so many requests fold into one run.
//!
//! ```text
//!   requester                              holder
//!   (its input is already visible)         ...
//!   pending.swap(1, AcqRel)      ──┐       lock.store(0, Release)
//!   fence(SeqCst)                  │       fence(SeqCst)
//!   lock.load(Relaxed) == 1 ?      └─────▶ pending.load(Relaxed) == 1 ? -> run again
//! ```
//! The two SeqCst fences make it impossible for both sides to miss each other (the
//! store-buffering pattern): either the requester sees the lock free and takes it, or the
//! holder sees the request. Requests are read-modify-writes so that they extend the release
//! sequence: the holder's `pending.swap(0, AcqRel)` synchronises with *every* requester
//! before it, making each requester's input visible to the run.
//!
//! Scope: system (all atomics here are `crate::protocol::sync` atomics). Several lanes of one warp
//! may call it at once (each waiting lane helps); that is safe because nobody ever waits
//! for the lock, so lanes of one warp cannot deadlock on it.

use crate::protocol::sync::{fence, AtomicU32, Ordering};

/// The lock word and the request word.
#[repr(C)]
pub struct Combiner {
    lock: AtomicU32,
    pending: AtomicU32,
}

impl Combiner {
    /// An unlocked combiner with no request.
    pub fn new() -> Self {
        Combiner {
            lock: AtomicU32::new(0),
            pending: AtomicU32::new(0),
        }
    }

    /// Runs `work` exclusively: here, or, if another agent holds the lock, by that agent
    /// before it releases. Returns `true` if this call ran it at least once.
    pub fn run(&self, mut work: impl FnMut()) -> bool {
        // AcqRel RMW, system scope: extends the release sequence, so the holder's swap(0)
        // synchronises with every requester before it. If a request was already pending, its
        // maker made sure that some agent will consume it: by running the work itself, or
        // because the holder sees it after releasing (the fence below). That consumption
        // is a later swap(0) in the word's modification order than ours, so it
        // synchronises with us too, and the work it triggers sees our input. We can leave
        // without the fence: under contention most callers do, which matters on GPUs,
        // where a system-scope SeqCst fence is expensive.
        if self.pending.swap(1, Ordering::AcqRel) != 0 {
            return false;
        }
        // SeqCst fence, system scope: orders our request before our look at the lock,
        // against the holder's release-then-look (store-buffering, see the module docs).
        fence(Ordering::SeqCst);
        self.serve(&mut work, false)
    }

    /// Like [`Combiner::run`], with a fast path for the uncontended case: when the lock is
    /// free, take it directly (no request, no fence before it), run `work`, release, and
    /// only then look for requests made meanwhile, serving them as [`Combiner::run`] does.
    /// On a GPU this saves most of `run`'s system-scope fences when one thread is alone.
    ///
    /// Why no request is stranded: a requester that found the lock held left its request
    /// after a SeqCst fence and a look at the lock; we release the lock, fence (SeqCst),
    /// then look at `pending`. Of two such store-fence-load sequences at least one load sees
    /// the other's store: the requester takes the lock itself, or we see its request.
    pub fn run_fast(&self, mut work: impl FnMut()) -> bool {
        // Relaxed look first: contended callers go to the request protocol without an RMW.
        if self.lock.load(Ordering::Relaxed) == 0
            // Acquire, system scope: the previous holder's work happens-before ours.
            && self.lock.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            work();
            // Release, system scope: our work happens-before the next holder's.
            self.lock.store(0, Ordering::Release);
            // SeqCst fence: pairs with the requesters' fence (see above).
            fence(Ordering::SeqCst);
            if self.pending.load(Ordering::Relaxed) != 0 {
                self.serve(&mut work, true);
            }
            return true;
        }
        self.run(work)
    }

    /// The holder's loop: takes the lock while requests are pending and serves them.
    /// Called after a request (ours, or one we saw) was made and fenced.
    fn serve(&self, work: &mut impl FnMut(), mut ran: bool) -> bool {
        loop {
            if self.lock.load(Ordering::Relaxed) != 0 {
                return ran;
            }
            // Acquire, system scope: the previous holder's work happens-before ours.
            if self
                .lock
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                return ran;
            }
            // AcqRel swap, system scope: synchronises with every request made so far.
            while self.pending.swap(0, Ordering::AcqRel) != 0 {
                work();
                ran = true;
            }
            // Release, system scope: our work happens-before the next holder's.
            self.lock.store(0, Ordering::Release);
            // SeqCst fence: pairs with the requesters' fence (see the module docs).
            fence(Ordering::SeqCst);
            if self.pending.load(Ordering::Relaxed) == 0 {
                return ran;
            }
        }
    }

    /// Runs `work` once if nobody holds the lock; returns whether it ran. Leaves no
    /// request: for work that anyone may redo later (reaping), where thousands of callers
    /// must not queue up behind one another.
    ///
    /// `work` says what it left for the next holder ([`Left`]), which decides how the lock
    /// is released: on a GPU each system-scope release is a fence, about a PCIe round trip,
    /// and a waiter polling an empty CQ takes this lock on every look.
    pub fn try_run(&self, work: impl FnOnce() -> Left) -> bool {
        // Relaxed look first: contended callers leave without a read-modify-write.
        if self.lock.load(Ordering::Relaxed) != 0 {
            return false;
        }
        // Acquire, system scope: the previous holder's work happens-before ours.
        if self
            .lock
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        match work() {
            // Release, system scope: our work happens-before the next holder's.
            Left::Writes => self.lock.store(0, Ordering::Release),
            // Relaxed, system scope: the work's own release fence, after its last write,
            // synchronises with the next holder's acquire of this store.
            Left::Fenced => self.lock.store(0, Ordering::Relaxed),
            // Relaxed read-modify-write, system scope: nothing to publish (see `Left`). An
            // `and` with 0, not a swap: in the PTX every swap is a combiner request, acq_rel,
            // which `tests/ptx_atomics` checks.
            Left::Nothing => {
                self.lock.fetch_and(0, Ordering::Relaxed);
            }
        }
        true
    }

    /// Whether some agent holds the lock right now: a hint (to skip a try that would
    /// fail), which orders nothing.
    pub fn busy(&self) -> bool {
        // Relaxed, system scope: nothing is read on the strength of it. (On a GPU an acquire
        // at system scope costs about a fence, and waiters ask every round.)
        self.lock.load(Ordering::Relaxed) != 0
    }
}

/// What the work of a [`Combiner::try_run`] left for the next holder of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Nothing: it only looked (a reap that finds no CQE). The lock is released by a
    /// relaxed read-modify-write, and the next holder still synchronises with the last
    /// holder that wrote: its acquire reads our RMW, which continues the release sequence
    /// of that holder's release (the lock's other writes are the takers' compare-exchanges,
    /// also read-modify-writes, and releases). A holder that released with a relaxed store
    /// after its release fence ([`Left::Fenced`]) heads no release sequence itself, but its
    /// fence synchronises with an acquire that reads any read-modify-write following that
    /// store (the sequence the store would head if it were a release), so the argument holds
    /// for it too.
    Nothing,
    /// Writes, then a release fence (system scope) after the last of them: the lock is
    /// released by a relaxed store, which that fence orders after all of them. The work's
    /// fence then also serves the caller, whose relaxed stores after `try_run` it releases
    /// too (a fence orders every later store; a release store only itself).
    Fenced,
    /// Writes: the lock is released by a release store.
    Writes,
}

impl Default for Combiner {
    fn default() -> Self {
        Self::new()
    }
}
