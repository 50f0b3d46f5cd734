//! Where the lines land: a closed fd reported, stderr on its own fd or sharing stdout's
//! file, host writes between kernels, positional writes, offsets shared with the host, and
//! two runtimes printing to one file.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::{eprintln, println};
use gpuio::Error;

use crate::common::suite_builder as builder;
use crate::common::{check_lines, sorted_lines, stress_kernel, temp_file, watchdog, Suite};

pub(crate) fn printing_to_a_closed_fd_is_reported_and_nothing_hangs(sub: Suite) {
    let _wd = watchdog("printing_to_a_closed_fd_is_reported_and_nothing_hangs", 120);
    let (f, _) = temp_file("closed.txt");
    let fd = f.as_raw_fd();
    drop(f); // `fd` is now closed (and, in this test, not reused: we pick a high number)
    let closed = 1_000_000 + fd; // beyond any open descriptor
    let rt = builder(sub).stdout_fd(closed).build().unwrap();
    rt.launch(1, 4, stress_kernel(10)).unwrap();
    let started = Instant::now();
    match rt.synchronize() {
        Err(Error::Print(p)) => {
            assert_eq!(p.outputs.len(), 1, "{p}");
            let o = &p.outputs[0];
            assert_eq!(o.fd, closed);
            assert_eq!(o.errno, libc::EBADF);
            assert!(o.failed_writes >= 1);
            assert_eq!(o.lost_lines, 40, "every line is counted as lost");
            assert!(p.to_string().contains("Bad file descriptor"), "{p}");
        }
        other => panic!("expected a print error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // The errors were reported once; the runtime goes on working.
    rt.synchronize().unwrap();
}

pub(crate) fn stderr_goes_to_its_own_fd_and_shares_a_stream_with_stdout_when_the_file_is_one(sub: Suite) {
    let _wd = watchdog(
        "stderr_goes_to_its_own_fd_and_shares_a_stream_with_stdout_when_the_file_is_one",
        120,
    );
    let (out, out_path) = temp_file("out.txt");
    let (err, err_path) = temp_file("err.txt");
    let rt = builder(sub)
        .stdout_fd(out.as_raw_fd())
        .stderr_fd(err.as_raw_fd())
        .build()
        .unwrap();
    rt.launch(1, 2, || {
        println!("out {}", gpuio::device::thread_idx());
        eprintln!("err {}", gpuio::device::thread_idx());
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    assert_eq!(sorted_lines(out_path), ["out 0", "out 1"]);
    assert_eq!(sorted_lines(err_path), ["err 0", "err 1"]);

    // `> file 2>&1`: both go to one file. Two positional streams would overwrite each
    // other at the same offsets; one shared stream keeps every line.
    let (both, both_path) = temp_file("both.txt");
    let rt = builder(sub)
        .stdout_fd(both.as_raw_fd())
        .stderr_fd(both.as_raw_fd())
        .build()
        .unwrap();
    rt.launch(1, 8, || {
        for i in 0..500 {
            println!("t={} i={i}", gpuio::device::thread_idx());
            eprintln!("t={} i={i}", 8 + gpuio::device::thread_idx());
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    check_lines(&std::fs::read(both_path).unwrap(), 16, 500);
}

pub(crate) fn host_writes_between_kernels_stay_in_order(sub: Suite) {
    let _wd = watchdog("host_writes_between_kernels_stay_in_order", 120);
    let (f, path) = temp_file("interleave.txt");
    let mut file = f.try_clone().unwrap();
    let rt = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
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

pub(crate) fn positional_writes_land_at_their_offset_wherever_the_fd_points(sub: Suite) {
    // A regular file is written with pwrite at the stream's offsets: moving the fd's own
    // offset while a kernel runs changes nothing (write(2) would follow it).
    let _wd = watchdog("positional_writes_land_at_their_offset_wherever_the_fd_points", 60);
    let (f, path) = temp_file("positional.txt");
    let rt = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
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

pub(crate) fn a_stream_that_printed_nothing_leaves_a_shared_offset_alone(sub: Suite) {
    let _wd = watchdog("a_stream_that_printed_nothing_leaves_a_shared_offset_alone", 60);
    // `> log 2>&1`: the runtime's stderr fd shares its file offset with another fd that the
    // host writes to. The kernels print only to stdout (another file); the host's own lines
    // must not be overwritten when the runtime synchronizes or drops.
    let (log, log_path) = temp_file("shared-offset.txt");
    let mut host_fd = log.try_clone().unwrap(); // same open file description, same offset
    let (out, _) = temp_file("kernel-out.txt");
    for round in 0..3 {
        use std::io::Write;
        let rt = builder(sub)
            .stdout_fd(out.as_raw_fd())
            .stderr_fd(log.as_raw_fd())
            .build()
            .unwrap();
        rt.launch(1, 2, || println!("kernel line")).unwrap();
        rt.synchronize().unwrap();
        writeln!(host_fd, "host {round} after synchronize").unwrap();
        drop(rt);
        writeln!(host_fd, "host {round} after drop").unwrap();
    }
    let text = std::fs::read_to_string(log_path).unwrap();
    let expected: String = (0..3)
        .map(|r| format!("host {r} after synchronize\nhost {r} after drop\n"))
        .collect();
    assert_eq!(
        text, expected,
        "the runtime moved a shared offset it had not written through"
    );
}

pub(crate) fn two_runtimes_printing_to_one_file_at_once_lose_nothing(sub: Suite) {
    // A runtime per GPU, both printing to one redirected stdout: each would write the file
    // at positions of its own from the same offset, over the other's lines. Both append
    // instead (host/src/runtime/print_files.rs): every line of both, each whole and in its thread's order,
    // and the host's line, written once both synchronized, after them.
    let _wd = watchdog("two_runtimes_printing_to_one_file_at_once_lose_nothing", 120);
    let (f, path) = temp_file("two-runtimes.txt");
    let (threads, lines) = (16u64, 4000u64);
    for round in 0..2 {
        let a = builder(sub)
            .stdout_fd(f.as_raw_fd())
            .log_bytes(8 << 20)
            .build()
            .unwrap();
        let b = builder(sub)
            .stdout_fd(f.as_raw_fd())
            .log_bytes(8 << 20)
            .build()
            .unwrap();
        for (r, rt) in [(0, &a), (1, &b)] {
            rt.launch(1, threads as u32, move || {
                let t = gpuio::device::global_thread_idx();
                for i in 0..lines {
                    println!("r={r} t={t} i={i} round={round}");
                }
            })
            .unwrap();
        }
        a.synchronize().unwrap();
        b.synchronize().unwrap();
    }
    // The fd's offset was left at the end: the host's write follows the kernels' lines.
    use std::io::Write;
    (&f).write_all(b"host\n").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut next = std::collections::HashMap::new();
    let mut body = text.strip_suffix("host\n").expect("the host's line is last").lines();
    let mut n = 0;
    for line in body.by_ref() {
        let f: Vec<u64> = line
            .split(' ')
            .map(|kv| {
                kv.split_once('=')
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or_else(|| panic!("torn line {line:?}"))
            })
            .collect();
        let [r, t, i, round] = f[..] else {
            panic!("torn line {line:?}")
        };
        let want = next.entry((r, t)).or_insert(0u64);
        assert_eq!(
            i + round * lines,
            *want,
            "runtime {r} thread {t}: line out of order, lost or doubled"
        );
        *want += 1;
        n += 1;
    }
    assert_eq!(n, 2 * 2 * threads * lines, "lines lost");
}

pub(crate) fn a_runtime_that_would_overwrite_another_ones_running_kernel_says_why(sub: Suite) {
    // The file holds 12 bytes and `a`'s fd stands at 0: alone, `a` writes over them at
    // positions of its own, as write(2) would. `b`, built meanwhile on the same file, would
    // append into the range `a` is writing: it is refused until `a` synchronized; then both
    // append. A runtime that appends (the fd at the file's end) holds no one off: see
    // two_runtimes_printing_to_one_file_at_once_lose_nothing.
    let _wd = watchdog(
        "a_runtime_that_would_overwrite_another_ones_running_kernel_says_why",
        60,
    );
    let (f, path) = temp_file("held-off.txt");
    std::fs::write(&path, b"0123456789AB").unwrap();
    let a = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
    let go = Arc::new(AtomicBool::new(false));
    let go2 = go.clone();
    a.launch(1, 1, move || {
        println!("a 1");
        while !go2.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        println!("a 2");
    })
    .unwrap();
    let b = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
    let refused = b.launch(1, 1, || println!("b"));
    assert!(
        matches!(&refused, Err(Error::Config(m)) if m.contains("synchronize that runtime")),
        "{refused:?}"
    );
    go.store(true, Ordering::Release);
    a.synchronize().unwrap();
    b.launch(1, 1, || println!("b")).unwrap();
    b.synchronize().unwrap();
    a.launch(1, 1, || println!("a 3")).unwrap();
    a.synchronize().unwrap();
    drop((a, b));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 1\na 2\n89ABb\na 3\n");
}
