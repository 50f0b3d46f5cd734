//! println! end to end on the CPU backend, over both submission paths: the machine's real
//! io_uring (SQPOLL), tests `io_uring::*`, and the host-thread fallback, tests
//! `host_thread::*` (see `over_submissions!` in tests/common).
//!
//! Each test checks one of the protocol's invariants (docs/PROTOCOL.md) and fails if it is
//! broken.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::{eprintln, print, println};
use gpuio::{Backend, Error, Runtime};

#[allow(dead_code)]
mod common;
use common::pipes::{slow_reader, small_pipe};
use common::warp::run_warps;
use common::{check_lines, skip, stress_kernel, temp_file, watchdog, Suite};

use common::suite_builder as builder;

over_submissions!(
    sixty_four_threads_hundred_thousand_lines_into_a_file,
    tiny_ring_and_arena_apply_backpressure,
    a_slow_pipe_reader_loses_nothing_and_the_writers_wait,
    printing_to_a_closed_fd_is_reported_and_nothing_hangs,
    formatting_matches_std,
    a_locked_stdouts_pieces_make_whole_lines,
    long_lines_stay_whole,
    lines_that_fit_the_line_buffer_but_not_the_log_stay_whole,
    stderr_goes_to_its_own_fd_and_shares_a_stream_with_stdout_when_the_file_is_one,
    logs_of_two_sizes_keep_every_line_of_both_streams,
    host_writes_between_kernels_stay_in_order,
    positional_writes_land_at_their_offset_wherever_the_fd_points,
    a_stream_that_printed_nothing_leaves_a_shared_offset_alone,
    two_runtimes_printing_to_one_file_at_once_lose_nothing,
    a_runtime_that_would_overwrite_another_ones_running_kernel_says_why,
    a_warp_println_is_one_record_in_lane_order,
    a_tiny_log_with_lines_near_its_size_does_not_hang,
    a_quiet_kernel_costs_few_waker_looks_and_its_late_lines_all_get_out,
    a_thread_printing_alone_batches_its_lines,
    a_print_inside_a_display_comes_out_once_before_its_line,
    a_display_that_fails_ends_its_line_with_a_mark_and_is_reported,
);

