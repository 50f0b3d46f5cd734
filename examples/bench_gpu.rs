//! CUDA backend: gpuio's `println!` against CUDA's own device `printf`, side by side.
//!
//! `cargo run --release --example bench_gpu [-- OPTIONS]`
//!
//! Needs an NVIDIA GPU; elsewhere it prints `bench_gpu: skipped: no CUDA GPU (<reason>)` and
//! exits 0. Every measurement runs in a fresh child process (this binary, re-run in a hidden
//! mode), so that a kernel fault or a hang costs one case, not the run; a child that runs
//! longer than `--timeout-s` is killed and its case reported as `timeout`.
//!
//! For each lines-per-thread `L` (`--lines`, default `1,16`), line width `W` (`--widths`,
//! default `32,128`, bytes including the newline) and target (`--targets`, default `shm,null`:
//! a fresh file in `--dir`, default `/dev/shm`, or `/dev/null`), `T = --total / L` threads
//! (`--total`, default 16777216 lines; blocks of `--block`, default 256) print `L` lines
//! each, `t=<global thread> i=<seq>` padded with `.` to `W` bytes:
//!
//! - **gpuio**: a child builds a CUDA `Runtime` (Builder defaults, `stdout_fd` = the target,
//!   `--log-mib` if given), loads the kernels' PTX, runs a warm-up launch (one block, one line
//!   per thread; then the file is truncated), and then `--reps` times (default 3) launches
//!   `stress(L, W)` and times launch .. `synchronize` returned. A tmpfs file is checked after
//!   each rep (every line exactly once, whole, in per-thread order, nothing else) and
//!   truncated; `lost` = expected - good lines. Into `/dev/null` nothing can be read back:
//!   `lost` is what `synchronize` reports as lost. The table shows the median time.
//! - **printf**: a child whose stdout is the target sets the device printf FIFO (before any
//!   module is loaded, as the driver requires) to hold every line, builds a runtime (its own
//!   prints go to /dev/null) and loads the same PTX, runs a warm-up launch of `printf_stress`
//!   (then truncates its stdout), and times one launch of `printf_stress(L, W)` (the same
//!   bytes through `vprintf`) .. `synchronize` returned and C stdio flushed: the driver
//!   formats and writes the FIFO's records during `synchronize`. The parent checks the file
//!   the same way once the child exited. Into `/dev/null`: `lost` is `n/a`.
//! - **cold start** (`--cold-reps`, default 3, fresh processes, a tmpfs file): time from
//!   before `Runtime::builder().build()` until the first line of a one-thread `stress(1, 0)`
//!   launch is in the file (its size polled every 50 us, no `synchronize`), split into
//!   runtime build, module load (includes the driver's PTX JIT, which it may cache in
//!   `~/.nv/ComputeCache`) and launch-to-line.
//!
//! Output: machine and settings, one table (stdout), the targets' verdicts; per-rep details
//! on stderr. Exits 1 if gpuio lost a line or a gpuio case failed, 2 on bad options.
//!
//! `GPUIO_LOCKSTEP=1` runs every case on the `sm_60` PTX, which the GPU runs with the lanes
//! of each warp in lockstep (as AMD GPUs run wavefronts); the header says which ran.
//!
//! Options: `--total N`, `--lines 1,16`, `--widths 32,128`, `--targets shm,null`,
//! `--dir /dev/shm`, `--block 256`, `--reps 3`, `--cold-reps 3`, `--timeout-s 120`,
//! `--log-mib N` (gpuio log per stream, a power of two), `--printf-fifo-mib N` (override the
//! FIFO size), `--skip-printf-above N` (no printf for cases of more than N lines; 0, the
//! default, never skips).
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpuio::cuda::Cuda;
use gpuio::{Arg, Backend, Error, Runtime, Scheduling};

mod common;
use common::{expected_bytes, statfs, verify, Check};

/// The example kernels (`kernels/`) as PTX, built by build.rs for `sm_90` and for `sm_60`
/// (the lockstep build, which `GPUIO_LOCKSTEP=1` selects: `Runtime::load_matching`).
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::NVPTX;

const USAGE: &str = "usage: bench_gpu [--total N] [--lines 1,16] [--widths 32,128] [--targets shm,null] \
                     [--dir /dev/shm] [--block 256] [--reps 3] [--cold-reps 3] [--timeout-s 120] [--log-mib N] \
                     [--printf-fifo-mib N] [--skip-printf-above N]";

/// Child reports on stderr start with this; everything else a child writes there is passed on.
const REPORT: &str = "@bench ";

const MIB: u64 = 1 << 20;

const CLI: common::Cli = common::Cli {
    name: "bench_gpu",
    usage: USAGE,
};

fn fail(msg: &str) -> ! {
    CLI.fail(msg)
}

// ---------------------------------------------------------------------------------------
// Options

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// A fresh file in `--dir` (tmpfs).
    Shm,
    /// `/dev/null`.
    Null,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Shm => "shm",
            Target::Null => "null",
        }
    }
}

struct Config {
    total: u64,
    lines: Vec<u32>,
    widths: Vec<u32>,
    targets: Vec<Target>,
    dir: PathBuf,
    block: u32,
    reps: u32,
    cold_reps: u32,
    timeout: Duration,
    log_mib: u64,
    fifo_mib: Option<u64>,
    skip_printf_above: u64,
}

fn list<T: std::str::FromStr>(args: &[String], name: &str, default: &str) -> Vec<T> {
    let s: String = CLI.opt(args, name).unwrap_or_else(|| default.into());
    s.split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| fail(&format!("{name}: bad value {v:?}")))
        })
        .collect()
}

