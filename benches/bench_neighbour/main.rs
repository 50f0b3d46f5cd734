//! What a CPU-backend workload costs the other processes of the machine.
//!
//! ```sh
//! cargo bench --bench bench_neighbour                          # 5 s per load, 1 rep
//! cargo bench --bench bench_neighbour -- --secs 5 --reps 3 --loads idle,plain,fair
//! cargo bench --bench bench_neighbour -- --setsid 0            # probes in this session
//! cargo bench --bench bench_neighbour -- --loads plain,yield,wake,yield+wake
//! cargo bench --bench bench_neighbour -- --reps 3 --loads idle,plain,spin,fair
//! ```
//!
//! For each load, `--reps` times in turn (the loads alternate within a rep), the load runs
//! in this process for `--secs` seconds (after a 0.5 s warm-up) while three neighbours run
//! as processes of their own: this executable re-run in a probe mode, each in a session
//! (and so a process group) of its own, as a login or a service would be; under
//! `sched_autogroup` a session is also a scheduling group of its own, whose share the
//! load's group cannot take. `--setsid 0` keeps them in this session, in process groups of
//! their own (then they share the load's group).
//!
//! - `date`: runs `/bin/date` (output to /dev/null) every 50 ms; its wall time from the
//!   spawn to the reaped exit, worst and p99;
//! - a busy loop: its share of a core, utime + stime over wall time (`/proc/self/stat`);
//! - a sleeper: sleeps 1 ms at a time; how late each sleep ends, p50, p99 and max.
//!
//! The loads: `idle` (none: the baseline); `plain` (64 std threads, each `pwrite(2)`ing
//! 4 KiB at its own offset of a file in `--dir`, no gpuio: "the plain C program"); `fair`
//! (the CPU backend, `Sandbox::FileIo`, default settings: one launch of 64 threads, each
//! doing 4 KiB device `pwrite`s at its own offset until a flag in host memory says stop);
//! `rt` (the same with `Builder::real_time_waker(true)`); `print` (64 CPU-backend threads
//! `println!` into a file in `--dir` until told to stop). Not run unless named, loads
//! without gpuio or I/O: `spin` (64 nice-0 threads that compute and never sleep: a program
//! whose threads are always runnable, as a CPU-backend kernel's are, where `plain`'s sleep on
//! the file's lock), and three that mimic the CPU backend's threads under I/O: `yield` (64
//! threads at nice +10 calling `sched_yield`, as kernel threads waiting for a completion
//! do), `wake` (two nice-0 threads waking each other tens of thousands of times a second,
//! as the waker and io_uring's worker do), and `yield+wake` (both).
//!
//! Each row gives the load's own throughput (pwrites, lines, yields or wakeups a second),
//! and on the CPU backend the CPU time of gpuio's I/O threads (the waker `gpuio-waker` and
//! io_uring's workers `iou-wrk-*`, found by name in /proc/self/task; a worker that exited
//! during the window is missed) against the rest of the process but its main thread (the
//! kernel's threads). Then the verdicts: `date`'s worst under gpuio's pwrites (fair, and
//! with the real-time waker) within 2x its worst under the plain program, and, where `spin`
//! ran, the fair load's beside the spinning program's (information: the same count of
//! always-runnable threads without gpuio).
//!
//! Options: `--secs S` (default 5), `--reps R` (default 1), `--threads T` (default 64),
//! `--loads idle,plain,fair,rt,print` (the default; also `spin`, `yield`, `wake`, `yield+wake`),
//! `--dir /dev/shm`, `--setsid 0|1` (default 1).
//!
//! Here: the options, the loads and the table. `load.rs`: a load run with the probes beside
//! it, and the CPU time of the process's threads; `probe.rs`: the probes, this executable
//! re-run in a session of its own.
use std::path::PathBuf;
use std::time::Duration;

#[path = "../common/mod.rs"]
mod common;
mod load;
mod probe;
use load::run_load;
use probe::probe;

const USAGE: &str = "usage: bench_neighbour [--secs S] [--reps R] [--threads T] \
                     [--loads idle,plain,fair,rt,print,spin,yield,wake,yield+wake] [--dir /dev/shm] [--setsid 0|1]";

const CLI: common::Cli = common::Cli {
    name: "bench_neighbour",
    usage: USAGE,
};

