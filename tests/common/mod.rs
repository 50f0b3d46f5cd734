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

/// One configuration of the suite ([`over_submissions!`]), passed to each case as a value:
/// who consumes the rings (SQPOLL, the waker entering them, the fallback's threads, or the
/// kernel threads performing inline), how many rings, whether there is a solo ring and how
/// its holder waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suite {
    pub submission: gpuio::Submission,
    /// io_uring rings with SQPOLL ([`gpuio::Builder::sqpoll`]), as a GPU's; otherwise, on
    /// io_uring, rings the waker enters, as the CPU backend makes them with a file root.
    pub sqpoll: bool,
    pub rings: u32,
    /// A solo ring ([`gpuio::Builder::solo`]).
    pub solo: bool,
    /// Its holder waits on the CQ tail, not on each CQE's result
    /// ([`gpuio::Builder::solo_waits_on_tail`]).
    pub solo_on_tail: bool,
}

impl Suite {
    /// `io_uring::*`: one io_uring ring as the CPU backend makes it where it takes io_uring
    /// (no SQPOLL: the waker enters it), and a solo ring.
    pub const IO_URING: Suite = Suite {
        submission: gpuio::Submission::IoUring,
        sqpoll: false,
        rings: 1,
        solo: true,
        solo_on_tail: false,
    };
    /// `io_uring_sqpoll::*`: one io_uring ring with SQPOLL, as a GPU's, and a solo ring
    /// (served by the ring's SQPOLL thread).
    pub const IO_URING_SQPOLL: Suite = Suite {
        sqpoll: true,
        ..Suite::IO_URING
    };
    /// `io_uring_rings::*`: [`SUITE_RINGS`] io_uring rings, each with its SQPOLL thread, no
    /// solo ring (so that a lone thread's requests go through the shared rings).
    pub const IO_URING_RINGS: Suite = Suite {
        rings: SUITE_RINGS,
        solo: false,
        ..Suite::IO_URING_SQPOLL
    };
    /// `host_thread::*`: the host-thread fallback (`GPUIO_URING=off`), no solo ring.
    pub const HOST_THREAD: Suite = Suite {
        submission: gpuio::Submission::HostThread,
        solo: false,
        ..Suite::IO_URING
    };
    /// `inline::*`: the CPU backend's default, the kernel threads performing the requests
    /// themselves (`GPUIO_URING=inline`), and a solo ring (performed inline too).
    pub const INLINE: Suite = Suite {
        submission: gpuio::Submission::Inline,
        ..Suite::IO_URING
    };

    /// The suite's module for this configuration: a test's name is `<this>::<case>` (for
    /// skip lines and watchdogs that name the test).
    pub fn name(self) -> &'static str {
        match self.submission {
            gpuio::Submission::HostThread => "host_thread",
            gpuio::Submission::Inline => "inline",
            _ if self.rings > 1 => "io_uring_rings",
            _ if self.sqpoll => "io_uring_sqpoll",
            _ => "io_uring",
        }
    }

    /// The CPU backend on this configuration's rings (the solo ring as the builder
    /// chooses).
    pub fn builder(self) -> gpuio::Builder {
        gpuio::Runtime::builder()
            .backend(gpuio::Backend::Cpu)
            .submission(self.submission)
            .sqpoll(self.sqpoll)
            .rings(self.rings)
    }

    /// [`Suite::builder`] with the solo ring as this configuration says.
    pub fn builder_with_solo(self) -> gpuio::Builder {
        self.builder().solo(self.solo).solo_waits_on_tail(self.solo_on_tail)
    }

    /// The same with a solo ring or without.
    pub fn with_solo(self, solo: bool) -> Suite {
        Suite { solo, ..self }
    }

    /// The same with the solo ring's holder waiting on the CQ tail.
    pub fn with_solo_on_tail(self) -> Suite {
        Suite {
            solo: true,
            solo_on_tail: true,
            ..self
        }
    }
}

/// Runs `case` in `suite` `GPUIO_SUITE_REPEAT` times (default once), each round with the
/// runtime the case builds itself: `.ci/run` repeats the liveness suite so, in one process.
/// A failing round says which it was (libtest shows a failed test's output).
pub fn repeated(suite: Suite, case: fn(Suite)) {
    let rounds: u32 = match std::env::var("GPUIO_SUITE_REPEAT") {
        Ok(v) => match v.parse() {
            Ok(n) if n >= 1 => n,
            _ => panic!("GPUIO_SUITE_REPEAT={v}: a number of rounds, 1 or more"),
        },
        Err(_) => 1,
    };
    for round in 1..=rounds {
        if rounds > 1 {
            eprintln!("round {round} of {rounds}");
        }
        case(suite);
    }
}

/// [`Suite::builder`], for the cases' `use common::suite_builder as builder`.
pub fn suite_builder(suite: Suite) -> gpuio::Builder {
    suite.builder()
}