fn parse_config(args: &[String]) -> Config {
    let known = [
        "--total",
        "--lines",
        "--widths",
        "--targets",
        "--dir",
        "--block",
        "--reps",
        "--cold-reps",
        "--timeout-s",
        "--log-mib",
        "--printf-fifo-mib",
        "--skip-printf-above",
    ];
    CLI.only_known(args, &known);
    let targets = list::<String>(args, "--targets", "shm,null")
        .iter()
        .map(|t| match t.as_str() {
            "shm" | "tmpfs" => Target::Shm,
            "null" => Target::Null,
            _ => fail(&format!("--targets: {t:?} is neither shm nor null")),
        })
        .collect();
    let cfg = Config {
        total: CLI.opt(args, "--total").unwrap_or(16_777_216),
        lines: list(args, "--lines", "1,16"),
        widths: list(args, "--widths", "32,128"),
        targets,
        dir: CLI.opt(args, "--dir").unwrap_or_else(|| "/dev/shm".into()),
        block: CLI.opt(args, "--block").unwrap_or(256),
        reps: CLI.opt(args, "--reps").unwrap_or(3),
        cold_reps: CLI.opt(args, "--cold-reps").unwrap_or(3),
        timeout: Duration::from_secs(CLI.opt(args, "--timeout-s").unwrap_or(120)),
        log_mib: CLI.opt(args, "--log-mib").unwrap_or(0),
        fifo_mib: CLI.opt(args, "--printf-fifo-mib"),
        skip_printf_above: CLI.opt(args, "--skip-printf-above").unwrap_or(0),
    };
    if cfg.reps == 0 {
        fail("--reps must be at least 1");
    }
    if cfg.timeout.is_zero() {
        fail("--timeout-s must be at least 1");
    }
    if cfg.block == 0 || cfg.block > 1024 {
        fail("--block must be 1..=1024");
    }
    if cfg.log_mib != 0 && !cfg.log_mib.is_power_of_two() {
        fail("--log-mib must be a power of two");
    }
    for &l in &cfg.lines {
        let threads = cfg.total / u64::from(l.max(1));
        if l == 0 || threads * u64::from(l) != cfg.total || !threads.is_multiple_of(u64::from(cfg.block)) {
            fail(&format!(
                "--total {} must be L x T with T a multiple of --block {} (L = {l})",
                cfg.total, cfg.block
            ));
        }
        if threads / u64::from(cfg.block) > i32::MAX as u64 {
            fail(&format!("L = {l}: {threads} threads is more than a grid holds"));
        }
    }
    cfg
}

// ---------------------------------------------------------------------------------------
// Entry

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--gpuio-child") => gpuio_child(&child_args(&args[1..])),
        Some("--printf-child") => printf_child(&child_args(&args[1..])),
        Some("--cold-child") => cold_child(&child_args(&args[1..])),
        _ => {}
    }
    let cfg = parse_config(&args);
    let started = Instant::now();

    // Is there a CUDA GPU? (The children force the CUDA backend.)
    let forced = Backend::from_env().unwrap_or_else(|e| fail(&e.to_string()));
    if let Some(b) = forced.filter(|b| *b != Backend::Cuda) {
        println!(
            "bench_gpu: skipped: no CUDA GPU (GPUIO_BACKEND={} selects another backend)",
            b.name()
        );
        return;
    }
    let gpu_name = match Cuda::open() {
        Ok(cuda) => cuda.device_name().to_string(),
        Err(reason) => {
            println!("bench_gpu: skipped: no CUDA GPU ({reason})");
            return;
        }
    };
    let lockstep = Scheduling::lockstep_from_env()
        .unwrap_or_else(|e| fail(&e.to_string()))
        .unwrap_or(false);
    let want = if lockstep {
        Scheduling::Lockstep
    } else {
        Scheduling::Independent
    };
    let Some((arch, ptx)) = NVPTX.iter().find(|(arch, _)| Scheduling::of_sm(arch) == Some(want)) else {
        fail("no PTX for this scheduling: rebuild without GPUIO_SKIP_GPU_BUILD=1");
    };
    let ptx = String::from_utf8_lossy(ptx);
    if !ptx.contains(".entry printf_stress(") || !ptx.contains(".entry stress(") {
        fail("the kernels' PTX lacks `stress` or `printf_stress`: rebuild without GPUIO_SKIP_GPU_BUILD=1");
    }
    println!("scheduling:     {want} ({arch} PTX; GPUIO_LOCKSTEP={})", lockstep as u8);

    machine_info(&cfg, &gpu_name);
    let cold = cold_start(&cfg);
    let mut rows = Vec::new();
    for &lines in &cfg.lines {
        for &width in &cfg.widths {
            for &target in &cfg.targets {
                let case = Case {
                    lines,
                    width,
                    target,
                    threads: (cfg.total / u64::from(lines)) as u32,
                };
                rows.push(bench_case(&cfg, &case));
            }
        }
    }
    print_table(&cfg, &rows, &cold);
    let failed = rows.iter().any(|r| r.gpuio.error.is_some() || r.gpuio.lost != 0);
    println!("total run time: {:.1} s", started.elapsed().as_secs_f64());
    if failed {
        eprintln!("bench_gpu: gpuio lost lines or a gpuio case failed (see above): exit 1");
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------------------
// Machine information

fn machine_info(cfg: &Config, gpu: &str) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = common::cpu_model();
    println!("date (UTC):     {}", common::utc_date());
    println!("kernel:         {}", common::uname_release());
    println!("cpu:            {model} ({cpus} CPUs)");
    println!("gpu:            {gpu}");
    let smi = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,memory.total,persistence_mode,pci.bus_id",
            "--format=csv,noheader",
        ])
        .stderr(Stdio::null())
        .output();
    match smi {
        Ok(o) if o.status.success() => {
            for l in String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                println!("nvidia-smi:     {} (name, driver, memory, persistence, bus)", l.trim());
            }
        }
        _ => println!("nvidia-smi:     not available (driver version not shown)"),
    }
    if cfg.targets.contains(&Target::Shm) {
        let fs = match statfs(&cfg.dir) {
            Ok((tmpfs, free)) => format!(
                "{}, {:.1} GiB free",
                if tmpfs { "tmpfs" } else { "NOT tmpfs" },
                free as f64 / (1u64 << 30) as f64
            ),
            Err(e) => fail(&format!("statfs {}: {e}", cfg.dir.display())),
        };
        println!("dir:            {} ({fs})", cfg.dir.display());
    }
    println!(
        "gpuio runtime:  CUDA backend, Builder defaults{}",
        if cfg.log_mib > 0 {
            format!(" except log_bytes {} MiB", cfg.log_mib)
        } else {
            " (64 MiB log per stream)".into()
        }
    );
    println!(
        "work:           {} lines per case, blocks of {} threads; gpuio: median of {} reps after a warm-up; \
         printf: 1 run after a warm-up; timeout {} s per child",
        cfg.total,
        cfg.block,
        cfg.reps,
        cfg.timeout.as_secs()
    );
    println!();
}

