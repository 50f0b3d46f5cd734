//! Faults, on the CPU backend against the machine's real io_uring (issue 6): a full disk
//! (ENOSPC on a small tmpfs, EFBIG from RLIMIT_FSIZE), a reader that closes its pipe
//! (EPIPE, with SIGPIPE at its default action), a kernel that panics mid-print, dropping
//! the runtime with writes in flight, SQPOLL asleep and then a burst, and 10,000 rings
//! created and destroyed. On a CUDA GPU, also a kernel that traps mid-print (skipped
//! without one).
//!
//! Each test checks that the fault is reported, that nothing is lost beyond what is
//! reported, and that nothing hangs: a watchdog aborts a test that runs too long. Faults
//! that change process-wide state (a mount namespace, an rlimit, a signal disposition) or
//! that count the process's fds and threads run in a child process of this test binary
//! (`fault_child`), which is killed if it runs too long. RELIABILITY.md records what each
//! one found.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gpuio::device::println;
use gpuio::{Backend, Error, OutputErrors, Runtime};

/// The example kernels' PTX, built by build.rs (empty with `GPUIO_SKIP_GPU_BUILD=1`).
const PTX: &str = gpuio_kernels_gpu::PTX;

// ------------------------------------------------------------------------------ helpers

// The watchdog and the stress kernel are used here.
#[allow(dead_code)]
mod common;
use common::{skip, stress_kernel, watchdog};

fn builder() -> gpuio::Builder {
    Runtime::builder().backend(Backend::Cpu)
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuio-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn create(path: &Path, append: bool) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(!append) // (a new file either way: std refuses O_APPEND with O_TRUNC)
        .append(append)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()))
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds that we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds from pipe2, owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Bytes that `stress_kernel(lines)` prints from `threads` threads.
fn total_bytes(threads: u64, lines: u64) -> u64 {
    (0..threads)
        .flat_map(|t| (0..lines).map(move |i| format!("t={t} i={i}\n").len() as u64))
        .sum()
}

/// What a cut output of `stress_kernel` holds.
#[derive(Debug, Default)]
struct Cut {
    /// Bytes other than NUL (NULs: holes a failed positional write left before a later one).
    bytes: u64,
    /// Newlines.
    newlines: u64,
    /// Whole lines, each checked.
    whole: u64,
    /// Pieces of lines at a hole or at the end, where a write stopped.
    pieces: u64,
    /// NUL bytes.
    holes: u64,
}

/// Checks an output that may have been cut by failed writes: every line that is not next
/// to a cut is whole and well-formed, appears once, and keeps its thread's order. Pieces
/// of lines are allowed only where the output stops or a hole begins or ends.
fn check_cut(out: &[u8], threads: u64, lines: u64) -> Cut {
    let mut cut = Cut {
        holes: out.iter().filter(|&&b| b == 0).count() as u64,
        ..Cut::default()
    };
    let mut next = vec![0u64; threads as usize];
    for segment in out.split(|&b| b == 0).filter(|s| !s.is_empty()) {
        cut.bytes += segment.len() as u64;
        // A segment starts at the start of the output or right after a hole.
        let starts_after_hole = segment.as_ptr() != out.as_ptr();
        let pieces: Vec<&[u8]> = segment.split_inclusive(|&b| b == b'\n').collect();
        for (k, piece) in pieces.iter().enumerate() {
            let ends = piece.ends_with(b"\n");
            cut.newlines += ends as u64;
            if !ends || (k == 0 && starts_after_hole) {
                cut.pieces += 1;
                continue;
            }
            let line = std::str::from_utf8(&piece[..piece.len() - 1])
                .unwrap_or_else(|_| panic!("a line is not UTF-8: {piece:?}"));
            let (t, i) = line
                .strip_prefix("t=")
                .and_then(|r| r.split_once(" i="))
                .unwrap_or_else(|| panic!("torn or foreign line {line:?}"));
            let t: usize = t.parse().unwrap_or_else(|_| panic!("torn line {line:?}"));
            let i: u64 = i.parse().unwrap_or_else(|_| panic!("torn line {line:?}"));
            assert!(t < threads as usize && i < lines, "foreign line {line:?}");
            assert!(i >= next[t], "thread {t}: line {i} duplicated or out of order");
            next[t] = i + 1;
            cut.whole += 1;
        }
    }
    cut
}

