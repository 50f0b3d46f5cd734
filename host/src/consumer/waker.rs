//! The SQPOLL waker: a parked host thread that never touches data on a GPU (invariant 9).
//!
//! The kernel's SQPOLL thread sleeps after `sq_thread_idle` ms without work and sets
//! `IORING_SQ_NEED_WAKEUP`; from then on it consumes nothing until someone calls
//! `io_uring_enter(IORING_ENTER_SQ_WAKEUP)`. A GPU cannot make that syscall. While kernels
//! run, or a launch call or a drain is under way (a launch call may return only once its
//! kernel has ended), this thread looks at the SQ (`Queue::wake_if_needed`): if SQEs wait
//! unconsumed and the flag is set, it wakes SQPOLL. With the host-thread fallback
//! it unparks that thread instead, the same way. On rings made without SQPOLL (the CPU
//! backend's default, `Builder::sqpoll`) it is the consumer itself: it submits what waits
//! (`io_uring_enter`), and a kernel thread that published SQEs unparks it (the doorbell,
//! [`Waker::doorbell`]), so it submits at once rather than at its next look. On rings
//! performed inline (the CPU backend's default, `Submission::Inline`) the kernel threads
//! perform their own requests; the waker's looks perform what computing threads left, and
//! what host threads (a drain, `Runtime::host_thread`) publish and ring for, so that no
//! thread of the program's makes a syscall that could raise `SIGPIPE` in it. While no
//! kernel runs it stays parked. On the CPU backend each look also rescues print streams
//! (`builder/rescue.rs`: the builder's closure runs both).
//!
//! **How often it looks.** Every 50 µs while it sees I/O: SQEs unconsumed, the SQ tail moved
//! since its last look, or a wakeup just made. Each look that sees none of that doubles the
//! pause, up to 1 ms ([`MAX_PAUSE`]), so a kernel that computes for seconds without I/O
//! costs about 1,000 looks a second, not 20,000; the first look that sees I/O again goes
//! back to 50 µs. On rings it enters, a doorbell ends the pause at once, and after a look
//! that submitted it looks again without a pause for [`LINGER`] (20 µs), except at
//! real-time priority (`realtime.rs`). On rings performed inline it looks every
//! [`INLINE_PAUSE`] (10 ms) while kernels run, and never lingers. A look reads at most three
//! words of host memory and makes no syscall unless it wakes the consumer (or performs).
//! `Stats::waker_looks` counts the looks.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use gpuio_device::protocol::arch::host::{install_doorbell, relax_by_dozing, Doorbell};

use crate::consumer::realtime;

/// What one look at the SQ saw (`Uring::wake_if_needed`,
/// `HostRing::wake_if_needed`): the host-memory words only, no syscall unless it woke the
/// consumer. The waker paces itself by it: a tail that moved, or SQEs waiting, mean I/O
/// flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Look {
    /// The SQ tail as read.
    pub tail: u32,
    /// SQEs waited unconsumed (the SQ tail differed from the head).
    pub waiting: bool,
    /// The consumer slept with SQEs waiting, and was woken.
    pub woke: bool,
}

