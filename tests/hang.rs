//! No silent hang (invariant 11), on the CPU backend against the machine's real io_uring: a
//! kernel that never finishes, and prints that never drain (a pipe nobody reads), make
//! `synchronize` return `Error::Hang` with a report of what is outstanding once nothing has
//! moved for the hang timeout; the kernels stay launched, and once they can go on a later
//! `synchronize` succeeds with every line out. Without a timeout nothing changes, except a
//! warning on stderr when nothing moves for long; a runtime dropped while its kernel hangs
//! leaks its memory instead of freeing it under the kernel (or hanging in the drop).
//!
//! Each test runs under a watchdog that aborts the binary if it hangs itself. Tests that
//! read stderr or set environment variables run in a child process of this binary
//! (`hang_child`), which is killed if it runs too long.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpuio::device::{global_thread_idx, println};
use gpuio::{Backend, Error, HangReport, Runtime, StreamPositions, Submission, Waiting};

// The watchdog, temporary files, the line checker and the stress kernel are used here.
#[allow(dead_code)]
mod common;
use common::child::{child_mode, report, ChildRun, CHILD_ENV};
use common::pipes::{fill, small_pipe};
use common::{check_lines, stress_kernel, temp_file, watchdog};

fn builder() -> gpuio::Builder {
    Runtime::builder().backend(Backend::Cpu)
}

/// Reads the pipe to its end on another thread.
fn read_all(r: OwnedFd) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        std::fs::File::from(r).read_to_end(&mut out).expect("reading the pipe");
        out
    })
}

/// [`builder`] printing into `stdout` (a pipe nobody reads, in the tests that use it) through
/// a 4 KiB log, with a hang timeout of 500 ms.
fn stuck_pipe_builder(stdout: RawFd) -> gpuio::Builder {
    builder()
        .stdout_fd(stdout)
        .log_bytes(4096)
        .hang_timeout(Some(Duration::from_millis(500)))
}