/// Checks that an output of `stress_kernel` plus what the runtime reported lost adds up to
/// everything printed: nothing is lost beyond what is reported.
fn check_accounted(cut: &Cut, lost: &OutputErrors, threads: u64, lines: u64) {
    assert_eq!(
        cut.bytes + lost.lost_bytes,
        total_bytes(threads, lines),
        "bytes in the output ({}) + bytes reported lost ({}) != bytes printed",
        cut.bytes,
        lost.lost_bytes
    );
    assert_eq!(
        cut.newlines + lost.lost_lines,
        threads * lines,
        "lines in the output ({}) + lines reported lost ({}) != lines printed",
        cut.newlines,
        lost.lost_lines
    );
}

/// The one output a print error is about.
fn print_error(r: gpuio::Result<()>, fd: i32, errno: i32) -> OutputErrors {
    match r {
        Err(Error::Print(p)) => {
            assert_eq!(p.outputs.len(), 1, "{p}");
            let o = p.outputs[0].clone();
            assert_eq!(o.fd, fd, "{p}");
            assert_eq!(o.errno, errno, "{p}: expected errno {errno}");
            assert!(o.failed_writes >= 1, "{p}");
            o
        }
        other => panic!("expected a print error (errno {errno}), got {other:?}"),
    }
}

// ------------------------------------------------------------------- child processes

/// Names the fault a child process of this binary runs (see `fault_child`).
const CHILD_ENV: &str = "GPUIO_FAULTS_CHILD";

/// What a child reported (`fault: key=value` lines on its stdout), and how it ended.
struct ChildRun {
    status: std::process::ExitStatus,
    report: BTreeMap<String, String>,
    stdout: String,
    stderr: String,
}

impl ChildRun {
    fn get(&self, key: &str) -> Option<&str> {
        self.report.get(key).map(String::as_str)
    }

