//! The host-thread fallback (`Submission::HostThread`, `GPUIO_URING=off`) end to end on the
//! CPU backend: the same device protocol, served by a host thread with ordinary syscalls.
//!
//! The stress-like cases of `print.rs` with the fallback forced (CI also runs all of
//! `print.rs` under `GPUIO_URING=off`), and the automatic choice: with io_uring setup made
//! to fail with ENOSYS or EPERM the runtime says so in one line and works; with `on` it
//! refuses. Cases that depend on the environment or on stderr run in a child process (this
//! test binary, re-run on `child`).

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::println;
use gpuio::{Backend, Error, Runtime, Submission};

#[allow(dead_code)]
mod common;
use common::{check_lines, stress_kernel, temp_file, watchdog};

fn builder() -> gpuio::Builder {
    Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::HostThread)
}

#[test]
fn many_threads_into_a_file() {
    let _wd = watchdog("many_threads_into_a_file", 120);
    let (f, path) = temp_file("fb-many.txt");
    let rt = builder().stdout_fd(f.as_raw_fd()).build().unwrap();
    assert_eq!(rt.submission(), Submission::HostThread);
    rt.launch(1, 64, stress_kernel(50_000)).unwrap();
    rt.synchronize().unwrap();
    assert!(rt.stats().sqes > 0);
    assert_eq!(rt.stats().stray_completions, 0);
    drop(rt);
    check_lines(&std::fs::read(&path).unwrap(), 64, 50_000);
}

#[test]
fn tiny_ring_and_arena_apply_backpressure() {
    let _wd = watchdog("tiny_ring_and_arena_apply_backpressure", 120);
    let (f, path) = temp_file("fb-tiny.txt");
    let log = 256u64;
    let rt = builder()
        .stdout_fd(f.as_raw_fd())
        .sq_entries(8)
        .log_bytes(log as usize)
        .max_flights(2)
        .build()
        .unwrap();
    rt.launch(4, 8, stress_kernel(2_000)).unwrap();
    rt.synchronize().unwrap();
    let out = std::fs::read(&path).unwrap();
    let sqes = rt.stats().sqes as u64;
    // The 8-entry SQ wrapped many times and the log was recycled hundreds of times.
    assert!(out.len() as u64 > 100 * log, "output {} bytes", out.len());
    assert!(sqes >= out.len() as u64 / log, "{sqes} SQEs for {} bytes", out.len());
    drop(rt);
    check_lines(&out, 32, 2_000);
}

