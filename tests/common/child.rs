//! Child processes of a test binary: a test that changes process-wide state (an rlimit, a
//! signal disposition, credentials, the environment) or reads the process's stderr runs its
//! body in a new process of the same binary. The child is a `#[test]` that does nothing
//! unless [`CHILD_ENV`] is set; it tells the parent what it saw with [`report`].

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Names what the child runs (its mode); unset, the child test returns at once.
pub const CHILD_ENV: &str = "GPUIO_TEST_CHILD";

/// The mode this process was started with, if it is a child.
pub fn child_mode() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

/// What a child reported ([`report`] lines on its stdout), and how it ended.
pub struct ChildRun {
    pub status: std::process::ExitStatus,
    pub report: BTreeMap<String, String>,
    pub stdout: String,
    pub stderr: String,
}

impl ChildRun {
    /// The value the child reported for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.report.get(key).map(String::as_str)
    }

    /// The child's [`report`] lines, joined by `sep`: what a parent test prints for the log.
    pub fn reports(&self, sep: &str) -> String {
        self.stdout
            .lines()
            .filter(|l| l.contains(REPORT))
            .collect::<Vec<_>>()
            .join(sep)
    }

    /// Fails the test unless the child exited 0 (it makes its own assertions).
    pub fn assert_ok(&self, what: &str) {
        if !self.status.success() {
            let how = match self.status.signal() {
                Some(s) => format!("was killed by signal {s} ({})", signal_name(s)),
                None => format!("exited with {:?}", self.status.code()),
            };
            panic!(
                "{what}: the child process {how}\n--- stdout\n{}\n--- stderr\n{}",
                self.stdout, self.stderr
            );
        }
    }
}

fn signal_name(s: i32) -> String {
    // SAFETY: strsignal returns a pointer to a static or thread-local string.
    let p = unsafe { libc::strsignal(s) };
    if p.is_null() {
        return "?".into();
    }
    // SAFETY: non-NULL, NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Runs the test `test` of this binary alone in a new process, with `CHILD_ENV=mode` and the
/// variables `env` (`None`: removed), and kills it (failing the test) after `limit`, counted
/// as the machine lets it run ([`super::FairTime`]: on a loaded machine, more wall-clock time).
pub fn run_child(test: &str, mode: &str, env: &[(&str, Option<&str>)], limit: Duration) -> ChildRun {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd.spawn().expect("spawning the child");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    // The limit counts as the machine lets the child run (`FairTime`): on a loaded machine
    // a slow child is not a hung one.
    let mut time = super::FairTime::start();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break status;
        }
        if time.counted() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "child `{mode}` made no headway for {limit:?} ({:.0} s on the wall clock, the \
                 machine's load counted): killed\n--- stderr\n{}",
                started.elapsed().as_secs_f64(),
                err_reader.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let report = stdout
        .lines()
        // (The harness may print `test <name> ... ` before the first one.)
        .filter_map(|l| l.find(REPORT).map(|at| &l[at + REPORT.len()..]))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ChildRun {
        status,
        report,
        stdout,
        stderr,
    }
}

pub const REPORT: &str = "child report: ";

/// Tells the parent `key=value` (the child's stdout is the parent's pipe).
pub fn report(key: &str, value: impl std::fmt::Display) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{REPORT}{key}={value}");
    let _ = o.flush();
}

/// Declares a test binary's child test, `fault_child`, which runs the body that
/// [`CHILD_ENV`] names (`"mode" => body(),` arms; nothing without it, as in a plain
/// `cargo test -- --ignored`), and `run_child(mode, limit)`, which runs it in a new process
/// of the binary and kills it after `limit`.
#[macro_export]
macro_rules! fault_children {
    ($ignore:literal, { $($mode:literal => $body:expr),+ $(,)? }) => {
        /// The body of a child process: runs the fault `GPUIO_TEST_CHILD` names.
        #[test]
        #[ignore = $ignore]
        fn fault_child() {
            let Some(mode) = $crate::common::child::child_mode() else {
                return;
            };
            let _wd = $crate::common::watchdog("fault_child", 300);
            match mode.as_str() {
                $($mode => $body,)+
                other => panic!("unknown {} {other}", $crate::common::child::CHILD_ENV),
            }
        }

        /// Runs `fault_child` in a new process of this test binary on `mode`, killing it
        /// after `limit`.
        fn run_child(mode: &str, limit: std::time::Duration) -> $crate::common::child::ChildRun {
            $crate::common::child::run_child("fault_child", mode, &[], limit)
        }
    };
}
