//! Faults of the runtime's life, on the CPU backend against the machine's real io_uring:
//! dropping the runtime with writes in flight, SQPOLL asleep and then a burst, and rings
//! created and destroyed by the thousand (1,000 here; CI's stress step runs 10,000 with
//! `GPUIO_FAULTS_RINGS=10000`).
//!
//! Each test checks that nothing is lost and that nothing hangs or leaks. The rings
//! count the process's fds and threads, so they run in a child process of this test binary
//! (`fault_child`), which is killed if it runs too long. RELIABILITY.md records what each
//! one found.

#[allow(dead_code)]
mod common;

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gpuio::device::println;

use common::child::report;
use common::dirs::process_dir;
use common::faults::{builder, check_cut, create, total_bytes};
use common::pipes::{slow_reader, small_pipe};
use common::{stress_kernel, watchdog};

fault_children!("runs as a child process of the lifecycle tests (GPUIO_TEST_CHILD), not by itself", {
    "rings" => child_rings(),
});

// ------------------------------------------------------------------ drop, in flight

#[test]
fn dropping_the_runtime_with_writes_in_flight_drains_them_all() {
    let _wd = watchdog("dropping_the_runtime_with_writes_in_flight_drains_them_all", 120);
    let (r, w) = small_pipe();
    let reader = slow_reader(r);
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
    let path = process_dir().join("asleep.txt");
    let f = create(&path, false);
    // SQPOLL (asked for: the CPU backend's rings have none by default) sleeps after 1 ms
    // without work. A 4 KiB log: a burst cannot finish without completions, so without a
    // wakeup it would hang.
    let rt = builder()
        .sqpoll(true)
        .stdout_fd(f.as_raw_fd())
        .sq_thread_idle_ms(1)
        .log_bytes(4096)
        .build()
        .unwrap();
    let ctx = rt.context().expect("CPU backend");
    // SAFETY: the kernel's SQ flags word, in the ring memory the runtime keeps mapped.
    let flags = unsafe { &*ctx.rings[0].sq_flags };
    let (threads, lines) = (4u64, 2_000u64);
    let rounds = 3;
    for round in 0..rounds {
        // At least 150 ms idle, and until SQPOLL says it sleeps (it may be scheduled late
        // on a loaded machine; 1 ms of idleness is all it needs).
        std::thread::sleep(Duration::from_millis(150));
        let until = Instant::now() + Duration::from_secs(10);
        while flags.load(Ordering::Acquire) & gpuio::device::protocol::uapi::IORING_SQ_NEED_WAKEUP == 0 {
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

// ------------------------------------------------------------------ rings by the thousand

#[test]
fn rings_created_and_destroyed_by_the_thousand_leak_nothing() {
    let _wd = watchdog("rings_created_and_destroyed_by_the_thousand_leak_nothing", 590);
    let run = run_child("rings", Duration::from_secs(580));
    run.assert_ok("rings created and destroyed");
    assert_eq!(run.get("checked"), Some("1"), "{}", run.stdout);
    eprintln!("{}", run.reports("\n"));
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
        fds: fds_not_in_proc(),
        threads: count("/proc/self/task"),
        maps: std::fs::read_to_string("/proc/self/maps")
            .map(|m| m.lines().count())
            .unwrap_or(0),
        rss_kb: kb("VmRSS:"),
        pinned_kb: kb("VmPin:"),
    }
}

/// This process's open fds but those on `/proc` files: the watchdog thread reads
/// `/proc/loadavg` and `/proc/self/task/*/stat` every 50 ms (and this count reads
/// `/proc/self/fd`), so an fd there may be open for a moment whatever the rings did; on a
/// loaded machine the watchdog can be preempted holding one, and a plain count of
/// `/proc/self/fd` then saw one fd more than before.
fn fds_not_in_proc() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|target| !target.starts_with("/proc"))
                .count()
        })
        .unwrap_or(0)
}

/// What each open fd refers to, for a failure's message.
fn fd_targets() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|t| t.display().to_string())
                .collect()
        })
        .unwrap_or_default()
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

/// `GPUIO_FAULTS_RINGS` (default 1,000: about 20 s on 2 cores) runtimes (ring, SQPOLL
/// thread, waker thread, mappings) created and dropped; every
/// 100th also runs a kernel that prints. Small rings and logs, and SQPOLL idle after 1 ms:
/// a runtime costs its setup and teardown, not page-zeroing (logs are populated at
/// creation) nor an SQPOLL thread spinning 50 ms on one of CI's two cores.
fn child_rings() {
    let n: usize = std::env::var("GPUIO_FAULTS_RINGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
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
    assert_eq!(after.fds, before.fds, "fds leaked; open now: {:?}", fd_targets());
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
