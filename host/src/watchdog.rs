//! No silent hang (invariant 11): how [`crate::Runtime::synchronize`] waits.
//!
//! Every wait of synchronize (for CPU kernel threads, for GPU kernels, for the drain) is one
//! loop, [`wait`]: it asks "done?", and between the questions observes everything the runtime
//! can see move (the ring's words, on the CPU backend also the stream positions, the SQ
//! tickets and the number of running kernel threads). Any change is progress. When nothing
//! has changed for the hang timeout, the wait ends with [`Error::Hang`] and a report of what
//! is outstanding. Without a timeout it never gives up, but says so on stderr after 30 s of
//! no progress, then every 5 minutes (`GPUIO_QUIET` silences these warnings only).
//!
//! The pauses between questions grow while nothing moves ([`Pacing`]): a few spins, then
//! yields, then sleeps from a microsecond up to a cap (the GPU's is 1 ms). So a short
//! kernel is noticed within microseconds, and a long wait costs little CPU. A wait whose
//! pause the awaited event itself ends (a condition variable) neither spins nor yields:
//! on a loaded machine a yielding thread waits behind every other runnable one, while a
//! woken one runs at once.

use std::time::{Duration, Instant};

use crate::error::{Error, HangReport, Result};

/// `GPUIO_HANG_TIMEOUT`: seconds without progress after which synchronize gives up.
pub(crate) const ENV: &str = "GPUIO_HANG_TIMEOUT";

/// Without a timeout: the first warning after this long without progress...
const WARN_FIRST: Duration = Duration::from_secs(30);
/// ...then one every this long while still nothing moves.
const WARN_EVERY: Duration = Duration::from_secs(300);

/// How a wait paces its questions while nothing moves: `spins` rounds of spinning, then
/// `yields` rounds of `yield_now`, then pauses from `first_pause`, doubling every other
/// round, up to `max_pause`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pacing {
    pub(crate) spins: u32,
    pub(crate) yields: u32,
    pub(crate) first_pause: Duration,
    pub(crate) max_pause: Duration,
}

/// When synchronize gives up, or warns.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HangPolicy {
    /// Give up after this long without progress (`None`: never, warn instead).
    pub(crate) timeout: Option<Duration>,
    /// Without a timeout: the first warning after this long without progress.
    pub(crate) warn_first: Duration,
    /// Then one every this long.
    pub(crate) warn_every: Duration,
    /// Gives a warning: [`warn_on_stderr`], except in tests.
    pub(crate) warn: fn(&HangReport),
}

impl HangPolicy {
    /// The policy for `timeout`, with the default warnings.
    pub(crate) fn new(timeout: Option<Duration>) -> HangPolicy {
        HangPolicy {
            timeout,
            warn_first: WARN_FIRST,
            warn_every: WARN_EVERY,
            warn: warn_on_stderr,
        }
    }
}

/// The default's warning: a notice (`notice.rs`: the program's logger, else one line on
/// stderr; `GPUIO_QUIET` silences it).
pub(crate) fn warn_on_stderr(report: &HangReport) {
    crate::notice::say(
        crate::notice::Level::Warn,
        &format!(
            "gpuio: synchronize: {report} (still waiting: Builder::hang_timeout or {ENV} makes \
             synchronize give up instead)"
        ),
    );
}

/// `GPUIO_HANG_TIMEOUT`, parsed: `None` where it is unset or says no timeout.
pub(crate) fn timeout_from_env() -> Result<Option<Duration>> {
    Ok(crate::settings::var(ENV)?
        .map(|v| parse_timeout(&v))
        .transpose()?
        .flatten())
}

/// Parses a `GPUIO_HANG_TIMEOUT` value: seconds (`2`, `0.5`), or `0`/`off`/`none` (or the
/// empty string) for no timeout.
pub(crate) fn parse_timeout(value: &str) -> Result<Option<Duration>> {
    let v = value.trim().to_ascii_lowercase();
    if matches!(v.as_str(), "" | "0" | "off" | "none") {
        return Ok(None);
    }
    let bad = || crate::settings::invalid(ENV, value);
    let secs: f64 = v.parse().map_err(|_| bad())?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad());
    }
    if secs == 0.0 {
        return Ok(None);
    }
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(Some(d)),
        Ok(_) => Err(Error::Config(format!(
            "{ENV}={value:?} is shorter than a nanosecond; 0 or off means no timeout"
        ))),
        Err(_) => Err(Error::Config(format!("{ENV}={value:?} is too long a duration"))),
    }
}