/// The pause between looks while I/O is seen.
const POLL: Duration = Duration::from_micros(50);
/// The longest pause between looks while kernels run: what the first request after a
/// quiet spell may wait, beyond the 50 µs it waits while I/O flows, for its wakeup. Only a
/// request after a spell long enough for the consumer to fall asleep pays it: SQPOLL (and
/// the fallback thread) keeps polling for `sq_thread_idle` ms (50 ms by default) after its
/// last work, and takes SQEs without the waker meanwhile, so steady I/O never waits on
/// the waker. 1 ms is then at most 2% of the default quiet spell that came before, while
/// an idle-running kernel costs 1,000 looks a second (a few µs of CPU each) instead of
/// 20,000.
const MAX_PAUSE: Duration = Duration::from_millis(1);
/// How long an idle waker stays parked before it looks anyway.
const PARKED: Duration = Duration::from_millis(100);
/// On rings the waker enters (no SQPOLL): how long it goes on looking, without parking,
/// after a look that submitted. A request that comes within it (a thread's next `pwrite`
/// once its last completed) is submitted at once, not after the waker's wakeup, which on a
/// 2-vCPU VM put a 64-byte `pwrite` round trip through the shared rings at about 20 µs
/// (p50) where SQPOLL, which polls, took 2.5. What it costs: at most this much of a core
/// after each burst of requests, against SQPOLL's `sq_thread_idle` (50 ms).
const LINGER: Duration = Duration::from_micros(20);
/// On rings performed inline (`Submission::Inline`): the pause between looks while kernels
/// run. The kernel threads perform their requests themselves; a look only rescues lines
/// and performs what computing threads left, so this bounds how long a line waits then.
/// It is kept long because a thread woken at a high rate beside kernel threads that yield
/// while they wait stalled other sessions' processes: every 1 ms, `date` beside 64
/// threads doing `pwrite`s once took 1.55 s in 3 runs of 5 s; every 10 ms, at most 20 ms
/// in 7, against 8-10 ms beside a plain program.
const INLINE_PAUSE: Duration = Duration::from_millis(10);

pub(crate) struct Waker {
    /// The thread's id (as it sent it), for its scheduler slice (`io_threads.rs`).
    pub(crate) thread_id: Option<libc::pid_t>,
    state: Arc<WakerState>,
    handle: Option<JoinHandle<()>>,
}

struct WakerState {
    stop: AtomicBool,
    /// Kernels running, launch calls, drains and host threads driving the protocol under way.
    active: AtomicUsize,
    /// SQ_WAKEUP calls made.
    wakeups: AtomicU64,
    /// Looks at the ring (calls of `look`).
    looks: AtomicU64,
    /// Where it stands with real-time priority: [`NOT_YET`], [`REAL_TIME`], [`NEVER`] or
    /// [`ASKING`].
    real_time: AtomicU8,
}

/// Not real-time yet: asked for (on rings it enters), and no launch has crowded the cores.
const NOT_YET: u8 = 0;
/// Running at real-time priority.
const REAL_TIME: u8 = 1;
/// Not asked for, or refused by the kernel: for good.
const NEVER: u8 = 2;
/// A launch is asking for it now.
const ASKING: u8 = 3;

