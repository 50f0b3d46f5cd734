//! Formatting: as std's, a locked stdout's `write!` pieces making whole lines, a print inside
//! a `Display`, and a `Display` that fails.

use std::os::fd::AsRawFd;
use std::time::Duration;

use gpuio::device::{print, println};
use gpuio::Error;

use crate::common::suite_builder as builder;
use crate::common::{temp_file, watchdog, Suite};

pub(crate) fn formatting_matches_std(sub: Suite) {
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
pub(crate) fn a_locked_stdouts_pieces_make_whole_lines(sub: Suite) {
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
pub(crate) fn a_print_inside_a_display_comes_out_once_before_its_line(sub: Suite) {
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
pub(crate) fn a_display_that_fails_ends_its_line_with_a_mark_and_is_reported(sub: Suite) {
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

/// The device library's C `printf` (`gpuio_printf_args`, what a C++ kernel's `gpuio_printf`
/// calls) returns the bytes it printed: for a short line, for one longer than the print's
/// line buffer (formatted twice), for one made inside a `Display` while a long line is
/// formatted (its second call is skipped, so the count comes from formatting it into a
/// counter), and outside a kernel; -1 for a format it does not take, with nothing of it on
/// stdout and the reason on stderr.
pub(crate) fn c_printf_returns_the_bytes_it_printed(sub: Suite) {
    use gpuio::device::c_abi::{gpuio_printf_arg, gpuio_printf_args, GPUIO_PRINTF_INT, GPUIO_PRINTF_PTR};
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::{Arc, Mutex};
    let _wd = watchdog("c_printf_returns_the_bytes_it_printed", 120);
    let (f, path) = temp_file("c_printf.txt");
    let (e, err_path) = temp_file("c_printf-err.txt");
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .stderr_fd(e.as_raw_fd())
        .build()
        .unwrap();
    let long = std::ffi::CString::new("x".repeat(600)).unwrap();
    let long_at = long.as_ptr() as u64;
    // What the three calls below returned, and what the `Display` got from its own call,
    // each time it was called (this test runs in several configurations at once).
    let returned: Arc<[AtomicI32; 3]> = Arc::new([AtomicI32::new(0), AtomicI32::new(0), AtomicI32::new(0)]);
    let nested: Arc<Mutex<Vec<i32>>> = Arc::default();
    struct PrintsInside<'a>(&'a Mutex<Vec<i32>>);
    impl std::fmt::Display for PrintsInside<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let seven = gpuio_printf_arg {
                kind: GPUIO_PRINTF_INT,
                bits: 7,
            };
            // SAFETY: a NUL-terminated format and its one argument.
            let n = unsafe { gpuio_printf_args(c"inner %d\n".as_ptr(), &seven, 1) };
            self.0.lock().unwrap().push(n);
            f.write_str(&"o".repeat(300))
        }
    }
    let (returned_in, nested_in) = (returned.clone(), nested.clone());
    rt.launch(1, 1, move || {
        let returned = &returned_in;
        let int = |v: i64| gpuio_printf_arg {
            kind: GPUIO_PRINTF_INT,
            bits: v as u64,
        };
        let args = [
            int(-42),
            int(-42),
            gpuio_printf_arg {
                kind: GPUIO_PRINTF_PTR,
                bits: long_at,
            },
        ];
        // SAFETY: NUL-terminated formats, their arguments, and a C string for `%s`.
        unsafe {
            returned[0].store(
                gpuio_printf_args(c"short %d|%5d\n".as_ptr(), args.as_ptr(), 2),
                Ordering::Relaxed,
            );
            returned[1].store(
                gpuio_printf_args(c"long %s\n".as_ptr(), args[2..].as_ptr(), 1),
                Ordering::Relaxed,
            );
            returned[2].store(
                gpuio_printf_args(c"bad %n\n".as_ptr(), args.as_ptr(), 1),
                Ordering::Relaxed,
            );
        }
        println!("outer {}", PrintsInside(&nested_in));
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let out = std::fs::read_to_string(path).unwrap();
    let long_line = format!("long {}\n", "x".repeat(600));
    let outer = format!("outer {}\n", "o".repeat(300));
    assert_eq!(out, format!("short -42|  -42\n{long_line}inner 7\n{outer}"));
    let returned: Vec<i32> = returned.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    assert_eq!(returned, [16, long_line.len() as i32, -1]);
    // Called twice (the outer line is longer than the line buffer): the first call's line
    // went out, the second's was skipped; both return its length.
    assert_eq!(*nested.lock().unwrap(), [8, 8]);
    let err = std::fs::read_to_string(err_path).unwrap();
    assert!(
        err.starts_with("gpuio_printf: ") && err.contains("`%n` is not taken"),
        "{err:?}"
    );
    // Outside a kernel nothing formats the line in print_to; the count is the same.
    // SAFETY: as above.
    let n = unsafe {
        gpuio_printf_args(
            c"%s".as_ptr(),
            [gpuio_printf_arg {
                kind: GPUIO_PRINTF_PTR,
                bits: c"".as_ptr() as u64,
            }]
            .as_ptr(),
            1,
        )
    };
    assert_eq!(n, 0);
}
