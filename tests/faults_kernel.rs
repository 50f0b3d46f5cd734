//! Faults of the kernel itself: a kernel that panics mid-print, a Display that panics after
//! its line was reserved, an index past an `Out`'s end (CPU backend, real io_uring), the
//! trap kernel's GPU build, and on a CUDA GPU a kernel that traps mid-print (skipped
//! without one).
//!
//! Each test checks that the fault is reported, that nothing is lost beyond what is
//! reported, and that nothing hangs: a watchdog aborts a test that runs too long.

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use gpuio::device::println;
use gpuio::{Error, Runtime, Sandbox};

use common::dirs::process_dir;
use common::faults::{builder, create, cuda_or_skip};
use common::{skip, watchdog};

/// The example kernels' PTX, built by build.rs (empty with `GPUIO_SKIP_GPU_BUILD=1`).
const PTX: &str = gpuio_kernels_gpu::PTX;

/// The GPU suite's kernels (`sm_90` and `sm_60`, build.rs).
const TEST_NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_NVPTX;

// --------------------------------------------------------------- a kernel that panics

#[test]
fn a_kernel_that_panics_mid_print_is_reported_and_the_runtime_goes_on() {
    let _wd = watchdog("a_kernel_that_panics_mid_print_is_reported_and_the_runtime_goes_on", 60);
    let path = process_dir().join("panic.txt");
    let f = create(&path, false);
    // The panic reports go to the runtime's stderr: a file here, checked below.
    let err_path = process_dir().join("panic-stderr.txt");
    let e = create(&err_path, false);
    let rt = builder()
        .stdout_fd(f.as_raw_fd())
        .stderr_fd(e.as_raw_fd())
        .build()
        .unwrap();
    // Thread 2 gives up after 10 lines; the others print 20.
    rt.launch(1, 4, || {
        let t = gpuio::device::global_thread_idx();
        for i in 0..20 {
            if t == 2 && i == 10 {
                panic!("thread {t} gives up at line {i}");
            }
            println!("t={t} i={i}");
        }
    })
    .unwrap();
    match rt.synchronize() {
        Err(Error::Kernel(why)) => {
            assert!(why.contains("1 thread(s) failed"), "{why}");
            assert!(why.contains("thread 2 panicked: thread 2 gives up at line 10"), "{why}");
        }
        other => panic!("expected a kernel error, got {other:?}"),
    }
    // The example kernel that traps on a GPU panics here, after 5 lines per thread.
    rt.launch(1, 4, || gpuio_kernels::trap_after_print(5)).unwrap();
    match rt.synchronize() {
        Err(Error::Kernel(why)) => {
            assert!(why.contains("4 thread(s) failed"), "{why}");
            assert!(why.contains("trap_after_print: thread"), "{why}");
        }
        other => panic!("expected a kernel error, got {other:?}"),
    }
    // The runtime goes on: a new launch prints.
    rt.launch(1, 2, || println!("after t={}", gpuio::device::global_thread_idx()))
        .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let reports = std::fs::read_to_string(&err_path).unwrap();
    assert!(
        reports.contains("kernel thread 2 (block 0, thread 2) panicked at tests/faults_kernel.rs:")
            && reports.contains(": thread 2 gives up at line 10\n"),
        "the panic is reported on the runtime's stderr: {reports:?}"
    );
    assert_eq!(
        reports.matches("trap_after_print: thread").count(),
        4,
        "each trapping thread is reported: {reports:?}"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let mut per_thread = BTreeMap::<String, Vec<u64>>::new();
    let mut after = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("after ") {
            after.push(rest.to_string());
            continue;
        }
        let (t, i) = line.strip_prefix("t=").and_then(|r| r.split_once(" i=")).expect(line);
        per_thread
            .entry(t.to_string())
            .or_default()
            .push(i.parse().expect(line));
    }
    // Launch 1: threads 0, 1, 3 printed 20 lines, thread 2 ten; launch 2: 5 each.
    for (t, is) in &per_thread {
        let first: Vec<u64> = if t == "2" { (0..10).collect() } else { (0..20).collect() };
        let expected: Vec<u64> = first.into_iter().chain(0..5).collect();
        assert_eq!(is, &expected, "thread {t}'s lines");
    }
    assert_eq!(per_thread.len(), 4);
    after.sort();
    assert_eq!(after, ["t=0", "t=1"]);
}