/// Sleeps for `d`, by the monotonic clock, however often signals interrupt it: the pause of
/// every host-side wait (`synchronize`'s, a fault's settling).
///
/// Not [`std::thread::sleep`]: it restarts an interrupted `nanosleep` with the time the
/// kernel says is left, which is measured to the timer's *hard* expiry, its soft expiry
/// plus the thread's timer slack (50 µs by default). So each restart asks for at least the
/// slack again, and where signals come more often than that (100,000 a second into the
/// process) a 50 µs sleep never ends. An absolute deadline (`TIMER_ABSTIME`) is the same
/// instant at every restart. The clock is also read after every interruption, a defence
/// not seen needed: by `do_nanosleep` (kernel/time/hrtimer.c), a signal that comes while
/// the sleep waits for its timer's interrupt, even a timer already expired, cancels that
/// timer and reports `EINTR`, so signals that always came in that window would keep the
/// kernel from ever reporting the deadline.
pub(crate) fn sleep(d: Duration) {
    const NANOS: u128 = 1_000_000_000;
    let now = || {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec into `t`; CLOCK_MONOTONIC always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
        t
    };
    let start = now();
    let until = start.tv_nsec as u128 + d.as_nanos();
    let until = libc::timespec {
        tv_sec: start
            .tv_sec
            .saturating_add((until / NANOS).min(libc::time_t::MAX as u128) as libc::time_t),
        tv_nsec: (until % NANOS) as libc::c_long,
    };
    loop {
        // SAFETY: clock_nanosleep reads one timespec from `until`; with TIMER_ABSTIME it
        // writes no remainder (null). It returns the error number itself: EINTR means a
        // signal handler ran.
        let r =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &until, std::ptr::null_mut()) };
        let t = now();
        if r != libc::EINTR || (t.tv_sec, t.tv_nsec) >= (until.tv_sec, until.tv_nsec) {
            return;
        }
    }
}

