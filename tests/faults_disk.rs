//! Faults of a full disk, on the CPU backend against the machine's real io_uring: ENOSPC
//! on a small tmpfs, EFBIG from RLIMIT_FSIZE (for println! and for device file I/O).
//!
//! Each test checks that the fault is reported, that nothing is lost beyond what is
//! reported, and that nothing hangs. They change process-wide state (a mount namespace, an
//! rlimit, a signal disposition), so each runs in a child process of this test binary
//! (`fault_child`), which is killed if it runs too long. RELIABILITY.md records what each
//! one found.

#[allow(dead_code)]
mod common;

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use common::child::report;
use common::dirs::process_dir;
use common::faults::{builder, check_accounted, check_cut, create, print_error, total_bytes};
use common::{skip, stress_kernel, watchdog};

fault_children!("runs as a child process of the disk tests (GPUIO_TEST_CHILD), not by itself", {
    "enospc" => child_enospc(),
    "efbig-ignored" => child_efbig(libc::SIG_IGN),
    "efbig-default" => child_efbig(libc::SIG_DFL),
    "fileio-efbig" => child_fileio_efbig(),
});

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
    eprintln!("{}", run.reports("\n"));
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
        let dir = process_dir().join(format!("tmpfs-{mode}"));
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
        eprintln!("{mode}: {}", run.reports("; "));
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
    let path = process_dir().join("efbig.txt");
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
    let path = process_dir().join("fileio-efbig.bin");
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
