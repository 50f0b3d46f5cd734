//! CPU backend `println!` against std's `println!`: lines/s and MB/s into a tmpfs file.
//!
//! `cargo run --release --example bench_print [-- OPTIONS]`
//!
//! For each thread count `T`, `--reps` times in turn: gpuio (a fresh CPU-backend runtime
//! printing to a fresh file, one block of `T` threads running `gpuio_kernels::stress(L, 0)`,
//! timed from launch until `synchronize` returns) and std (this binary re-run as a child
//! whose stdout is a fresh file in the same directory, `T` std threads each doing
//! `println!("t={t} i={i}")` `L` times, timed from the first spawn to the last join). Both
//! files are then checked: every line exactly once, whole, in per-thread order; `lost` is
//! the lines expected minus the lines that pass. The table shows medians over the reps
//! (lost: summed over the reps).
//!
//! Options: `--lines-total N` (default 4000000, split evenly over the threads),
//! `--threads 1,4,16,64`, `--dir /dev/shm` (should be tmpfs), `--reps R` (default 3).
//! Runtime settings (default: the Builder's): `--log-bytes N`, `--sq-entries N`,
//! `--max-flights N`, `--sq-idle-ms N`.
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: bench_print [--lines-total N] [--threads 1,4,16,64] [--dir /dev/shm] [--reps R] \
                     [--log-bytes N] [--sq-entries N] [--max-flights N] [--sq-idle-ms N]";

fn fail(msg: &str) -> ! {
    eprintln!("bench_print: {msg}\n{USAGE}");
    std::process::exit(2)
}

/// The value after `name`, parsed, or `default` when `name` is absent.
fn opt<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    match args.get(i + 1).map(|v| v.parse()) {
        Some(Ok(v)) => Some(v),
        _ => fail(&format!("{name} needs a valid value")),
    }
}

struct Config {
    lines_total: u64,
    threads: Vec<u32>,
    dir: PathBuf,
    reps: usize,
    log_bytes: Option<usize>,
    sq_entries: Option<u32>,
    max_flights: Option<u32>,
    sq_idle_ms: Option<u32>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--std-child") {
        std_child(&args[1..]);
    }
    // SAFETY: nothing else runs yet: no threads exist that could read the environment.
    unsafe { std::env::set_var("GPUIO_QUIET", "1") };
    let known = [
        "--lines-total",
        "--threads",
        "--dir",
        "--reps",
        "--log-bytes",
        "--sq-entries",
        "--max-flights",
        "--sq-idle-ms",
    ];
    for pair in args.chunks(2) {
        if !known.contains(&pair[0].as_str()) {
            fail(&format!("unknown option {}", pair[0]));
        }
    }
    let threads: String = opt(&args, "--threads").unwrap_or_else(|| "1,4,16,64".into());
    let cfg = Config {
        lines_total: opt(&args, "--lines-total").unwrap_or(4_000_000),
        threads: threads
            .split(',')
            .map(|t| match t.trim().parse::<u32>() {
                Ok(n) if (1..=1024).contains(&n) => n,
                _ => fail(&format!("--threads: bad thread count {t:?} (1..=1024)")),
            })
            .collect(),
        dir: opt::<String>(&args, "--dir")
            .unwrap_or_else(|| "/dev/shm".into())
            .into(),
        reps: opt(&args, "--reps").unwrap_or(3),
        log_bytes: opt(&args, "--log-bytes"),
        sq_entries: opt(&args, "--sq-entries"),
        max_flights: opt(&args, "--max-flights"),
        sq_idle_ms: opt(&args, "--sq-idle-ms"),
    };
    if cfg.reps == 0 {
        fail("--reps must be at least 1");
    }
    let started = Instant::now();
    machine_info(&cfg);
    let mut rows = Vec::new();
    for &t in &cfg.threads {
        rows.push(bench(&cfg, t));
    }
    print_table(&rows);
    let verdict = target(&rows);
    println!("{verdict}");
    println!("total run time: {:.1} s", started.elapsed().as_secs_f64());
    if rows.iter().any(|r| r.lost_gpuio + r.lost_std > 0) {
        std::process::exit(1);
    }
}