impl Waker {
    /// Starts the thread. `look` is one look: it wakes the ring's consumer if it sleeps with
    /// work waiting, and says what it saw (`Queue::wake_if_needed`); the builder's also
    /// rescues print streams on the CPU backend (`builder/rescue.rs`). `enters` is `Some` where the
    /// thread enters the rings (no SQPOLL): its own doorbell (`arch::host::install_doorbell`),
    /// which its rescues ring after they publish, and while they wait for SQ slots, which
    /// there only this thread frees. After a look that submitted such a waker goes on
    /// looking for [`LINGER`] before it parks, and if `real_time` it runs at real-time
    /// priority once a launch crowds the cores ([`Waker::crowded`]). `inline`: the rings are
    /// performed inline (its looks perform too): it looks every [`INLINE_PAUSE`] while
    /// kernels run, never lingers, never becomes real-time.
    pub(crate) fn start(
        mut look: impl FnMut() -> Look + Send + 'static,
        enters: Option<Doorbell>,
        real_time: bool,
        inline: bool,
    ) -> std::io::Result<Waker> {
        let real_time_asked = real_time && enters.is_some() && !inline;
        let state = Arc::new(WakerState {
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            wakeups: AtomicU64::new(0),
            looks: AtomicU64::new(0),
            real_time: AtomicU8::new(if real_time_asked { NOT_YET } else { NEVER }),
        });
        let st = state.clone();
        let (id_tx, id_rx) = std::sync::mpsc::sync_channel(1);
        let handle = thread::Builder::new().name("gpuio-waker".into()).spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = id_tx.send(unsafe { libc::gettid() });
            if real_time_asked {
                // Before it may become real-time, which another thread makes it
                // (`Waker::crowded`): its waits inside the protocol sleep (realtime.rs). They
                // are rare (a rescue waiting for an SQ slot or a CQ credit).
                relax_by_dozing();
            }
            let linger = if enters.is_some() && !inline {
                LINGER
            } else {
                Duration::ZERO
            };
            let _bell = install_doorbell(enters);
            run(&mut look, &st, linger, inline)
        })?;
        Ok(Waker {
            // The thread sends its id before anything else.
            thread_id: id_rx.recv().ok(),
            state,
            handle: Some(handle),
        })
    }

    /// What a kernel thread rings after it published SQEs to a ring without SQPOLL: unparks
    /// this thread, which then looks (and submits) at once. Cheap while it is awake (one
    /// atomic swap); a futex wake while it sleeps.
    pub(crate) fn doorbell(&self) -> Option<Doorbell> {
        let thread = self.handle.as_ref()?.thread().clone();
        Some(Arc::new(move || thread.unpark()))
    }

    /// A launch with more threads than cores is about to start: from now on the waker and
    /// its io-wq workers run at real-time priority, if it was asked for and the kernel
    /// allows it (`realtime.rs`). Called by the launching thread before the kernel's threads
    /// start, so that the waker's first wakeup among them is already prompt. A refusal is
    /// for good (`NEVER`).
    pub(crate) fn crowded(&self) {
        if self.change_policy(NOT_YET, realtime::make_real_time, (REAL_TIME, NEVER)) {
            crate::notice::say_once(crate::notice::Level::Info, realtime::NOTICE);
        }
    }

    /// A launch that fits the cores (with the kernel threads still running) is about to
    /// start: a waker at real-time priority, and its io-wq workers, go back to the fair
    /// scheduler with the short slice, as they were before the crowded launch; the next
    /// crowded launch makes them real-time again. (Giving a privilege back needs none; an
    /// error leaves the thread real-time, and the state says so.)
    pub(crate) fn fits(&self) {
        self.change_policy(REAL_TIME, realtime::make_fair, (NOT_YET, REAL_TIME));
    }

    /// Where the state is `from`, gives the waker, then its io-wq workers (best effort),
    /// the scheduling policy `make` gives, and leaves the state at `then.0` where the
    /// waker took it, at `then.1` where it did not. Whether the waker took it.
    fn change_policy(&self, from: u8, make: fn(libc::pid_t) -> std::io::Result<()>, then: (u8, u8)) -> bool {
        let Some(tid) = self.thread_id else {
            return false;
        };
        // Relaxed, as the store below: only this word is read through it. A launch that
        // finds another state (already changed, being changed by another launch, or never
        // to be) goes on.
        if self
            .state
            .real_time
            .compare_exchange(from, ASKING, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        let took = make(tid).is_ok();
        if took {
            // Those io_uring made meanwhile: best effort (one that exits between the
            // listing and the call is gone anyway).
            for w in realtime::io_workers_of(tid) {
                let _ = make(w);
            }
        }
        self.state
            .real_time
            .store(if took { then.0 } else { then.1 }, Ordering::Relaxed);
        took
    }

    /// Whether the waker runs at real-time priority ([`Waker::crowded`]).
    pub(crate) fn real_time(&self) -> bool {
        self.state.real_time.load(Ordering::Relaxed) == REAL_TIME
    }

    /// Kernels are running: look often.
    pub(crate) fn activate(&self) {
        if self.state.active.fetch_add(1, Ordering::SeqCst) == 0 {
            if let Some(h) = &self.handle {
                h.thread().unpark();
            }
        }
    }

    /// One activity ended.
    pub(crate) fn deactivate(&self) {
        self.state.active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Keeps the waker looking while the guard lives ([`Waker::activate`] until it drops):
    /// for a launch call, which may return only once its kernel has ended.
    #[must_use = "the waker looks only while the guard lives"]
    pub(crate) fn looking(&self) -> Looking<'_> {
        self.activate();
        Looking(self)
    }

    pub(crate) fn wakeups(&self) -> u64 {
        self.state.wakeups.load(Ordering::Relaxed)
    }

    /// Looks at the ring so far.
    pub(crate) fn looks(&self) -> u64 {
        // Relaxed: a statistic; nothing else is read through it.
        self.state.looks.load(Ordering::Relaxed)
    }
}