fn sixty_four_threads_hundred_thousand_lines_into_a_file(sub: Suite) {
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

fn tiny_ring_and_arena_apply_backpressure(sub: Suite) {
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

fn a_slow_pipe_reader_loses_nothing_and_the_writers_wait(sub: Suite) {
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

fn printing_to_a_closed_fd_is_reported_and_nothing_hangs(sub: Suite) {
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

fn formatting_matches_std(sub: Suite) {
    let _wd = watchdog("formatting_matches_std", 120);
    let (f, path) = temp_file("fmt.txt");
    let rt = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
    rt.launch(1, 1, || {
        println!(
            "{} {:?} {:>6.2} {:#x} {:08b} {:e}",
            "str",
            ("tuple", 1),
            -12.3456f64,
            255u32,
            5u8,
            1234.5f32
        );
        print!("no newline, ");
        print!("then one\n");
        println!();
        println!("{{braces}} {name}", name = "named");
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let expected = format!(
        "{} {:?} {:>6.2} {:#x} {:08b} {:e}\nno newline, then one\n\n{{braces}} {name}\n",
        "str",
        ("tuple", 1),
        -12.3456f64,
        255u32,
        5u8,
        1234.5f32,
        name = "named"
    );
    assert_eq!(std::fs::read_to_string(path).unwrap(), expected);
}

/// `io::stdout().lock()` as std's: 32 threads each build lines from many `write!` pieces
/// at once; every line comes out whole (no other thread's piece inside it), in each
/// thread's order; a line longer than the buffer comes out in pieces of its size, in
/// order; the unfinished line comes out at the drop; `io::stderr()` writes at once; code
/// generic over the io traits writes through a lock.
fn a_locked_stdouts_pieces_make_whole_lines(sub: Suite) {
    let _wd = watchdog("a_locked_stdouts_pieces_make_whole_lines", 120);
    let (f, path) = temp_file("locked.txt");
    let (e, err_path) = temp_file("locked-err.txt");
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .stderr_fd(e.as_raw_fd())
        .build()
        .unwrap();
    rt.launch(1, 32, || {
        use gpuio::device::io;
        let t = gpuio::device::thread_idx();
        let mut out = io::stdout().lock();
        for i in 0..20 {
            write!(out, "t={t} i={i}:").unwrap();
            for k in 0..10 {
                write!(out, " {k}").unwrap();
            }
            writeln!(out, " end").unwrap();
        }
        // 512 bytes without a newline, then the drop: two pieces of LINE_BUF (256) bytes,
        // of 64 numbered 8-byte units `<letter><t:03><k:04>`.
        for k in 0..64 {
            write!(out, "{}", (b'A' + (t % 26) as u8) as char).unwrap();
            write!(out, "{t:03}{k:04}").unwrap();
        }
        drop(out);
        let mut err = io::stderr();
        writeln!(err, "err t={t}").unwrap();
        // Code generic over the io traits takes stderr's lock; bytes that are not UTF-8
        // print as U+FFFD.
        fn through_the_traits<W: io::Write>(w: &mut W, t: u32) {
            w.write_all(b"trait ").unwrap();
            write!(w, "t={t}").unwrap();
            w.write_all(&[b' ', 0xff, b'\n']).unwrap();
        }
        through_the_traits(&mut io::stderr().lock(), t);
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let out = std::fs::read_to_string(path).unwrap();
    let mut next = [0u32; 32];
    let mut tails: std::collections::HashMap<u32, String> = Default::default();
    let mut rest = out.as_str();
    // The unfinished tails are printed without newlines, each 256-byte piece a record of
    // its own, between lines: runs of one thread's 8-byte `<letter><t:03><k:04>` units.
    while let Some(line_end) = rest.find('\n') {
        let line = &rest[..line_end];
        let (head, body) = line.split_once(':').unwrap_or_else(|| panic!("a torn line: {line:?}"));
        let (t, i) = head
            .strip_prefix("t=")
            .and_then(|h| h.split_once(" i="))
            .unwrap_or_else(|| panic!("{line:?}"));
        let (t, i): (usize, u32) = (t.parse().unwrap(), i.parse().unwrap());
        assert_eq!(
            body, " 0 1 2 3 4 5 6 7 8 9 end",
            "a line torn by another thread's piece"
        );
        assert_eq!(i, next[t], "thread {t}'s lines out of order");
        next[t] += 1;
        rest = &rest[line_end + 1..];
        while let Some(c) = rest.chars().next().filter(|c| c.is_ascii_uppercase()) {
            let unit = &rest[..8];
            let number =
                |digits: &str| -> usize { digits.parse().unwrap_or_else(|_| panic!("a torn tail piece: {unit:?}")) };
            let (t, k) = (number(&unit[1..4]) as u32, number(&unit[4..]));
            assert_eq!(c, (b'A' + (t % 26) as u8) as char);
            let tail = tails.entry(t).or_default();
            assert_eq!(k, tail.len() / 8, "thread {t}'s tail out of order at {unit:?}");
            tail.push_str(unit);
            rest = &rest[8..];
        }
    }
    assert!(rest.is_empty(), "text after the last line is not a tail: {rest:?}");
    assert_eq!(next, [20; 32], "every thread's 20 lines");
    assert_eq!(tails.len(), 32);
    for (t, tail) in &tails {
        assert_eq!(tail.len(), 512, "thread {t}'s unfinished line, whole at its drop");
    }
    let err = std::fs::read_to_string(err_path).unwrap();
    let mut errs: Vec<&str> = err.lines().collect();
    errs.sort_unstable();
    let mut want: Vec<String> = (0..32)
        .flat_map(|t| [format!("err t={t}"), format!("trait t={t} \u{FFFD}")])
        .collect();
    want.sort_unstable();
    assert_eq!(errs, want);
}

fn long_lines_stay_whole(sub: Suite) {
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

fn lines_that_fit_the_line_buffer_but_not_the_log_stay_whole(sub: Suite) {
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
fn logs_of_two_sizes_keep_every_line_of_both_streams(sub: Suite) {
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

fn stderr_goes_to_its_own_fd_and_shares_a_stream_with_stdout_when_the_file_is_one(sub: Suite) {
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
    let mut o: Vec<String> = std::fs::read_to_string(out_path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let mut e: Vec<String> = std::fs::read_to_string(err_path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    o.sort();
    e.sort();
    assert_eq!(o, ["out 0", "out 1"]);
    assert_eq!(e, ["err 0", "err 1"]);

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

fn host_writes_between_kernels_stay_in_order(sub: Suite) {
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

fn positional_writes_land_at_their_offset_wherever_the_fd_points(sub: Suite) {
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

fn a_stream_that_printed_nothing_leaves_a_shared_offset_alone(sub: Suite) {
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

fn two_runtimes_printing_to_one_file_at_once_lose_nothing(sub: Suite) {
    // A runtime per GPU, both printing to one redirected stdout: each would write the file
    // at positions of its own from the same offset, over the other's lines. Both append
    // instead (print_files.rs): every line of both, each whole and in its thread's order,
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

fn a_runtime_that_would_overwrite_another_ones_running_kernel_says_why(sub: Suite) {
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

/// A serial stream (a pipe) with a 128-byte log, short lines between lines of nearly the
/// log's size, from single threads and from warps (whose lanes' lines form one record).
/// A record of more than the log less a chunk waits for room that needs the bytes just
/// before it released, and those sit in a chunk that the record's own bytes keep from being
/// whole: such a record goes out one lane at a time instead (`print::emit`). Before that,
/// this hung in its first round.
fn a_tiny_log_with_lines_near_its_size_does_not_hang(sub: Suite) {
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

fn a_warp_println_is_one_record_in_lane_order(sub: Suite) {
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

/// Forcing a GPU backend gives a runtime on it where that GPU is present, and elsewhere
/// fails with `BackendUnavailable` naming the backend and why; never anything else.
#[test]
fn forcing_a_gpu_backend_runs_on_it_or_says_why_not() {
    const TEST: &str = "forcing_a_gpu_backend_runs_on_it_or_says_why_not";
    let _wd = watchdog(TEST, 120);
    let mut explained = 0;
    for backend in [Backend::Cuda, Backend::Hsa] {
        let name = backend.name();
        match Runtime::builder().backend(backend).build() {
            Ok(rt) => {
                assert_eq!(rt.backend(), backend, "forcing {name} gave another backend");
                std::eprintln!("the {name} backend is present here: {:?}", rt.device_name());
            }
            Err(Error::BackendUnavailable { backend: named, reason }) => {
                assert_eq!(
                    named, name,
                    "forcing {name}: the error names another backend ({reason})"
                );
                assert!(!reason.trim().is_empty(), "forcing {name}: no reason given");
                std::eprintln!("forcing {name}: unavailable: {reason}");
                explained += 1;
            }
            Err(e) => panic!("forcing {name}: expected a runtime or BackendUnavailable, got: {e}"),
        }
    }
    if explained == 0 {
        skip(
            TEST,
            "every GPU backend is available here, so no BackendUnavailable error was checked",
        );
    }
}

fn a_quiet_kernel_costs_few_waker_looks_and_its_late_lines_all_get_out(sub: Suite) {
    // Invariant 9, and what it costs: while a kernel computes without I/O the waker backs
    // off to a look a millisecond (at 50 µs, 300 ms would be 6,000 looks); the first SQE
    // after the quiet spell still finds a waker that wakes the consumer.
    let _wd = watchdog(
        "a_quiet_kernel_costs_few_waker_looks_and_its_late_lines_all_get_out",
        120,
    );
    let (f, path) = temp_file("quiet.txt");
    // The consumer sleeps after 1 ms without work. A 4 KiB log: the burst after the quiet
    // spell cannot finish without completions, so without a wakeup it would hang.
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .sq_thread_idle_ms(1)
        .log_bytes(4096)
        .build()
        .unwrap();
    let quiet = Duration::from_millis(300);

    let before = rt.stats();
    let started = Instant::now();
    rt.launch(1, 1, move || std::thread::sleep(quiet)).unwrap();
    rt.synchronize().unwrap();
    let (took, after) = (started.elapsed(), rt.stats());
    let looks = after.waker_looks - before.waker_looks;
    eprintln!(
        "quiet {took:?}: {looks} waker looks ({:.0}/s)",
        looks as f64 / took.as_secs_f64()
    );
    assert!(
        looks < 1000,
        "{looks} waker looks in {took:?} of a kernel without I/O: it polls as if I/O flowed"
    );
    assert!(
        looks >= 10,
        "{looks} waker looks in {took:?}: the waker stopped looking"
    );

    let (threads, lines) = (4u64, 2_000u64);
    let before = rt.stats();
    let started = Instant::now();
    rt.launch(1, threads as u32, move || {
        std::thread::sleep(quiet);
        let t = gpuio::device::global_thread_idx();
        for i in 0..lines {
            println!("t={t} i={i}");
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    let (took, after) = (started.elapsed(), rt.stats());
    eprintln!(
        "quiet then a burst {took:?}: {} SQEs, {} wakeups, {} waker looks",
        after.sqes - before.sqes,
        after.wakeups - before.wakeups,
        after.waker_looks - before.waker_looks
    );
    // SQPOLL, asleep after the quiet spell, consumes nothing until someone wakes it, and the
    // burst cannot finish without completions: only the waker can have woken it. (The
    // host-thread fallback also wakes itself every 100 ms, so there the burst may go out
    // without the waker.)
    if sub.submission == gpuio::Submission::IoUring {
        assert!(
            after.wakeups > before.wakeups,
            "the burst went out without a wakeup ({before:?} -> {after:?})"
        );
    }
    assert_eq!(after.stray_completions, 0);
    drop(rt);
    check_lines(&std::fs::read(&path).unwrap(), threads, lines);
}

/// A thread that prints alone does not wait for each of its writes: the lines it prints
/// while a write is out go together in the next (invariant 12 on the CPU backend: a flush
/// there leaves what it cannot send to the next flush or to the waker's rescue). A flusher
/// that waited for its own write made one write per line.
fn a_thread_printing_alone_batches_its_lines(sub: Suite) {
    let _wd = watchdog("a_thread_printing_alone_batches_its_lines", 120);
    let (f, path) = temp_file("alone.txt");
    let rt = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
    let lines = 20_000u64;
    rt.launch(1, 1, stress_kernel(lines)).unwrap();
    rt.synchronize().unwrap();
    let sqes = u64::from(rt.stats().sqes);
    drop(rt);
    check_lines(&std::fs::read(&path).unwrap(), 1, lines);
    assert!(
        sqes <= lines / 4,
        "{sqes} writes for {lines} lines from one thread: it waited for its writes"
    );
}

/// On the CPU backend's rings without SQPOLL a publishing thread rings the waker's
/// doorbell, and a flusher rings it only once it has released the stream: the waker it
/// wakes can preempt it at once, and inside its flush it would hold every later line for
/// its next turn among the computing threads. Here a thread's doorbell, wrapped, records
/// whether the stream's flush role was held when it rang (one printing thread: if it is, the
/// holder is the thread that rang).
#[test]
fn a_flusher_rings_the_doorbell_only_once_it_let_go_of_the_stream() {
    let _wd = watchdog("a_flusher_rings_the_doorbell_only_once_it_let_go_of_the_stream", 60);
    let (f, path) = temp_file("doorbell.txt");
    // io_uring entered by the waker (the CPU backend's default performs inline, where no
    // doorbell wakes anyone to submit).
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(gpuio::Submission::Auto)
        .sqpoll(false)
        .stdout_fd(f.as_raw_fd())
        .build()
        .unwrap();
    if rt.stats().sqpoll || rt.submission() != gpuio::Submission::IoUring {
        skip(
            "a_flusher_rings_the_doorbell_only_once_it_let_go_of_the_stream",
            "no io_uring here",
        );
        return;
    }
    let ctx = rt.context().expect("CPU backend");
    let (rings, inside) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let lines = 2_000u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            // The runtime's doorbell (the waker looks as while kernels run), and over it one
            // that counts; the waker's looks submit what it does not.
            let _driving = rt.host_thread();
            let (r, i) = (rings.clone(), inside.clone());
            let stream_at = ctx.stream(false) as *const gpuio::device::protocol::stream::Stream as usize;
            let _counting = gpuio::device::protocol::arch::host::install_doorbell(Some(Arc::new(move || {
                // SAFETY: the stream lives in the runtime's context, which outlives this
                // thread (the scope ends before `rt` drops).
                let stream = unsafe { &*(stream_at as *const gpuio::device::protocol::stream::Stream) };
                r.fetch_add(1, Ordering::Relaxed);
                if stream.flusher.busy() {
                    i.fetch_add(1, Ordering::Relaxed);
                }
            })));
            let g = gpuio::device::protocol::group::SingleLane;
            for n in 0..lines {
                gpuio::device::protocol::print::emit(&g, ctx, ctx.stream(false), true, format_args!("t=0 i={n}"));
            }
        });
    });
    rt.synchronize().unwrap();
    drop(rt);
    let (rings, inside) = (rings.load(Ordering::Relaxed), inside.load(Ordering::Relaxed));
    assert!(rings > 0, "no doorbell rang for {lines} lines");
    assert_eq!(inside, 0, "{inside} of {rings} rings came from inside a flush");
    check_lines(&std::fs::read(&path).unwrap(), 1, lines);
}

/// A `Display` whose `fmt` prints a line of its own (`inner t=T i=I`) and then writes `len`
/// letters `o`.
struct PrintsInside {
    t: u32,
    i: usize,
    len: usize,
}

impl std::fmt::Display for PrintsInside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        println!("inner t={} i={}", self.t, self.i);
        f.write_str(&"o".repeat(self.len))
    }
}

/// A print inside a `Display` comes out once, whole, before the line that formats it, for
/// lines that fit the stack buffer and longer ones (formatted twice: measured, then in
/// place). Before, the inner line of a long outer line came out three times (once per
/// formatting pass), and with a 256-byte log the outer line never came out: the inner
/// print of the in-place pass waited for room behind the outer line's own unwritten bytes
/// (a hang). Four threads at once, so that several hold their in-place marks together.
fn a_print_inside_a_display_comes_out_once_before_its_line(sub: Suite) {
    let _wd = watchdog("a_print_inside_a_display_comes_out_once_before_its_line", 120);
    const LENS: [usize; 5] = [10, 200, 300, 1000, 5000];
    for log in [4096, 256] {
        let (f, path) = temp_file("nested.txt");
        let rt = builder(sub)
            .stdout_fd(f.as_raw_fd())
            .log_bytes(log)
            .hang_timeout(Some(Duration::from_secs(10)))
            .build()
            .unwrap();
        rt.launch(1, 4, || {
            let t = gpuio::device::thread_idx();
            for (i, &len) in LENS.iter().enumerate() {
                println!("outer t={t} i={i} {} end", PrintsInside { t, i, len });
            }
        })
        .unwrap();
        if let Err(e) = rt.synchronize() {
            panic!("log of {log} bytes: {e}");
        }
        drop(rt);
        let out = std::fs::read_to_string(path).unwrap();
        let mut per_thread: std::collections::HashMap<u32, Vec<&str>> = Default::default();
        for line in out.lines() {
            let t = line
                .split_once("t=")
                .and_then(|(_, r)| r.split(' ').next())
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("log of {log} bytes: a torn line {line:?}"));
            per_thread.entry(t).or_default().push(line);
        }
        assert_eq!(per_thread.len(), 4, "log of {log} bytes: {out:?}");
        for (t, lines) in per_thread {
            let expected: Vec<String> = LENS
                .iter()
                .enumerate()
                .flat_map(|(i, &len)| {
                    [
                        format!("inner t={t} i={i}"),
                        format!("outer t={t} i={i} {} end", "o".repeat(len)),
                    ]
                })
                .collect();
            assert!(
                lines.iter().eq(expected.iter()),
                "log of {log} bytes, thread {t}: each inner line once, right before its outer line; got {:?}",
                lines.iter().map(|l| &l[..l.len().min(40)]).collect::<Vec<_>>()
            );
        }
    }
}

/// A `Display` that writes `part` and then returns `Err`.
struct FailsAfter(&'static str);

impl std::fmt::Display for FailsAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)?;
        Err(std::fmt::Error)
    }
}

/// A `Display` that returns `Err` ends its line there: the text written until then, the
/// mark, the newline; nothing after it in the format string. Each such line is counted and
/// `synchronize` reports it as a print error (before, the line came out cut, with no mark
/// and no error). Short lines (the stack buffer), lines that fit it only without the mark,
/// and long ones (formatted in place), with `println!` and `print!`, through a 256-byte
/// log; the lines around them are untouched.
fn a_display_that_fails_ends_its_line_with_a_mark_and_is_reported(sub: Suite) {
    let _wd = watchdog("a_display_that_fails_ends_its_line_with_a_mark_and_is_reported", 120);
    const MARK: &str = gpuio::device::protocol::print::FORMAT_ERROR;
    static LONG: std::sync::LazyLock<&'static str> = std::sync::LazyLock::new(|| "p".repeat(300).leak());
    let (f, path) = temp_file("fmt_error.txt");
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .log_bytes(256)
        .hang_timeout(Some(Duration::from_secs(10)))
        .build()
        .unwrap();
    let (threads, failing) = (4u32, 4u32);
    rt.launch(1, threads, || {
        let t = gpuio::device::thread_idx();
        println!("t={t} before");
        println!("t={t} short {} not reached", FailsAfter("part"));
        println!("t={t} long {} not reached", FailsAfter(&LONG));
        // Exactly the stack buffer with the mark and the newline, and one byte more.
        let fits = "f".repeat(256 - "t=0 ".len() - MARK.len() - 1);
        println!("t={t} {}", FailsAfter(fits.leak()));
        let over = "g".repeat(256 - "t=0 ".len() - MARK.len());
        println!("t={t} {}", FailsAfter(over.leak()));
        println!("t={t} after");
    })
    .unwrap();
    match rt.synchronize() {
        Err(Error::Print(p)) => {
            assert_eq!(p.outputs.len(), 1, "{p}");
            let o = &p.outputs[0];
            assert_eq!(o.format_errors, threads * failing, "{p}");
            assert_eq!((o.failed_writes, o.lost_bytes, o.lost_lines), (0, 0, 0), "{p}");
            assert!(p.to_string().contains("Display returned an error"), "{p}");
        }
        other => panic!("expected a print error naming the Display's, got {other:?}"),
    }
    // Reported once; the runtime goes on. `print!`: the mark, and no newline.
    rt.launch(1, 1, || {
        print!("t=9 no newline {} not reached", FailsAfter("part"));
        println!("|");
    })
    .unwrap();
    match rt.synchronize() {
        Err(Error::Print(p)) => assert_eq!(p.outputs[0].format_errors, 1, "{p}"),
        other => panic!("expected a print error naming the Display's, got {other:?}"),
    }
    rt.synchronize().unwrap();
    drop(rt);
    let out = std::fs::read_to_string(path).unwrap();
    let mut per_thread: std::collections::HashMap<&str, Vec<&str>> = Default::default();
    for line in out.lines() {
        per_thread
            .entry(line.split(' ').next().unwrap())
            .or_default()
            .push(line);
    }
    for t in 0..threads {
        let key = format!("t={t}");
        let expected = [
            format!("t={t} before"),
            format!("t={t} short part{MARK}"),
            format!("t={t} long {}{MARK}", *LONG),
            format!("t={t} {}{MARK}", "f".repeat(256 - 4 - MARK.len() - 1)),
            format!("t={t} {}{MARK}", "g".repeat(256 - 4 - MARK.len())),
            format!("t={t} after"),
        ];
        let got = per_thread.get(key.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        assert!(got.iter().eq(expected.iter()), "thread {t}: {got:?}");
    }
    assert_eq!(per_thread["t=9"], [format!("t=9 no newline part{MARK}|")]);
}