/// An index past the end of an `Out` panics at the kernel's line, not inside gpuio
/// (`#[track_caller]` on `Out::write`, as on `Out::read`), and the message says both
/// numbers.
#[test]
fn an_out_index_past_the_end_is_reported_at_the_kernels_line() {
    let _wd = watchdog("an_out_index_past_the_end_is_reported_at_the_kernels_line", 60);
    let err_path = process_dir().join("past-the-end-stderr.txt");
    let e = create(&err_path, false);
    let rt = builder().stderr_fd(e.as_raw_fd()).build().unwrap();
    // The CPU backend runs the host functions: no code object to give.
    let kernels = rt.kernels(&[]).unwrap();
    let mut out = rt.output::<u64>(4).unwrap();
    kernels
        .launch(
            gpuio_test_kernels::writes_past_the_end,
            gpuio::LaunchConfig::linear(1, 2),
            (&mut out,),
        )
        .unwrap();
    let why = match rt.synchronize() {
        Err(Error::Kernel(why)) => why,
        other => panic!("expected a kernel error, got {other:?}"),
    };
    assert!(why.contains("Out::write: index 4 past its 4 elements"), "{why}");
    assert_eq!(out.read().unwrap(), [0; 4], "nothing written");
    drop((out, kernels));
    drop(rt);
    let reports = std::fs::read_to_string(&err_path).unwrap();
    let line = source_line("kernels-test/src/suite.rs", "unsafe { out.write(out.len(), 1) }");
    assert!(
        reports.contains(&format!(
            "kernel thread 0 (block 0, thread 0) panicked at kernels-test/src/suite.rs:{line}:"
        )),
        "the report names the kernel's line ({line}), not gpuio's: {reports:?}"
    );
}

/// The 1-based number of the line of `file` (from the workspace root) that contains `text`.
fn source_line(file: &str, text: &str) -> usize {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let source = std::fs::read_to_string(&path).unwrap();
    1 + source.lines().position(|l| l.contains(text)).expect(text)
}

/// A Display that panics only when formatted for the third time: in println!'s long-line
/// path, the first two passes (the stack buffer, then measuring) succeed, the space is
/// reserved, and the third pass, writing in place, panics.
struct PanicsOnSecondPass(AtomicU32);

impl std::fmt::Display for PanicsOnSecondPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pass = self.0.fetch_add(1, Ordering::SeqCst);
        f.write_str(&"x".repeat(150))?;
        // The first pass measures (nothing reserved); the second formats in place.
        if pass == 1 {
            panic!("Display panicked after reserving its line");
        }
        f.write_str(&"y".repeat(150))
    }
}

