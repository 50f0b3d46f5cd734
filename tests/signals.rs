//! No hang is silent, even under a signal flood (invariant 11), on the CPU backend against
//! the machine's real io_uring and on the host-thread fallback.
//!
//! A program whose process takes 100,000 or more signals a second (a profiler's timer, a
//! supervisor's pokes, an attacker) must still see `synchronize` warn on time when nothing
//! moves and return once every byte is written. A sleep that restarts with the time the
//! kernel says is left (`std::thread::sleep`) never ends there: that time counts the
//! timer slack as left too, so a 50 µs pause under signals more frequent than the slack
//! asks for 50 µs again at each restart.
//!
//! Each case: stdout is a full pipe, so the drain cannot finish; one thread, which takes
//! the signals, builds the runtime, launches (its kernel threads take them too) and
//! synchronizes; every other thread of the test blocks them. Two POSIX timers send
//! `SIGUSR1` every 10 µs, one to that thread, one to the process. The case checks that the
//! hang warning (due after 3 s without progress: the drain's wait yields for its first
//! rounds, and pauses only after them) comes within 40 s, then empties the pipe and checks
//! that `synchronize` returns with every line out. The cases run one at a time (the flood
//! is the whole process's). The host's `watchdog` unit test checks the sleep itself.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[allow(dead_code)]
mod common;
use common::pipes::{fill, slow_reader, small_pipe};
use common::{check_lines, stress_kernel, watchdog, Suite};

/// Signals the handler ran for.
static HANDLED: AtomicU64 = AtomicU64::new(0);
/// The hang warnings gpuio gave (its notices go to the `log` crate's logger where one is
/// installed).
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The timer slack the synchronizing thread sets (power-saving programs set such).
const SLACK: Duration = Duration::from_millis(1);
/// The signals per slack window, on average, the synchronizing thread must handle for the
/// case to hold a restarting sleep. Each restart asks again for the time left counting the
/// slack, so any rate above one per window never lets the sleep end; five leaves room for
/// the gaps a busy machine puts between deliveries.
const NEEDED_PER_SLACK: u32 = 5;
/// One case at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The synchronizing thread's id, and the signals it handled.
static SYNCHRONIZER: AtomicI32 = AtomicI32::new(0);
static AT_SYNCHRONIZER: AtomicU64 = AtomicU64::new(0);

extern "C" fn count(_: libc::c_int) {
    HANDLED.fetch_add(1, Ordering::Relaxed);
    // SAFETY: gettid is async-signal-safe and has no preconditions.
    if unsafe { libc::gettid() } == SYNCHRONIZER.load(Ordering::Relaxed) {
        AT_SYNCHRONIZER.fetch_add(1, Ordering::Relaxed);
    }
}

struct Warnings;

impl log::Log for Warnings {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        let text = record.args().to_string();
        if text.starts_with("synchronize:") {
            WARNINGS.lock().unwrap_or_else(|e| e.into_inner()).push(text);
        }
    }
    fn flush(&self) {}
}

/// Installs the handler (no `SA_RESTART`: every interruptible call of the flooded threads
/// sees `EINTR`) and the logger, once.
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid start; `count` is async-signal-safe (one
        // relaxed atomic add) and has the handler's signature.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = count as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
        }
        log::set_logger(&Warnings).expect("the only logger");
        log::set_max_level(log::LevelFilter::Warn);
    });
}

/// Blocks (`true`) or unblocks `SIGUSR1` on the calling thread; threads it makes later
/// inherit that.
fn block_usr1(block: bool) {
    // SAFETY: changes only this thread's signal mask, through a sigset made here.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        let how = if block { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
        assert_eq!(libc::pthread_sigmask(how, &set, std::ptr::null_mut()), 0);
    }
}