    /// Fails the test unless the child exited 0 (it makes its own assertions).
    fn assert_ok(&self, what: &str) {
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

/// Runs `fault_child` in a new process of this test binary with `GPUIO_FAULTS_CHILD=mode`,
/// killing it after `limit`.
fn run_child(mode: &str, limit: Duration) -> ChildRun {
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .args(["fault_child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the child");
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
    let until = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "child `{mode}` ran past {limit:?}: killed\n--- stderr\n{}",
                err_reader.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let report = stdout
        .lines()
        // (The harness may print `test fault_child ... ` before the first one.)
        .filter_map(|l| l.find("fault: ").map(|at| &l[at + "fault: ".len()..]))
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

/// Tells the parent `key=value` (the child's stdout is the parent's pipe).
fn report(key: &str, value: impl std::fmt::Display) {
    println_std(&format!("fault: {key}={value}"));
}

fn println_std(s: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

/// The body of a child process: runs the fault `GPUIO_FAULTS_CHILD` names. Without it
/// (a plain `cargo test -- --ignored`), does nothing.
#[test]
#[ignore = "runs as a child process of the fault tests (GPUIO_FAULTS_CHILD), not by itself"]
fn fault_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let _wd = watchdog("fault_child", 300);
    match mode.as_str() {
        "enospc" => child_enospc(),
        "efbig-ignored" => child_efbig(libc::SIG_IGN),
        "efbig-default" => child_efbig(libc::SIG_DFL),
        "sigpipe" => child_sigpipe(),
        "fileio-efbig" => child_fileio_efbig(),
        "rings" => child_rings(),
        other => panic!("unknown {CHILD_ENV} {other}"),
    }
}

// ------------------------------------------------------------------------ disk full

#[test]
fn disk_full_enospc_is_reported_and_the_lines_before_it_are_intact() {
    let _wd = watchdog("disk_full_enospc_is_reported_and_the_lines_before_it_are_intact", 180);
    let run = run_child("enospc", Duration::from_secs(150));
    if let Some(why) = run.get("skip") {
        skip(
            "disk_full_enospc_is_reported_and_the_lines_before_it_are_intact",
            &format!("cannot mount a small tmpfs here ({why})"),
        );
        return;
    }
    run.assert_ok("ENOSPC on a 64 KiB tmpfs");
    for mode in ["positional", "append"] {
        assert_eq!(run.get(&format!("{mode}.checked")), Some("1"), "{}", run.stdout);
    }
    eprintln!(
        "{}",
        run.stdout
            .lines()
            .filter(|l| l.contains("fault: "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn mount_tmpfs(dir: &Path, size: &str) -> std::io::Result<()> {
    let src = CString::new("tmpfs").unwrap();
    let target = CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let data = CString::new(format!("size={size}")).unwrap();
    // SAFETY: NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            src.as_ptr(),
            0,
            data.as_ptr() as *const libc::c_void,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// ENOSPC: prints ~130 KB into a file on a 64 KiB tmpfs, mounted in a mount namespace of
/// this process alone (it goes away with the process). Once as a positional stream (a
/// regular file: many writes in flight at explicit offsets), once as a serial one
/// (`O_APPEND`).
fn child_enospc() {
    // SAFETY: unshare(CLONE_NEWNS) changes only this process's mount namespace; the
    // test harness runs this child's one test on one thread, and no mount is shared yet.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        report(
            "skip",
            format!("unshare(CLONE_NEWNS): {}", std::io::Error::last_os_error()),
        );
        return;
    }
    let root = CString::new("/").unwrap();
    // SAFETY: makes every mount of our new namespace private (no propagation back out).
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        report(
            "skip",
            format!("mount --make-rprivate /: {}", std::io::Error::last_os_error()),
        );
        return;
    }
    let (threads, lines) = (4u64, 3_000u64);
    for (mode, append) in [("positional", false), ("append", true)] {
        let dir = temp_dir().join(format!("tmpfs-{mode}"));
        std::fs::create_dir_all(&dir).unwrap();
        if let Err(e) = mount_tmpfs(&dir, "64k") {
            report("skip", format!("mount -t tmpfs -o size=64k: {e}"));
            return;
        }
        let path = dir.join("out.txt");
        let f = create(&path, append);
        let rt = builder().stdout_fd(f.as_raw_fd()).build().unwrap();
        let started = Instant::now();
        rt.launch(1, threads as u32, stress_kernel(lines)).unwrap();
        let lost = print_error(rt.synchronize(), f.as_raw_fd(), libc::ENOSPC);
        let took = started.elapsed();
        // Reported once; the runtime goes on.
        rt.synchronize().unwrap();
        drop(rt);
        let out = std::fs::read(&path).unwrap();
        let cut = check_cut(&out, threads, lines);
        check_accounted(&cut, &lost, threads, lines);
        assert!(cut.whole > 0, "{mode}: no line made it before the disk was full");
        assert!(out.len() <= 64 << 10, "{mode}: {} bytes on a 64 KiB tmpfs", out.len());
        report(&format!("{mode}.report"), format!("{lost:?}"));
        report(
            &format!("{mode}.file"),
            format!(
                "{} bytes: {} whole lines, {} pieces of lines, {} hole bytes; printed {} bytes in {} lines; synchronize took {took:?}",
                out.len(),
                cut.whole,
                cut.pieces,
                cut.holes,
                total_bytes(threads, lines),
                threads * lines
            ),
        );
        report(&format!("{mode}.checked"), 1);
        drop(f);
        let target = CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: unmounts the tmpfs we mounted; nothing of ours is open on it any more.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
fn file_too_large_efbig_is_reported_and_sigxfsz_kills_nothing() {
    let _wd = watchdog("file_too_large_efbig_is_reported_and_sigxfsz_kills_nothing", 180);
    for mode in ["efbig-ignored", "efbig-default"] {
        let run = run_child(mode, Duration::from_secs(80));
        run.assert_ok(&format!("EFBIG past RLIMIT_FSIZE ({mode})"));
        assert_eq!(run.get("checked"), Some("1"), "{}", run.stdout);
        eprintln!(
            "{mode}: {}",
            run.stdout
                .lines()
                .filter(|l| l.contains("fault: "))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
}

/// Sets this (child) process's RLIMIT_FSIZE to `limit` bytes and SIGXFSZ's disposition
/// to `sigxfsz`.
fn limit_file_size(limit: u64, sigxfsz: libc::sighandler_t) {
    // SAFETY: sets the disposition of one signal in this child process.
    unsafe { libc::signal(libc::SIGXFSZ, sigxfsz) };
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and then sets this process's RLIMIT_FSIZE (a valid struct each time).
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut rl), 0);
        rl.rlim_cur = limit;
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &rl), 0);
    }
}

/// EFBIG: a 64 KiB RLIMIT_FSIZE, ~130 KB printed to a regular file. `sigxfsz` is the
/// disposition of SIGXFSZ, which the kernel sends to the task whose write went past the
/// limit: with plain write(2) and the default action, that kills the process. Here the
/// writes are made by io_uring's threads, which block every signal but SIGKILL and
/// SIGSTOP: at the default action too, the process must live and get EFBIG.
fn child_efbig(sigxfsz: libc::sighandler_t) {
    let limit = 64u64 << 10;
    limit_file_size(limit, sigxfsz);
    let (threads, lines) = (4u64, 3_000u64);
    let path = temp_dir().join("efbig.txt");
    let f = create(&path, false);
    let rt = builder().stdout_fd(f.as_raw_fd()).build().unwrap();
    rt.launch(1, threads as u32, stress_kernel(lines)).unwrap();
    let lost = print_error(rt.synchronize(), f.as_raw_fd(), libc::EFBIG);
    rt.synchronize().unwrap();
    drop(rt);
    let out = std::fs::read(&path).unwrap();
    let cut = check_cut(&out, threads, lines);
    check_accounted(&cut, &lost, threads, lines);
    assert!(
        out.len() as u64 <= limit,
        "{} bytes past a {limit}-byte limit",
        out.len()
    );
    assert!(cut.whole > 0, "no line made it before the limit");
    report("report", format!("{lost:?}"));
    report(
        "file",
        format!(
            "{} bytes: {} whole lines, {} pieces, {} hole bytes",
            out.len(),
            cut.whole,
            cut.pieces,
            cut.holes
        ),
    );
    report("checked", 1);
    let _ = std::fs::remove_file(path);
}

/// Device file I/O past RLIMIT_FSIZE: a GPU-thread `write_all_at` of 200,000 bytes under
/// a 64 KiB limit (SIGXFSZ at its default action) must come back to the thread as EFBIG
/// with the count written (65,536), the file must hold exactly those bytes, and the
/// process must live.
#[test]
fn device_file_write_past_the_size_limit_reports_efbig_with_the_count() {
    let _wd = watchdog(
        "device_file_write_past_the_size_limit_reports_efbig_with_the_count",
        120,
    );
    let run = run_child("fileio-efbig", Duration::from_secs(100));
    run.assert_ok("device file write past RLIMIT_FSIZE, with SIGXFSZ at its default action");
    assert_eq!(run.get("checked"), Some("1"), "{}", run.stdout);
    eprintln!("{}", run.get("result").unwrap_or("?"));
}

fn child_fileio_efbig() {
    use gpuio::device::fs::{Error as FsError, File};
    let limit = 64u64 << 10;
    limit_file_size(limit, libc::SIG_DFL);
    let path = temp_dir().join("fileio-efbig.bin");
    let _ = std::fs::remove_file(&path);
    let rt = builder()
        .sandbox(gpuio::Sandbox::FileIo)
        .arena_bytes(64 << 10)
        .arena_block_bytes(16 << 10)
        .build()
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (p, s) = (path.to_str().unwrap().to_string(), seen.clone());
    rt.launch(1, 1, move || {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let f = File::create(&p).unwrap();
        *s.lock().unwrap() = Some(f.write_all_at(&data, 0));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let got = seen.lock().unwrap().take().expect("the kernel ran");
    assert_eq!(
        got,
        Err(FsError::Os {
            errno: gpuio::device::io::Errno(libc::EFBIG),
            done: limit as usize
        })
    );
    let out = std::fs::read(&path).unwrap();
    assert_eq!(out.len() as u64, limit, "file size");
    assert!(
        out.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
        "wrong bytes below the limit"
    );
    report(
        "result",
        format!("write_all_at returned {got:?}; the file holds the first {limit} bytes"),
    );
    report("checked", 1);
    let _ = std::fs::remove_file(path);
}

// ---------------------------------------------------------------- the reader goes away

#[test]
fn a_closed_pipe_reports_epipe_and_sigpipe_kills_nothing() {
    let _wd = watchdog("a_closed_pipe_reports_epipe_and_sigpipe_kills_nothing", 180);
    let run = run_child("sigpipe", Duration::from_secs(150));
    run.assert_ok("printing into a pipe whose reader closed, with SIGPIPE at its default action");
    assert_eq!(run.get("checked"), Some("1"), "{}", run.stdout);
    eprintln!(
        "{}",
        run.stdout
            .lines()
            .filter(|l| l.contains("fault: "))
            .collect::<Vec<_>>()
            .join("\n")
    );
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

// --------------------------------------------------------------- a kernel that panics

#[test]
fn a_kernel_that_panics_mid_print_is_reported_and_the_runtime_goes_on() {
    let _wd = watchdog("a_kernel_that_panics_mid_print_is_reported_and_the_runtime_goes_on", 60);
    let path = temp_dir().join("panic.txt");
    let f = create(&path, false);
    let rt = builder().stdout_fd(f.as_raw_fd()).build().unwrap();
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

/// A Display that panics only when formatted for the third time: in println!'s long-line
/// path, the first two passes (the stack buffer, then measuring) succeed, the space is
/// reserved, and the third pass, writing in place, panics.
struct PanicsOnThirdPass(AtomicU32);

impl std::fmt::Display for PanicsOnThirdPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pass = self.0.fetch_add(1, Ordering::SeqCst);
        f.write_str(&"x".repeat(150))?;
        if pass == 2 {
            panic!("Display panicked after reserving its line");
        }
        f.write_str(&"y".repeat(150))
    }
}

/// Regression: a Display that panicked after its line's space was reserved left the range
/// uncommitted, and synchronize waited for it forever (this test hung until the watchdog
/// aborted it). Now the range is padded and committed while the thread unwinds.
#[test]
fn a_display_that_panics_after_its_line_was_reserved_hangs_nothing() {
    let _wd = watchdog("a_display_that_panics_after_its_line_was_reserved_hangs_nothing", 60);
    let path = temp_dir().join("display-panic.txt");
    let f = create(&path, false);
    let rt = builder().stdout_fd(f.as_raw_fd()).build().unwrap();
    rt.launch(1, 1, || {
        println!("before");
        println!("{}", PanicsOnThirdPass(AtomicU32::new(0)));
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

// ------------------------------------------------------------------ drop, in flight

#[test]
fn dropping_the_runtime_with_writes_in_flight_drains_them_all() {
    let _wd = watchdog("dropping_the_runtime_with_writes_in_flight_drains_them_all", 120);
    let (r, w) = pipe();
    // SAFETY: fcntl on our own fd.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    let reader = std::thread::spawn(move || {
        let mut file = std::fs::File::from(r);
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match file.read(&mut buf) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => panic!("read: {e}"),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let (threads, lines) = (8u64, 1_000u64);
    let rt = builder().stdout_fd(w.as_raw_fd()).log_bytes(4096).build().unwrap();
    rt.launch(1, threads as u32, stress_kernel(lines)).unwrap();
    // No synchronize: the kernel threads are still printing, the log is full and a write
    // waits for the slow reader. Drop must wait for all of it.
    let started = Instant::now();
    drop(rt);
    let dropping = started.elapsed();
    drop(w);
    let out = reader.join().unwrap();
    let cut = check_cut(&out, threads, lines);
    assert_eq!((cut.pieces, cut.holes), (0, 0));
    assert_eq!(cut.whole, threads * lines, "lines lost at drop");
    assert_eq!(cut.bytes, total_bytes(threads, lines));
    eprintln!(
        "drop waited {dropping:?} for {} bytes through a 4 KiB pipe read 1 KiB per ms",
        cut.bytes
    );
}

// ------------------------------------------------------------- SQPOLL asleep, a burst

#[test]
fn a_burst_after_sqpoll_fell_asleep_wakes_it_and_loses_nothing() {
    let _wd = watchdog("a_burst_after_sqpoll_fell_asleep_wakes_it_and_loses_nothing", 120);
    let path = temp_dir().join("asleep.txt");
    let f = create(&path, false);
    // SQPOLL sleeps after 1 ms without work. A 4 KiB log: a burst cannot finish without
    // completions, so without a wakeup it would hang.
    let rt = builder()
        .stdout_fd(f.as_raw_fd())
        .sq_thread_idle_ms(1)
        .log_bytes(4096)
        .build()
        .unwrap();
    let ctx = rt.context().expect("CPU backend");
    // SAFETY: the kernel's SQ flags word, in the ring memory the runtime keeps mapped.
    let flags = unsafe { &*ctx.ring.sq_flags };
    let (threads, lines) = (4u64, 2_000u64);
    let rounds = 3;
    for round in 0..rounds {
        // At least 150 ms idle, and until SQPOLL says it sleeps (it may be scheduled late
        // on a loaded machine; 1 ms of idleness is all it needs).
        std::thread::sleep(Duration::from_millis(150));
        let until = Instant::now() + Duration::from_secs(10);
        while flags.load(Ordering::Acquire) & gpuio::device::uapi::IORING_SQ_NEED_WAKEUP == 0 {
            assert!(
                Instant::now() < until,
                "round {round}: SQPOLL is not asleep after 10 s idle (sq_thread_idle 1 ms)"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let before = rt.stats();
        rt.launch(1, threads as u32, stress_kernel(lines)).unwrap();
        rt.synchronize().unwrap();
        let after = rt.stats();
        assert!(
            after.wakeups > before.wakeups,
            "round {round}: the burst went out without a wakeup ({before:?} -> {after:?})"
        );
        eprintln!(
            "round {round}: {} SQEs, {} wakeups",
            after.sqes - before.sqes,
            after.wakeups - before.wakeups
        );
    }
    drop(rt);
    // Every round's lines, each exactly once, whole, in order.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut next = vec![0u64; threads as usize];
    for line in text.lines() {
        let (t, i) = line.strip_prefix("t=").and_then(|r| r.split_once(" i=")).expect(line);
        let (t, i): (usize, u64) = (t.parse().expect(line), i.parse().expect(line));
        assert_eq!(i, next[t] % lines, "thread {t}: out of order or duplicated");
        next[t] += 1;
    }
    assert!(next.iter().all(|&n| n == rounds * lines), "lines lost: {next:?}");
}

// ------------------------------------------------------------------ 10,000 rings

#[test]
fn ten_thousand_rings_created_and_destroyed_leak_nothing() {
    let _wd = watchdog("ten_thousand_rings_created_and_destroyed_leak_nothing", 590);
    let run = run_child("rings", Duration::from_secs(580));
    run.assert_ok("10,000 rings created and destroyed");
    assert_eq!(run.get("checked"), Some("1"), "{}", run.stdout);
    eprintln!(
        "{}",
        run.stdout
            .lines()
            .filter(|l| l.contains("fault: "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// What the process holds: open fds, threads, mappings, resident and pinned memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    fds: usize,
    threads: usize,
    maps: usize,
    rss_kb: u64,
    pinned_kb: u64,
}

fn held() -> Held {
    let count = |dir: &str| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Held {
        fds: count("/proc/self/fd"),
        threads: count("/proc/self/task"),
        maps: std::fs::read_to_string("/proc/self/maps")
            .map(|m| m.lines().count())
            .unwrap_or(0),
        rss_kb: kb("VmRSS:"),
        pinned_kb: kb("VmPin:"),
    }
}

/// Waits (up to 20 s) until the kernel has ended the SQPOLL threads of dropped rings: it
/// does that asynchronously after the ring's fd closes.
fn settled(threads: usize) -> Held {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let h = held();
        if h.threads <= threads || Instant::now() > until {
            return h;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 10,000 runtimes (ring, SQPOLL thread, waker thread, mappings) created and dropped; every
/// 100th also runs a kernel that prints. Small rings and logs, and SQPOLL idle after 1 ms:
/// a runtime costs its setup and teardown, not page-zeroing (logs are populated at
/// creation) nor an SQPOLL thread spinning 50 ms on one of CI's two cores.
fn child_rings() {
    let n: usize = std::env::var("GPUIO_FAULTS_RINGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    let make = || {
        builder()
            .sq_entries(8)
            .log_bytes(4096)
            .sq_thread_idle_ms(1)
            .stdout_fd(null.as_raw_fd())
            .build()
            .unwrap()
    };
    let cycle = |i: usize| {
        let rt = make();
        if i.is_multiple_of(100) {
            rt.launch(1, 1, || println!("a line")).unwrap();
            rt.synchronize().unwrap();
        }
        drop(rt);
    };
    // The threads of this process with no ring at all (the harness's, the watchdog).
    let baseline = held().threads;
    // Warm up: thread-locals, the allocator's arenas, lazily made statics.
    for i in 0..50 {
        cycle(i);
    }
    let before = settled(baseline);
    let started = Instant::now();
    for i in 0..n {
        cycle(i);
    }
    let took = started.elapsed();
    let after = settled(before.threads);
    report("rings", n);
    report(
        "took",
        format!("{took:.1?} ({:.0} µs per ring)", took.as_secs_f64() * 1e6 / n as f64),
    );
    report("before", format!("{before:?}"));
    report("after", format!("{after:?}"));
    assert_eq!(after.fds, before.fds, "fds leaked");
    assert_eq!(after.threads, before.threads, "threads left behind");
    assert!(
        after.maps <= before.maps + 4,
        "mappings leaked: {before:?} -> {after:?}"
    );
    assert!(
        after.rss_kb <= before.rss_kb + 16 * 1024,
        "resident memory grew by {} KiB over {n} rings",
        after.rss_kb.saturating_sub(before.rss_kb)
    );
    assert!(
        after.pinned_kb <= before.pinned_kb + 64,
        "pinned memory leaked: {before:?} -> {after:?}"
    );
    report("checked", 1);
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
            "GPUIO_SKIP_GPU_BUILD=1 (no PTX)",
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

/// On a CUDA GPU: a kernel whose threads print, then trap. Synchronize reports the CUDA
/// error; the context is lost after a trap, so the runtime then refuses clearly. What
/// came out before the trap is whole (how much did is not guaranteed). Skips without CUDA.
///
/// Run on a GPU machine: `cargo test --release --test faults -- --nocapture cuda_`.
#[test]
fn cuda_a_kernel_that_traps_mid_print_is_reported_and_the_runtime_refuses_clearly() {
    let _wd = watchdog(
        "cuda_a_kernel_that_traps_mid_print_is_reported_and_the_runtime_refuses_clearly",
        120,
    );
    let path = temp_dir().join("trap.txt");
    let f = create(&path, false);
    let rt = match Runtime::builder()
        .backend(Backend::Cuda)
        .stdout_fd(f.as_raw_fd())
        .build()
    {
        Ok(rt) => rt,
        Err(Error::BackendUnavailable { reason, .. }) => {
            skip(
                "cuda_a_kernel_that_traps_mid_print_is_reported_and_the_runtime_refuses_clearly",
                &format!("no CUDA GPU ({reason})"),
            );
            return;
        }
        Err(e) => panic!("CUDA runtime failed: {e}"),
    };
    let m = rt.load_module(PTX).unwrap();
    // Warm: the runtime works before the trap.
    m.launch("hello", 1, 32, &[]).unwrap();
    rt.synchronize().unwrap();
    let (grid, block, lines) = (4u32, 64u32, 3u32);
    m.launch("trap_after_print", grid, block, &[lines.into()]).unwrap();
    let started = Instant::now();
    let fault = match rt.synchronize() {
        Err(Error::Kernel(why)) => why,
        other => panic!("expected a kernel error from a trapping kernel, got {other:?}"),
    };
    eprintln!(
        "synchronize after the trap ({:?}): kernel failed: {fault}",
        started.elapsed()
    );
    // The context is lost: everything after refuses, naming the first fault.
    for (what, r) in [
        ("launch", m.launch("hello", 1, 1, &[])),
        ("synchronize", rt.synchronize()),
        ("load_module", rt.load_module(PTX).map(drop)),
    ] {
        match r {
            Err(Error::Kernel(why)) => {
                assert!(why.contains("unusable") && why.contains(&fault), "{what}: {why}");
                eprintln!("{what} after the trap: {why}");
            }
            other => panic!("{what} after a trap: expected a clear refusal, got {other:?}"),
        }
    }
    drop(m);
    drop(rt);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut trap_lines = 0;
    for line in text.lines() {
        if line.starts_with("hello from thread") {
            continue;
        }
        let (t, i) = line.strip_prefix("t=").and_then(|r| r.split_once(" i=")).expect(line);
        let (t, i): (u32, u32) = (t.parse().expect(line), i.parse().expect(line));
        assert!(t < grid * block && i < lines, "foreign line {line:?}");
        trap_lines += 1;
    }
    eprintln!(
        "{trap_lines} of {} lines came out before the trap, all whole",
        grid * block * lines
    );
}