/// Regression: a Display that panicked after its line's space was reserved left the range
/// uncommitted, and synchronize waited for it forever (this test hung until the watchdog
/// aborted it). Now the range is padded and committed while the thread unwinds.
/// A thread that returns or panics before its block's `sync_threads` leaves the others
/// waiting for nobody (CPU backend): they pass the barrier, the kernel ends, and the panic
/// is reported.
#[test]
fn a_thread_that_leaves_before_its_blocks_barrier_hangs_nothing() {
    let _wd = watchdog("a_thread_that_leaves_before_its_blocks_barrier_hangs_nothing", 60);
    // The panic reports go to the runtime's stderr: a file here, checked below.
    let err_path = process_dir().join("barrier-stderr.txt");
    let e = create(&err_path, false);
    let rt = builder().stderr_fd(e.as_raw_fd()).build().unwrap();
    let passed = std::sync::Arc::new(AtomicU32::new(0));
    for panics in [false, true] {
        passed.store(0, Ordering::Relaxed);
        let p = passed.clone();
        rt.launch(2, 8, move || {
            if gpuio::device::thread_idx() == 0 {
                if panics {
                    panic!("thread 0 leaves before the barrier");
                }
                return;
            }
            for _ in 0..3 {
                gpuio::device::sync_threads();
            }
            p.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        match (rt.synchronize(), panics) {
            (Ok(()), false) => {}
            (Err(Error::Kernel(why)), true) => assert!(why.contains("leaves before the barrier"), "{why}"),
            (other, _) => panic!("panics {panics}: {other:?}"),
        }
        assert_eq!(passed.load(Ordering::Relaxed), 14, "panics {panics}");
    }
    drop(rt);
    let reports = std::fs::read_to_string(&err_path).unwrap();
    for (t, b) in [(0, 0), (8, 1)] {
        assert!(
            reports.contains(&format!(
                "kernel thread {t} (block {b}, thread 0) panicked at tests/faults_kernel.rs:"
            )),
            "block {b}'s panic is reported: {reports:?}"
        );
    }
}

#[test]
fn a_display_that_panics_after_its_line_was_reserved_hangs_nothing() {
    let _wd = watchdog("a_display_that_panics_after_its_line_was_reserved_hangs_nothing", 60);
    let path = process_dir().join("display-panic.txt");
    let f = create(&path, false);
    let rt = builder().stdout_fd(f.as_raw_fd()).build().unwrap();
    rt.launch(1, 1, || {
        println!("before");
        println!("{}", PanicsOnSecondPass(AtomicU32::new(0)));
        println!("not reached");
    })
    .unwrap();
    match rt.synchronize() {
        Err(Error::Kernel(why)) => assert!(why.contains("Display panicked after reserving its line"), "{why}"),
        other => panic!("expected a kernel error, got {other:?}"),
    }
    rt.launch(1, 1, || println!("after")).unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text:?}");
    assert_eq!(lines[0], "before");
    // The cut line: what was formatted before the panic, padded to the length it measured.
    assert_eq!(lines[1], format!("{}{}", "x".repeat(150), " ".repeat(150)));
    assert_eq!(lines[2], "after");
}

// ------------------------------------------------------------------- CUDA: a trap

/// The trap kernel is in the GPU builds and traps after reporting: its panic path (core's
/// `panic_fmt`, then gpuio's panic handler) calls `report_panic` and reaches `trap;`
/// (checked without a GPU; skipped when the GPU builds were skipped).
#[test]
fn the_trap_kernel_is_built_for_the_gpu() {
    if PTX.is_empty() {
        skip(
            "the_trap_kernel_is_built_for_the_gpu",
            "no GPU code was built on this machine (GPUIO_GPU_TARGETS=all builds every target)",
        );
        return;
    }
    // A function's body: from its header to the next `// -- End function`.
    let body = |header: &str| {
        let at = PTX.find(header).unwrap_or_else(|| panic!("the PTX has no {header}"));
        let rest = &PTX[at..];
        &rest[..rest.find("// -- End function").unwrap_or(rest.len())]
    };
    let calls = |text: &str| -> Vec<String> {
        text.split("call.uni ")
            .skip(1)
            .filter_map(|c| c.split([',', ' ', '(', ';', '\n', '\t']).find(|w| !w.is_empty()))
            .map(str::to_string)
            .collect()
    };
    // The panic path: the kernel calls panic_fmt, which calls the panic handler (gpuio's,
    // `gpuio_device::panic_handler!`), which reports the panic and then traps. Somewhere
    // on that path, within a few calls, there is a `trap`, after the report.
    let kernel = body(".entry trap_after_print(");
    let mut path = vec![".entry trap_after_print".to_string()];
    let mut text = kernel;
    for _ in 0..4 {
        if text.contains("trap;") {
            let reported = path.iter().any(|f| f.contains("report_panic"))
                || calls(text).iter().any(|c| c.contains("report_panic"));
            assert!(reported, "the trap on {path:?} comes without gpuio's panic report");
            return;
        }
        let Some(next) = calls(text)
            .into_iter()
            .find(|n| n.contains("panic_fmt") || n.contains("rust_begin_unwind") || n.contains("gpuio_panic"))
        else {
            break;
        };
        text = body(&format!(".func {next}("));
        path.push(next);
    }
    panic!("no trap on the panic path of trap_after_print: {path:?}");
}

/// On a CUDA GPU: a kernel whose thread 0 traps once every other thread's prints have
/// returned. Synchronize reports the CUDA error; the context is lost after a trap, so the
/// runtime then refuses clearly; and every line whose print returned before the trap is in
/// the file, whole (invariant 12: the trapping thread's panic report waits, boundedly, for
/// what every stream holds). `GPUIO_LOCKSTEP=1` runs the sm_60 build. One trap per process:
/// the trap takes the process's CUDA context with it. Skips without CUDA.
///
/// Run on a GPU machine: `cargo test --release --test faults_kernel -- --nocapture cuda_`.
#[test]
fn cuda_a_kernel_that_traps_is_reported_the_runtime_refuses_and_earlier_lines_are_out() {
    const NAME: &str = "cuda_a_kernel_that_traps_is_reported_the_runtime_refuses_and_earlier_lines_are_out";
    let _wd = watchdog(NAME, 300);
    let path = process_dir().join("trap.txt");
    let f = create(&path, false);
    let builder = Runtime::builder().sandbox(Sandbox::FileIo).stdout_fd(f.as_raw_fd());
    let Some(rt) = cuda_or_skip(NAME, builder) else {
        return;
    };
    let m = rt.load_matching(TEST_NVPTX).unwrap();
    let (grid, block, lines) = (4u32, 64u32, 3u32);
    let threads = (grid * block) as usize;
    let mut words = rt.host_buffer(4 * threads).unwrap();
    let marks = words.as_mut_slice().as_mut_ptr() as *const u32;
    let args = [lines.into(), words.device_ptr().into(), 10_000_000_000u64.into()];
    m.launch("trap_after_others_print", grid, block, &args).unwrap();
    let started = Instant::now();
    let fault = match rt.synchronize() {
        Err(Error::Kernel(why)) => why,
        other => panic!("expected a kernel error from a trapping kernel, got {other:?}"),
    };
    eprintln!(
        "synchronize after the trap ({:?}, {}): kernel failed: {fault}",
        started.elapsed(),
        m.scheduling().map_or("unknown scheduling".into(), |s| s.to_string())
    );
    // SAFETY: a u32 per thread of the host buffer, alive until its drop below; the kernel
    // is over.
    let returned: Vec<u32> = (0..threads)
        .map(|t| unsafe { std::ptr::read_volatile(marks.add(t)) })
        .collect();
    // The context is lost: everything after refuses, naming the first fault.
    for (what, r) in [
        ("launch", m.launch("trap_after_others_print", 1, 32, &args)),
        ("synchronize", rt.synchronize()),
        ("load_module", rt.load_matching(TEST_NVPTX).map(drop)),
    ] {
        match r {
            Err(Error::Kernel(why)) => {
                assert!(why.contains("unusable") && why.contains(&fault), "{what}: {why}");
                eprintln!("{what} after the trap: {why}");
            }
            other => panic!("{what} after a trap: expected a clear refusal, got {other:?}"),
        }
    }
    drop(words);
    drop(m);
    drop(rt);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut seen = vec![0u32; threads];
    for line in text.lines() {
        let (t, i) = line.strip_prefix("t=").and_then(|r| r.split_once(" i=")).expect(line);
        let (t, i): (usize, u32) = (t.parse().expect(line), i.parse().expect(line));
        assert!(
            t < threads && i < lines && i == seen[t],
            "foreign or out-of-order line {line:?}"
        );
        seen[t] += 1;
    }
    let held: Vec<(usize, u32, u32)> = (0..threads)
        .filter(|&t| seen[t] < returned[t])
        .map(|t| (t, returned[t], seen[t]))
        .collect();
    assert!(
        held.is_empty(),
        "lines whose print returned before the trap are missing (thread, returned, in the file): {:?}",
        &held[..held.len().min(8)]
    );
    let printed: u32 = returned.iter().sum();
    eprintln!(
        "{printed} prints returned before the trap ({} expected); all their lines are out, whole",
        (threads - 32) as u32 * lines
    );
}