fn synchronize_under_a_signal_flood_warns_on_time_and_returns_once_every_line_is_out(suite: Suite) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    install();
    // This thread, and the watchdog and reader it makes, take no signal.
    block_usr1(true);
    let name = "synchronize_under_a_signal_flood_warns_on_time_and_returns_once_every_line_is_out";
    // Beyond the bounds below (60 s to synchronize, 40 s to the warning, 30 s to return).
    let _wd = watchdog(name, 150);
    let (r, w) = small_pipe();
    let filled = fill(w.as_raw_fd());
    let (threads, lines) = (8u32, 20u64);
    let warn_first = Duration::from_secs(3);
    WARNINGS.lock().unwrap().clear();

    let fd = w.as_raw_fd();
    // When synchronize starts, and how long the runtime's build and the launch took under
    // the flood before it: the warning's bound counts from there.
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let builder = suite
        .builder()
        .stdout_fd(fd)
        .hang_timeout(None)
        .hang_warnings(warn_first, warn_first);
    let synchronizing = std::thread::spawn(move || {
        block_usr1(false);
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        SYNCHRONIZER.store(me, Ordering::Relaxed);
        // The flood: one timer at this thread, one at the process (any thread that takes
        // SIGUSR1: the kernel's threads too), each firing every 10 µs. The kernel keeps
        // their pace, however loaded the machine (a flooder thread's pace would be the
        // scheduler's).
        let floods = [Some(me), None].map(|at| Flood::every(Duration::from_micros(10), at));
        // A timer slack of 1 ms (power-saving programs set such), which the kernel's
        // threads inherit: a restarting sleep then asks for 1 ms more at each of the
        // signals, which come every 10 µs, and never ends. With the default 50 µs it ends
        // only where a gap between signals outlasts what it asked for, which on a busy
        // machine happens at random.
        // SAFETY: PR_SET_TIMERSLACK changes only this thread's timer slack.
        let slack = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, SLACK.as_nanos() as u64, 0u64, 0u64, 0u64) };
        assert_eq!(slack, 0);
        let building = Instant::now();
        let rt = builder.build().expect("a runtime");
        rt.launch(1, threads, stress_kernel(lines)).expect("the launch");
        let started = Instant::now();
        let _ = started_tx.send((started, started - building));
        let (handled, at_me) = (HANDLED.load(Ordering::Relaxed), AT_SYNCHRONIZER.load(Ordering::Relaxed));
        let r = rt.synchronize();
        let took = started.elapsed();
        let secs = took.as_secs_f64();
        let rates = (
            (HANDLED.load(Ordering::Relaxed) - handled) as f64 / secs,
            (AT_SYNCHRONIZER.load(Ordering::Relaxed) - at_me) as f64 / secs,
        );
        drop(floods);
        (r, took, rates)
    });

    // The runtime's build and the launch, under the flood (their own bound: a stuck build
    // is not the stuck wait this test is about).
    let (started, build) = match started_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
            "{}: no synchronize within 60 s under a signal flood: the runtime's build or the launch is stuck",
            suite.name()
        ),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The flooded thread ended before synchronize: its panic says why.
            let why = synchronizing.join().err().and_then(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            });
            panic!(
                "{}: the runtime's build or the launch failed under a signal flood: {}",
                suite.name(),
                why.unwrap_or_else(|| "(no message)".into())
            )
        }
    };
    // The warning: nothing moves while the pipe stays full. Due 3 s into synchronize; up to
    // 40 s allowed: a thread that takes 100,000 signals a second gets little of a 2-core
    // machine busy with the rest of the test suite, and the stuck pause this catches never
    // ends.
    let until = started + Duration::from_secs(40);
    while WARNINGS.lock().unwrap().is_empty() {
        assert!(
            Instant::now() < until,
            "{}: no hang warning within 40 s of synchronize's start under a signal flood (warnings \
             after {warn_first:?}; the build and launch before it took {build:?}): synchronize's wait \
             is stuck in a pause",
            suite.name()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Then room in the pipe: every line goes out, and synchronize returns.
    let reader = slow_reader(r);
    let until = Instant::now() + Duration::from_secs(30);
    while !synchronizing.is_finished() {
        assert!(
            Instant::now() < until,
            "{}: synchronize did not return within 30 s of the pipe's reader starting, under a \
             signal flood",
            suite.name()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (result, took, (rate, at_rate)) = synchronizing.join().unwrap();
    result.unwrap_or_else(|e| panic!("{}: synchronize failed: {e}", suite.name()));
    // The runtime is dropped (its write end with it, as the builder did not own `fd`):
    // closing ours ends the reader.
    drop(w);
    let out = reader.join().unwrap();
    assert!(out[..filled].iter().all(|&b| b == b'x'), "the pipe's filler first");
    check_lines(&out[filled..], threads as u64, lines);
    println!(
        "{}: {rate:.0} signals a second handled, {at_rate:.0} by the synchronizing thread; the build and \
         launch took {build:?}; the warning came, and synchronize returned after {took:?}",
        suite.name()
    );
    // A restarting sleep never ends once signals come more often than the timer slack
    // ([`SLACK`]): the flood must bring this thread several a window. The timers ask for
    // 100,000 a second; a busy machine delivers fewer.
    let needed = NEEDED_PER_SLACK as f64 / SLACK.as_secs_f64();
    assert!(
        at_rate >= needed,
        "{}: the synchronizing thread handled {at_rate:.0} signals a second, fewer than the \
         {needed:.0} ({NEEDED_PER_SLACK} per {SLACK:?} of timer slack) this test needs to hold a \
         restarting sleep; the machine is too busy to flood it",
        suite.name()
    );
}

/// A POSIX interval timer that sends `SIGUSR1` every `period` to thread `at` of this
/// process, or to the process; deleted on drop.
struct Flood(libc::timer_t);

impl Flood {
    fn every(period: Duration, at: Option<libc::pid_t>) -> Flood {
        // SAFETY: a zeroed sigevent and itimerspec are valid starts; timer_create writes
        // the new timer's id into `timer`, timer_settime reads `its`.
        unsafe {
            let mut sev: libc::sigevent = std::mem::zeroed();
            sev.sigev_signo = libc::SIGUSR1;
            match at {
                Some(tid) => {
                    sev.sigev_notify = libc::SIGEV_THREAD_ID;
                    sev.sigev_notify_thread_id = tid;
                }
                None => sev.sigev_notify = libc::SIGEV_SIGNAL,
            }
            let mut timer: libc::timer_t = std::ptr::null_mut();
            assert_eq!(libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer), 0);
            let mut its: libc::itimerspec = std::mem::zeroed();
            its.it_interval.tv_nsec = period.as_nanos() as libc::c_long;
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

over_submissions!(synchronize_under_a_signal_flood_warns_on_time_and_returns_once_every_line_is_out);