/// Bytes per pwrite.
const BLOCK: usize = 4096;
/// How long a load runs before the probes start.
const WARM_UP: Duration = Duration::from_millis(500);
/// The pause between two runs of `date`.
const DATE_EVERY: Duration = Duration::from_millis(50);
/// The sleeper's sleep.
const SLEEP: Duration = Duration::from_millis(1);
/// The nice value of the `yield` loads' threads: the CPU backend's for kernel threads that
/// outnumber the cores (gpuio-host's `backend/cpu.rs`).
const YIELD_NICE: i32 = 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Load {
    Idle,
    Plain,
    Fair,
    RealTime,
    Print,
    /// No gpuio, no I/O: nice-0 threads that compute and never sleep.
    Spin,
    /// No gpuio, no I/O: threads at the kernel threads' nice value calling `sched_yield`.
    Yield,
    /// No gpuio, no I/O: two nice-0 threads waking each other, as the waker and io_uring's
    /// worker do.
    Wake,
    /// Both at once: the pattern of the CPU backend's threads under I/O, without gpuio.
    YieldWake,
}

impl Load {
    fn parse(s: &str) -> Option<Load> {
        Some(match s {
            "idle" => Load::Idle,
            "plain" => Load::Plain,
            "fair" => Load::Fair,
            "rt" => Load::RealTime,
            "print" => Load::Print,
            "spin" => Load::Spin,
            "yield" => Load::Yield,
            "wake" => Load::Wake,
            "yield+wake" => Load::YieldWake,
            _ => return None,
        })
    }

    fn name(self, threads: u32) -> String {
        match self {
            Load::Idle => "idle (no load)".into(),
            Load::Plain => format!("plain: {threads} std threads, 4 KiB pwrite(2)"),
            Load::Fair => format!("gpuio fair: {threads} threads, 4 KiB device pwrite"),
            Load::RealTime => format!("gpuio real-time waker: {threads} threads, 4 KiB pwrite"),
            Load::Print => format!("gpuio print: {threads} threads, println!"),
            Load::Spin => format!("no gpuio: {threads} threads computing, never sleeping"),
            Load::Yield => format!("no gpuio: {threads} threads sched_yield at nice +{YIELD_NICE}"),
            Load::Wake => "no gpuio: 2 threads waking each other".into(),
            Load::YieldWake => format!("no gpuio: {threads} sched_yield at nice +{YIELD_NICE} + 2 waking"),
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Load::Idle => "",
            Load::Print => "lines/s",
            Load::Yield | Load::YieldWake => "yields/s",
            Load::Wake => "wakeups/s",
            Load::Spin => "M loops/s",
            _ => "pwrites/s",
        }
    }
}

struct Config {
    secs: f64,
    reps: usize,
    threads: u32,
    loads: Vec<Load>,
    dir: PathBuf,
    setsid: bool,
}

