//! A kernel whose body returns `Err` (`kernel! { pub fn k(..) -> Result<(), E> { .. } }`,
//! `?` on the way): each failing thread is reported on the runtime's stderr as a panic is,
//! naming the kernel and the error's Display, and `synchronize` returns the kernel failure.
//! On the CPU backend, and on a CUDA GPU (skipped without one; `GPUIO_LOCKSTEP=1` runs the
//! sm_60 build), where the failing thread traps and takes the process's CUDA context with it:
//! one such test per process, this file's.

#[allow(dead_code)]
mod common;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Instant;

use gpuio::{Error, Runtime};

use common::dirs::process_dir;
use common::faults::{builder, create, cuda_or_skip};
use common::{sorted_lines, watchdog};

/// The GPU suite's kernels (`sm_90` and `sm_60`, build.rs).
const TEST_NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_NVPTX;

/// A test's stdout and stderr: new files `<tag>-out.txt` and `<tag>-err.txt` in this
/// process's directory, open while this lives.
struct Outputs {
    out: File,
    err: File,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl Outputs {
    fn new(tag: &str) -> Outputs {
        let (out_path, err_path) = (
            process_dir().join(format!("{tag}-out.txt")),
            process_dir().join(format!("{tag}-err.txt")),
        );
        let (out, err) = (create(&out_path, false), create(&err_path, false));
        Outputs {
            out,
            err,
            out_path,
            err_path,
        }
    }

    /// `b` printing into these files.
    fn on(&self, b: gpuio::Builder) -> gpuio::Builder {
        b.stdout_fd(self.out.as_raw_fd()).stderr_fd(self.err.as_raw_fd())
    }

    /// What the runtime's stderr received.
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err_path).unwrap()
    }
}

/// `kernel thread T (block B, thread I) of returns_an_error returned Err: thread T is past
/// the limit L`, for the thread `t` of a one-block launch.
fn report(t: u64, limit: u32) -> String {
    format!("kernel thread {t} (block 0, thread {t}) of returns_an_error returned Err: thread {t} is past the limit {limit}")
}

#[test]
fn an_err_from_a_kernel_body_is_reported_and_fails_the_launch() {
    let _wd = watchdog("an_err_from_a_kernel_body_is_reported_and_fails_the_launch", 60);
    let files = Outputs::new("err");
    let rt = files.on(builder()).build().unwrap();
    // Threads 5 to 10 of 11 fail: more than the summary names.
    let (threads, limit) = (11u32, 5u32);
    rt.launch(1, threads, move || gpuio_test_kernels::returns_an_error(limit))
        .unwrap();
    match rt.synchronize() {
        Err(Error::Kernel(why)) => {
            assert!(why.starts_with("6 thread(s) failed: "), "{why}");
            assert!(
                why.ends_with("; and 2 more"),
                "the summary counts those it does not name: {why}"
            );
            assert!(why.contains("of returns_an_error returned Err: thread "), "{why}");
            assert!(!why.contains("panicked"), "{why}");
        }
        other => panic!("expected a kernel error, got {other:?}"),
    }
    // The runtime goes on.
    rt.launch(1, 2, || gpuio_test_kernels::returns_an_error(2)).unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let reports = files.stderr();
    for t in limit..threads {
        assert!(
            reports.contains(&format!("{}\n", report(t.into(), limit))),
            "thread {t}'s report is on the runtime's stderr: {reports:?}"
        );
    }
    assert_eq!(reports.lines().count(), (threads - limit) as usize, "{reports:?}");
    let lines = sorted_lines(&files.out_path);
    let mut expected: Vec<String> = (0..threads)
        .map(|t| format!("t={t} before"))
        .chain((0..limit).map(|t| format!("t={t} after")))
        .chain((0..2).flat_map(|t| [format!("t={t} before"), format!("t={t} after")]))
        .collect();
    expected.sort();
    assert_eq!(lines, expected);
}

/// Called as a function on the host, outside a launch: the report goes to std's stderr and
/// the thread unwinds with it.
#[test]
fn an_err_outside_a_launch_unwinds_with_its_report() {
    let caught = std::panic::catch_unwind(|| gpuio_test_kernels::returns_an_error(0)).unwrap_err();
    let failed = caught
        .downcast_ref::<gpuio::device::entry::KernelFailed>()
        .expect("a KernelFailed payload");
    assert_eq!(failed.0, report(0, 0));
    gpuio_test_kernels::returns_an_error(1);
}