// ---------------------------------------------------------------------------------------
// Child processes

/// `key=value` arguments of a child mode.
fn child_args(args: &[String]) -> HashMap<String, String> {
    args.iter()
        .map(|a| match a.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => fail(&format!("child argument {a:?} is not key=value")),
        })
        .collect()
}

fn get<T: std::str::FromStr>(kv: &HashMap<String, String>, key: &str) -> T {
    kv.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| child_error(&format!("missing or bad child argument {key}")))
}

/// Child side: one report line for the parent.
fn report(kind: &str, fields: &[(&str, String)]) {
    let mut s = format!("{REPORT}{kind}");
    for (k, v) in fields {
        s.push_str(&format!(" {k}={v}"));
    }
    eprintln!("{s}");
}

/// Child side: reports an error and exits 3.
fn child_error(msg: &str) -> ! {
    eprintln!("{REPORT}error {msg}");
    std::process::exit(3)
}

/// One report line from a child: its kind and fields.
#[derive(Debug, Default)]
struct Report {
    kind: String,
    fields: HashMap<String, String>,
}

impl Report {
    fn u64(&self, key: &str) -> Option<u64> {
        self.fields.get(key).and_then(|v| v.parse().ok())
    }
}

/// What a child left.
struct ChildRun {
    reports: Vec<Report>,
    /// `@bench error` messages, then a description of an abnormal exit.
    errors: Vec<String>,
    timed_out: bool,
}

/// Runs this binary in child mode `mode`, with `stdout`, passing its stderr on (indented,
/// tagged) except report lines, which it collects. Kills it after `timeout`.
fn run_child(mode: &str, args: &[String], stdout: Stdio, timeout: Duration, tag: &str) -> ChildRun {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&format!("current_exe: {e}")));
    let mut child = Command::new(exe)
        .arg(mode)
        .args(args)
        .env("GPUIO_QUIET", "1")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("starting a child: {e}")));
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    let tag = tag.to_string();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            match line.strip_prefix(REPORT) {
                Some(r) => {
                    let _ = tx.send(r.to_string());
                }
                None => eprintln!("    [{tag}] {line}"),
            }
        }
    });
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => fail(&format!("waiting for a child: {e}")),
        }
    };
    let _ = reader.join();
    let (mut reports, mut errors) = (Vec::new(), Vec::new());
    for r in rx.try_iter() {
        if let Some(msg) = r.strip_prefix("error ") {
            errors.push(msg.to_string());
            continue;
        }
        let mut parts = r.split(' ');
        let kind = parts.next().unwrap_or_default().to_string();
        let fields = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        reports.push(Report { kind, fields });
    }
    if timed_out {
        errors.push(format!("killed after {} s (timeout)", timeout.as_secs()));
    } else if let Some(s) = status.filter(|s| !s.success()) {
        errors.push(format!("child exited with {s}"));
    }
    ChildRun {
        reports,
        errors,
        timed_out,
    }
}

/// Opens the target of a child: `/dev/null` for writing, or creates (truncates) a file.
fn open_target(path: &str) -> File {
    let r = if path == "/dev/null" {
        File::options().write(true).open(path)
    } else {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    };
    r.unwrap_or_else(|e| child_error(&format!("open {path}: {e}")))
}

/// Empties a regular file and rewinds its offset (after a warm-up, between reps).
fn reset(file: &mut File) {
    let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if regular {
        file.set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .unwrap_or_else(|e| child_error(&format!("truncating the output: {e}")));
    }
}

fn ns(d: Duration) -> String {
    d.as_nanos().to_string()
}

