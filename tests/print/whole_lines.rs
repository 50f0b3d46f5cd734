//! Lines stay whole: lines longer than the log or than fits it, stdout's and stderr's logs of
//! different sizes (and a stderr size that is refused), a warp's println as one record.

use std::os::fd::AsRawFd;

use gpuio::device::{eprintln, println};
use gpuio::{Backend, Runtime};

use crate::common::suite_builder as builder;
use crate::common::warp::run_warps;
use crate::common::{temp_file, watchdog, Suite};

pub(crate) fn long_lines_stay_whole(sub: Suite) {
    let _wd = watchdog("long_lines_stay_whole", 120);
    // A log smaller than one line: 64 KiB and 200 KiB lines go out in pieces, whole.
    lines_of_one_letter_stay_whole(sub, "long.txt", 4096, &[100, 64 * 1024, 200 * 1024]);
}

struct Repeat(char, usize);

impl std::fmt::Display for Repeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chunk: String = std::iter::repeat_n(self.0, 1000).collect();
        let mut left = self.1;
        while left > 0 {
            let n = left.min(1000);
            f.write_str(&chunk[..n])?;
            left -= n;
        }
        Ok(())
    }
}

pub(crate) fn lines_that_fit_the_line_buffer_but_not_the_log_stay_whole(sub: Suite) {
    let _wd = watchdog("lines_that_fit_the_line_buffer_but_not_the_log_stay_whole", 60);
    // A 64-byte log, and lines of 65 to 250 bytes: short enough for the stack buffer, too
    // long to be one record in the log: such a line must go out in pieces, not wait for room
    // the log can never have.
    lines_of_one_letter_stay_whole(sub, "small_log.txt", 64, &[10, 64, 100, 250]);
}

/// Four threads each print a line of each length in `lens`, all of one letter (its own),
/// through a log of `log_bytes` and an 8-entry SQ: every line arrives whole (no letter of
/// another thread inside it), each thread's in order, into the file `name`.
fn lines_of_one_letter_stay_whole(sub: Suite, name: &str, log_bytes: usize, lens: &'static [usize]) {
    let (f, path) = temp_file(name);
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .log_bytes(log_bytes)
        .sq_entries(8)
        .build()
        .unwrap();
    rt.launch(1, 4, move || {
        let t = gpuio::device::thread_idx() as u8;
        let c = (b'a' + t) as char;
        for &len in lens {
            println!("{}", Repeat(c, len));
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let out = std::fs::read_to_string(path).unwrap();
    let mut per_thread = std::collections::HashMap::<char, Vec<usize>>::new();
    for line in out.lines() {
        let c = line.chars().next().unwrap();
        assert!(line.chars().all(|x| x == c), "a line was torn by another thread's line");
        per_thread.entry(c).or_default().push(line.len());
    }
    assert_eq!(per_thread.len(), 4);
    for got in per_thread.values() {
        assert_eq!(got, lens);
    }
}

/// stdout's log and stderr's have different sizes (`Builder::stderr_log_bytes`): stderr's
/// 64 bytes, so that most of its lines go out in pieces and its writers wait for room, while
/// stdout's 4 KiB log sits right before it in the same mapping. Every line of both streams
/// must arrive whole, in each thread's order, in its own file.
pub(crate) fn logs_of_two_sizes_keep_every_line_of_both_streams(sub: Suite) {
    let _wd = watchdog("logs_of_two_sizes_keep_every_line_of_both_streams", 120);
    let (out, out_path) = temp_file("out_4k.txt");
    let (err, err_path) = temp_file("err_64.txt");
    let rt = builder(sub)
        .stdout_fd(out.as_raw_fd())
        .stderr_fd(err.as_raw_fd())
        .log_bytes(4096)
        .stderr_log_bytes(64)
        .sq_entries(8)
        .build()
        .unwrap();
    rt.launch(1, 8, || {
        let t = gpuio::device::thread_idx();
        let c = (b'a' + t as u8) as char;
        for i in 0..40usize {
            println!("{t} {i} {}", Repeat(c, 5 + i * 3));
            eprintln!("{t} {i} {}", Repeat(c, 100 - i));
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(rt.stats().stray_completions, 0);
    drop(rt);
    for (path, len) in [
        (out_path, &(|i: usize| 5 + i * 3) as &dyn Fn(usize) -> usize),
        (err_path, &|i: usize| 100 - i),
    ] {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut next = [0usize; 8];
        for line in text.lines() {
            let mut parts = line.splitn(3, ' ');
            let t: usize = parts.next().unwrap().parse().unwrap();
            let i: usize = parts.next().unwrap().parse().unwrap();
            let body = parts.next().unwrap();
            assert_eq!(
                i,
                next[t],
                "{}: thread {t}'s lines out of order or lost",
                path.display()
            );
            next[t] += 1;
            let c = (b'a' + t as u8) as char;
            assert!(
                body.len() == len(i) && body.chars().all(|x| x == c),
                "{}: a torn line: {line}",
                path.display()
            );
        }
        assert_eq!(next, [40; 8], "{}: lines missing", path.display());
    }
}

#[test]
fn a_stderr_log_size_that_is_not_a_power_of_two_is_refused() {
    let r = Runtime::builder().backend(Backend::Cpu).stderr_log_bytes(100).build();
    assert!(
        matches!(&r, Err(gpuio::Error::Config(m)) if m.contains("stderr_log_bytes must be a power of two")),
        "accepted, or refused for another reason"
    );
}

pub(crate) fn a_warp_println_is_one_record_in_lane_order(sub: Suite) {
    let _wd = watchdog("a_warp_println_is_one_record_in_lane_order", 120);
    let (f, path) = temp_file("warp.txt");
    let lanes = 4;
    let warps = 6;
    let prints = 300;
    // A small log and many warps: records would interleave if lanes reserved separately.
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .log_bytes(1024)
        .sq_entries(8)
        .build()
        .unwrap();
    let ctx = rt.context().expect("the CPU backend keeps its context in host memory");
    let stream = ctx.stream(false);
    run_warps(&rt, warps, lanes, |w, g| {
        let lane = g.lane;
        for i in 0..prints {
            // Lanes print lines of different lengths, as real lanes would.
            gpuio::device::protocol::print::emit(
                g,
                ctx,
                stream,
                true,
                format_args!("w={w} i={i} lane={lane}{}", ".".repeat(lane * 3)),
            );
        }
    });
    let sqes_before_drain = rt.stats().sqes;
    rt.synchronize().unwrap();
    drop(rt);
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), warps * lanes * prints);
    // Every group of `lanes` consecutive lines is one warp's print, lanes 0..n in order.
    for rec in lines.chunks(lanes) {
        let head = rec[0].split(" lane=").next().unwrap();
        for (lane, line) in rec.iter().enumerate() {
            assert_eq!(
                *line,
                format!("{head} lane={lane}{}", ".".repeat(lane * 3)),
                "record torn: {rec:?}"
            );
        }
    }
    // One reservation per warp print: never more SQEs than warp prints (group commit
    // usually folds many records into one SQE).
    assert!(sqes_before_drain as usize <= warps * prints, "{sqes_before_drain} SQEs");
}
