//! CPU backend `println!` against std's `println!`: lines/s into a tmpfs file, three ways of
//! submitting gpuio's writes beside one std baseline.
//!
//! `cargo bench --bench bench_print [-- OPTIONS]`
//!
//! For each thread count `T`, `--reps` times in turn: each gpuio mode that `--modes` names,
//! in this order whatever order it names them (a fresh CPU-backend runtime printing to a
//! fresh file, one block of `T` threads running `gpuio_kernels::stress(L, 0)`, timed from
//! launch until `synchronize` returns), then std:
//! - `default`: the Builder's default (no `.submission(..)`): `GPUIO_URING` where it is set,
//!   else `Submission::Inline`, the kernel threads performing their own writes, unless SQPOLL
//!   is asked for (`GPUIO_SQPOLL=1`, `GPUIO_SQPOLL_CPUS`: then io_uring); the header says
//!   which it got;
//! - `io_uring`: `Submission::IoUring`, io_uring as the CPU backend makes it (the waker enters
//!   the ring), with SQPOLL where `GPUIO_SQPOLL=1`;
//! - `fallback`: `Submission::HostThread`, the host-thread fallback;
//! - std: this binary re-run as a child whose stdout is a fresh file in the same directory,
//!   `T` std threads each doing `println!("t={t} i={i}")` `L` times, timed from the first
//!   spawn to the last join.
//!
//! Every file is then checked: every line exactly once, whole, in per-thread order; `lost` is
//! the lines expected minus the lines that pass. The table shows medians over the reps (lost:
//! summed over the reps) and the default's speed against std, the fallback and io_uring;
//! verdicts follow it. The exit code is 1 if any mode or std lost a line.
//!
//! Options: `--lines-total N` (default 4000000, split evenly over the threads),
//! `--threads 1,4,16,64`, `--dir /dev/shm` (should be tmpfs), `--reps R` (default 3),
//! `--modes default,io_uring,fallback` (default: all three; any non-empty subset).
//! Runtime settings, for every mode (default: the Builder's): `--log-bytes N`,
//! `--sq-entries N`, `--max-flights N`, `--sq-idle-ms N`.
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{expected_bytes, verify, Check};

const USAGE: &str = "usage: bench_print [--lines-total N] [--threads 1,4,16,64] [--dir /dev/shm] [--reps R] \
                     [--modes default,io_uring,fallback] [--log-bytes N] [--sq-entries N] [--max-flights N] \
                     [--sq-idle-ms N]";

const CLI: common::Cli = common::Cli {
    name: "bench_print",
    usage: USAGE,
};

fn fail(msg: &str) -> ! {
    CLI.fail(msg)
}

/// How a gpuio run submits its writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The Builder's default: no `.submission(..)`.
    Default,
    IoUring,
    Fallback,
}

/// Every mode, in the order each rep runs them and the table shows them.
const MODES: [Mode; 3] = [Mode::Default, Mode::IoUring, Mode::Fallback];

impl Mode {
    /// Its name in `--modes`, the table and the output files.
    fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::IoUring => "io_uring",
            Mode::Fallback => "fallback",
        }
    }

    fn parse(s: &str) -> Option<Mode> {
        MODES.into_iter().find(|m| m.name() == s)
    }

    /// What it asks the Builder for (`None`: nothing, the default).
    fn submission(self) -> Option<gpuio::Submission> {
        match self {
            Mode::Default => None,
            Mode::IoUring => Some(gpuio::Submission::IoUring),
            Mode::Fallback => Some(gpuio::Submission::HostThread),
        }
    }

    /// Its place in `MODES`, and in a row's results.
    fn index(self) -> usize {
        self as usize
    }
}