/// Waits until `done` says so, looking every millisecond.
fn wait_until(done: impl Fn() -> bool) {
    while !done() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until `n` kernel threads counted themselves done in `done`.
fn wait_for(done: &AtomicUsize, n: usize) {
    wait_until(|| done.load(Ordering::Acquire) >= n);
}

/// The report of a hang, or a failure naming what came instead.
fn hang(r: gpuio::Result<()>) -> HangReport {
    match r {
        Err(Error::Hang(report)) => {
            let text = Error::Hang(report.clone()).to_string();
            assert!(!text.contains('\n'), "one line: {text}");
            assert!(text.contains("a later synchronize waits"), "{text}");
            *report
        }
        other => panic!("expected Error::Hang, got {other:?}"),
    }
}

/// The stream of `report` that writes to `fd`, or a failure showing the report.
fn stream_of(report: &HangReport, fd: RawFd) -> &StreamPositions {
    report
        .streams
        .iter()
        .find(|s| s.fd == fd)
        .unwrap_or_else(|| panic!("no fd {fd}: {report}"))
}

// ------------------------------------------------------------------- hangs reported

#[test]
fn a_kernel_that_never_finishes_is_reported_then_waited_for() {
    let _wd = watchdog("a_kernel_that_never_finishes_is_reported_then_waited_for", 60);
    let (file, path) = temp_file("hang-spin.txt");
    let timeout = Duration::from_secs(1);
    let rt = builder()
        .stdout_fd(file.as_raw_fd())
        .hang_timeout(Some(timeout))
        .build()
        .unwrap();
    assert_eq!(rt.hang_timeout(), Some(timeout));
    let (threads, lines) = (4u32, 40u64);
    let go = Arc::new(AtomicBool::new(false));
    let halfway = Arc::new(AtomicUsize::new(0));
    let (g, h) = (go.clone(), halfway.clone());
    rt.launch(1, threads, move || {
        let t = global_thread_idx();
        for i in 0..lines / 2 {
            println!("t={t} i={i}");
        }
        h.fetch_add(1, Ordering::Release);
        wait_until(|| g.load(Ordering::Acquire));
        for i in lines / 2..lines {
            println!("t={t} i={i}");
        }
    })
    .unwrap();
    wait_for(&halfway, threads as usize);
    let start = Instant::now();
    let report = hang(rt.synchronize());
    let took = start.elapsed();
    assert!(
        took >= timeout && took < Duration::from_secs(5),
        "gave up after {took:?}"
    );
    assert_eq!(report.waiting_for, Waiting::KernelThreads, "{report}");
    assert_eq!(report.running.count, threads as usize, "{report}");
    assert!(report.stalled >= timeout, "{report}");
    let text = report.to_string();
    assert!(text.contains("4 kernel thread(s) still running"), "{text}");
    // The first half was printed and its writes completed (the spinning threads reap no
    // more, so `released` and `reaped` may lag behind).
    let fd = file.as_raw_fd();
    let s = stream_of(&report, fd);
    assert!(s.reserved > 0 && s.committed == s.reserved, "{text}");
    assert!(text.contains(&format!("fd {fd}: reserved {}", s.reserved)), "{text}");
    let t = report.tickets.expect("the CPU backend reads the tickets");
    assert!(t.taken > 0 && t.published == t.taken, "{text}");
    assert_eq!(report.ring.sq_tail, t.taken, "{text}");
    assert_eq!(
        report.ring.cq_tail, report.ring.sq_tail,
        "every write completed: {text}"
    );

    // Still launched: another synchronize waits again, and gives up again.
    hang(rt.synchronize());
    go.store(true, Ordering::Release);
    rt.synchronize().expect("the kernel finished");
    drop(rt);
    check_lines(&std::fs::read(&path).unwrap(), threads as u64, lines);
}

/// The blocks a GPU report names come from the threads that count themselves in and out
/// (what `kernel!` does on a GPU; here the kernel does it itself, as the CPU backend's
/// kernels otherwise count nothing): the report names the blocks whose counted threads
/// have not returned, with their count, modulo the counters' number past it.
#[test]
fn blocks_whose_threads_have_not_returned_are_named() {
    use gpuio::device::protocol::context::count_running;
    use gpuio::device::protocol::running::BLOCK_SLOTS;
    let _wd = watchdog("blocks_whose_threads_have_not_returned_are_named", 60);
    let rt = builder()
        .hang_timeout(Some(Duration::from_millis(500)))
        .build()
        .unwrap();
    // Blocks 3 and 3 + BLOCK_SLOTS share a counter; block 7 has its own.
    let grid = BLOCK_SLOTS as u32 + 4;
    let held = [3, 7, 3 + BLOCK_SLOTS as u64];
    let go = Arc::new(AtomicBool::new(false));
    let entered = Arc::new(AtomicUsize::new(0));
    let (g, e) = (go.clone(), entered.clone());
    rt.launch(grid, 1, move || {
        let _running = count_running();
        e.fetch_add(1, Ordering::Release);
        if held.contains(&gpuio::device::block_rank()) {
            wait_until(|| g.load(Ordering::Acquire));
        }
    })
    .unwrap();
    wait_for(&entered, grid as usize);
    let report = hang(rt.synchronize());
    let text = report.to_string();
    let blocks = report
        .running
        .blocks
        .clone()
        .unwrap_or_else(|| panic!("no blocks: {text}"));
    assert_eq!(blocks.threads, 3, "{text}");
    assert_eq!(blocks.blocks, 2, "{text}");
    assert_eq!(blocks.first, vec![(3, 2), (7, 1)], "{text}");
    assert_eq!(blocks.modulo, Some(BLOCK_SLOTS as u32), "{text}");
    assert!(
        text.contains(&format!(
            "3 thread(s) of kernel!-declared kernels have not returned, in 2 block(s): 2 in block 3, 1 in \
             block 7 (block numbers modulo {BLOCK_SLOTS}: a grid had more blocks)"
        )),
        "{text}"
    );
    go.store(true, Ordering::Release);
    rt.synchronize().expect("the kernel finished");
    // Every thread counted itself out.
    assert_eq!(rt.context().unwrap().running.busy().count(), 0);
}

#[test]
fn prints_into_a_pipe_nobody_reads_are_reported_then_drained() {
    let _wd = watchdog("prints_into_a_pipe_nobody_reads_are_reported_then_drained", 60);
    let (r, w) = small_pipe();
    let rt = stuck_pipe_builder(w.as_raw_fd()).build().unwrap();
    // About 22 KB: far more than the pipe (4 KiB) and the log (4 KiB) hold.
    let (threads, lines) = (4u64, 600u64);
    rt.launch(1, threads as u32, stress_kernel(lines)).unwrap();
    // Until more is printed than the pipe holds (nobody reads it: those bytes stay
    // outstanding), so that the report below shows them however slowly the threads got
    // going.
    let stdout = &rt.context().expect("CPU backend").streams[0];
    wait_until(|| stdout.reserved.load(Ordering::Acquire) >= 4096 + 1024);
    let report = hang(rt.synchronize());
    let text = report.to_string();
    let fd = w.as_raw_fd();
    let s = stream_of(&report, fd);
    assert!(s.released < s.reserved, "bytes are outstanding: {text}");
    assert!(
        text.contains(&format!("fd {fd}: reserved {}, committed {}", s.reserved, s.committed)),
        "{text}"
    );
    assert!(text.contains("whole line(s), not confirmed written"), "{text}");

    // A reader comes: everything goes out.
    let reader = read_all(r);
    rt.synchronize().expect("the pipe drained");
    drop(rt);
    drop(w);
    check_lines(&reader.join().unwrap(), threads, lines);
}

/// A print whose write cannot complete (a full pipe nobody reads): on the CPU backend its
/// thread goes on (a flush there never waits for a write, invariant 12), and synchronize
/// reports the drain stuck with the stream's bytes not confirmed written, each line
/// counted; once a reader comes, every line goes out and a kernel's failure meanwhile is
/// reported by the synchronize after.
#[test]
fn a_print_stuck_behind_a_full_pipe_is_reported_with_its_lines() {
    let _wd = watchdog("a_print_stuck_behind_a_full_pipe_is_reported_with_its_lines", 60);
    let (r, w) = small_pipe();
    let filled = fill(w.as_raw_fd());
    // The deliberate panic's report goes to a file, not the test's stderr.
    let (reports, _) = temp_file("stuck-stderr.txt");
    let rt = stuck_pipe_builder(w.as_raw_fd())
        .stderr_fd(reports.as_raw_fd())
        .build()
        .unwrap();
    // A few lines: they fit the log; their write cannot complete. And a kernel that fails,
    // whose failure the synchronize that gives up cannot report yet.
    let (threads, lines) = (2u64, 5u64);
    rt.launch(1, threads as u32, stress_kernel(lines)).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    rt.launch(1, 1, move || {
        d.fetch_add(1, Ordering::Release);
        panic!("failed before the hang")
    })
    .unwrap();
    wait_for(&done, 1);
    // One thread's first line goes out in a write that the full pipe holds; every other
    // line waits in the log behind it, and the threads finish.
    let stdout = &rt.context().expect("CPU backend").streams[0];
    let line = "t=0 i=0\n".len() as u64;
    wait_until(|| stdout.committed.load(Ordering::Acquire) >= (lines + 1) * line);
    let report = hang(rt.synchronize());
    let text = report.to_string();
    assert_eq!(report.waiting_for, Waiting::Drain, "{text}");
    let fd = w.as_raw_fd();
    let s = stream_of(&report, fd);
    assert!(s.reserved > 0 && s.committed == s.reserved && s.written == 0, "{text}");
    // Every line in the log is counted (each of this kernel's lines is `line` bytes long).
    assert_eq!(s.unconfirmed_lines, s.committed / line, "{text}");
    assert!(
        text.contains(&format!("{} whole line(s), not confirmed", s.unconfirmed_lines)),
        "{text}"
    );
    assert!(text.contains("whole line(s), not confirmed written"), "{text}");
    let t = report.tickets.expect("the CPU backend reads the tickets");
    assert!(t.taken > t.reaped, "a write is in flight: {text}");

    let reader = read_all(r);
    match rt.synchronize() {
        Err(Error::Kernel(m)) => assert!(
            m.contains("1 thread(s) failed") && m.contains("failed before the hang"),
            "{m}"
        ),
        other => panic!("expected the kernel's failure once the pipe drained, got {other:?}"),
    }
    rt.synchronize().expect("reported once");
    drop(rt);
    drop(w);
    let out = reader.join().unwrap();
    assert!(out[..filled].iter().all(|&b| b == b'x'));
    check_lines(&out[filled..], threads, lines);
}

/// A lone thread's request that the kernel cannot finish yet (a read of a pipe nobody
/// writes) holds the solo ring: synchronize reports the solo ring held by a thread, and
/// once a writer writes, the read completes and the kernel finishes.
#[test]
fn a_request_stuck_on_the_solo_ring_is_reported_holding_it() {
    let _wd = watchdog("a_request_stuck_on_the_solo_ring_is_reported_holding_it", 60);
    let (r, w) = small_pipe();
    // io_uring: the host-thread fallback's `pread` of a pipe fails (ESPIPE) instead.
    let rt = builder()
        .submission(Submission::IoUring)
        .sandbox(gpuio::Sandbox::FileIo)
        .solo(true)
        .hang_timeout(Some(Duration::from_millis(500)))
        .build()
        .unwrap();
    let got = Arc::new(std::sync::Mutex::new(None));
    let (g, fd) = (got.clone(), r.as_raw_fd());
    rt.launch(1, 1, move || {
        // io_uring reads a pipe at its current position whatever the offset; this waits
        // in the kernel until something is written.
        let mut buf = [0u8; 16];
        let n = gpuio::device::io::pread(fd, &mut buf, 0);
        *g.lock().unwrap() = Some(n.map(|n| buf[..n].to_vec()));
    })
    .unwrap();
    let report = hang(rt.synchronize());
    let text = report.to_string();
    assert_eq!(report.waiting_for, Waiting::KernelThreads, "{text}");
    let solo = report.solo.as_ref().expect("the runtime has a solo ring");
    assert_eq!(solo.held, Some(true), "{text}");
    assert!(
        text.contains("solo ring") && text.contains("(held by a thread)"),
        "{text}"
    );
    assert!(got.lock().unwrap().is_none());

    // A writer writes: the read completes, the thread lets go of the ring.
    // SAFETY: writes 5 bytes of a valid buffer to our pipe.
    assert_eq!(unsafe { libc::write(w.as_raw_fd(), b"hello".as_ptr().cast(), 5) }, 5);
    rt.synchronize().expect("the read completed");
    assert_eq!(*got.lock().unwrap(), Some(Ok(b"hello".to_vec())));
    let stats = rt.stats();
    assert_eq!((stats.solo_requests, stats.sqes), (1, 0), "{stats:?}");
}

// ------------------------------------------------------------------- nothing changes

#[test]
fn runs_that_keep_moving_never_time_out() {
    let _wd = watchdog("runs_that_keep_moving_never_time_out", 60);
    let (file, path) = temp_file("hang-moving.txt");
    let rt = builder()
        .stdout_fd(file.as_raw_fd())
        .log_bytes(1 << 12)
        .hang_timeout(Some(Duration::from_millis(600)))
        .build()
        .unwrap();
    // A line every 60 ms for 1.5 s: 2.5 times the timeout in all, never more than a tenth
    // of it still (a margin for a loaded CI machine, where a sleeping thread may wake late).
    rt.launch(1, 1, || {
        for i in 0..25 {
            println!("t=0 i={i}");
            std::thread::sleep(Duration::from_millis(60));
        }
    })
    .unwrap();
    rt.synchronize().expect("progress resets the timeout");
    // A stress run through a small log, under the same timeout.
    let (threads, lines) = (16u64, 500u64);
    rt.launch(2, 8, stress_kernel(lines)).unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let out = std::fs::read(&path).unwrap();
    let first: usize = (0..25).map(|i| format!("t=0 i={i}\n").len()).sum();
    check_lines(&out[..first], 1, 25);
    check_lines(&out[first..], threads, lines);
}

#[test]
fn a_zero_timeout_is_refused() {
    match builder().hang_timeout(Some(Duration::ZERO)).build() {
        Err(Error::Config(m)) => assert!(m.contains("hang_timeout"), "{m}"),
        other => panic!("expected a configuration error, got {:?}", other.map(|_| ())),
    }
}

// ------------------------------------------------------------------- child processes

/// Runs `hang_child` in a new process of this test binary on `mode` and the variables
/// `env` (`None`: removed), killing it after 30 s; fails unless it exits 0.
fn run_child(mode: &str, env: &[(&str, Option<&str>)]) -> ChildRun {
    let mut vars = vec![("GPUIO_HANG_TIMEOUT", None), ("GPUIO_QUIET", None)];
    vars.extend_from_slice(env);
    let run = common::child::run_child("hang_child", mode, &vars, Duration::from_secs(30));
    run.assert_ok(&format!("child `{mode}`"));
    run
}

/// The body of a child process: runs what `GPUIO_TEST_CHILD` names. Without it (a plain
/// `cargo test -- --ignored`), does nothing.
#[test]
#[ignore = "runs as a child process of the hang tests (GPUIO_TEST_CHILD), not by itself"]
fn hang_child() {
    let Some(mode) = child_mode() else {
        return;
    };
    let _wd = watchdog("hang_child", 25);
    match mode.as_str() {
        "warn" => child_warn(),
        "env" => child_env(),
        "drop-spin" => child_drop_spin(),
        "drop-full-pipe" => child_drop_full_pipe(),
        other => panic!("unknown {CHILD_ENV} {other}"),
    }
}

/// Without a timeout: a kernel that sits still for 0.9 s, with warnings due after 0.2 s
/// and then every 0.3 s (instead of 30 s and 5 minutes).
fn child_warn() {
    let rt = builder()
        .hang_warnings(Duration::from_millis(200), Duration::from_millis(300))
        .build()
        .unwrap();
    assert_eq!(rt.hang_timeout(), None);
    rt.launch(1, 1, || std::thread::sleep(Duration::from_millis(900)))
        .unwrap();
    let start = Instant::now();
    rt.synchronize().expect("no timeout: synchronize waits it out");
    report("waited_ms", start.elapsed().as_millis());
    report("synchronized", "ok");
}

#[test]
fn without_a_timeout_a_stall_is_waited_out_and_said_on_stderr() {
    let _wd = watchdog("without_a_timeout_a_stall_is_waited_out_and_said_on_stderr", 60);
    let run = run_child("warn", &[]);
    assert_eq!(run.report.get("synchronized").map(String::as_str), Some("ok"));
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("gpuio: synchronize: nothing has moved for"))
        .collect();
    // Due at 0.2, 0.5 and 0.8 s, and every 0.3 s after, while the kernel sleeps (longer
    // than 0.9 s on a loaded machine): never more than the wait allows.
    let waited: u64 = run
        .report
        .get("waited_ms")
        .and_then(|v| v.parse().ok())
        .expect("waited_ms");
    let most = 1 + waited.saturating_sub(200) / 300;
    assert!(
        (2..=most as usize).contains(&warnings.len()),
        "expected 2 to {most} warnings in {waited} ms:\n{}",
        run.stderr
    );
    for w in &warnings {
        assert!(w.contains("1 kernel thread(s) still running"), "{w}");
        assert!(w.contains("GPUIO_HANG_TIMEOUT"), "{w}");
    }
    // GPUIO_QUIET silences the warnings, and changes nothing else.
    let quiet = run_child("warn", &[("GPUIO_QUIET", Some("1"))]);
    assert_eq!(quiet.report.get("synchronized").map(String::as_str), Some("ok"));
    assert!(!quiet.stderr.contains("nothing has moved"), "{}", quiet.stderr);
}

