//! Helpers shared by the tests: a watchdog, the line checker, the stress kernel, the report
//! of a test that cannot run here, one suite over both submission paths
//! ([`over_submissions!`]), temporary files ([`dirs`]), pipes and a slow reader
//! ([`pipes`]), a simulated warp ([`warp`]), child processes of a test binary ([`child`]),
//! and C hosts of the C API ([`c_hosts`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::println;

pub mod c_hosts;
pub mod child;
pub mod dirs;
pub mod faults;
pub mod pipes;
pub mod warp;

#[allow(unused_imports)] // (not every test binary uses both)
pub use dirs::{temp_file, TempDir};

/// Both submission paths, for a case to run over: io_uring with SQPOLL, and the host-thread
/// fallback (`GPUIO_URING=off`).
pub const SUBMISSIONS: [gpuio::Submission; 2] = [gpuio::Submission::IoUring, gpuio::Submission::HostThread];

/// The rings the suite's `io_uring_rings::*` cases ask for: more than one, and not a power
/// of two (the completion slots round up to one).
pub const SUITE_RINGS: u32 = 3;

/// The CPU backend, its rings consumed by `sub`, as many as the running case asks for
/// ([`suite_rings`]).
pub fn suite_builder(sub: gpuio::Submission) -> gpuio::Builder {
    gpuio::Runtime::builder()
        .backend(gpuio::Backend::Cpu)
        .submission(sub)
        .rings(suite_rings())
}

thread_local! {
    /// The rings the case running on this thread asks for (see [`suite_rings`]).
    static RINGS: std::cell::Cell<u32> = const { std::cell::Cell::new(1) };
}

/// The rings the running case's builder should ask for ([`gpuio::Builder::rings`]): 1, or
/// [`SUITE_RINGS`] in `io_uring_rings::*` (see [`over_submissions!`]).
pub fn suite_rings() -> u32 {
    RINGS.with(|r| r.get())
}

