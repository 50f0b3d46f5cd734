//! Faults of a reader that goes away, on the CPU backend against the machine's real
//! io_uring: a reader that closes its pipe (EPIPE, with SIGPIPE at its default action),
//! before the kernel printed and in the middle.
//!
//! The test changes a signal disposition, so it runs in a child process of this test binary
//! (`fault_child`), which is killed if it runs too long. RELIABILITY.md records what it
//! found.

#[allow(dead_code)]
mod common;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::child::report;
use common::faults::{builder, check_cut, print_error, total_bytes};
use common::pipes::pipe;
use common::{stress_kernel, watchdog};

fault_children!("runs as a child process of the pipe tests (GPUIO_TEST_CHILD), not by itself", {
    "sigpipe" => child_sigpipe(),
});

// ---------------------------------------------------------------- the reader goes away

#[test]
fn a_closed_pipe_reports_epipe_and_sigpipe_kills_nothing() {
    let _wd = watchdog("a_closed_pipe_reports_epipe_and_sigpipe_kills_nothing", 180);
    let run = run_child("sigpipe", Duration::from_secs(150));
    run.assert_ok("printing into a pipe whose reader closed, with SIGPIPE at its default action");
    assert_eq!(run.get("checked"), Some("1"), "{}", run.stdout);
    eprintln!("{}", run.reports("\n"));
}

/// The signal masks of this process's threads, by thread name: `(name, SigBlk, SigPnd)`.
fn thread_signals() -> Vec<(String, u64, u64)> {
    let mut v = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return v;
    };
    for t in dir.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(0)
        };
        v.push((comm.trim().to_string(), field("SigBlk:"), field("SigPnd:")));
    }
    v
}

/// EPIPE with SIGPIPE at its default action, as a C host has it (Rust's runtime ignores
/// SIGPIPE; this child undoes that): a pipe whose reader closed before the kernel printed,
/// then one whose reader closes in the middle.
fn child_sigpipe() {
    // SAFETY: sets the disposition of one signal in this child process.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let bit = 1u64 << (libc::SIGPIPE - 1);

    // 1. The reader is gone before the kernel starts: every line is lost, and says so.
    let (r, w) = pipe();
    drop(r);
    let (threads, lines) = (4u64, 100u64);
    let rt = builder().stdout_fd(w.as_raw_fd()).build().unwrap();
    rt.launch(1, threads as u32, stress_kernel(lines)).unwrap();
    let lost = print_error(rt.synchronize(), w.as_raw_fd(), libc::EPIPE);
    assert_eq!(lost.lost_lines, threads * lines, "{lost:?}");
    assert_eq!(lost.lost_bytes, total_bytes(threads, lines), "{lost:?}");
    // Where the kernel's SIGPIPE went: to the io_uring thread that made the write, which
    // blocks it (so it stays pending there, harmless), not to the process.
    let sigs = thread_signals();
    report(
        "threads",
        sigs.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>().join(","),
    );
    for (name, blocked, pending) in &sigs {
        if name.starts_with("iou-") {
            report(
                &format!("thread.{name}"),
                format!(
                    "SigBlk {blocked:016x} (SIGPIPE {}), SigPnd {pending:016x} (SIGPIPE {})",
                    if blocked & bit != 0 { "blocked" } else { "NOT blocked" },
                    if pending & bit != 0 { "pending" } else { "not pending" }
                ),
            );
        }
    }
    rt.synchronize().unwrap();
    drop(rt);
    report("closed_before.report", format!("{lost:?}"));

    // 2. The reader takes ~20 KB, then closes, while 8 threads print ~190 KB through a
    //    4 KiB pipe.
    let (r, w) = pipe();
    // SAFETY: fcntl on our own fd.
    let pipe_size = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    assert!(pipe_size > 0);
    let reader = std::thread::spawn(move || {
        let mut file = std::fs::File::from(r);
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        while out.len() < 20_000 {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => panic!("read: {e}"),
            }
        }
        out // the read end closes here, with the writers still printing
    });
    let (threads, lines) = (8u64, 2_000u64);
    let rt = builder().stdout_fd(w.as_raw_fd()).log_bytes(4096).build().unwrap();
    rt.launch(1, threads as u32, stress_kernel(lines)).unwrap();
    let got = reader.join().unwrap();
    let lost = print_error(rt.synchronize(), w.as_raw_fd(), libc::EPIPE);
    drop(rt);
    let cut = check_cut(&got, threads, lines);
    assert_eq!(cut.holes, 0);
    // What was neither read nor reported lost sat in the pipe's buffer when the reader
    // closed it: the writes had succeeded, and the kernel discarded those bytes (as it
    // does for any writer). No more than the pipe holds.
    let total = total_bytes(threads, lines);
    let unaccounted = total
        .checked_sub(cut.bytes + lost.lost_bytes)
        .unwrap_or_else(|| panic!("read {} + lost {} > printed {total}", cut.bytes, lost.lost_bytes));
    assert!(
        unaccounted <= pipe_size as u64,
        "{unaccounted} bytes neither read nor reported lost: more than the {pipe_size}-byte pipe holds"
    );
    report(
        "closed_midway",
        format!(
            "read {} bytes ({} whole lines), reported {lost:?}, {unaccounted} bytes were in the {pipe_size}-byte pipe when it closed",
            cut.bytes, cut.whole
        ),
    );
    report("checked", 1);
}