/// On a CUDA GPU: the last thread of a block fails, with an error of 1,000 digits (a report
/// longer than a GPU formats in one pass); the launch fails with the CUDA error of its
/// trap, and its report is on the runtime's stderr, whole, before it. Skips without CUDA.
///
/// Run on a GPU machine: `cargo test --release --test kernel_errors -- --nocapture cuda_`.
#[test]
fn cuda_an_err_from_a_kernel_body_is_reported_and_fails_the_launch() {
    const NAME: &str = "cuda_an_err_from_a_kernel_body_is_reported_and_fails_the_launch";
    // The lockstep build's first load is the driver's JIT of the whole test module: minutes.
    let _wd = watchdog(NAME, 560);
    let files = Outputs::new("cuda");
    let Some(rt) = cuda_or_skip(NAME, files.on(Runtime::builder())) else {
        return;
    };
    let m = rt.load_matching(TEST_NVPTX).unwrap();
    let (block, limit) = (32u32, 31u32);
    m.launch("returns_a_long_error", 1, block, &[limit.into(), LONG.into()])
        .unwrap();
    let started = Instant::now();
    let fault = match rt.synchronize() {
        Err(Error::Kernel(why)) => why,
        other => panic!("expected a kernel error from a kernel that returned Err, got {other:?}"),
    };
    eprintln!(
        "synchronize ({:?}, {}): kernel failed: {fault}",
        started.elapsed(),
        m.scheduling().map_or("unknown scheduling".into(), |s| s.to_string())
    );
    drop(m);
    drop(rt);
    let reports = files.stderr();
    assert_eq!(
        reports,
        format!("{}\n", long_report(limit.into())),
        "the failing thread's report, whole, on the runtime's stderr"
    );
    eprintln!("its report ({} bytes): {}...", reports.len(), &reports[..120]);
}

/// The digits of the long error the tests ask for: a report of over 1 KB.
const LONG: u32 = 1000;

/// `kernel thread T (block 0, thread T) of returns_a_long_error returned Err: thread T:
/// 0123456789...` (`LONG` digits).
fn long_report(t: u64) -> String {
    let digits: String = (0..LONG).map(|i| char::from(b'0' + (i % 10) as u8)).collect();
    format!("kernel thread {t} (block 0, thread {t}) of returns_a_long_error returned Err: thread {t}: {digits}")
}

/// A long report (1,000 digits) comes out whole on the CPU backend, which formats it once;
/// the CUDA case above covers a GPU's two passes (measured, then written).
#[test]
fn a_long_err_is_reported_whole() {
    let _wd = watchdog("a_long_err_is_reported_whole", 60);
    let files = Outputs::new("long");
    let rt = files.on(builder()).build().unwrap();
    rt.launch(1, 4, || gpuio_test_kernels::returns_a_long_error(3, LONG))
        .unwrap();
    match rt.synchronize() {
        Err(Error::Kernel(why)) => assert!(why.contains(&long_report(3)), "{why}"),
        other => panic!("expected a kernel error, got {other:?}"),
    }
    drop(rt);
    assert_eq!(files.stderr(), format!("{}\n", long_report(3)));
}

gpuio::device::kernel! {
    /// Creates a file: the default sandbox (prints only) refuses it, and `?` returns the
    /// error.
    pub fn creates_a_file() -> Result<(), gpuio::device::io::Errno> {
        gpuio::device::fs::File::create("gpuio-kernel-errors-never-created")?;
        Ok(())
    }
}

/// An `Err` that the sandbox caused: the kernel failure says what the sandbox refused and
/// which sandbox allows it, in the same error.
#[test]
fn a_kernel_failure_says_what_the_sandbox_refused() {
    let _wd = watchdog("a_kernel_failure_says_what_the_sandbox_refused", 60);
    let err = create(&process_dir().join("refused-err.txt"), false);
    let rt = builder().stderr_fd(err.as_raw_fd()).build().unwrap();
    rt.launch(1, 1, *creates_a_file).unwrap();
    match rt.synchronize() {
        Err(Error::Kernel(why)) => {
            assert!(
                why.contains("of creates_a_file returned Err: Permission denied"),
                "{why}"
            );
            assert!(why.contains("the sandbox refused 1 device request(s)"), "{why}");
            assert!(why.contains(".sandbox(Sandbox::FileIo)"), "{why}");
        }
        other => panic!("expected a kernel error, got {other:?}"),
    }
    rt.synchronize().unwrap();
}

/// An error whose `Display` counts its calls.
struct Counted;

static DISPLAYED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        DISPLAYED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f.write_str("counted")
    }
}

gpuio_device::kernel! {
    /// Every thread returns `Err(Counted)`.
    pub fn fails_counted() -> Result<(), Counted> {
        Err(Counted)
    }
}

/// The error's `Display` runs once per failing thread on the CPU backend, as on a GPU: the
/// report printed is the text the failure carries, not a second formatting.
#[test]
fn an_errs_display_runs_once_per_failing_thread() {
    let _wd = watchdog("an_errs_display_runs_once_per_failing_thread", 60);
    let err_path = process_dir().join("counted-err.txt");
    let err = create(&err_path, false);
    let rt = builder().stderr_fd(err.as_raw_fd()).build().unwrap();
    rt.launch(1, 3, *fails_counted).unwrap();
    match rt.synchronize() {
        Err(Error::Kernel(why)) => assert!(why.contains("of fails_counted returned Err: counted"), "{why}"),
        other => panic!("expected a kernel error, got {other:?}"),
    }
    drop(rt);
    assert_eq!(DISPLAYED.load(std::sync::atomic::Ordering::Relaxed), 3);
    let reports = std::fs::read_to_string(&err_path).unwrap();
    assert_eq!(
        reports.matches("of fails_counted returned Err: counted\n").count(),
        3,
        "{reports}"
    );
}