/// Waits until `done` says so, observing progress with `observe` (see the module docs).
///
/// `pause(d)` waits at most `d` (it may return early: a condition variable that the awaited
/// event signals, say); it is called once the spins and yields are over, with `d` growing
/// as `pacing` says while nothing moves. `observe` reports what is outstanding (cheaply: it
/// runs every round); its `stalled` is filled in here. `detail` completes the report that
/// is returned or warned about (with what is too costly to read every round).
pub(crate) fn wait(
    policy: &HangPolicy,
    pacing: Pacing,
    mut done: impl FnMut() -> Result<bool>,
    mut pause: impl FnMut(Duration),
    mut observe: impl FnMut() -> HangReport,
    mut detail: impl FnMut(HangReport) -> HangReport,
) -> Result<()> {
    if done()? {
        return Ok(());
    }
    let mut seen = observe();
    let mut since = Instant::now();
    let mut next_warning = policy.warn_first;
    let mut rounds = 0u32;
    let sleeps_from = pacing.spins.saturating_add(pacing.yields);
    loop {
        match rounds {
            r if r < pacing.spins => {
                for _ in 0..32 {
                    std::hint::spin_loop();
                }
            }
            r if r < sleeps_from => std::thread::yield_now(),
            r => {
                let doublings = ((r - sleeps_from) / 2).min(30);
                pause(pacing.first_pause.saturating_mul(1 << doublings).min(pacing.max_pause));
            }
        }
        rounds = rounds.saturating_add(1);
        if done()? {
            return Ok(());
        }
        let now = observe();
        if !now.same_progress(&seen) {
            seen = now;
            since = Instant::now();
            next_warning = policy.warn_first;
            // Something moved: look again soon, but without spinning again (a slow pipe
            // reader that moves a little now and then should not keep a core busy).
            rounds = rounds.min(sleeps_from);
            continue;
        }
        let stalled = since.elapsed();
        match policy.timeout {
            Some(limit) if stalled >= limit => {
                return Err(Error::Hang(Box::new(detail(HangReport { stalled, ..now }))));
            }
            Some(_) => {}
            None if stalled >= next_warning => {
                next_warning = stalled + policy.warn_every;
                (policy.warn)(&detail(HangReport { stalled, ..now }));
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{RingWords, Waiting};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU32, Ordering};

    extern "C" fn ignore(_: libc::c_int) {}

    /// A POSIX timer that interrupts thread `tid` with `SIGUSR1` every 50 µs until dropped
    /// (20,000 signals a second, at the kernel's pace whatever the machine's load). Not
    /// every 10 µs: on the 2-vCPU VM this was measured on, a thread flooded so handled
    /// 31,800-37,600 signals a second and at times finished no 50 µs sleep of either kind
    /// within a second, its time taken by signal delivery.
    struct Flood(libc::timer_t);

    impl Flood {
        fn at(tid: libc::pid_t) -> Flood {
            // SAFETY: a zeroed sigaction, sigevent and itimerspec are valid starts; the
            // handler does nothing (async-signal-safe); timer_create writes the timer's id
            // into `timer`, timer_settime reads `its`.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = ignore as extern "C" fn(libc::c_int) as libc::sighandler_t;
                assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
                let mut sev: libc::sigevent = std::mem::zeroed();
                sev.sigev_signo = libc::SIGUSR1;
                sev.sigev_notify = libc::SIGEV_THREAD_ID;
                sev.sigev_notify_thread_id = tid;
                let mut timer: libc::timer_t = std::ptr::null_mut();
                assert_eq!(libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer), 0);
                let mut its: libc::itimerspec = std::mem::zeroed();
                its.it_interval.tv_nsec = 50_000;
                its.it_value = its.it_interval;
                assert_eq!(libc::timer_settime(timer, 0, &its, std::ptr::null_mut()), 0);
                Flood(timer)
            }
        }
    }

    impl Drop for Flood {
        fn drop(&mut self) {
            // SAFETY: a timer this value created, deleted once.
            unsafe { libc::timer_delete(self.0) };
        }
    }

    /// Under a signal every 50 µs our sleep ends on time, where `std::thread::sleep` (the
    /// control) stays asleep for as long as the flood lasts.
    #[test]
    fn a_sleep_ends_by_the_clock_under_a_signal_flood() {
        // 20 sleeps of 50 µs on a thread flooded for at most a second: how long they took,
        // if they ended within it.
        let flooded = |sleep: fn(Duration)| {
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let (tx, rx) = std::sync::mpsc::channel();
            let t = std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tid_tx.send(unsafe { libc::gettid() }).unwrap();
                // A slack of 1 ms (power-saving programs set such): a restarting sleep asks
                // for it again at each signal, and the signals come every 50 µs. (With the
                // default 50 µs it ends where a gap between signals outlasts what it asked
                // for: on a busy machine, at random.)
                // SAFETY: PR_SET_TIMERSLACK changes only this thread's timer slack.
                let slack = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000_000u64, 0u64, 0u64, 0u64) };
                assert_eq!(slack, 0);
                // Until the flood is on.
                std::thread::park();
                let start = Instant::now();
                for _ in 0..20 {
                    sleep(Duration::from_micros(50));
                }
                let _ = tx.send(start.elapsed());
            });
            let flood = Flood::at(tid_rx.recv().unwrap());
            t.thread().unpark();
            let took = rx.recv_timeout(Duration::from_secs(1)).ok();
            // Without the flood any sleep ends: std's only once it slept the slack it asked
            // for at every signal (tens of seconds), so the thread is not waited for.
            drop(flood);
            drop(t);
            took
        };
        let ours = flooded(sleep).expect("our 20 sleeps of 50 µs within a second, under the flood");
        assert!(ours < Duration::from_millis(500), "{ours:?}");
        match flooded(std::thread::sleep) {
            None => println!("the control, std::thread::sleep: still asleep after 1 s of the flood"),
            Some(d) => println!("the control, std::thread::sleep: ended in {d:?} under the flood"),
        }
    }

    const MS: Pacing = Pacing {
        spins: 16,
        yields: 48,
        first_pause: Duration::from_micros(1),
        max_pause: Duration::from_millis(1),
    };

    fn report(sq_tail: u32) -> HangReport {
        HangReport {
            waiting_for: Waiting::GpuKernels,
            stalled: Duration::ZERO,
            ring: RingWords {
                sq_tail,
                ..RingWords::default()
            },
            tickets: None,
            other_rings: Vec::new(),
            solo: None,
            streams: Vec::new(),
            running: Box::default(),
            wake_error: None,
        }
    }

    #[test]
    fn parses_gpuio_hang_timeout() {
        let ok = |s: &str| parse_timeout(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        assert_eq!(ok("2"), Some(Duration::from_secs(2)));
        assert_eq!(ok(" 0.25 "), Some(Duration::from_millis(250)));
        assert_eq!(ok("1e-3"), Some(Duration::from_millis(1)));
        for none in ["", "0", "0.0", "off", "OFF", "none"] {
            assert_eq!(ok(none), None, "{none:?}");
        }
        for bad in ["abc", "-1", "nan", "inf", "1e300", "2s", "1e-12"] {
            match parse_timeout(bad) {
                Err(Error::Config(m)) => assert!(m.contains(ENV), "{bad:?}: {m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn gives_up_only_when_nothing_moves_for_the_timeout() {
        let policy = HangPolicy::new(Some(Duration::from_millis(200)));
        // Progress every round for 400 ms (twice the timeout): no hang.
        let start = Instant::now();
        let tail = Cell::new(0);
        let r = wait(
            &policy,
            MS,
            || Ok(start.elapsed() > Duration::from_millis(400)),
            std::thread::sleep,
            || {
                tail.set(tail.get() + 1);
                report(tail.get())
            },
            |r| r,
        );
        assert!(r.is_ok(), "{r:?}");
        // No progress: a hang after the timeout, not much later, with the report.
        let start = Instant::now();
        let r = wait(&policy, MS, || Ok(false), std::thread::sleep, || report(7), |r| r);
        let waited = start.elapsed();
        match r {
            Err(Error::Hang(h)) => {
                assert!(h.stalled >= Duration::from_millis(200), "{h:?}");
                assert_eq!(h.ring.sq_tail, 7);
                assert!(h.to_string().starts_with("nothing has moved for 0."), "{h}");
            }
            other => panic!("expected a hang, got {other:?}"),
        }
        assert!(waited < Duration::from_secs(2), "gave up after {waited:?}");
        // Errors of `done` end the wait as they are.
        let r = wait(
            &policy,
            MS,
            || Err(Error::Kernel("x".into())),
            |_| {},
            || report(0),
            |r| r,
        );
        assert!(matches!(r, Err(Error::Kernel(_))), "{r:?}");
    }

    #[test]
    fn sleeps_grow_to_the_cap_and_flags_are_not_progress() {
        let policy = HangPolicy::new(Some(Duration::from_millis(100)));
        let mut pauses = Vec::new();
        let flags = Cell::new(0);
        let r = wait(
            &policy,
            Pacing {
                spins: 4,
                yields: 8,
                first_pause: Duration::from_micros(1),
                max_pause: Duration::from_micros(300),
            },
            || Ok(false),
            |d| {
                pauses.push(d);
                std::thread::sleep(d)
            },
            || {
                // SQPOLL falling asleep and being woken, over and over: not progress.
                flags.set(flags.get() ^ 1);
                let mut r = report(1);
                r.ring.sq_flags = flags.get();
                r
            },
            |r| r,
        );
        assert!(matches!(r, Err(Error::Hang(_))), "{r:?}");
        assert_eq!(pauses.first(), Some(&Duration::from_micros(1)));
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]), "{pauses:?}");
        assert_eq!(pauses.last(), Some(&Duration::from_micros(300)));
    }

    #[test]
    fn without_a_timeout_it_warns_and_keeps_waiting() {
        static WARNINGS: AtomicU32 = AtomicU32::new(0);
        fn count(r: &HangReport) {
            assert!(r.stalled >= Duration::from_millis(100), "{r:?}");
            WARNINGS.fetch_add(1, Ordering::Relaxed);
        }
        let policy = HangPolicy {
            timeout: None,
            warn_first: Duration::from_millis(100),
            warn_every: Duration::from_millis(200),
            warn: count,
        };
        // Nothing moves for 450 ms: warnings at 100 and 300 ms, and no giving up.
        let start = Instant::now();
        let r = wait(
            &policy,
            MS,
            || Ok(start.elapsed() > Duration::from_millis(450)),
            std::thread::sleep,
            || report(3),
            |r| r,
        );
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(WARNINGS.load(Ordering::Relaxed), 2);
    }
}
