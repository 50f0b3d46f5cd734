//! The CPU backend's print rescue: the waker sends what kernel threads left unsent
//! (invariant 12 there).
//!
//! On a GPU a flush that finds every flight of its stream out, with no print in progress,
//! waits for one to land and sends what is left itself: no host thread is on the data
//! path. On the CPU backend it returns instead (`arch::flusher_sees_flights_through`): a
//! kernel thread is an OS thread, and one preempted while it waited there held every later
//! line for a scheduler round among its peers, while a thread printing alone waited for
//! each of its writes, one line per write. The next print's flush sends what was left; and
//! where none comes, the waker does ([`Rescue::look`]). On each look while kernels
//! run (every 50 µs while I/O flows, backing off to 1 ms; every 10 ms on rings performed
//! inline, where the look also performs what waits) it reads each print stream's
//! positions, and if bytes wait (committed and not in a write, or a write out) while the
//! positions have not moved for [`RESCUE_AFTER`], it reaps and flushes the stream as a
//! kernel thread would (`Context::help`): reaping and flushing are open to any thread,
//! and the host's drain runs the same code after the kernels. A rescue leaves a print in
//! progress to its producer, and a flush in progress to its flusher (the combiner). The
//! waker's closure owns the [`Rescue`] (what it last saw).
//!
//! What it costs: five loads per stream on each look; a rescue only after the quiet time,
//! at most one per stream per [`RESCUE_AFTER`]. `Stats::rescues` counts them.

use std::sync::atomic::Ordering as StdOrdering;
use std::time::{Duration, Instant};

use gpuio_device::protocol::context::STREAMS;
use gpuio_device::protocol::stream::Stream;
use gpuio_device::protocol::sync::Ordering;

use crate::shared::Shared;

/// How long a stream's bytes wait unmoved before the waker sends them: what a line whose
/// print returned may wait, beyond its write and the waker's pause (at most 1 ms; 10 ms on
/// rings performed inline), when no kernel thread flushes after it. Short against the 100 ms a line may take (invariant
/// 12); long against a write's round trip (microseconds), so that while kernel threads
/// flush the waker leaves them to it.
pub(crate) const RESCUE_AFTER: Duration = Duration::from_millis(1);

/// What the rescue last saw of each stream, and since when: the waker's, one per runtime.
#[derive(Default)]
pub(crate) struct Rescue {
    seen: [Option<(Positions, Instant)>; STREAMS],
}

/// A stream's positions, as one look read them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Positions {
    committed: u64,
    flushed: u64,
    released: u64,
    flight_head: u32,
    flight_tail: u32,
}

impl Positions {
    fn of(s: &Stream) -> Positions {
        // Relaxed: these only decide whether to help; the help itself (reaping, flushing)
        // takes its own acquires, as a kernel thread's does.
        Positions {
            committed: s.committed.load(Ordering::Relaxed),
            flushed: s.flushed.load(Ordering::Relaxed),
            released: s.released.load(Ordering::Relaxed),
            flight_head: s.flight_head.load(Ordering::Relaxed),
            flight_tail: s.flight_tail.load(Ordering::Relaxed),
        }
    }

    /// Bytes committed and not yet in a write, or a write out (which may have landed short,
    /// its rest waiting for a flush).
    fn waiting(&self) -> bool {
        self.committed != self.flushed || self.flight_head != self.flight_tail
    }
}

impl Rescue {
    /// Takes each stream's positions as read at `now`; returns the streams to help: those
    /// whose bytes wait, with positions unmoved for [`RESCUE_AFTER`]. A stream helped
    /// starts a new quiet time.
    fn due(&mut self, positions: impl Iterator<Item = Positions>, now: Instant) -> Vec<usize> {
        let mut due = Vec::new();
        for (i, p) in positions.enumerate().take(STREAMS) {
            let seen = &mut self.seen[i];
            match seen {
                Some((q, since)) if *q == p => {
                    if p.waiting() && now.duration_since(*since) >= RESCUE_AFTER {
                        due.push(i);
                        *since = now;
                    }
                }
                _ => *seen = Some((p, now)),
            }
        }
        due
    }

    /// CPU backend: sends what kernel threads left unsent in `shared`'s print streams (see
    /// the module docs). Called by the waker on each look while kernels run; does nothing
    /// on a GPU.
    pub(crate) fn look(&mut self, shared: &Shared) {
        let Some(ctx) = shared.host_context() else {
            return;
        };
        for i in self.due(ctx.streams.iter().map(Positions::of), Instant::now()) {
            ctx.help(&ctx.streams[i]);
            // Relaxed: a statistic.
            shared.rescues.fetch_add(1, StdOrdering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_waiting_bytes_unmoved_for_the_quiet_time_are_due() {
        let p = |committed, flushed, head| Positions {
            committed,
            flushed,
            released: 0,
            flight_head: head,
            flight_tail: 0,
        };
        assert!(!p(40, 40, 0).waiting(), "everything written");
        assert!(p(80, 40, 1).waiting(), "committed bytes not in a write");
        assert!(p(40, 40, 1).waiting(), "a write out");
    }

    #[test]
    fn a_stream_is_helped_after_its_quiet_time_then_not_again_until_another() {
        let (t0, mut r) = (Instant::now(), Rescue::default());
        let waiting = Positions {
            committed: 80,
            flushed: 40,
            released: 0,
            flight_head: 1,
            flight_tail: 0,
        };
        let written = Positions {
            committed: 80,
            flushed: 80,
            released: 80,
            flight_head: 2,
            flight_tail: 2,
        };
        let at = |us| t0 + Duration::from_micros(us);
        let look = |r: &mut Rescue, ps: [Positions; 2], us| r.due(ps.into_iter(), at(us));
        assert_eq!(look(&mut r, [waiting, written], 0), Vec::<usize>::new(), "first seen");
        assert_eq!(
            look(&mut r, [waiting, written], 500),
            Vec::<usize>::new(),
            "still quiet"
        );
        assert_eq!(look(&mut r, [waiting, written], 1_000), [0], "quiet for RESCUE_AFTER");
        assert_eq!(
            look(&mut r, [waiting, written], 1_500),
            Vec::<usize>::new(),
            "helped: a new quiet time"
        );
        assert_eq!(look(&mut r, [waiting, written], 2_000), [0]);
        let moved = Positions { flushed: 60, ..waiting };
        assert_eq!(
            look(&mut r, [moved, written], 3_500),
            Vec::<usize>::new(),
            "moved: a new quiet time"
        );
        assert_eq!(
            look(&mut r, [written, written], 9_000),
            Vec::<usize>::new(),
            "nothing waits"
        );
    }
}
