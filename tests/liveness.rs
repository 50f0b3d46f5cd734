//! Output makes progress without any other thread's progress (invariant 12), on the CPU
//! backend over both submission paths (see `over_submissions!` in tests/common): a line
//! whose `println!` returned reaches its fd while the kernel's threads, the printer among
//! them, go on computing or never finish; and when synchronize gives up on such a kernel,
//! its report finds every returned line written.
//!
//! The kernel threads here do not finish until the test has seen what it waits for, or
//! until a deadline far beyond any honest delay (`DEADLINE`): a miss is a failure that
//! says what was missing, never a hang.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::{global_thread_idx, println};
use gpuio::Error;

#[allow(dead_code)]
mod common;
use common::pipes::{fill, small_pipe};
use common::{temp_file, watchdog, Suite};

/// How long a test waits for a line before it calls it held back. Lines take microseconds
/// to milliseconds here; the margin is for a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(20);

use common::suite_builder as builder;

over_submissions!(
    lines_reach_a_pipe_while_the_printers_compute,
    lines_reach_a_terminal_while_the_printers_compute,
    lines_reach_a_file_while_a_thread_computes,
    lines_reach_a_file_while_every_printer_computes,
    a_hang_report_finds_every_returned_line_written,
);

/// What the kernel threads wait on after they printed: `stop`, or the deadline.
#[derive(Clone)]
struct Gate {
    stop: Arc<AtomicBool>,
    /// Prints that returned.
    returned: Arc<AtomicU64>,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            stop: Arc::new(AtomicBool::new(false)),
            returned: Arc::new(AtomicU64::new(0)),
        }
    }

    /// "Computes" until the test lets go (a sleep: on the CPU backend what matters is that
    /// the thread does nothing more with the runtime).
    fn compute(&self) {
        let start = Instant::now();
        while !self.stop.load(Ordering::Acquire) && start.elapsed() < DEADLINE + Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn release(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Lines of the form `live t=<t>` in `out`, each thread's once.
fn live_lines(out: &[u8]) -> Vec<u64> {
    let mut ts: Vec<u64> = String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| l.strip_prefix("live t=")?.parse().ok())
        .collect();
    ts.sort_unstable();
    ts
}

/// Polls `read` until it shows `want` lines or the deadline passes; returns what it saw
/// last and how long it took.
fn wait_for_lines(want: usize, mut read: impl FnMut() -> Vec<u8>) -> (Vec<u64>, Duration) {
    let start = Instant::now();
    loop {
        let seen = live_lines(&read());
        if seen.len() >= want || start.elapsed() > DEADLINE {
            return (seen, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn lines_reach_a_pipe_while_the_printers_compute(sub: Suite) {
    let _wd = watchdog("lines_reach_a_pipe_while_the_printers_compute", 120);
    // A full pipe: the first write blocks until the reader below starts, so the later
    // prints find the stream's one flight out. Before invariant 12 held, their flushes
    // left the rest to whoever reaped that flight's completion: nobody, while every
    // thread computes.
    let (r, w) = small_pipe();
    lines_reach_a_full_output_while_the_printers_compute(sub, std::fs::File::from(r), w.as_raw_fd(), "a pipe");
}

/// A pseudo-terminal: (the side a terminal emulator reads, the side programs write to).
fn pty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds into the locals; the name, termios and window size
    // arguments may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened and are owned by nothing else.
    unsafe {
        (
            std::fs::File::from(OwnedFd::from_raw_fd(master)),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

/// As the pipe above, into a terminal nobody has read yet (a pseudo-terminal whose buffer
/// is full): each line reaches the screen once it is read, while the printers compute.
fn lines_reach_a_terminal_while_the_printers_compute(sub: Suite) {
    let _wd = watchdog("lines_reach_a_terminal_while_the_printers_compute", 120);
    let (screen, tty) = pty();
    lines_reach_a_full_output_while_the_printers_compute(sub, screen, tty.as_raw_fd(), "a terminal");
}

/// Fills `w` (a pipe or a terminal) until a write would block, has 16 threads print a line
/// each into it and compute, then reads `r` and checks that every line comes out after the
/// filler (which has no newline, so a terminal passes it through as is) while they compute.
fn lines_reach_a_full_output_while_the_printers_compute(sub: Suite, mut r: std::fs::File, w: i32, what: &str) {
    let filled = fill(w);
    let threads = 16u64;
    let rt = builder(sub).stdout_fd(w).build().unwrap();
    let gate = Gate::new();
    let g = gate.clone();
    rt.launch(1, threads as u32, move || {
        println!("live t={}", global_thread_idx());
        g.returned.fetch_add(1, Ordering::AcqRel);
        g.compute();
    })
    .unwrap();
    // Let every print run into the full output first.
    let start = Instant::now();
    while gate.returned.load(Ordering::Acquire) < threads - 1 && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: fcntl only changes the file status flags of our read side.
    unsafe {
        let fl = libc::fcntl(r.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(r.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut out = Vec::new();
    let (seen, took) = wait_for_lines(threads as usize, || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = r.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        out.get(filled..).unwrap_or_default().to_vec()
    });
    let returned = gate.returned.load(Ordering::Acquire);
    gate.release();
    rt.synchronize().unwrap();
    assert_eq!(
        seen,
        (0..threads).collect::<Vec<_>>(),
        "lines held back from {what} while every printer computes ({returned} prints had \
         returned; {took:?} after the reader started); after the filler it showed {:?}",
        String::from_utf8_lossy(out.get(filled..).unwrap_or_default())
    );
    assert!(
        out[..filled].iter().all(|&c| c == b'x'),
        "{what}'s filler came out first, whole"
    );
}

/// Runs `threads` threads of which those that `prints(t)` print one line and then compute
/// until the file shows every such line (or the deadline), and those that do not compute
/// from the start.
fn lines_reach_a_file_while(sub: Suite, blocks: u32, threads: u32, prints: fn(u64) -> bool) {
    let (f, path) = temp_file("live.txt");
    let rt = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
    let gate = Gate::new();
    let g = gate.clone();
    rt.launch(blocks, threads, move || {
        let t = global_thread_idx();
        if prints(t) {
            println!("live t={t}");
            g.returned.fetch_add(1, Ordering::AcqRel);
        }
        g.compute();
    })
    .unwrap();
    let want: Vec<u64> = (0..(blocks * threads) as u64).filter(|&t| prints(t)).collect();
    let (seen, took) = wait_for_lines(want.len(), || std::fs::read(&path).unwrap());
    let returned = gate.returned.load(Ordering::Acquire);
    gate.release();
    rt.synchronize().unwrap();
    assert_eq!(
        seen, want,
        "lines held back while threads compute ({returned} prints had returned; waited {took:?})"
    );
}

fn lines_reach_a_file_while_a_thread_computes(sub: Suite) {
    let _wd = watchdog("lines_reach_a_file_while_a_thread_computes", 120);
    // Thread 0 computes from the start; the others print one line and compute too.
    lines_reach_a_file_while(sub, 2, 32, |t| t != 0);
}

fn lines_reach_a_file_while_every_printer_computes(sub: Suite) {
    let _wd = watchdog("lines_reach_a_file_while_every_printer_computes", 120);
    lines_reach_a_file_while(sub, 4, 16, |_| true);
}

fn a_hang_report_finds_every_returned_line_written(sub: Suite) {
    let _wd = watchdog("a_hang_report_finds_every_returned_line_written", 120);
    let (f, path) = temp_file("hang-live.txt");
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .hang_timeout(Some(Duration::from_millis(500)))
        .build()
        .unwrap();
    let gate = Gate::new();
    let g = gate.clone();
    let threads = 32u64;
    rt.launch(1, threads as u32, move || {
        println!("live t={}", global_thread_idx());
        g.returned.fetch_add(1, Ordering::AcqRel);
        // Thread 0 never finishes (until the test lets go): synchronize gives up on it.
        if global_thread_idx() == 0 {
            g.compute();
        }
    })
    .unwrap();
    let start = Instant::now();
    while gate.returned.load(Ordering::Acquire) < threads && start.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(1));
    }
    let err = rt.synchronize().expect_err("thread 0 still runs");
    let report = match &err {
        Error::Hang(r) => r.clone(),
        e => panic!("expected a hang, got {e}"),
    };
    let seen = live_lines(&std::fs::read(&path).unwrap());
    gate.release();
    let text = report.to_string();
    assert_eq!(seen, (0..threads).collect::<Vec<_>>(), "at the hang report: {text}");
    let s = report.streams.iter().find(|s| s.fd == f.as_raw_fd()).expect(&text);
    assert_eq!(s.written, s.reserved, "every returned line is written: {text}");
    assert!(text.contains("(every byte written)"), "{text}");
    // The thread that still runs is named.
    assert_eq!(report.running.first, [(0, 0)], "{text}");
    assert!(
        text.contains("1 kernel thread(s) still running (block 0 thread 0)"),
        "{text}"
    );
    rt.synchronize().unwrap();
}