/// The timeout each way of setting it gives, under the environment the parent set.
fn child_env() {
    let show = |b: gpuio::Builder| match b.build() {
        Ok(rt) => format!("{:?}", rt.hang_timeout()),
        Err(e) => format!("error: {e}"),
    };
    report("default", show(builder()));
    report("builder_none", show(builder().hang_timeout(None)));
    report("builder_2s", show(builder().hang_timeout(Some(Duration::from_secs(2)))));
}

#[test]
fn the_builder_overrides_gpuio_hang_timeout_which_overrides_the_default() {
    let _wd = watchdog(
        "the_builder_overrides_gpuio_hang_timeout_which_overrides_the_default",
        60,
    );
    let get = |run: &ChildRun, k: &str| run.report.get(k).cloned().unwrap_or_default();
    let run = run_child("env", &[("GPUIO_HANG_TIMEOUT", Some("0.25"))]);
    assert_eq!(get(&run, "default"), "Some(250ms)");
    assert_eq!(get(&run, "builder_none"), "None");
    assert_eq!(get(&run, "builder_2s"), "Some(2s)");
    let run = run_child("env", &[]);
    assert_eq!(get(&run, "default"), "None");
    assert_eq!(get(&run, "builder_2s"), "Some(2s)");
    let run = run_child("env", &[("GPUIO_HANG_TIMEOUT", Some("off"))]);
    assert_eq!(get(&run, "default"), "None");
    // A bad value is an error that names the variable, unless the builder decides.
    let run = run_child("env", &[("GPUIO_HANG_TIMEOUT", Some("soon"))]);
    let default = get(&run, "default");
    assert!(
        default.starts_with("error: invalid configuration: GPUIO_HANG_TIMEOUT=\"soon\""),
        "{default}"
    );
    assert_eq!(get(&run, "builder_2s"), "Some(2s)");
}