/// Child mode: `--std-child T L`. `T` std threads print `L` lines each to our stdout;
/// the elapsed nanoseconds go to stderr.
fn std_child(args: &[String]) -> ! {
    let parse = |i: usize| {
        args.get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| fail("--std-child T L"))
    };
    let (threads, lines) = (parse(0), parse(1));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..lines {
                    println!("t={t} i={i}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a printing thread panicked");
    }
    let ns = start.elapsed().as_nanos();
    eprintln!("elapsed_ns={ns}");
    std::process::exit(0)
}

/// Prints the machine and the settings.
fn machine_info(cfg: &Config) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("date (UTC):     {}", utc_date());
    println!("nproc:          {cpus}");
    println!("kernel:         {}", uname_release());
    println!("cpu:            {model}");
    let tmpfs = match is_tmpfs(&cfg.dir) {
        Ok(true) => "tmpfs".to_string(),
        Ok(false) => {
            eprintln!(
                "bench_print: warning: {} is not tmpfs: figures include that filesystem's costs",
                cfg.dir.display()
            );
            "NOT tmpfs".to_string()
        }
        Err(e) => fail(&format!("statfs {}: {e}", cfg.dir.display())),
    };
    println!("dir:            {} ({tmpfs})", cfg.dir.display());
    let setting = |v: Option<String>| v.unwrap_or_else(|| "default".into());
    println!(
        "gpuio runtime:  CPU backend, log_bytes {}, sq_entries {}, max_flights {}, sq_thread_idle_ms {}",
        setting(cfg.log_bytes.map(|v| v.to_string())),
        setting(cfg.sq_entries.map(|v| v.to_string())),
        setting(cfg.max_flights.map(|v| v.to_string())),
        setting(cfg.sq_idle_ms.map(|v| v.to_string())),
    );
    println!(
        "work:           {} lines in all, split evenly over the threads; {} reps, medians (lost: sum over reps)",
        cfg.lines_total, cfg.reps
    );
    println!();
}

fn uname_release() -> String {
    // SAFETY: uname fills the zeroed struct we own; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

fn is_tmpfs(dir: &Path) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statfs fills the zeroed struct we own; `c` is a NUL-terminated path.
    let st = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        st
    };
    Ok(st.f_type == libc::TMPFS_MAGIC)
}

/// Today's date in UTC, `YYYY-MM-DD` (civil-from-days).
fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// One thread count's results.
struct Row {
    threads: u32,
    lines: u64,
    bytes: u64,
    gpuio: Duration,
    std: Duration,
    build: Duration,
    lost_gpuio: u64,
    lost_std: u64,
    sqes: u64,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// Bytes of `lines` lines `t={t} i={i}\n` for each of `threads` threads.
fn expected_bytes(threads: u64, lines: u64) -> u64 {
    let digits = |mut n: u64| {
        let mut d = 1;
        while n >= 10 {
            n /= 10;
            d += 1;
        }
        d
    };
    let per_thread_i: u64 = (0..lines).map(|i| digits(i) + "t= i=\n".len() as u64).sum();
    (0..threads).map(|t| digits(t) * lines + per_thread_i).sum()
}

fn bench(cfg: &Config, threads: u32) -> Row {
    let lines = cfg.lines_total / u64::from(threads);
    if lines == 0 || lines > u64::from(u32::MAX) {
        fail(&format!(
            "--lines-total {} does not split into 1..=2^32-1 lines over {threads} threads",
            cfg.lines_total
        ));
    }
    let total = lines * u64::from(threads);
    let bytes = expected_bytes(u64::from(threads), lines);
    let size_check = |what: &str, c: &Check| {
        if c.good == total && c.read == total && c.bytes != bytes {
            eprintln!("bench_print: {what} T={threads}: {} bytes, expected {bytes}", c.bytes);
        }
    };
    let (mut g, mut s, mut b, mut sq) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut lost_gpuio, mut lost_std) = (0, 0);
    for rep in 0..cfg.reps {
        let (elapsed, build, sqes, check) = run_gpuio(cfg, threads, lines as u32, rep);
        eprintln!(
            "  T={threads:<3} rep {rep}: gpuio {:>8.3} s  build {:>6.2} ms  {sqes} SQEs  {check}",
            elapsed.as_secs_f64(),
            build.as_secs_f64() * 1e3
        );
        size_check("gpuio", &check);
        lost_gpuio += total - check.good;
        g.push(elapsed);
        b.push(build);
        sq.push(sqes);
        let (elapsed, check) = run_std(cfg, threads, lines, rep);
        eprintln!(
            "  T={threads:<3} rep {rep}: std   {:>8.3} s  {check}",
            elapsed.as_secs_f64()
        );
        size_check("std", &check);
        lost_std += total - check.good;
        s.push(elapsed);
    }
    sq.sort_unstable();
    Row {
        threads,
        lines: total,
        bytes,
        gpuio: median(g),
        std: median(s),
        build: median(b),
        lost_gpuio,
        lost_std,
        sqes: sq[sq.len() / 2],
    }
}