thread_local! {
    /// Whether the case running on this thread gives its runtime a solo ring (see
    /// [`suite_solo`]).
    static SOLO: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Whether the running case's builder should give the runtime a solo ring
/// ([`gpuio::Builder::solo`]): in `io_uring::*` (and where a test asks, [`set_suite_solo`]),
/// not in `io_uring_rings::*` and `host_thread::*`, so that a lone thread's requests go
/// through the shared rings on both consumers there.
pub fn suite_solo() -> bool {
    SOLO.with(|s| s.get())
}

thread_local! {
    /// Whether the case running on this thread has its solo ring's holder wait on the CQ
    /// tail (see [`suite_solo_on_tail`]).
    static SOLO_ON_TAIL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the running case's solo ring waits on the CQ tail rather than on each CQE's
/// result ([`gpuio::Builder::solo_waits_on_tail`]; the default on x86-64 is the result):
/// where a test asks, [`set_suite_solo_on_tail`].
pub fn suite_solo_on_tail() -> bool {
    SOLO_ON_TAIL.with(|s| s.get())
}

/// Sets [`suite_solo_on_tail`] for the calling test thread.
pub fn set_suite_solo_on_tail(on: bool) {
    SOLO_ON_TAIL.with(|s| s.set(on));
}

/// Sets [`suite_solo`] for the calling test thread (`over_submissions!` does).
pub fn set_suite_solo(on: bool) {
    SOLO.with(|s| s.set(on));
}

/// Sets [`suite_rings`] for the calling test thread (`over_submissions!` does).
pub fn set_suite_rings(n: u32) {
    RINGS.with(|r| r.set(n));
}

/// The module `over_submissions!` puts a case on `sub` in: the test's name is
/// `<this>::<case>` (for skip lines and watchdogs that name the test).
pub fn path_name(sub: gpuio::Submission) -> &'static str {
    match sub {
        gpuio::Submission::HostThread => "host_thread",
        _ if suite_rings() > 1 => "io_uring_rings",
        _ => "io_uring",
    }
}

/// One suite over the submission paths: for each `case` (a `fn case(gpuio::Submission)`
/// of the test file), a test `io_uring::case` that runs it with io_uring (SQPOLL), a test
/// `io_uring_rings::case` that runs it over [`SUITE_RINGS`] io_uring rings, and a test
/// `host_thread::case` that runs it on the host-thread fallback; only the first has a solo
/// ring (the case's builder asks for [`suite_rings`] and [`suite_solo`]). Each case asks its builder for the path it is given
/// ([`gpuio::Builder::submission`], which `GPUIO_URING` does not override), so one
/// `cargo test` covers all three.
#[macro_export]
macro_rules! over_submissions {
    ($($case:ident),* $(,)?) => {
        /// The cases on io_uring with SQPOLL.
        mod io_uring {
            $(
                #[test]
                fn $case() {
                    super::$case(gpuio::Submission::IoUring)
                }
            )*
        }
        /// The cases on several io_uring rings, each with its SQPOLL thread, and no solo
        /// ring.
        mod io_uring_rings {
            $(
                #[test]
                fn $case() {
                    super::common::set_suite_rings(super::common::SUITE_RINGS);
                    super::common::set_suite_solo(false);
                    super::$case(gpuio::Submission::IoUring)
                }
            )*
        }
        /// The cases on the host-thread fallback (`GPUIO_URING=off`), without a solo ring.
        mod host_thread {
            $(
                #[test]
                fn $case() {
                    super::common::set_suite_solo(false);
                    super::$case(gpuio::Submission::HostThread)
                }
            )*
        }
    };
}

/// Reports that `test` cannot run here, and why; the caller returns right after. libtest
/// would count the test as passed and hide what it prints, so the line goes to stderr as
/// `SKIPPED <binary>::<test>: <reason>` and, if `GPUIO_SKIP_LOG` names a file, is appended
/// to it without the `SKIPPED ` (`.ci/run` counts and lists them at the end).
/// Whether this build made the GPU code at `paths` (files `gpuio_kernels_gpu` names): where
/// this machine built no GPU targets (`GPUIO_GPU_TARGETS`, linker/src/kernels.rs), says
/// the test skipped, visibly, and returns false.
pub fn gpu_code_built(test: &str, paths: &[&str]) -> bool {
    let built = paths.iter().all(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0));
    if !built {
        skip(
            test,
            "no GPU code was built on this machine (GPUIO_GPU_TARGETS=all builds every target)",
        );
    }
    built
}

pub fn skip(test: &str, reason: &str) {
    let line = format!(
        "{}::{test}: {}",
        env!("CARGO_CRATE_NAME"),
        reason.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    eprintln!("SKIPPED {line}");
    if let Some(log) = std::env::var_os("GPUIO_SKIP_LOG") {
        use std::io::Write;
        // One write of one line to an O_APPEND file: lines from parallel tests and test
        // binaries do not interleave.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
            .unwrap_or_else(|e| panic!("GPUIO_SKIP_LOG={}: {e}", log.to_string_lossy()));
    }
}

/// Why `program` (`rustc`, `cargo`, `cc`) cannot run on this machine, if it cannot (it is
/// not installed: the GPU machine runs prebuilt test binaries and has no toolchain). Any
/// other failure to run it is not a reason to skip.
pub fn missing_program(program: &str) -> Option<String> {
    match std::process::Command::new(program).arg("--version").output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "`{program}` is not installed here (prebuilt test binaries, no toolchain)"
        )),
        _ => None,
    }
}

/// Aborts the test binary if the test makes no headway for `secs`: a protocol bug shows as
/// a failure naming the test, never as a CI run that hangs.
///
/// The time counts as the machine lets the test run: each moment counts in full while the
/// machine has a core for the test, and in part while other processes' runnable threads
/// outnumber the cores (a 2-core machine running 8 busy processes counts about 2/9 of each
/// second). So a test on a loaded machine gets the time it would have had on an idle one,
/// and a hang on an idle machine is caught after `secs`.
///
/// The last words go straight to fd 2, past libtest's capture of the test's output (which
/// an abort would discard), and name the test as libtest does (`io_uring::case`).
pub struct Watchdog(Arc<AtomicBool>);

