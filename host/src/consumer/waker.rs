//! The SQPOLL waker: a parked host thread that never touches data (invariant 9).
//!
//! The kernel's SQPOLL thread sleeps after `sq_thread_idle` ms without work and sets
//! `IORING_SQ_NEED_WAKEUP`; from then on it consumes nothing until someone calls
//! `io_uring_enter(IORING_ENTER_SQ_WAKEUP)`. A GPU cannot make that syscall. While kernels
//! run (or a drain is under way) this thread looks every 50 µs: if SQEs wait unconsumed
//! and the flag is set, it wakes SQPOLL. Otherwise it stays parked. With the host-thread
//! fallback it unparks that thread instead, the same way (`Queue::wake_if_needed`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How often an active waker looks at the flag.
const POLL: Duration = Duration::from_micros(50);
/// How long an idle waker stays parked before it looks anyway.
const PARKED: Duration = Duration::from_millis(100);

pub(crate) struct Waker {
    state: Arc<State>,
    handle: Option<JoinHandle<()>>,
}

struct State {
    stop: AtomicBool,
    /// Kernels running or drains under way.
    active: AtomicUsize,
    /// SQ_WAKEUP calls made.
    wakeups: AtomicU64,
}

impl Waker {
    /// Starts the thread. `wake_if_needed` wakes the ring's consumer if it sleeps with
    /// work waiting, and says whether it did (`Queue::wake_if_needed`).
    pub(crate) fn start(wake_if_needed: impl Fn() -> bool + Send + 'static) -> std::io::Result<Waker> {
        let state = Arc::new(State {
            stop: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            wakeups: AtomicU64::new(0),
        });
        let st = state.clone();
        let handle = thread::Builder::new()
            .name("gpuio-waker".into())
            .spawn(move || run(&wake_if_needed, &st))?;
        Ok(Waker {
            state,
            handle: Some(handle),
        })
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

    pub(crate) fn wakeups(&self) -> u64 {
        self.state.wakeups.load(Ordering::Relaxed)
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

fn run(wake_if_needed: &dyn Fn() -> bool, state: &State) {
    // Sleep precisely: the default 50 µs timer slack would double our polling interval.
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
    while !state.stop.load(Ordering::SeqCst) {
        if wake_if_needed() {
            state.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        if state.active.load(Ordering::SeqCst) > 0 {
            thread::sleep(POLL);
        } else {
            thread::park_timeout(PARKED);
        }
    }
}