fn out_path(cfg: &Config, what: &str, threads: u32, rep: usize) -> PathBuf {
    cfg.dir.join(format!(
        "bench_print-{}-{what}-t{threads}-r{rep}.out",
        std::process::id()
    ))
}

/// Reads, checks and removes an output file.
fn check_file(path: &Path, threads: u64, lines: u64) -> Check {
    let data = std::fs::read(path).unwrap_or_else(|e| fail(&format!("read {}: {e}", path.display())));
    let _ = std::fs::remove_file(path);
    verify(&data, threads, lines)
}

fn run_gpuio(cfg: &Config, threads: u32, lines: u32, rep: usize) -> (Duration, Duration, u64, Check) {
    let path = out_path(cfg, "gpuio", threads, rep);
    let file = File::create(&path).unwrap_or_else(|e| fail(&format!("create {}: {e}", path.display())));
    let t0 = Instant::now();
    let mut builder = gpuio::Runtime::builder()
        .backend(gpuio::Backend::Cpu)
        .stdout_fd(file.as_raw_fd());
    if let Some(n) = cfg.log_bytes {
        builder = builder.log_bytes(n);
    }
    if let Some(n) = cfg.sq_entries {
        builder = builder.sq_entries(n);
    }
    if let Some(n) = cfg.max_flights {
        builder = builder.max_flights(n);
    }
    if let Some(n) = cfg.sq_idle_ms {
        builder = builder.sq_thread_idle_ms(n);
    }
    let rt = builder.build().unwrap_or_else(|e| fail(&format!("runtime: {e}")));
    let build = t0.elapsed();
    let start = Instant::now();
    rt.launch(1, threads, move || gpuio_kernels::stress(lines, 0))
        .unwrap_or_else(|e| fail(&format!("launch: {e}")));
    let result = rt.synchronize();
    let elapsed = start.elapsed();
    if let Err(e) = result {
        eprintln!("bench_print: gpuio T={threads} rep {rep}: synchronize: {e}");
    }
    let sqes = u64::from(rt.stats().sqes);
    drop(rt);
    drop(file);
    (
        elapsed,
        build,
        sqes,
        check_file(&path, u64::from(threads), u64::from(lines)),
    )
}

fn run_std(cfg: &Config, threads: u32, lines: u64, rep: usize) -> (Duration, Check) {
    let path = out_path(cfg, "std", threads, rep);
    let file = File::create(&path).unwrap_or_else(|e| fail(&format!("create {}: {e}", path.display())));
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&format!("current_exe: {e}")));
    let out = Command::new(exe)
        .args(["--std-child".to_string(), threads.to_string(), lines.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::from(file))
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| fail(&format!("running the std child: {e}")));
    let err = String::from_utf8_lossy(&out.stderr);
    let ns = err
        .lines()
        .find_map(|l| l.strip_prefix("elapsed_ns="))
        .and_then(|n| n.trim().parse::<u64>().ok());
    let Some(ns) = ns.filter(|_| out.status.success()) else {
        let _ = std::fs::remove_file(&path);
        fail(&format!("std child failed ({}): {err}", out.status));
    };
    (Duration::from_nanos(ns), check_file(&path, u64::from(threads), lines))
}

/// What the checker found in one output file.
#[derive(Clone, Copy, Debug, Default)]
struct Check {
    /// Bytes in the file.
    bytes: u64,
    /// Lines read (a last line without its newline counts).
    read: u64,
    /// Lines expected, whole, seen for the first time, after every earlier line of their thread.
    good: u64,
    /// Lines not of the form `t=<t> i=<i>\n` with `t`, `i` in range (torn, garbled, extra).
    malformed: u64,
    /// Repeats of a line already seen.
    duplicate: u64,
    /// First sightings of a line after a later line of the same thread.
    disorder: u64,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} lines read, {} good", self.read, self.good)?;
        if self.malformed + self.duplicate + self.disorder > 0 {
            write!(
                f,
                ", {} malformed, {} duplicate, {} out of order",
                self.malformed, self.duplicate, self.disorder
            )?;
        }
        Ok(())
    }
}