pub fn watchdog(name: &'static str, secs: u64) -> Watchdog {
    watchdog_saying(secs, move || format!("test {name} made no headway for {secs} s"))
}

/// [`watchdog`] with its own last words: `say` gives them, before the abort.
pub fn watchdog_saying(secs: u64, say: impl FnOnce() -> String + Send + 'static) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    // libtest names each test's thread after the test's path.
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    std::thread::spawn(move || {
        let limit = Duration::from_secs(secs);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let (mut counted, mut last) = (Duration::ZERO, Instant::now());
        while counted < limit {
            if d.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
            let now = Instant::now();
            let share = match others_runnable() {
                Some(others) => (cores / (others as f64 + 1.0)).min(1.0),
                None => 1.0,
            };
            counted += (now - last).mul_f64(share);
            last = now;
        }
        use std::io::Write;
        let words = format!(
            "\nwatchdog: {}::{test}: {}: aborting\n",
            env!("CARGO_CRATE_NAME"),
            say()
        );
        let _ = std::io::stderr().write_all(words.as_bytes());
        std::process::abort();
    });
    Watchdog(done)
}

/// Runnable threads on the machine outside this process, from `/proc` (`None` where it
/// cannot be read): the competition for its cores.
fn others_runnable() -> Option<usize> {
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    // "0.20 0.18 0.12 3/80 11206": runnable/total scheduling entities.
    let all: usize = loadavg.split_whitespace().nth(3)?.split('/').next()?.parse().ok()?;
    let ours = std::fs::read_dir("/proc/self/task")
        .ok()?
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        // The state follows the command name in parentheses: "123 (name) R ...".
        .filter(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('R'))
        })
        .count();
    Some(all.saturating_sub(ours))
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Checks `t=<t> i=<i>` lines: each exactly once, whole, in per-thread order.
pub fn check_lines(out: &[u8], threads: u64, lines: u64) {
    let text = std::str::from_utf8(out).expect("output is UTF-8 (no torn multi-byte writes)");
    assert!(text.is_empty() || text.ends_with('\n'), "output ends mid-line");
    let mut next = vec![0u64; threads as usize];
    let mut n = 0u64;
    for line in text.lines() {
        let (t, i) = line
            .strip_prefix("t=")
            .and_then(|r| r.split_once(" i="))
            .unwrap_or_else(|| panic!("torn or foreign line {n}: {line:?}"));
        let t: usize = t.parse().unwrap_or_else(|_| panic!("torn line {line:?}"));
        let i: u64 = i.parse().unwrap_or_else(|_| panic!("torn line {line:?}"));
        assert_eq!(i, next[t], "thread {t}: line out of order or duplicated");
        next[t] += 1;
        n += 1;
    }
    assert_eq!(n, threads * lines, "lines lost or added");
    assert!(next.iter().all(|&c| c == lines), "a thread lost lines");
}

/// A line of the `stress` GPU kernel, `t=<thread> i=<n>` padded with dots to its width:
/// `(thread, n)`. Panics on anything else (a torn or foreign line).
pub fn stress_line(line: &str) -> (usize, u32) {
    let parsed = line
        .trim_end_matches('.')
        .strip_prefix("t=")
        .and_then(|r| r.split_once(" i="))
        .and_then(|(t, i)| Some((t.parse().ok()?, i.parse().ok()?)));
    parsed.unwrap_or_else(|| panic!("not a whole stress line: {line:?}"))
}

pub fn stress_kernel(lines: u64) -> impl Fn() + Send + Sync + 'static {
    move || {
        let t = gpuio::device::global_thread_idx();
        for i in 0..lines {
            println!("t={t} i={i}");
        }
    }
}
