//! What is specific to the host-thread fallback (`Submission::HostThread`,
//! `GPUIO_URING=off`): the automatic choice. With io_uring setup made to fail with ENOSYS or
//! EPERM, or one of io_uring's three calls refused by a real seccomp filter (as container
//! profiles do), `auto` says so in one line and works, with the default sandbox held by the
//! fallback; with `on` it refuses; `off`, `inline` and unset (inline on the CPU backend,
//! which needs no io_uring: it works under such a filter without a word) choose as
//! documented. These cases depend on the environment and on stderr, so they run in
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
    let f = std::fs::File::create(&path).unwrap();
    if let Some(nr) = std::env::var("GPUIO_TEST_SECCOMP").ok().and_then(|n| n.parse().ok()) {
        refuse_syscall(nr);
    }
    match b.stdout_fd(f.as_raw_fd()).build() {
        Ok(rt) => {
            eprintln!("child: submission {}", rt.submission().name());
            rt.launch(4, 8, stress_kernel(500)).unwrap();
            rt.synchronize().unwrap();
            if std::env::var_os("GPUIO_TEST_ESCAPE").is_some() {
                try_to_escape(&rt, &format!("{path}.escaped"));
            }
        }
        Err(e) => eprintln!("child: error: {e}"),
    }
}

/// A kernel that tries what the default sandbox forbids: to create a file. Says what the
/// device call returned and what synchronize reported, and whether the file exists.
fn try_to_escape(rt: &Runtime, path: &str) {
    let (p, res) = (
        path.to_string(),
        std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0)),
    );
    let r = res.clone();
    rt.launch(1, 1, move || {
        let got = gpuio::device::io::open(&p, libc::O_CREAT | libc::O_WRONLY, 0o644);
        r.store(got.err().map_or(0, |e| e.0), std::sync::atomic::Ordering::Release);
    })
    .unwrap();
    let sync = match rt.synchronize() {
        Ok(()) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    eprintln!(
        "child: escape errno {} exists {} synchronize {sync}",
        res.load(std::sync::atomic::Ordering::Acquire),
        std::path::Path::new(path).exists()
    );
}

/// Installs a seccomp filter that fails system call `nr` with EPERM, as Docker's default
/// profile does for io_uring's calls (this process only; no privileges needed once
/// `no_new_privs` is set).
fn refuse_syscall(nr: u32) {
    let stmt = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
    let filter = [
        // The syscall number.
        stmt((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
        // Equal to `nr`: next instruction (refuse); else skip it (allow).
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        stmt(
            (libc::BPF_RET | libc::BPF_K) as u16,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        stmt((libc::BPF_RET | libc::BPF_K) as u16, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut _,
    };
    // SAFETY: prctl with no pointers; then the filter program above, which the kernel copies.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A seccomp filter that refuses one of io_uring's calls: with `io_uring_setup` refused the
/// ring is not made; with `io_uring_enter` or `io_uring_register` refused it is made but could
/// not be woken or sandboxed. Either way the runtime says which call and falls back, and
/// the fallback holds the default sandbox: a kernel's attempt to create a file is refused
/// and reported.
#[test]
fn a_seccomp_filter_on_any_io_uring_call_falls_back_with_the_sandbox_held() {
    let _wd = watchdog(
        "a_seccomp_filter_on_any_io_uring_call_falls_back_with_the_sandbox_held",
        180,
    );
    for (nr, call) in [
        (libc::SYS_io_uring_setup, "io_uring_setup"),
        (libc::SYS_io_uring_enter, "io_uring_enter"),
        (libc::SYS_io_uring_register, "io_uring_register"),
    ] {
        let nr = nr.to_string();
        let (ok, lines, out) = run(
            call,
            &[
                ("GPUIO_TEST_SECCOMP", &nr),
                ("GPUIO_TEST_ESCAPE", "1"),
                ("GPUIO_URING", "auto"),
            ],
        );
        assert!(ok, "{call}: {lines:?}");
        let notices: Vec<_> = lines.iter().filter(|l| l.starts_with("gpuio:")).collect();
        assert!(
            notices
                .iter()
                .any(|n| n.contains("host thread") && (call == "io_uring_setup" || n.contains(call))),
            "{call}: the notice names the refused call and the fallback: {lines:?}"
        );
        assert!(
            lines.contains(&"child: submission off".to_string()),
            "{call}: {lines:?}"
        );
        check_lines(&out, 32, 500);
        let escape = lines
            .iter()
            .find(|l| l.starts_with("child: escape"))
            .unwrap_or_else(|| panic!("{call}: {lines:?}"));
        assert!(
            escape.starts_with(&format!(
                "child: escape errno {} exists false synchronize ",
                libc::EACCES
            )) && escape.contains("PrintOnly"),
            "{call}: the default sandbox refused the kernel's open and said so: {escape}"
        );
        // Unset: the kernel threads perform the requests; io_uring is not needed, and
        // nothing is said.
        let (ok, lines, out) = run(
            &format!("{call}-unset"),
            &[("GPUIO_TEST_SECCOMP", &nr), ("GPUIO_TEST_ESCAPE", "1")],
        );
        assert!(ok, "{call}: {lines:?}");
        assert_eq!(lines[0], "child: submission inline", "{call}: {lines:?}");
        assert!(!lines.iter().any(|l| l.starts_with("gpuio:")), "{call}: {lines:?}");
        check_lines(&out, 32, 500);
        assert!(
            lines.iter().any(|l| l.starts_with(&format!(
                "child: escape errno {} exists false synchronize ",
                libc::EACCES
            )) && l.contains("PrintOnly")),
            "{call}: the default sandbox held inline too: {lines:?}"
        );
    }
}

#[test]
fn auto_falls_back_with_a_notice_when_io_uring_is_unavailable() {
    let _wd = watchdog("auto_falls_back_with_a_notice_when_io_uring_is_unavailable", 120);
    for (errno, cause) in [(libc::ENOSYS, "ENOSYS"), (libc::EPERM, "EPERM")] {
        let (ok, lines, out) = run(
            "auto",
            &[("GPUIO_FALLBACK_ERRNO", &errno.to_string()), ("GPUIO_URING", "auto")],
        );
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
            &[
                ("GPUIO_FALLBACK_ERRNO", &errno.to_string()),
                ("GPUIO_QUIET", "1"),
                ("GPUIO_URING", "auto"),
            ],
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
    // `auto` on this machine, which has io_uring: io_uring.
    let (ok, lines, out) = run("auto-real", &[("GPUIO_URING", "auto")]);
    assert!(ok && lines == ["child: submission on"], "{lines:?}");
    check_lines(&out, 32, 500);
    // Unset on the CPU backend, or `inline`: the kernel threads perform the requests.
    for (name, env) in [("unset", vec![]), ("inline", vec![("GPUIO_URING", "inline")])] {
        let (ok, lines, out) = run(name, &env);
        assert!(ok && lines == ["child: submission inline"], "{name}: {lines:?}");
        check_lines(&out, 32, 500);
    }
    // A value that means nothing is an error, not a guess.
    let (ok, lines, _) = run("bad", &[("GPUIO_URING", "maybe")]);
    assert!(
        ok && lines.len() == 1 && lines[0].contains("GPUIO_URING=\"maybe\""),
        "{lines:?}"
    );
}
