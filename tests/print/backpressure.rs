//! Backpressure: 64 threads' 100,000 lines into a file, a tiny ring and arena, a slow pipe
//! reader, and lines near a tiny log's size: the writers wait for room, nothing is lost,
//! nothing hangs.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::{eprintln, println};

use crate::common::pipes::{slow_reader, small_pipe};
use crate::common::suite_builder as builder;
use crate::common::warp::run_warps;
use crate::common::{check_lines, stress_kernel, temp_file, watchdog, Suite};

pub(crate) fn sixty_four_threads_hundred_thousand_lines_into_a_file(sub: Suite) {
    let _wd = watchdog("sixty_four_threads_hundred_thousand_lines_into_a_file", 120);
    let (f, path) = temp_file("many.txt");
    let rt = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
    assert_eq!(rt.submission(), sub.submission);
    rt.launch(1, 64, stress_kernel(100_000)).unwrap();
    rt.synchronize().unwrap();
    assert!(rt.stats().sqes > 0);
    assert_eq!(rt.stats().stray_completions, 0);
    drop(rt);
    check_lines(&std::fs::read(&path).unwrap(), 64, 100_000);
}

pub(crate) fn tiny_ring_and_arena_apply_backpressure(sub: Suite) {
    let _wd = watchdog("tiny_ring_and_arena_apply_backpressure", 120);
    let (f, path) = temp_file("tiny.txt");
    let log = 256u64;
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .sq_entries(8)
        .log_bytes(log as usize)
        .max_flights(2)
        .build()
        .unwrap();
    rt.launch(4, 8, stress_kernel(2_000)).unwrap();
    rt.synchronize().unwrap();
    let out = std::fs::read(&path).unwrap();
    // The 256-byte log was filled and recycled hundreds of times, and the 8-entry SQ
    // wrapped many times: producers must have waited for space, and nothing was dropped.
    let sqes = rt.stats().sqes as u64;
    assert!(out.len() as u64 > 100 * log, "output {} bytes", out.len());
    assert!(
        sqes >= out.len() as u64 / log,
        "{sqes} SQEs for {} bytes through a {log}-byte log",
        out.len()
    );
    assert!(sqes > 8 * 10, "SQ of 8 wrapped only {sqes} times");
    drop(rt);
    check_lines(&out, 32, 2_000);
}

pub(crate) fn a_slow_pipe_reader_loses_nothing_and_the_writers_wait(sub: Suite) {
    let _wd = watchdog("a_slow_pipe_reader_loses_nothing_and_the_writers_wait", 120);
    // A one-page pipe, so the writers outrun the reader at once.
    let (r, w) = small_pipe();
    let start = Instant::now();
    let reader = slow_reader(r);

    let threads = 8u64;
    let lines = 1_000u64; // ~15 KB per thread, ~120 KB: over 100 reads of 1 KiB, >= 100 ms
    let last_line_at = Arc::new(AtomicU64::new(0));
    let rt = builder(sub).stdout_fd(w.as_raw_fd()).log_bytes(4096).build().unwrap();
    let stamp = last_line_at.clone();
    rt.launch(1, threads as u32, move || {
        let t = gpuio::device::global_thread_idx();
        for i in 0..lines {
            println!("t={t} i={i}");
        }
        stamp.fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    drop(w);
    let out = reader.join().unwrap();
    check_lines(&out, threads, lines);
    // The writers could not finish before the reader had taken most of the output: they
    // waited (backpressure) instead of dropping or buffering without bound.
    let waited = Duration::from_micros(last_line_at.load(Ordering::Relaxed));
    assert!(
        waited > Duration::from_millis(50),
        "writers finished after {waited:?}: they did not wait for the reader"
    );
}

/// A serial stream (a pipe) with a 128-byte log, short lines between lines of nearly the
/// log's size, from single threads and from warps (whose lanes' lines form one record).
/// A record of more than the log less a chunk waits for room that needs the bytes just
/// before it released, and those sit in a chunk that the record's own bytes keep from being
/// whole: such a record goes out one lane at a time instead (`print::emit`). Before that,
/// this hung in its first round.
pub(crate) fn a_tiny_log_with_lines_near_its_size_does_not_hang(sub: Suite) {
    let _wd = watchdog("a_tiny_log_with_lines_near_its_size_does_not_hang", 120);
    let (r, w) = small_pipe();
    let reader = slow_reader(r);
    let rt = builder(sub)
        .stdout_fd(w.as_raw_fd())
        .stderr_fd(w.as_raw_fd())
        .log_bytes(128)
        .sq_entries(8)
        .hang_timeout(Some(Duration::from_secs(5)))
        .build()
        .unwrap();
    let (rounds, prints) = (10usize, 50usize);
    for round in 0..rounds {
        rt.launch(1, 1, move || {
            for i in 0..prints {
                println!("s{i}");
                eprintln!("{}", "x".repeat(100 + (i * 7 + round) % 27));
            }
        })
        .unwrap();
        if let Err(e) = rt.synchronize() {
            panic!("threads, round {round}: {e}");
        }
    }
    // Warps of 4 lanes: a record of 4 short lines, then one of 4 lines of 21-28 bytes
    // (records of 94, 98 or 102 bytes: those of 94 fit the log less a chunk, 96 bytes; the
    // others go out lane by lane).
    let (warps, lanes) = (2usize, 4usize);
    let ctx = rt.context().expect("the CPU backend keeps its context in host memory");
    let stream = ctx.stream(false);
    run_warps(&rt, warps, lanes, |w, g| {
        let lane = g.lane;
        for i in 0..prints {
            gpuio::device::protocol::print::emit(g, ctx, stream, true, format_args!("{w}{lane}"));
            let pad = "y".repeat(16 + (i + lane * 3) % 8);
            gpuio::device::protocol::print::emit(g, ctx, stream, true, format_args!("{w} {lane} {pad}"));
        }
    });
    if let Err(e) = rt.synchronize() {
        panic!("warps: {e}");
    }
    drop(rt);
    drop(w);
    let out = String::from_utf8(reader.join().unwrap()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), rounds * prints * 2 + warps * lanes * prints * 2);
    // Every line whole: what each thread printed, once, in its order.
    let mut seen: std::collections::HashMap<String, Vec<&str>> = Default::default();
    for line in &lines {
        // A thread's lines start with `s` or `x`; a lane's with its warp and lane numbers
        // (a torn line lands under some other key, and the checks below fail on it).
        let who = if line.starts_with(['s', 'x']) {
            "thread".to_string()
        } else {
            line.chars().filter(|&c| c != ' ').take(2).collect()
        };
        seen.entry(who).or_default().push(line);
    }
    let thread: Vec<String> = (0..rounds)
        .flat_map(|round| (0..prints).flat_map(move |i| [format!("s{i}"), "x".repeat(100 + (i * 7 + round) % 27)]))
        .collect();
    assert!(
        seen["thread"].iter().eq(thread.iter()),
        "the threads' lines, torn or out of order"
    );
    for w in 0..warps {
        for lane in 0..lanes {
            let expected: Vec<String> = (0..prints)
                .flat_map(|i| {
                    [
                        format!("{w}{lane}"),
                        format!("{w} {lane} {}", "y".repeat(16 + (i + lane * 3) % 8)),
                    ]
                })
                .collect();
            let got = seen.get(&format!("{w}{lane}")).map(Vec::as_slice).unwrap_or(&[]);
            assert!(got.iter().eq(expected.iter()), "warp {w} lane {lane}: {got:?}");
        }
    }
    assert_eq!(seen.len(), 1 + warps * lanes);
}
