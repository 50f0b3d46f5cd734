//! Helpers shared by the tests: a watchdog, temporary files, the line checker, the stress
//! kernel, the report of a test that cannot run here, and C hosts of the C API
//! ([`c_hosts`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::println;

pub mod c_hosts;

/// Reports that `test` cannot run here, and why; the caller returns right after. libtest
/// would count the test as passed and hide what it prints, so the line goes to stderr as
/// `SKIPPED <binary>::<test>: <reason>` and, if `GPUIO_SKIP_LOG` names a file, is appended
/// to it without the `SKIPPED ` (`.ci/run` counts and lists them at the end).
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

/// Aborts the test binary if the test runs longer than `secs`: a protocol bug shows as a
/// failure naming the test, never as a CI run that hangs.
pub struct Watchdog(Arc<AtomicBool>);

pub fn watchdog(name: &'static str, secs: u64) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < until {
            if d.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("test {name} hung for {secs} s: aborting");
        std::process::abort();
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub fn temp_file(name: &str) -> (std::fs::File, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("gpuio-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    (f, path)
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