/// Parses a decimal number without sign or leading zeros.
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || (s.len() > 1 && s[0] == b'0') {
        return None;
    }
    s.iter()
        .try_fold(0u64, |n, &c| c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0')))
}

/// Parses `t=<t> i=<i>` (without the newline).
fn parse_line(line: &[u8]) -> Option<(u64, u64)> {
    let rest = line.strip_prefix(b"t=")?;
    let sp = rest.iter().position(|&c| c == b' ')?;
    let t = number(&rest[..sp])?;
    let i = number(rest[sp + 1..].strip_prefix(b"i=")?)?;
    Some((t, i))
}

/// Checks that `data` holds `lines` lines from each of `threads` threads, each exactly
/// once, whole, in per-thread order, and nothing else.
fn verify(data: &[u8], threads: u64, lines: u64) -> Check {
    let mut seen = vec![0u64; (threads * lines).div_ceil(64) as usize];
    let mut high = vec![0u64; threads as usize]; // 1 + the highest i seen per thread
    let mut c = Check {
        bytes: data.len() as u64,
        ..Check::default()
    };
    let mut rest = data;
    while !rest.is_empty() {
        c.read += 1;
        let (line, whole) = match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                let line = &rest[..n];
                rest = &rest[n + 1..];
                (line, true)
            }
            None => (std::mem::take(&mut rest), false),
        };
        let (t, i) = match parse_line(line) {
            Some((t, i)) if whole && t < threads && i < lines => (t, i),
            _ => {
                c.malformed += 1;
                continue;
            }
        };
        let k = t * lines + i;
        let (word, bit) = ((k / 64) as usize, 1u64 << (k % 64));
        if seen[word] & bit != 0 {
            c.duplicate += 1;
            continue;
        }
        seen[word] |= bit;
        let h = &mut high[t as usize];
        if i < *h {
            c.disorder += 1;
        } else {
            *h = i + 1;
            c.good += 1;
        }
    }
    c
}

fn print_table(rows: &[Row]) {
    let mut out = std::io::stdout().lock();
    let header = [
        "threads",
        "lines",
        "gpuio lines/s",
        "gpuio MB/s",
        "std lines/s",
        "std MB/s",
        "gpuio/std",
        "lost (gpuio)",
        "lost (std)",
        "SQEs (gpuio)",
        "rt build ms",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (g, s) = (r.gpuio.as_secs_f64(), r.std.as_secs_f64());
            vec![
                r.threads.to_string(),
                r.lines.to_string(),
                format!("{:.0}", r.lines as f64 / g),
                format!("{:.1}", r.bytes as f64 / g / 1e6),
                format!("{:.0}", r.lines as f64 / s),
                format!("{:.1}", r.bytes as f64 / s / 1e6),
                format!("{:.2}", s / g),
                r.lost_gpuio.to_string(),
                r.lost_std.to_string(),
                r.sqes.to_string(),
                format!("{:.2}", r.build.as_secs_f64() * 1e3),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cols: Vec<String>| {
        let padded: Vec<String> = cols.iter().zip(&widths).map(|(s, w)| format!("{s:>w$}")).collect();
        format!("| {} |", padded.join(" | "))
    };
    let _ = writeln!(out, "{}", line(header.iter().map(|h| h.to_string()).collect()));
    let _ = writeln!(
        out,
        "|{}|",
        widths
            .iter()
            .map(|w| format!("{}:", "-".repeat(w + 1)))
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in cells {
        let _ = writeln!(out, "{}", line(r));
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "MB = 10^6 bytes of output; gpuio/std = std time / gpuio time (> 1: gpuio faster)."
    );
}

/// Whether gpuio met "not slower than std at the most threads, zero lines lost".
fn target(rows: &[Row]) -> String {
    let Some(top) = rows.iter().max_by_key(|r| r.threads) else {
        return "target: no rows".into();
    };
    let lost: u64 = rows.iter().map(|r| r.lost_gpuio).sum();
    let ratio = top.std.as_secs_f64() / top.gpuio.as_secs_f64();
    let met = ratio >= 1.0 && lost == 0;
    format!(
        "target (gpuio not slower than std at {} threads, zero lines lost): {} (gpuio/std {ratio:.2}, {lost} lost)",
        top.threads,
        if met { "MET" } else { "NOT MET" }
    )
}