/// The waker looks while this lives ([`Waker::looking`]).
#[must_use = "the waker looks only while the guard lives"]
pub(crate) struct Looking<'a>(&'a Waker);

impl Drop for Looking<'_> {
    fn drop(&mut self) {
        self.0.deactivate();
    }
}

impl Waker {
    /// Leaves the thread running for good (a runtime leaked after a hang): it goes on
    /// looking, and submitting to rings without SQPOLL, for kernel threads that still run.
    pub(crate) fn leak(&mut self) {
        // Without its handle, drop neither stops nor joins it.
        if let Some(h) = self.handle.take() {
            std::mem::forget(h);
        }
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.state.stop.store(true, Ordering::SeqCst);
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// The pause after a look: 50 µs if it saw I/O, else twice the last one, up to [`MAX_PAUSE`].
fn next_pause(pause: Duration, io: bool) -> Duration {
    if io {
        POLL
    } else {
        (pause * 2).min(MAX_PAUSE)
    }
}

fn run(look_once: &mut dyn FnMut() -> Look, state: &WakerState, linger: Duration, inline: bool) {
    // Sleep precisely: the default 50 µs timer slack would double our shortest pause. And
    // block every signal: on a ring without SQPOLL a write this thread submits runs in it,
    // and a pipe whose reader is gone raises SIGPIPE in its writer (io_uring's task_work
    // wakeups are not signals, and still reach it).
    crate::consumer::io_threads::quiet_this_thread();
    let mut pause = POLL;
    let mut last_tail = None;
    let mut lingering_until = None;
    while !state.stop.load(Ordering::SeqCst) {
        let look = look_once();
        // Relaxed: statistics; nothing else is read through them.
        state.looks.fetch_add(1, Ordering::Relaxed);
        if look.woke {
            state.wakeups.fetch_add(1, Ordering::Relaxed);
            // Only under the fair scheduler (not while real-time, nor while a launch
            // changes that): at real-time priority, while kernel threads keep publishing,
            // the looking would hold a core from every fair thread of the machine, up to
            // the kernel's real-time throttle (realtime.rs). Relaxed: a hint, read again at
            // the next submission.
            if !linger.is_zero() && matches!(state.real_time.load(Ordering::Relaxed), NOT_YET | NEVER) {
                lingering_until = Some(Instant::now() + linger);
            }
        }
        if lingering_until.is_some_and(|t| Instant::now() < t) {
            std::hint::spin_loop();
            continue;
        }
        let io = look.waiting || look.woke || last_tail != Some(look.tail);
        last_tail = Some(look.tail);
        pause = if inline { INLINE_PAUSE } else { next_pause(pause, io) };
        if state.active.load(Ordering::SeqCst) > 0 {
            // Parked, not asleep: a doorbell (`Waker::doorbell`) ends the pause early.
            thread::park_timeout(pause);
        } else {
            thread::park_timeout(PARKED);
            // Unparked (most likely) by a launch: its first requests come soon.
            pause = POLL;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_to_its_cap_without_io_and_drops_back_with_it() {
        let mut pause = POLL;
        let mut quiet = vec![];
        for _ in 0..7 {
            pause = next_pause(pause, false);
            quiet.push(pause.as_micros());
        }
        assert_eq!(quiet, [100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(next_pause(pause, true), POLL);
    }
}
