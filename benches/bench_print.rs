//! CPU backend `println!` against std's `println!`: lines/s and MB/s into a tmpfs file.
//!
//! `cargo bench --bench bench_print [-- OPTIONS]`
//!
//! For each thread count `T`, `--reps` times in turn: gpuio (a fresh CPU-backend runtime
//! printing to a fresh file, one block of `T` threads running `gpuio_kernels::stress(L, 0)`,
//! timed from launch until `synchronize` returns; io_uring as the CPU backend makes it, with
//! SQPOLL where `GPUIO_SQPOLL=1`), the same with the host-thread fallback instead of
//! io_uring (`Submission::HostThread`; `--fallback 0` leaves it out),
//! and std (this binary re-run as a child
//! whose stdout is a fresh file in the same directory, `T` std threads each doing
//! `println!("t={t} i={i}")` `L` times, timed from the first spawn to the last join). Both
//! files are then checked: every line exactly once, whole, in per-thread order; `lost` is
//! the lines expected minus the lines that pass. The table shows medians over the reps
//! (lost: summed over the reps).
//!
//! Options: `--lines-total N` (default 4000000, split evenly over the threads),
//! `--threads 1,4,16,64`, `--dir /dev/shm` (should be tmpfs), `--reps R` (default 3),
//! `--fallback 0|1` (default 1).
//! Runtime settings (default: the Builder's): `--log-bytes N`, `--sq-entries N`,
//! `--max-flights N`, `--sq-idle-ms N`.
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{expected_bytes, verify, Check};

const USAGE: &str =
    "usage: bench_print [--lines-total N] [--threads 1,4,16,64] [--dir /dev/shm] [--reps R] [--fallback 0|1] \
                     [--log-bytes N] [--sq-entries N] [--max-flights N] [--sq-idle-ms N]";

const CLI: common::Cli = common::Cli {
    name: "bench_print",
    usage: USAGE,
};

fn fail(msg: &str) -> ! {
    CLI.fail(msg)
}

struct Config {
    lines_total: u64,
    threads: Vec<u32>,
    dir: PathBuf,
    reps: usize,
    fallback: bool,
    log_bytes: Option<usize>,
    sq_entries: Option<u32>,
    max_flights: Option<u32>,
    sq_idle_ms: Option<u32>,
}

