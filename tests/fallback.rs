//! What is specific to the host-thread fallback (`Submission::HostThread`,
//! `GPUIO_URING=off`): the automatic choice. With io_uring setup made to fail with ENOSYS or
//! EPERM the runtime says so in one line and works; with `on` it refuses; `off` and unset
//! choose as documented. These cases depend on the environment and on stderr, so they run in
//! a child process (this test binary, re-run on `child`). The print and file-I/O suites run
//! every other case over both paths (`over_submissions!` in tests/common).

use std::os::fd::AsRawFd;
use std::time::Duration;

use gpuio::{Backend, Runtime};

#[allow(dead_code)]
mod common;
use common::child::{child_mode, run_child};
use common::{check_lines, stress_kernel, temp_file, watchdog};

/// Runs `child` in a child process with `env`; returns whether it succeeded, the lines it
/// printed on stderr that start with `gpuio:` or `child:`, and the output file's bytes.
fn run(name: &str, env: &[(&str, &str)]) -> (bool, Vec<String>, Vec<u8>) {
    let (_, path) = temp_file(&format!("fb-child-{name}.txt"));
    let mut vars = vec![("GPUIO_QUIET", None), ("GPUIO_URING", None), ("GPUIO_BACKEND", None)];
    vars.extend(env.iter().map(|&(k, v)| (k, Some(v))));
    let out = run_child("child", path.to_str().unwrap(), &vars, Duration::from_secs(60));
    let lines = out
        .stderr
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
    let Some(path) = child_mode() else {
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
        let (ok, lines, out) = run("auto", &[("GPUIO_FALLBACK_ERRNO", &errno.to_string())]);
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
        let (ok, lines, out) = run(
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
    let (ok, lines, _) = run("on", &[("GPUIO_URING", "on"), ("GPUIO_FALLBACK_ERRNO", &errno)]);
    assert!(ok, "{lines:?}");
    assert!(
        lines.len() == 1
            && lines[0].starts_with("child: error: io_uring is unavailable")
            && lines[0].contains("ENOSYS"),
        "{lines:?}"
    );
    // `off` uses the host thread with io_uring available, without a notice.
    let (ok, lines, out) = run("off", &[("GPUIO_URING", "off")]);
    assert!(ok && lines == ["child: submission off"], "{lines:?}");
    check_lines(&out, 32, 500);
    // Unset (auto) on this machine, which has io_uring: io_uring.
    let (ok, lines, out) = run("auto-real", &[]);
    assert!(ok && lines == ["child: submission on"], "{lines:?}");
    check_lines(&out, 32, 500);
    // A value that means nothing is an error, not a guess.
    let (ok, lines, _) = run("bad", &[("GPUIO_URING", "maybe")]);
    assert!(
        ok && lines.len() == 1 && lines[0].contains("GPUIO_URING=\"maybe\""),
        "{lines:?}"
    );
}