#[test]
fn a_slow_pipe_reader_loses_nothing_and_the_writers_wait() {
    let _wd = watchdog("a_slow_pipe_reader_loses_nothing_and_the_writers_wait", 120);
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds that we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds from pipe2.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on our own fd. A one-page pipe: the fallback thread's writes block.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    let start = Instant::now();
    let reader = std::thread::spawn(move || {
        let mut file = std::fs::File::from(r);
        let (mut out, mut buf) = (Vec::new(), [0u8; 1024]);
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
    let last_line_at = Arc::new(AtomicU64::new(0));
    let stamp = last_line_at.clone();
    let rt = builder().stdout_fd(w.as_raw_fd()).log_bytes(4096).build().unwrap();
    rt.launch(1, threads as u32, move || {
        let t = gpuio::device::global_thread_idx();
        for i in 0..lines {
            println!("t={t} i={i}");
        }
        stamp.fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt); // stops the fallback thread: it must not hang on the pipe
    drop(w);
    check_lines(&reader.join().unwrap(), threads, lines);
    let waited = Duration::from_micros(last_line_at.load(Ordering::Relaxed));
    assert!(waited > Duration::from_millis(50), "writers did not wait: {waited:?}");
}

#[test]
fn printing_to_a_closed_fd_is_reported_and_nothing_hangs() {
    let _wd = watchdog("printing_to_a_closed_fd_is_reported_and_nothing_hangs", 120);
    let closed = 1_000_000; // beyond any open descriptor
    let rt = builder().stdout_fd(closed).build().unwrap();
    rt.launch(1, 4, stress_kernel(10)).unwrap();
    match rt.synchronize() {
        Err(Error::Print(p)) => {
            assert_eq!(p.outputs.len(), 1, "{p}");
            let o = &p.outputs[0];
            assert_eq!((o.fd, o.errno), (closed, libc::EBADF));
            assert_eq!(o.lost_lines, 40, "every line is counted as lost");
        }
        other => panic!("expected a print error, got {other:?}"),
    }
    rt.synchronize().unwrap();
}

#[test]
fn host_writes_between_kernels_stay_in_order() {
    // Positional writes (pwrite at the stream's offset) and the settled file offset.
    let _wd = watchdog("host_writes_between_kernels_stay_in_order", 60);
    let (f, path) = temp_file("fb-interleave.txt");
    let mut file = f.try_clone().unwrap();
    let rt = builder().stdout_fd(f.as_raw_fd()).build().unwrap();
    for k in 0..3 {
        use std::io::Write;
        writeln!(file, "host {k}").unwrap();
        rt.launch(1, 1, move || println!("kernel {k}")).unwrap();
        rt.synchronize().unwrap();
    }
    drop(rt);
    assert_eq!(
        std::fs::read_to_string(path).unwrap(),
        "host 0\nkernel 0\nhost 1\nkernel 1\nhost 2\nkernel 2\n"
    );
}

#[test]
fn positional_writes_land_at_their_offset_wherever_the_fd_points() {
    // A regular file is written with pwrite at the stream's offsets: moving the fd's own
    // offset while a kernel runs changes nothing (write(2) would follow it).
    let _wd = watchdog("positional_writes_land_at_their_offset_wherever_the_fd_points", 60);
    let (f, path) = temp_file("fb-positional.txt");
    let rt = builder().stdout_fd(f.as_raw_fd()).build().unwrap();
    let go = Arc::new(AtomicBool::new(false));
    let go2 = go.clone();
    rt.launch(1, 1, move || {
        println!("first");
        while !go2.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        println!("second");
    })
    .unwrap();
    while std::fs::metadata(&path).unwrap().len() < 6 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: lseek moves only the offset of our fd.
    assert_eq!(unsafe { libc::lseek(f.as_raw_fd(), 1000, libc::SEEK_SET) }, 1000);
    go.store(true, Ordering::Release);
    rt.synchronize().unwrap();
    drop(rt);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "first\nsecond\n");
}

// ---------------------------------------------------------------------------------------
// The automatic choice, in child processes

/// Runs `child` in a child process with `env`; returns whether it succeeded, the lines it
/// printed on stderr that start with `gpuio:` or `child:`, and the output file's bytes.
fn run_child(name: &str, env: &[(&str, &str)]) -> (bool, Vec<String>, Vec<u8>) {
    let (_, path) = temp_file(&format!("fb-child-{name}.txt"));
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("GPUIO_FALLBACK_CHILD", &path)
        .env_remove("GPUIO_QUIET")
        .env_remove("GPUIO_URING")
        .env_remove("GPUIO_BACKEND");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = stderr
        .lines()
        .filter(|l| l.starts_with("gpuio:") || l.starts_with("child:"))
        .map(String::from)
        .collect();
    (out.status.success(), lines, std::fs::read(&path).unwrap_or_default())
}

/// The child: a runtime as configured by the environment (`GPUIO_FALLBACK_ERRNO` simulates
/// an io_uring setup failure), 4 x 8 threads x 500 lines into the file; says on stderr
/// which submission it got, or the error.
#[test]
fn child() {
    let Some(path) = std::env::var_os("GPUIO_FALLBACK_CHILD") else {
        return; // only as a child
    };
    let mut b = Runtime::builder().backend(Backend::Cpu);
    if let Some(errno) = std::env::var("GPUIO_FALLBACK_ERRNO").ok().and_then(|e| e.parse().ok()) {
        b = b.simulate_uring_setup_error(errno);
    }
    let f = std::fs::File::create(path).unwrap();
    match b.stdout_fd(f.as_raw_fd()).build() {
        Ok(rt) => {
            eprintln!("child: submission {}", rt.submission().name());
            rt.launch(4, 8, stress_kernel(500)).unwrap();
            rt.synchronize().unwrap();
        }
        Err(e) => eprintln!("child: error: {e}"),
    }
}

#[test]
fn auto_falls_back_with_a_notice_when_io_uring_is_unavailable() {
    let _wd = watchdog("auto_falls_back_with_a_notice_when_io_uring_is_unavailable", 120);
    for (errno, cause) in [(libc::ENOSYS, "ENOSYS"), (libc::EPERM, "EPERM")] {
        let (ok, lines, out) = run_child("auto", &[("GPUIO_FALLBACK_ERRNO", &errno.to_string())]);
        assert!(ok, "{lines:?}");
        let notices: Vec<_> = lines.iter().filter(|l| l.starts_with("gpuio:")).collect();
        assert_eq!(notices.len(), 1, "one notice line: {lines:?}");
        assert!(
            notices[0].contains(cause) && notices[0].contains("host thread"),
            "{notices:?}"
        );
        assert!(lines.contains(&"child: submission off".to_string()), "{lines:?}");
        check_lines(&out, 32, 500);
        // GPUIO_QUIET silences the notice, not the fallback.
        let (ok, lines, out) = run_child(
            "quiet",
            &[("GPUIO_FALLBACK_ERRNO", &errno.to_string()), ("GPUIO_QUIET", "1")],
        );
        assert!(ok && lines == ["child: submission off"], "{lines:?}");
        check_lines(&out, 32, 500);
    }
}

#[test]
fn gpuio_uring_forces_either_way() {
    let _wd = watchdog("gpuio_uring_forces_either_way", 120);
    // `on` refuses to fall back, naming the cause.
    let errno = libc::ENOSYS.to_string();
    let (ok, lines, _) = run_child("on", &[("GPUIO_URING", "on"), ("GPUIO_FALLBACK_ERRNO", &errno)]);
    assert!(ok, "{lines:?}");
    assert!(
        lines.len() == 1
            && lines[0].starts_with("child: error: io_uring is unavailable")
            && lines[0].contains("ENOSYS"),
        "{lines:?}"
    );
    // `off` uses the host thread with io_uring available, without a notice.
    let (ok, lines, out) = run_child("off", &[("GPUIO_URING", "off")]);
    assert!(ok && lines == ["child: submission off"], "{lines:?}");
    check_lines(&out, 32, 500);
    // Unset (auto) on this machine, which has io_uring: io_uring.
    let (ok, lines, out) = run_child("auto-real", &[]);
    assert!(ok && lines == ["child: submission on"], "{lines:?}");
    check_lines(&out, 32, 500);
    // A value that means nothing is an error, not a guess.
    let (ok, lines, _) = run_child("bad", &[("GPUIO_URING", "maybe")]);
    assert!(
        ok && lines.len() == 1 && lines[0].contains("GPUIO_URING=\"maybe\""),
        "{lines:?}"
    );
}