/// Lines lost that `synchronize` reported, or the error if it failed otherwise.
fn runtime_lost(r: gpuio::Result<()>) -> Result<u64, String> {
    match r {
        Ok(()) => Ok(0),
        Err(Error::Print(p)) => {
            eprintln!("{p}");
            Ok(p.outputs.iter().map(|o| o.lost_lines).sum())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Child mode `--gpuio-child`: build, load, warm up, then `reps` timed launches of `stress`.
fn gpuio_child(kv: &HashMap<String, String>) -> ! {
    let (lines, width, threads, block): (u32, u32, u32, u32) =
        (get(kv, "lines"), get(kv, "width"), get(kv, "threads"), get(kv, "block"));
    let (reps, log_mib): (u32, u64) = (get(kv, "reps"), get(kv, "log_mib"));
    let path: String = get(kv, "out");
    let mut file = open_target(&path);
    let regular = path != "/dev/null";
    let t0 = Instant::now();
    let mut builder = Runtime::builder().backend(Backend::Cuda).stdout_fd(file.as_raw_fd());
    if log_mib > 0 {
        builder = builder.log_bytes((log_mib * MIB) as usize);
    }
    let rt = builder
        .build()
        .unwrap_or_else(|e| child_error(&format!("runtime: {e}")));
    let build = t0.elapsed();
    let t1 = Instant::now();
    let module = rt
        .load_matching(NVPTX)
        .unwrap_or_else(|e| child_error(&format!("load_matching: {e}")));
    let load = t1.elapsed();
    let t2 = Instant::now();
    let warm = module
        .launch("stress", 1, block, &[Arg::from(1u32), width.into()])
        .map_err(|e| e.to_string())
        .and_then(|_| runtime_lost(rt.synchronize()));
    if let Err(e) = warm {
        child_error(&format!("warm-up launch: {e}"));
    }
    let warm = t2.elapsed();
    reset(&mut file);
    report(
        "setup",
        &[("build_ns", ns(build)), ("load_ns", ns(load)), ("warm_ns", ns(warm))],
    );
    for rep in 0..reps {
        let sq0 = rt.stats().sqes;
        let t = Instant::now();
        let launched = module.launch("stress", threads / block, block, &[lines.into(), width.into()]);
        if let Err(e) = launched {
            child_error(&format!("rep {rep}: launch: {e}"));
        }
        let synced = rt.synchronize();
        let elapsed = t.elapsed();
        let rt_lost = runtime_lost(synced).unwrap_or_else(|e| child_error(&format!("rep {rep}: synchronize: {e}")));
        let sqes = rt.stats().sqes.wrapping_sub(sq0);
        let mut fields = vec![
            ("rep", rep.to_string()),
            ("ns", ns(elapsed)),
            ("sqes", sqes.to_string()),
            ("rt_lost", rt_lost.to_string()),
        ];
        if regular {
            let c = check_file(Path::new(&path), u64::from(threads), u64::from(lines), width);
            fields.extend(c.fields());
            reset(&mut file);
        }
        report("rep", &fields);
    }
    drop(module);
    drop(rt);
    if regular {
        let _ = std::fs::remove_file(&path);
    }
    std::process::exit(0)
}

/// Child mode `--printf-child`: stdout is the target. Set the FIFO, load, warm up, time one
/// launch of `printf_stress`.
fn printf_child(kv: &HashMap<String, String>) -> ! {
    let (lines, width, threads, block): (u32, u32, u32, u32) =
        (get(kv, "lines"), get(kv, "width"), get(kv, "threads"), get(kv, "block"));
    let mut fifo: u64 = get(kv, "fifo");
    // The FIFO size must be set before any module that uses printf is loaded. `cuda` holds
    // the primary context (which the runtime shares) until the end, so the limit stays.
    let cuda = Cuda::open().unwrap_or_else(|e| child_error(&format!("CUDA: {e}")));
    loop {
        match cuda.set_printf_fifo(fifo as usize) {
            Ok(()) => break,
            Err(e) if fifo > 64 * MIB => {
                eprintln!("printf FIFO of {} MiB refused ({e}); trying half", fifo / MIB);
                fifo /= 2;
            }
            Err(e) => child_error(&format!("set_printf_fifo({fifo}): {e}")),
        }
    }
    // gpuio's own prints (none: printf_stress does not use them) go to /dev/null, so that the
    // runtime never repositions our stdout.
    let devnull = open_target("/dev/null");
    let rt = Runtime::builder()
        .backend(Backend::Cuda)
        .stdout_fd(devnull.as_raw_fd())
        .stderr_fd(devnull.as_raw_fd())
        .build()
        .unwrap_or_else(|e| child_error(&format!("runtime: {e}")));
    let module = rt
        .load_matching(NVPTX)
        .unwrap_or_else(|e| child_error(&format!("load_matching: {e}")));
    let flush = || {
        // SAFETY: fflush(NULL) flushes every C stdio output stream; the driver writes the
        // printf output through C stdio (or directly; then there is nothing to flush).
        unsafe { libc::fflush(std::ptr::null_mut()) };
    };
    let warm = module
        .launch("printf_stress", 1, 32, &[Arg::from(1u32), width.into()])
        .and_then(|_| rt.synchronize());
    if let Err(e) = warm {
        child_error(&format!("warm-up launch: {e}"));
    }
    flush();
    // SAFETY: dup only duplicates our stdout (fd 1, which stays open).
    let fd = unsafe { libc::dup(1) };
    if fd < 0 {
        child_error(&format!("dup(1): {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let mut stdout = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    reset(&mut stdout);
    let t = Instant::now();
    let run = module
        .launch("printf_stress", threads / block, block, &[lines.into(), width.into()])
        .and_then(|_| rt.synchronize());
    flush();
    let elapsed = t.elapsed();
    if let Err(e) = run {
        child_error(&format!("printf_stress: {e}"));
    }
    let bytes = stdout.metadata().map(|m| m.len()).unwrap_or(0);
    // Anything the driver writes after synchronize returned (it should not) shows here.
    drop(module);
    drop(rt);
    drop(cuda);
    flush();
    let bytes_at_exit = stdout.metadata().map(|m| m.len()).unwrap_or(0);
    report(
        "printf",
        &[
            ("ns", ns(elapsed)),
            ("fifo", fifo.to_string()),
            ("bytes", bytes.to_string()),
            ("bytes_at_exit", bytes_at_exit.to_string()),
        ],
    );
    std::process::exit(0)
}

/// Child mode `--cold-child`: runtime creation to the first line in the file.
fn cold_child(kv: &HashMap<String, String>) -> ! {
    let path: String = get(kv, "out");
    let file = open_target(&path);
    let t0 = Instant::now();
    let rt = Runtime::builder()
        .backend(Backend::Cuda)
        .stdout_fd(file.as_raw_fd())
        .build()
        .unwrap_or_else(|e| child_error(&format!("runtime: {e}")));
    let build = t0.elapsed();
    let t1 = Instant::now();
    let module = rt
        .load_matching(NVPTX)
        .unwrap_or_else(|e| child_error(&format!("load_matching: {e}")));
    let load = t1.elapsed();
    let t2 = Instant::now();
    module
        .launch("stress", 1, 1, &[Arg::from(1u32), Arg::from(0u32)])
        .unwrap_or_else(|e| child_error(&format!("launch: {e}")));
    let poll_until = t2 + Duration::from_secs(10);
    let mut seen_by = "poll";
    while std::fs::metadata(&path).map_or(0, |m| m.len()) == 0 {
        if Instant::now() > poll_until {
            // Not on disk without synchronize: say so, and time it with synchronize.
            seen_by = "synchronize";
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let mut first = t2.elapsed();
    let total = t0.elapsed();
    if let Err(e) = rt.synchronize() {
        child_error(&format!("synchronize: {e}"));
    }
    if seen_by == "synchronize" {
        first = t2.elapsed();
    }
    report(
        "cold",
        &[
            ("build_ns", ns(build)),
            ("load_ns", ns(load)),
            ("first_ns", ns(first)),
            ("total_ns", ns(if seen_by == "poll" { total } else { t0.elapsed() })),
            ("seen_by", seen_by.into()),
        ],
    );
    drop(module);
    drop(rt);
    std::process::exit(0)
}

// ---------------------------------------------------------------------------------------
// Cases (parent side)

struct Case {
    lines: u32,
    width: u32,
    target: Target,
    threads: u32,
}

impl Case {
    fn name(&self) -> String {
        format!("L={} W={} {}", self.lines, self.width, self.target.name())
    }
    fn total(&self) -> u64 {
        u64::from(self.lines) * u64::from(self.threads)
    }
}

#[derive(Default)]
struct GpuioResult {
    /// Median of the reps.
    time: Option<Duration>,
    /// Lines lost, summed over the reps.
    lost: u64,
    /// SQEs of the median rep.
    sqes: Option<u64>,
    error: Option<String>,
}

enum PrintfResult {
    Measured {
        time: Duration,
        /// `None`: into /dev/null, not checkable.
        lost: Option<u64>,
    },
    Skipped(String),
    Timeout(Duration),
    Failed(String),
}

struct Row {
    name: String,
    target: Target,
    width: u32,
    lines: u64,
    bytes: u64,
    gpuio: GpuioResult,
    printf: PrintfResult,
}

fn out_path(cfg: &Config, target: Target, what: &str, case: &Case) -> String {
    match target {
        Target::Null => "/dev/null".into(),
        Target::Shm => cfg
            .dir
            .join(format!(
                "bench_gpu-{}-{what}-l{}-w{}.out",
                std::process::id(),
                case.lines,
                case.width
            ))
            .to_string_lossy()
            .into_owned(),
    }
}

/// Whether `dir` has room for `bytes` (and some slack); the reason if not.
fn room_for(cfg: &Config, bytes: u64) -> Result<(), String> {
    match statfs(&cfg.dir) {
        Ok((_, free)) if free < bytes + bytes / 16 + 64 * MIB => Err(format!(
            "{} has {:.2} GiB free, the output needs {:.2} GiB",
            cfg.dir.display(),
            free as f64 / (1u64 << 30) as f64,
            bytes as f64 / (1u64 << 30) as f64
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("statfs {}: {e}", cfg.dir.display())),
    }
}

fn bench_case(cfg: &Config, case: &Case) -> Row {
    let total = case.total();
    let bytes = expected_bytes(u64::from(case.threads), u64::from(case.lines), case.width);
    eprintln!(
        "{}: {} threads x {} lines = {total} lines, {:.1} MB",
        case.name(),
        case.threads,
        case.lines,
        bytes as f64 / 1e6
    );
    let room = match case.target {
        Target::Shm => room_for(cfg, bytes),
        Target::Null => Ok(()),
    };
    let gpuio = match &room {
        Ok(()) => run_gpuio(cfg, case, bytes),
        Err(why) => GpuioResult {
            error: Some(format!("not run: {why}")),
            ..GpuioResult::default()
        },
    };
    let printf = if cfg.skip_printf_above > 0 && total > cfg.skip_printf_above {
        PrintfResult::Skipped(format!("more than --skip-printf-above {}", cfg.skip_printf_above))
    } else if let Err(why) = room {
        PrintfResult::Skipped(why)
    } else {
        run_printf(cfg, case, bytes)
    };
    Row {
        name: case.name(),
        target: case.target,
        width: case.width,
        lines: total,
        bytes,
        gpuio,
        printf,
    }
}

fn run_gpuio(cfg: &Config, case: &Case, bytes: u64) -> GpuioResult {
    let path = out_path(cfg, case.target, "gpuio", case);
    let args = [
        format!("lines={}", case.lines),
        format!("width={}", case.width),
        format!("threads={}", case.threads),
        format!("block={}", cfg.block),
        format!("reps={}", cfg.reps),
        format!("log_mib={}", cfg.log_mib),
        format!("out={path}"),
    ];
    let run = run_child("--gpuio-child", &args, Stdio::null(), cfg.timeout, "gpuio");
    if case.target == Target::Shm {
        let _ = std::fs::remove_file(&path);
    }
    let total = case.total();
    let mut res = GpuioResult::default();
    let mut reps = Vec::new();
    for r in &run.reports {
        match r.kind.as_str() {
            "setup" => eprintln!(
                "  gpuio: runtime build {:.1} ms, module load {:.1} ms, warm-up {:.1} ms",
                r.u64("build_ns").unwrap_or(0) as f64 / 1e6,
                r.u64("load_ns").unwrap_or(0) as f64 / 1e6,
                r.u64("warm_ns").unwrap_or(0) as f64 / 1e6
            ),
            "rep" => {
                let t = Duration::from_nanos(r.u64("ns").unwrap_or(0));
                let lost = match r.u64("good") {
                    Some(good) => total.saturating_sub(good),
                    None => r.u64("rt_lost").unwrap_or(0),
                };
                res.lost += lost;
                let check = match r.fields.get("good") {
                    Some(_) => Check::from_report(r).to_string(),
                    None => "not read back (/dev/null)".into(),
                };
                eprintln!(
                    "  gpuio rep {}: {:.2} ms, {:.1} M lines/s, {} SQEs, {} lost by the runtime's count; {check}; lost {lost}",
                    r.fields.get("rep").map_or("?", String::as_str),
                    t.as_secs_f64() * 1e3,
                    total as f64 / t.as_secs_f64() / 1e6,
                    r.u64("sqes").unwrap_or(0),
                    r.u64("rt_lost").unwrap_or(0),
                );
                if r.u64("good").is_some() && r.u64("bytes") != Some(bytes) && lost == 0 {
                    eprintln!(
                        "  gpuio: {} bytes in the file, expected {bytes}",
                        r.u64("bytes").unwrap_or(0)
                    );
                }
                reps.push((t, r.u64("sqes").unwrap_or(0)));
            }
            _ => {}
        }
    }
    if !run.errors.is_empty() || reps.len() < cfg.reps as usize {
        let mut e = run.errors.join("; ");
        if e.is_empty() {
            e = format!("{} of {} reps reported", reps.len(), cfg.reps);
        }
        eprintln!("  gpuio FAILED: {e}");
        res.error = Some(if run.timed_out { "timeout".into() } else { e });
    }
    reps.sort();
    if !reps.is_empty() {
        let (t, sqes) = reps[reps.len() / 2];
        res.time = Some(t);
        res.sqes = Some(sqes);
    }
    res
}

/// The printf FIFO: the records hold the format's address, the arguments at 8-byte slots
/// and a copy of the `%s` string, with headers; twice a generous estimate of that per line.
fn fifo_bytes(cfg: &Config, case: &Case) -> u64 {
    match cfg.fifo_mib {
        Some(m) => m * MIB,
        None => case.total() * (u64::from(case.width) + 64) * 2 + 64 * MIB,
    }
}

fn run_printf(cfg: &Config, case: &Case, bytes: u64) -> PrintfResult {
    let path = out_path(cfg, case.target, "printf", case);
    let file = open_target_parent(&path);
    let fifo = fifo_bytes(cfg, case);
    let args = [
        format!("lines={}", case.lines),
        format!("width={}", case.width),
        format!("threads={}", case.threads),
        format!("block={}", cfg.block),
        format!("fifo={fifo}"),
    ];
    let run = run_child("--printf-child", &args, Stdio::from(file), cfg.timeout, "printf");
    let r = run.reports.iter().find(|r| r.kind == "printf");
    let result = match (r, run.errors.is_empty()) {
        (_, false) if run.timed_out => PrintfResult::Timeout(cfg.timeout),
        (Some(r), true) => {
            let time = Duration::from_nanos(r.u64("ns").unwrap_or(0));
            let used = r.u64("fifo").unwrap_or(0);
            let lost = (case.target == Target::Shm).then(|| {
                let c = check_file(
                    Path::new(&path),
                    u64::from(case.threads),
                    u64::from(case.lines),
                    case.width,
                );
                eprintln!("  printf check: {c}");
                if c.good == case.total() && c.bytes != bytes {
                    eprintln!("  printf: {} bytes in the file, expected {bytes}", c.bytes);
                }
                case.total().saturating_sub(c.good)
            });
            eprintln!(
                "  printf: {:.2} ms, {:.2} M lines/s, FIFO {} MiB, {} bytes written; lost {}",
                time.as_secs_f64() * 1e3,
                case.total() as f64 / time.as_secs_f64() / 1e6,
                used / MIB,
                r.u64("bytes").unwrap_or(0),
                lost.map_or("n/a (/dev/null)".into(), |l| l.to_string())
            );
            let (timed, at_exit) = (r.u64("bytes").unwrap_or(0), r.u64("bytes_at_exit").unwrap_or(0));
            if at_exit > timed {
                eprintln!(
                    "  printf: NOTE {} bytes were written after synchronize returned: the printf time is a lower bound",
                    at_exit - timed
                );
            }
            if lost.is_some_and(|l| l > 0) {
                eprintln!(
                    "  printf lost lines: a FIFO too small? try --printf-fifo-mib (now {} MiB)",
                    used / MIB
                );
            }
            PrintfResult::Measured { time, lost }
        }
        _ => {
            let e = if run.errors.is_empty() {
                "no report".to_string()
            } else {
                run.errors.join("; ")
            };
            eprintln!("  printf FAILED: {e}");
            PrintfResult::Failed(e)
        }
    };
    if case.target == Target::Shm {
        let _ = std::fs::remove_file(&path);
    }
    result
}

fn open_target_parent(path: &str) -> File {
    let r = if path == "/dev/null" {
        File::options().write(true).open(path)
    } else {
        File::create(path)
    };
    r.unwrap_or_else(|e| fail(&format!("open {path}: {e}")))
}

/// Cold start, `cfg.cold_reps` fresh processes: (build, load, first line, total) medians.
struct Cold {
    reps: Vec<[Duration; 4]>,
    seen_by_sync: bool,
    errors: Vec<String>,
}

fn cold_start(cfg: &Config) -> Cold {
    let mut cold = Cold {
        reps: Vec::new(),
        seen_by_sync: false,
        errors: Vec::new(),
    };
    if room_for(cfg, 0).is_err() {
        cold.errors.push(format!("{} is not usable", cfg.dir.display()));
        return cold;
    }
    for rep in 0..cfg.cold_reps {
        let path = cfg
            .dir
            .join(format!("bench_gpu-{}-cold-{rep}.out", std::process::id()))
            .to_string_lossy()
            .into_owned();
        let run = run_child(
            "--cold-child",
            &[format!("out={path}")],
            Stdio::null(),
            cfg.timeout,
            "cold",
        );
        let content = std::fs::read(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        let Some(r) = run
            .reports
            .iter()
            .find(|r| r.kind == "cold")
            .filter(|_| run.errors.is_empty())
        else {
            let e = format!("cold start rep {rep}: {}", run.errors.join("; "));
            eprintln!("  {e}");
            cold.errors.push(e);
            continue;
        };
        if content != b"t=0 i=0\n" {
            let e = format!("cold start rep {rep}: the file holds {content:?}, expected \"t=0 i=0\\n\"");
            eprintln!("  {e}");
            cold.errors.push(e);
        }
        let d = |k: &str| Duration::from_nanos(r.u64(k).unwrap_or(0));
        let v = [d("build_ns"), d("load_ns"), d("first_ns"), d("total_ns")];
        let by = r.fields.get("seen_by").map_or("?", String::as_str);
        cold.seen_by_sync |= by != "poll";
        eprintln!(
            "cold start rep {rep}: build {:.1} ms + load {:.1} ms + launch to first line {:.3} ms = {:.1} ms (seen by {by})",
            ms(v[0]),
            ms(v[1]),
            ms(v[2]),
            ms(v[3])
        );
        cold.reps.push(v);
    }
    cold
}

/// A speed-up, with two decimals below 10.
fn ratio(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.1}")
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------------------------------
// Reading output back (the checker is in `common`)

/// A [`Check`] as report fields, from the child to the parent.
impl Check {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("bytes", self.bytes.to_string()),
            ("read", self.read.to_string()),
            ("good", self.good.to_string()),
            ("malformed", self.malformed.to_string()),
            ("duplicate", self.duplicate.to_string()),
            ("disorder", self.disorder.to_string()),
        ]
    }

    fn from_report(r: &Report) -> Check {
        let f = |k: &str| r.u64(k).unwrap_or(0);
        Check {
            bytes: f("bytes"),
            read: f("read"),
            good: f("good"),
            malformed: f("malformed"),
            duplicate: f("duplicate"),
            disorder: f("disorder"),
        }
    }
}

/// A file mapped read-only.
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    fn open(path: &Path) -> std::io::Result<Mapped> {
        let file = File::open(path)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Ok(Mapped {
                ptr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a fresh private read-only mapping of `len` bytes of an open file; the
        // mapping outlives the fd (closed when `file` drops), as mmap allows.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes until `self` drops. Nobody writes the
        // file while we read it (the writer synchronized or exited).
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmaps exactly the mapping made in `open`; no slice of it outlives `self`.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}

/// Maps, checks and leaves the file in place.
fn check_file(path: &Path, threads: u64, lines: u64, width: u32) -> Check {
    match Mapped::open(path) {
        Ok(m) => verify(m.bytes(), threads, lines, width),
        Err(e) => {
            eprintln!("bench_gpu: cannot read {}: {e}", path.display());
            Check::default()
        }
    }
}

// ---------------------------------------------------------------------------------------
// Report

fn print_table(cfg: &Config, rows: &[Row], cold: &Cold) {
    let mut out = std::io::stdout().lock();
    let header = [
        "case",
        "lines",
        "gpuio ms",
        "gpuio M lines/s",
        "gpuio GB/s",
        "printf ms",
        "printf M lines/s",
        "gpuio/printf",
        "lost gpuio",
        "lost printf",
        "SQEs",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let g = r.gpuio.time.map(|t| t.as_secs_f64());
            let gpuio_cells = match (g, &r.gpuio.error) {
                (Some(g), None) => [
                    format!("{:.2}", g * 1e3),
                    format!("{:.1}", r.lines as f64 / g / 1e6),
                    format!("{:.2}", r.bytes as f64 / g / 1e9),
                ],
                (_, Some(e)) if e == "timeout" => ["timeout".into(), "-".into(), "-".into()],
                _ => ["error".into(), "-".into(), "-".into()],
            };
            let (p_ms, p_rate, ratio, p_lost) = match &r.printf {
                PrintfResult::Measured { time, lost } => {
                    let p = time.as_secs_f64();
                    (
                        format!("{:.2}", p * 1e3),
                        format!("{:.2}", r.lines as f64 / p / 1e6),
                        g.map_or("-".into(), |g| ratio(p / g)),
                        lost.map_or("n/a".into(), |l| l.to_string()),
                    )
                }
                PrintfResult::Timeout(t) => (
                    format!(">{:.0}", t.as_secs_f64() * 1e3),
                    format!("<{:.2}", r.lines as f64 / t.as_secs_f64() / 1e6),
                    g.map_or("-".into(), |g| format!(">{}", ratio(t.as_secs_f64() / g))),
                    "timeout".into(),
                ),
                PrintfResult::Skipped(_) => ("skipped".into(), "-".into(), "-".into(), "-".into()),
                PrintfResult::Failed(_) => ("error".into(), "-".into(), "-".into(), "-".into()),
            };
            let g_lost = if r.gpuio.error.is_some() && r.gpuio.time.is_none() {
                "?".into()
            } else {
                r.gpuio.lost.to_string()
            };
            let [g_ms, g_rate, g_gbs] = gpuio_cells;
            vec![
                r.name.clone(),
                r.lines.to_string(),
                g_ms,
                g_rate,
                g_gbs,
                p_ms,
                p_rate,
                ratio,
                g_lost,
                p_lost,
                r.gpuio.sqes.map_or("-".into(), |s| s.to_string()),
            ]
        })
        .collect();
    common::write_table(&mut out, &header, cells, 1);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "case: L lines per thread, W bytes per line (newline included), into a {} file (shm) or /dev/null.",
        cfg.dir.display()
    );
    let _ = writeln!(
        out,
        "gpuio: median of {} reps, launch .. synchronize returned; lost summed over the reps. GB = 10^9 bytes.",
        cfg.reps
    );
    let _ = writeln!(
        out,
        "printf: CUDA device printf (vprintf) of the same lines, one run, launch .. synchronize + fflush; \
         gpuio/printf = printf time / gpuio time."
    );
    let _ = writeln!(
        out,
        "lost: expected lines - lines found once, whole, in order (shm); /dev/null: gpuio's own count, printf n/a."
    );
    for r in rows {
        if let Some(e) = &r.gpuio.error {
            let _ = writeln!(out, "{}: gpuio: {e}", r.name);
        }
        match &r.printf {
            PrintfResult::Failed(e) => {
                let _ = writeln!(out, "{}: printf failed: {e}", r.name);
            }
            PrintfResult::Skipped(why) => {
                let _ = writeln!(out, "{}: printf skipped: {why}", r.name);
            }
            _ => {}
        }
    }
    let _ = writeln!(out);

    // Cold start.
    if cold.reps.is_empty() {
        let _ = writeln!(out, "cold start: not measured ({})", cold.errors.join("; "));
    } else {
        let med = |k: usize| {
            let mut v: Vec<Duration> = cold.reps.iter().map(|r| r[k]).collect();
            v.sort();
            v[v.len() / 2]
        };
        let all: Vec<String> = cold.reps.iter().map(|r| format!("{:.1}", ms(r[3]))).collect();
        let _ = writeln!(
            out,
            "cold start (fresh process, runtime creation to the first line on disk; median of {}): \
             {:.1} ms = runtime build {:.1} ms + module load {:.1} ms + launch to first line {:.3} ms \
             (each rep: {} ms){}",
            cold.reps.len(),
            ms(med(3)),
            ms(med(0)),
            ms(med(1)),
            ms(med(2)),
            all.join(", "),
            if cold.seen_by_sync {
                "; NOTE: the line appeared only after synchronize in some rep"
            } else {
                ""
            }
        );
        for e in &cold.errors {
            let _ = writeln!(out, "cold start: {e}");
        }
    }
    let _ = writeln!(out);

    // Targets.
    let at = |r: &Row| r.lines == 16_777_216;
    let fast: Vec<&Row> = rows
        .iter()
        .filter(|r| r.target == Target::Shm && r.width == 32 && at(r))
        .collect();
    let rate = |r: &Row| match (&r.gpuio.error, r.gpuio.time) {
        (None, Some(t)) => r.lines as f64 / t.as_secs_f64() / 1e6,
        _ => 0.0,
    };
    let verdict = |ok: bool| if ok { "MET" } else { "NOT MET" };
    if fast.is_empty() {
        let _ = writeln!(
            out,
            "target >= 100 M lines/s (32-byte lines, tmpfs, 16777216 lines): not measured in this run"
        );
    } else {
        let rates: Vec<String> = fast.iter().map(|r| format!("{} {:.1}", r.name, rate(r))).collect();
        let _ = writeln!(
            out,
            "target >= 100 M lines/s (32-byte lines, tmpfs, 16777216 lines): {} ({})",
            verdict(fast.iter().all(|r| rate(r) >= 100.0)),
            rates.join(", ")
        );
    }
    let ratios: Vec<(String, f64, bool)> = rows
        .iter()
        .filter_map(|r| {
            let g = r.gpuio.time.filter(|_| r.gpuio.error.is_none())?.as_secs_f64();
            match &r.printf {
                PrintfResult::Measured { time, .. } => Some((r.name.clone(), time.as_secs_f64() / g, false)),
                PrintfResult::Timeout(t) => Some((r.name.clone(), t.as_secs_f64() / g, true)),
                _ => None,
            }
        })
        .collect();
    let compared = ratios.len();
    let compare_rows = rows
        .iter()
        .filter(|r| !matches!(r.printf, PrintfResult::Skipped(_)))
        .count();
    match ratios.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        Some((name, min, lower)) => {
            let _ = writeln!(
                out,
                "target gpuio >= 50x CUDA printf (every compared case): {} (lowest {}{}x at {name}; {compared} of {} cases compared)",
                verdict(*min >= 50.0 && compared == compare_rows),
                if *lower { ">" } else { "" },
                ratio(*min),
                rows.len()
            );
        }
        None => {
            let _ = writeln!(out, "target gpuio >= 50x CUDA printf: not measured in this run");
        }
    }
    let lost: u64 = rows.iter().map(|r| r.gpuio.lost).sum();
    let failed = rows.iter().filter(|r| r.gpuio.error.is_some()).count();
    let _ = writeln!(
        out,
        "target zero lines lost by gpuio: {} ({lost} lost{})",
        verdict(lost == 0 && failed == 0),
        if failed > 0 {
            format!(", {failed} case(s) failed")
        } else {
            String::new()
        }
    );
    if cfg.total != 16_777_216 {
        let _ = writeln!(
            out,
            "(the targets are defined at 16777216 lines; this run used --total {})",
            cfg.total
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(t: u64, i: u64, width: u32) -> Vec<u8> {
        let mut s = format!("t={t} i={i}");
        while s.len() + 1 < width as usize {
            s.push('.');
        }
        s.push('\n');
        s.into_bytes()
    }

    #[test]
    fn verifies_padded_output() {
        for width in [0, 8, 32, 128] {
            let mut data = Vec::new();
            for i in 0..3 {
                for t in 0..12 {
                    data.extend(line(t, i, width));
                }
            }
            assert_eq!(data.len() as u64, expected_bytes(12, 3, width));
            let c = verify(&data, 12, 3, width);
            assert_eq!(
                (c.good, c.malformed, c.duplicate, c.disorder),
                (36, 0, 0, 0),
                "width {width}"
            );
            // A duplicate, one out of order, a torn line; (0, 1), (0, 2) missing.
            let mut bad = line(0, 0, width);
            bad.extend(line(0, 0, width));
            bad.extend(line(1, 2, width));
            bad.extend(line(1, 1, width));
            bad.extend(b"t=1 i\n");
            let c = verify(&bad, 2, 3, width);
            let found = (c.read, c.good, c.duplicate, c.disorder, c.malformed);
            assert_eq!(found, (5, 2, 1, 1, 1), "width {width}");
        }
        // Wrong padding is malformed.
        let mut short = line(3, 1, 32);
        short.remove(10);
        assert_eq!(verify(&short, 4, 2, 32).malformed, 1);
    }
}