fn main() {
    let args = common::args();
    if args.first().map(String::as_str) == Some("--probe") {
        probe(&args[1..]);
        return;
    }
    CLI.only_known(
        &args,
        &["--secs", "--reps", "--threads", "--loads", "--dir", "--setsid"],
    );
    let cfg = Config {
        secs: CLI.opt(&args, "--secs").unwrap_or(5.0),
        reps: CLI.opt(&args, "--reps").unwrap_or(1),
        threads: CLI.opt(&args, "--threads").unwrap_or(64),
        loads: CLI
            .opt::<String>(&args, "--loads")
            .unwrap_or_else(|| "idle,plain,fair,rt,print".into())
            .split(',')
            .map(|l| Load::parse(l).unwrap_or_else(|| CLI.fail(&format!("unknown load {l}"))))
            .collect(),
        dir: CLI
            .opt::<String>(&args, "--dir")
            .unwrap_or_else(|| "/dev/shm".into())
            .into(),
        setsid: CLI.opt::<u32>(&args, "--setsid").unwrap_or(1) != 0,
    };
    if cfg.secs <= 0.0 || cfg.reps == 0 || cfg.threads == 0 {
        CLI.fail("--secs, --reps and --threads must be positive");
    }
    println!(
        "# bench_neighbour: {} | {} | Linux {} | {} s per load after {WARM_UP:?} warm-up, {} rep(s) | probes in {} | autogroup {} | load {}",
        common::cpu_model(),
        common::topology(),
        common::uname_release(),
        cfg.secs,
        cfg.reps,
        if cfg.setsid { "sessions of their own" } else { "process groups of their own (this session)" },
        std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
            .map_or("?".into(), |s| s.trim().to_string()),
        loadavg()
    );
    let mut rows: Vec<(Load, Vec<Sample>)> = cfg.loads.iter().map(|&l| (l, Vec::new())).collect();
    for rep in 0..cfg.reps {
        for (load, samples) in &mut rows {
            let s = run_load(&cfg, *load);
            eprintln!(
                "rep {rep} {:?}: date worst {:.1} ms, busy {:.0}%, sleeper p99 {:.2} ms, {:.0} {} | load {}",
                load,
                ms(s.date_worst()),
                100.0 * s.busy_share,
                ms(quantile(&s.late, 0.99)),
                s.rate,
                load.unit(),
                loadavg()
            );
            samples.push(s);
        }
    }
    let header = [
        "load",
        "throughput",
        "date worst (per rep)",
        "date p99",
        "busy loop share",
        "sleeper p50 / p99 / max",
        "gpuio I/O threads' CPU (waker + iou-wrk) / kernel threads'",
    ];
    let cells = rows
        .iter()
        .map(|(load, s)| {
            let mut dates: Vec<Duration> = s.iter().flat_map(|s| s.dates.iter().copied()).collect();
            dates.sort_unstable();
            let mut late: Vec<Duration> = s.iter().flat_map(|s| s.late.iter().copied()).collect();
            late.sort_unstable();
            let busy: Vec<f64> = s.iter().map(|s| s.busy_share).collect();
            vec![
                load.name(cfg.threads),
                match load {
                    Load::Idle => "-".into(),
                    _ => format!(
                        "{:.0} {}",
                        common::median(s.iter().map(|s| s.rate).collect()),
                        load.unit()
                    ),
                },
                format!(
                    "{:.1} ms ({})",
                    ms(dates.last().copied().unwrap_or_default()),
                    s.iter()
                        .map(|s| format!("{:.1}", ms(s.date_worst())))
                        .collect::<Vec<_>>()
                        .join(" / ")
                ),
                format!("{:.1} ms", ms(quantile(&dates, 0.99))),
                format!(
                    "{:.0}% ({:.0}-{:.0}%)",
                    100.0 * common::median(busy.clone()),
                    100.0 * busy.iter().copied().fold(f64::INFINITY, f64::min),
                    100.0 * busy.iter().copied().fold(0.0, f64::max)
                ),
                format!(
                    "{:.2} / {:.2} / {:.1} ms",
                    ms(quantile(&late, 0.5)),
                    ms(quantile(&late, 0.99)),
                    ms(late.last().copied().unwrap_or_default())
                ),
                match load {
                    Load::Fair | Load::RealTime | Load::Print => format!(
                        "{:.2} s / {:.2} s a rep",
                        common::median(s.iter().map(|s| s.io_cpu).collect()),
                        common::median(s.iter().map(|s| s.kernel_cpu).collect())
                    ),
                    _ => "-".into(),
                },
            ]
        })
        .collect();
    common::write_table(&mut std::io::stdout(), &header, cells, 1);
    let worst = |l: Load| {
        rows.iter()
            .find(|(load, _)| *load == l)
            .map(|(_, s)| s.iter().map(Sample::date_worst).max().unwrap_or_default())
    };
    for (l, what) in [(Load::Fair, "gpuio fair"), (Load::RealTime, "gpuio real-time")] {
        match (worst(l), worst(Load::Plain)) {
            (Some(g), Some(p)) => println!(
                "verdict: date worst under {what} <= 2x plain: {} ({:.1} ms against {:.1} ms)",
                if g <= 2 * p { "MET" } else { "NOT MET" },
                ms(g),
                ms(p)
            ),
            _ => println!("verdict: date worst under {what} <= 2x plain: not measured (run both loads)"),
        }
    }
    if let (Some(g), Some(s)) = (worst(Load::Fair), worst(Load::Spin)) {
        println!(
            "information: date worst under gpuio fair against {} always-runnable threads without gpuio (spin): {:.2}x ({:.1} ms against {:.1} ms)",
            cfg.threads,
            g.as_secs_f64() / s.as_secs_f64().max(1e-9),
            ms(g),
            ms(s)
        );
    }
    println!("# load at the end: {}", loadavg());
}

/// What one load's window measured.
#[derive(Default)]
struct Sample {
    /// Each `date`'s wall time.
    dates: Vec<Duration>,
    /// The busy loop's share of a core.
    busy_share: f64,
    /// Each 1 ms sleep's lateness.
    late: Vec<Duration>,
    /// The load's pwrites or lines a second over the window.
    rate: f64,
    /// CPU seconds of gpuio's I/O threads (waker, io-wq workers) over the window.
    io_cpu: f64,
    /// CPU seconds of the rest of the process but the main thread (the kernel's threads).
    kernel_cpu: f64,
}

impl Sample {
    fn date_worst(&self) -> Duration {
        self.dates.iter().copied().max().unwrap_or_default()
    }
}
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `q` quantile of `sorted` (zero if empty).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted
        .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or_default()
}