/// The CUDA JIT's settings are checked when a runtime is built, on the CPU backend too: a
/// typo there is refused while a program is developed without a GPU, not first on one.
#[test]
fn the_jit_settings_are_checked_when_a_runtime_is_built_on_every_backend() {
    let _wd = watchdog(
        "the_jit_settings_are_checked_when_a_runtime_is_built_on_every_backend",
        60,
    );
    for (name, value, expects) in [
        ("GPUIO_BLOCK_THREADS", "2000", "1 to 1024"),
        ("GPUIO_PRINT_REGISTERS", "8", "16 to 255, or off"),
        ("GPUIO_MAX_REGISTERS", "abc", "16 to 255"),
    ] {
        let mut env = vec![
            ("GPUIO_BLOCK_THREADS", None),
            ("GPUIO_PRINT_REGISTERS", None),
            ("GPUIO_MAX_REGISTERS", None),
        ];
        env.retain(|(n, _)| *n != name);
        env.push((name, Some(value)));
        let run = run_child("env", &env);
        let default = run.report.get("default").cloned().unwrap_or_default();
        assert!(
            default.starts_with(&format!("error: invalid configuration: {name}=\"{value}\""))
                && default.contains(expects),
            "{name}={value}: {default}"
        );
    }
    let run = run_child("env", &[("GPUIO_BLOCK_THREADS", Some("256"))]);
    assert_eq!(run.report.get("default").map(String::as_str), Some("None"));
}