struct Config {
    lines_total: u64,
    threads: Vec<u32>,
    dir: PathBuf,
    reps: usize,
    /// The modes to run, in `MODES` order.
    modes: Vec<Mode>,
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
        "--modes",
        "--log-bytes",
        "--sq-entries",
        "--max-flights",
        "--sq-idle-ms",
    ];
    CLI.only_known(&args, &known);
    let threads: String = CLI.opt(&args, "--threads").unwrap_or_else(|| "1,4,16,64".into());
    let modes: String = CLI
        .opt(&args, "--modes")
        .unwrap_or_else(|| "default,io_uring,fallback".into());
    if modes.trim().is_empty() {
        fail("--modes: name at least one of default, io_uring, fallback");
    }
    let asked: Vec<Mode> = modes
        .split(',')
        .map(|m| {
            Mode::parse(m.trim())
                .unwrap_or_else(|| fail(&format!("--modes: unknown mode {m:?} (default, io_uring, fallback)")))
        })
        .collect();
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
        // One order for every rep, whatever order `--modes` gives: the columns line up, and
        // a mode named twice runs once.
        modes: MODES.into_iter().filter(|m| asked.contains(m)).collect(),
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
    for verdict in targets(&rows) {
        println!("{verdict}");
    }
    println!("total run time: {:.1} s", started.elapsed().as_secs_f64());
    let lost = |r: &Row| r.modes.iter().flatten().map(|m| m.lost).sum::<u64>() + r.lost_std;
    if rows.iter().any(|r| lost(r) > 0) {
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
    // A runtime of each mode, built as the runs build theirs, says what it got: the default
    // follows GPUIO_URING and GPUIO_SQPOLL, and io_uring's SQPOLL follows GPUIO_SQPOLL. One
    // that cannot be built fails here rather than after the modes before it have run.
    let probe = |mode: Mode| {
        builder(cfg, mode)
            .build()
            .unwrap_or_else(|e| fail(&format!("runtime ({}): {e}", mode.name())))
    };
    let not_run = |mode: Mode| (!cfg.modes.contains(&mode)).then_some("not run");
    let default = not_run(Mode::Default).map_or_else(
        || {
            let got = probe(Mode::Default).submission();
            let why = if got == gpuio::Submission::Inline {
                ""
            } else {
                ": GPUIO_URING or GPUIO_SQPOLL chose it"
            };
            format!("the Builder's default ({got:?} here{why})")
        },
        str::to_string,
    );
    let io_uring = not_run(Mode::IoUring).map_or_else(
        || {
            if probe(Mode::IoUring).stats().sqpoll {
                "io_uring with SQPOLL (GPUIO_SQPOLL)".to_string()
            } else {
                "io_uring as the CPU backend makes it unless SQPOLL is asked for (no SQPOLL: the waker enters the ring)"
                    .to_string()
            }
        },
        str::to_string,
    );
    let fallback = not_run(Mode::Fallback).unwrap_or("the host-thread fallback");
    println!(
        "gpuio runtime:  CPU backend, log_bytes {}, sq_entries {}, max_flights {}, sq_thread_idle_ms {}; \
         default = {default}, io_uring = {io_uring}, fallback = {fallback}",
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

/// One mode's results at one thread count: medians over the reps, lost summed.
struct ModeRow {
    time: Duration,
    build: Duration,
    lost: u64,
    sqes: u64,
    /// Times the waker performed or sent what kernel threads left (`Stats::rescues`).
    rescues: u64,
}

/// One thread count's results.
struct Row {
    threads: u32,
    lines: u64,
    bytes: u64,
    /// By `Mode::index`; `None`: not run.
    modes: [Option<ModeRow>; 3],
    std: Duration,
    lost_std: u64,
}

impl Row {
    fn mode(&self, mode: Mode) -> Option<&ModeRow> {
        self.modes[mode.index()].as_ref()
    }

    /// How many times faster the default ran than `other` (its time over the default's),
    /// where both ran.
    fn default_over(&self, other: Option<Duration>) -> Option<f64> {
        let default = self.mode(Mode::Default)?.time.as_secs_f64();
        Some(other?.as_secs_f64() / default)
    }
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

/// A count's median (the upper one of an even count).
fn median_count(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// One mode's runs at one thread count, rep by rep.
#[derive(Default)]
struct Runs {
    times: Vec<Duration>,
    builds: Vec<Duration>,
    sqes: Vec<u64>,
    rescues: Vec<u64>,
    lost: u64,
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
    let mut runs: [Runs; 3] = Default::default();
    let (mut s, mut lost_std) = (Vec::new(), 0);
    for rep in 0..cfg.reps {
        for &mode in &cfg.modes {
            let (elapsed, build, (sqes, rescues), check) = run_gpuio(cfg, threads, lines as u32, rep, mode);
            eprintln!(
                "  T={threads:<3} rep {rep}: {:<8} {:>8.3} s  build {:>6.2} ms  {sqes} SQEs  {rescues} rescues  {check}",
                mode.name(),
                elapsed.as_secs_f64(),
                build.as_secs_f64() * 1e3
            );
            size_check(mode.name(), &check);
            let r = &mut runs[mode.index()];
            r.lost += total - check.good;
            r.times.push(elapsed);
            r.builds.push(build);
            r.sqes.push(sqes);
            r.rescues.push(rescues);
        }
        let (elapsed, check) = run_std(cfg, threads, lines, rep);
        eprintln!(
            "  T={threads:<3} rep {rep}: {:<8} {:>8.3} s  {check}",
            "std",
            elapsed.as_secs_f64()
        );
        size_check("std", &check);
        lost_std += total - check.good;
        s.push(elapsed);
    }
    Row {
        threads,
        lines: total,
        bytes,
        modes: runs.map(|r| {
            (!r.times.is_empty()).then(|| ModeRow {
                time: median(r.times),
                build: median(r.builds),
                lost: r.lost,
                sqes: median_count(r.sqes),
                rescues: median_count(r.rescues),
            })
        }),
        std: median(s),
        lost_std,
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

/// A CPU-backend runtime's builder for `mode`, with the settings the options give.
fn builder(cfg: &Config, mode: Mode) -> gpuio::Builder {
    let mut builder = gpuio::Runtime::builder().backend(gpuio::Backend::Cpu);
    if let Some(s) = mode.submission() {
        builder = builder.submission(s);
    }
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
    builder
}

/// One run: its time, the runtime's build time, (SQEs, rescues), and the output's check.
fn run_gpuio(
    cfg: &Config,
    threads: u32,
    lines: u32,
    rep: usize,
    mode: Mode,
) -> (Duration, Duration, (u64, u64), Check) {
    let path = out_path(cfg, mode.name(), threads, rep);
    let file = File::create(&path).unwrap_or_else(|e| fail(&format!("create {}: {e}", path.display())));
    let t0 = Instant::now();
    let rt = builder(cfg, mode)
        .stdout_fd(file.as_raw_fd())
        .build()
        .unwrap_or_else(|e| fail(&format!("runtime ({}): {e}", mode.name())));
    let build = t0.elapsed();
    let start = Instant::now();
    rt.launch(1, threads, move || gpuio_kernels::stress(lines, 0))
        .unwrap_or_else(|e| fail(&format!("launch: {e}")));
    let result = rt.synchronize();
    let elapsed = start.elapsed();
    if let Err(e) = result {
        eprintln!("bench_print: {} T={threads} rep {rep}: synchronize: {e}", mode.name());
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
    // Every row ran the same modes.
    let ran: Vec<Mode> = MODES
        .into_iter()
        .filter(|&m| rows.iter().any(|r| r.mode(m).is_some()))
        .collect();
    let mut header: Vec<String> = vec!["threads".into(), "lines".into(), "bytes".into()];
    header.extend(ran.iter().map(|m| format!("{} lines/s", m.name())));
    header.extend(["std lines/s", "default/std", "default/fallback", "default/io_uring"].map(String::from));
    header.extend(ran.iter().map(|m| format!("lost ({})", m.name())));
    header.push("lost (std)".into());
    header.extend(ran.iter().map(|m| format!("SQEs ({})", m.name())));
    header.extend(["rescues (default)", "rt build ms (default)"].map(String::from));
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let run = |m: Mode| r.mode(m).expect("every row ran the same modes");
            let time = |m: Mode| r.mode(m).map(|m| m.time);
            let default = r.mode(Mode::Default);
            let mut c = vec![r.threads.to_string(), r.lines.to_string(), r.bytes.to_string()];
            c.extend(
                ran.iter()
                    .map(|&m| format!("{:.0}", r.lines as f64 / run(m).time.as_secs_f64())),
            );
            c.push(format!("{:.0}", r.lines as f64 / r.std.as_secs_f64()));
            for other in [Some(r.std), time(Mode::Fallback), time(Mode::IoUring)] {
                c.push(or_dash(r.default_over(other).map(|x| format!("{x:.2}"))));
            }
            c.extend(ran.iter().map(|&m| run(m).lost.to_string()));
            c.push(r.lost_std.to_string());
            c.extend(ran.iter().map(|&m| run(m).sqes.to_string()));
            c.push(or_dash(default.map(|d| d.rescues.to_string())));
            c.push(or_dash(default.map(|d| format!("{:.2}", d.build.as_secs_f64() * 1e3))));
            c
        })
        .collect();
    common::write_table(&mut out, &header, cells, 0);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "default/X = X's time / the default's time (> 1: the default faster); - where either did not run. \
         A mode's MB/s (10^6 bytes) = its lines/s x bytes / lines / 10^6."
    );
}

/// The verdicts on the default mode: against the fallback at every thread count, against
/// std at 64 threads, and not slower than std at the most threads with zero lines lost.
fn targets(rows: &[Row]) -> Vec<String> {
    let verdict = |met: bool| if met { "MET" } else { "NOT MET" };
    let ran = |m: Mode| rows.iter().any(|r| r.mode(m).is_some());
    let mut out = Vec::new();

    let what = "target (default at least as fast as the fallback at every thread count)";
    let worst = rows
        .iter()
        .filter_map(|r| Some((r.threads, r.default_over(r.mode(Mode::Fallback).map(|f| f.time))?)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    out.push(match worst {
        Some((threads, ratio)) => format!(
            "{what}: {} (worst default/fallback {ratio:.2}, at T={threads})",
            verdict(ratio >= 1.0)
        ),
        None if !ran(Mode::Default) || !ran(Mode::Fallback) => {
            format!("{what}: not measured (--modes did not name both default and fallback)")
        }
        None => format!("{what}: not measured (no rows)"),
    });

    let what = "target (default at least 15x std's println! at 64 threads)";
    out.push(match rows.iter().find(|r| r.threads == 64) {
        None => format!("{what}: not measured (64 threads not run)"),
        Some(r) => match r.default_over(Some(r.std)) {
            Some(ratio) => format!("{what}: {} (default/std {ratio:.2})", verdict(ratio >= 15.0)),
            None => format!("{what}: not measured (default not run)"),
        },
    });

    out.push(match rows.iter().max_by_key(|r| r.threads) {
        None => "target: no rows".into(),
        Some(top) => {
            let what = format!(
                "target (default not slower than std at {} threads, zero lines lost)",
                top.threads
            );
            match top.default_over(Some(top.std)) {
                Some(ratio) => {
                    let lost: u64 = rows.iter().filter_map(|r| r.mode(Mode::Default)).map(|d| d.lost).sum();
                    format!(
                        "{what}: {} (default/std {ratio:.2}, {lost} lost)",
                        verdict(ratio >= 1.0 && lost == 0)
                    )
                }
                None => format!("{what}: not measured (default not run)"),
            }
        }
    });
    out
}