/// One suite over the submission paths: for each `case` (a `fn case(common::Suite)` of the
/// test file), a test `io_uring::case` that runs it with io_uring as the CPU backend makes
/// it (the waker enters the ring, [`Suite::IO_URING`]), a test `io_uring_sqpoll::case` with
/// SQPOLL as on a GPU ([`Suite::IO_URING_SQPOLL`]), a test `io_uring_rings::case` over
/// [`SUITE_RINGS`] SQPOLL rings ([`Suite::IO_URING_RINGS`]), a test `host_thread::case`
/// on the host-thread fallback ([`Suite::HOST_THREAD`]), and a test `inline::case` with the
/// kernel threads performing the requests, the CPU backend's default ([`Suite::INLINE`]);
/// `io_uring`, `io_uring_sqpoll` and `inline` have a solo ring. Each case builds its runtime
/// from the configuration it is given ([`gpuio::Builder::submission`] and
/// [`gpuio::Builder::sqpoll`], which `GPUIO_URING` and `GPUIO_SQPOLL` do not override), so
/// one `cargo test` covers all five. `GPUIO_SUITE_REPEAT=N` runs each N times ([`repeated`]).
#[macro_export]
macro_rules! over_submissions {
    ($($case:ident),* $(,)?) => {
        /// The cases on an io_uring ring that the waker enters (the CPU backend's io_uring
        /// without SQPOLL).
        mod io_uring {
            $(
                #[test]
                fn $case() {
                    super::common::repeated(super::common::Suite::IO_URING, super::$case)
                }
            )*
        }
        /// The cases on an io_uring ring with SQPOLL, as a GPU's.
        mod io_uring_sqpoll {
            $(
                #[test]
                fn $case() {
                    super::common::repeated(super::common::Suite::IO_URING_SQPOLL, super::$case)
                }
            )*
        }
        /// The cases on several io_uring rings, each with its SQPOLL thread, and no solo
        /// ring.
        mod io_uring_rings {
            $(
                #[test]
                fn $case() {
                    super::common::repeated(super::common::Suite::IO_URING_RINGS, super::$case)
                }
            )*
        }
        /// The cases on the host-thread fallback (`GPUIO_URING=off`), without a solo ring.
        mod host_thread {
            $(
                #[test]
                fn $case() {
                    super::common::repeated(super::common::Suite::HOST_THREAD, super::$case)
                }
            )*
        }
        /// The cases with the kernel threads performing the requests (`GPUIO_URING=inline`,
        /// the CPU backend's default).
        mod inline {
            $(
                #[test]
                fn $case() {
                    super::common::repeated(super::common::Suite::INLINE, super::$case)
                }
            )*
        }
    };
}

/// Whether this build made the GPU code at `paths` (files `gpuio_kernels_gpu` names): where
/// this machine built no GPU targets (`GPUIO_GPU_TARGETS`, linker/src/kernel_crate.rs), says
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

/// Reports that `test` cannot run here, and why; the caller returns right after. libtest
/// counts the test as passed and hides what the print macros print, so the line goes
/// straight to fd 2, past that capture, as `SKIPPED <binary>::<test>: <reason>`: a skip is
/// seen in any run. If `GPUIO_SKIP_LOG` names a file, the line is appended to it without
/// the `SKIPPED ` (`.ci/run` counts and lists them at the end).
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let line = format!(
        "{}::{test}: {}",
        env!("CARGO_CRATE_NAME"),
        reason.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    let _ = std::io::stderr().write_all(format!("SKIPPED {line}\n").as_bytes());
    if let Some(log) = std::env::var_os("GPUIO_SKIP_LOG") {
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
        let mut time = FairTime::start();
        while time.counted() < limit {
            if d.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
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

/// Time as the machine lets a test run (see [`watchdog`]): each moment counts in full while
/// the machine has a core for it, and in part while other processes' runnable threads
/// outnumber the cores. Limits measured with it follow the test's chance to progress, not
/// the wall clock.
pub struct FairTime {
    counted: Duration,
    last: Instant,
    cores: f64,
}

impl FairTime {
    pub fn start() -> FairTime {
        FairTime {
            counted: Duration::ZERO,
            last: Instant::now(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
        }
    }

    /// The time counted so far: the time since the last call counts at the machine's share
    /// now (so call it often, every 50 ms or so).
    pub fn counted(&mut self) -> Duration {
        let now = Instant::now();
        let share = match others_runnable() {
            Some(others) => (self.cores / (others as f64 + 1.0)).min(1.0),
            None => 1.0,
        };
        self.counted += (now - self.last).mul_f64(share);
        self.last = now;
        self.counted
    }
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

/// The lines of the file at `path`, sorted: an output whose threads' lines interleave, to
/// compare with the lines expected.
pub fn sorted_lines(path: impl AsRef<std::path::Path>) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
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

/// A CUDA toolkit program that runs (`NAME --version` succeeds): the path in `$var` if that
/// is set and runs, else `name` on the PATH, else /usr/local/cuda/bin/`name` (the GPU
/// machine's toolkit). None where none runs.
pub fn cuda_tool(name: &str, var: &str) -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let candidates = [
        std::env::var_os(var).map(PathBuf::from),
        Some(PathBuf::from(name)),
        Some(PathBuf::from("/usr/local/cuda/bin").join(name)),
    ];
    candidates.into_iter().flatten().find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}