fn main() {
    let args: Vec<String> = common::args();
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
        "--fallback",
        "--log-bytes",
        "--sq-entries",
        "--max-flights",
        "--sq-idle-ms",
    ];
    CLI.only_known(&args, &known);
    let threads: String = CLI.opt(&args, "--threads").unwrap_or_else(|| "1,4,16,64".into());
    let cfg = Config {
        lines_total: CLI.opt(&args, "--lines-total").unwrap_or(4_000_000),
        threads: threads
            .split(',')
            .map(|t| match t.trim().parse::<u32>() {
                Ok(n) if (1..=1024).contains(&n) => n,
                _ => fail(&format!("--threads: bad thread count {t:?} (1..=1024)")),
            })
            .collect(),
        dir: CLI.opt(&args, "--dir").unwrap_or_else(|| "/dev/shm".into()),
        reps: CLI.opt(&args, "--reps").unwrap_or(3),
        fallback: CLI.opt::<u8>(&args, "--fallback").unwrap_or(1) != 0,
        log_bytes: CLI.opt(&args, "--log-bytes"),
        sq_entries: CLI.opt(&args, "--sq-entries"),
        max_flights: CLI.opt(&args, "--max-flights"),
        sq_idle_ms: CLI.opt(&args, "--sq-idle-ms"),
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
    if rows.iter().any(|r| r.lost_gpuio + r.lost_fallback + r.lost_std > 0) {
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
    let model = common::cpu_model();
    println!("date (UTC):     {}", common::utc_date());
    println!("nproc:          {cpus}");
    println!("kernel:         {}", common::uname_release());
    println!("cpu:            {model}");
    let tmpfs = match common::statfs(&cfg.dir).map(|(tmpfs, _)| tmpfs) {
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
        "gpuio runtime:  CPU backend, log_bytes {}, sq_entries {}, max_flights {}, sq_thread_idle_ms {}; \
         gpuio = io_uring {}, fallback = the host-thread fallback{}",
        setting(cfg.log_bytes.map(|v| v.to_string())),
        setting(cfg.sq_entries.map(|v| v.to_string())),
        setting(cfg.max_flights.map(|v| v.to_string())),
        setting(cfg.sq_idle_ms.map(|v| v.to_string())),
        match gpuio::Runtime::builder()
            .backend(gpuio::Backend::Cpu)
            .build()
            .map(|rt| rt.stats().sqpoll)
        {
            Ok(true) => "with SQPOLL (GPUIO_SQPOLL)",
            _ => "as the CPU backend makes it by default (no SQPOLL: the waker enters the ring)",
        },
        if cfg.fallback { "" } else { " (not run: --fallback 0)" },
    );
    println!(
        "work:           {} lines in all, split evenly over the threads; {} reps, medians (lost: sum over reps)",
        cfg.lines_total, cfg.reps
    );
    println!();
}

/// One thread count's results.
struct Row {
    threads: u32,
    lines: u64,
    bytes: u64,
    gpuio: Duration,
    /// The host-thread fallback (None: not run).
    fallback: Option<Duration>,
    std: Duration,
    build: Duration,
    lost_gpuio: u64,
    lost_fallback: u64,
    lost_std: u64,
    sqes: u64,
    sqes_fallback: u64,
    /// Times the waker sent what kernel threads left (`Stats::rescues`), median.
    rescues: u64,
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

fn bench(cfg: &Config, threads: u32) -> Row {
    let lines = cfg.lines_total / u64::from(threads);
    if lines == 0 || lines > u64::from(u32::MAX) {
        fail(&format!(
            "--lines-total {} does not split into 1..=2^32-1 lines over {threads} threads",
            cfg.lines_total
        ));
    }
    let total = lines * u64::from(threads);
    let bytes = expected_bytes(u64::from(threads), lines, 0);
    let size_check = |what: &str, c: &Check| {
        if c.good == total && c.read == total && c.bytes != bytes {
            eprintln!("bench_print: {what} T={threads}: {} bytes, expected {bytes}", c.bytes);
        }
    };
    let (mut g, mut s, mut b, mut sq, mut rs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut fb, mut fsq) = (Vec::new(), Vec::new());
    let (mut lost_gpuio, mut lost_fallback, mut lost_std) = (0, 0, 0);
    for rep in 0..cfg.reps {
        let (elapsed, build, (sqes, rescues), check) = run_gpuio(cfg, threads, lines as u32, rep, false);
        rs.push(rescues);
        eprintln!(
            "  T={threads:<3} rep {rep}: gpuio {:>8.3} s  build {:>6.2} ms  {sqes} SQEs  {rescues} rescues  {check}",
            elapsed.as_secs_f64(),
            build.as_secs_f64() * 1e3
        );
        size_check("gpuio", &check);
        lost_gpuio += total - check.good;
        g.push(elapsed);
        b.push(build);
        sq.push(sqes);
        if cfg.fallback {
            let (elapsed, _, (sqes, _), check) = run_gpuio(cfg, threads, lines as u32, rep, true);
            eprintln!(
                "  T={threads:<3} rep {rep}: fallb {:>8.3} s  {sqes} SQEs  {check}",
                elapsed.as_secs_f64()
            );
            size_check("fallback", &check);
            lost_fallback += total - check.good;
            fb.push(elapsed);
            fsq.push(sqes);
        }
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
    fsq.sort_unstable();
    rs.sort_unstable();
    Row {
        threads,
        lines: total,
        bytes,
        gpuio: median(g),
        fallback: (!fb.is_empty()).then(|| median(fb)),
        std: median(s),
        build: median(b),
        lost_gpuio,
        lost_fallback,
        lost_std,
        sqes: sq[sq.len() / 2],
        sqes_fallback: fsq.get(fsq.len() / 2).copied().unwrap_or(0),
        rescues: rs[rs.len() / 2],
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
    verify(&data, threads, lines, 0)
}

/// One run: its time, the runtime's build time, (SQEs, rescues), and the output's check.
fn run_gpuio(
    cfg: &Config,
    threads: u32,
    lines: u32,
    rep: usize,
    fallback: bool,
) -> (Duration, Duration, (u64, u64), Check) {
    let path = out_path(cfg, if fallback { "fallback" } else { "gpuio" }, threads, rep);
    let file = File::create(&path).unwrap_or_else(|e| fail(&format!("create {}: {e}", path.display())));
    let t0 = Instant::now();
    let mut builder = gpuio::Runtime::builder()
        .backend(gpuio::Backend::Cpu)
        .submission(if fallback {
            gpuio::Submission::HostThread
        } else {
            gpuio::Submission::IoUring
        })
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
    let stats = rt.stats();
    drop(rt);
    drop(file);
    (
        elapsed,
        build,
        (u64::from(stats.sqes), stats.rescues),
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

fn print_table(rows: &[Row]) {
    let mut out = std::io::stdout().lock();
    let header = [
        "threads",
        "lines",
        "gpuio lines/s",
        "gpuio MB/s",
        "fallback lines/s",
        "fallback MB/s",
        "std lines/s",
        "std MB/s",
        "gpuio/std",
        "fallback/gpuio",
        "fallback/std",
        "lost (gpuio)",
        "lost (fallback)",
        "lost (std)",
        "SQEs (gpuio)",
        "SQEs (fallback)",
        "rescues (gpuio)",
        "rt build ms",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (g, s) = (r.gpuio.as_secs_f64(), r.std.as_secs_f64());
            let f = r.fallback.map(|f| f.as_secs_f64());
            let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            vec![
                r.threads.to_string(),
                r.lines.to_string(),
                format!("{:.0}", r.lines as f64 / g),
                format!("{:.1}", r.bytes as f64 / g / 1e6),
                or_dash(f.map(|f| format!("{:.0}", r.lines as f64 / f))),
                or_dash(f.map(|f| format!("{:.1}", r.bytes as f64 / f / 1e6))),
                format!("{:.0}", r.lines as f64 / s),
                format!("{:.1}", r.bytes as f64 / s / 1e6),
                format!("{:.2}", s / g),
                or_dash(f.map(|f| format!("{:.2}", g / f))),
                or_dash(f.map(|f| format!("{:.2}", s / f))),
                r.lost_gpuio.to_string(),
                or_dash(f.map(|_| r.lost_fallback.to_string())),
                r.lost_std.to_string(),
                r.sqes.to_string(),
                or_dash(f.map(|_| r.sqes_fallback.to_string())),
                r.rescues.to_string(),
                format!("{:.2}", r.build.as_secs_f64() * 1e3),
            ]
        })
        .collect();
    common::write_table(&mut out, &header, cells, 0);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "MB = 10^6 bytes of output; gpuio/std = std time / gpuio time (> 1: gpuio faster); \
         fallback/gpuio = gpuio time / fallback time (> 1: the host-thread fallback faster than SQPOLL)."
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