/// Drops a runtime whose kernel never finishes.
fn child_drop_spin() {
    let rt = builder()
        .hang_timeout(Some(Duration::from_millis(300)))
        .build()
        .unwrap();
    rt.launch(1, 2, || loop {
        std::thread::sleep(Duration::from_millis(10));
    })
    .unwrap();
    let start = Instant::now();
    drop(rt);
    report("drop_ms", start.elapsed().as_millis());
}

/// Drops a runtime whose print is stuck behind a full pipe, on the host-thread fallback,
/// whose thread is blocked in write(2): freeing the ring would join it, forever.
fn child_drop_full_pipe() {
    let (_r, w) = small_pipe();
    fill(w.as_raw_fd());
    let rt = builder()
        .submission(Submission::HostThread)
        .stdout_fd(w.as_raw_fd())
        .hang_timeout(Some(Duration::from_millis(300)))
        .build()
        .unwrap();
    rt.launch(1, 1, stress_kernel(3)).unwrap();
    hang(rt.synchronize());
    let start = Instant::now();
    drop(rt);
    report("drop_ms", start.elapsed().as_millis());
}

#[test]
fn dropping_a_runtime_whose_kernel_hangs_leaks_instead_of_hanging_or_freeing() {
    let _wd = watchdog(
        "dropping_a_runtime_whose_kernel_hangs_leaks_instead_of_hanging_or_freeing",
        90,
    );
    for (mode, waiting) in [
        ("drop-spin", "kernel thread(s) still running"),
        ("drop-full-pipe", "every kernel thread has finished"),
    ] {
        let run = run_child(mode, &[]);
        let ms: u64 = run
            .report
            .get("drop_ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                panic!("{mode}: no drop time\n{}", run.stderr);
            });
        assert!((300..5000).contains(&ms), "{mode}: the drop took {ms} ms");
        let said: Vec<&str> = run.stderr.lines().filter(|l| l.contains("leaked")).collect();
        assert_eq!(said.len(), 1, "{mode}: said once:\n{}", run.stderr);
        assert!(
            said[0].starts_with("gpuio: at runtime drop: synchronize gave up"),
            "{}",
            said[0]
        );
        assert!(said[0].contains(waiting), "{mode}: {}", said[0]);
    }
}
