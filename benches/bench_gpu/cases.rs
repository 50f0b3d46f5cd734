//! The cases, parent side: run the children, collect their reports into rows.

use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::child::run_child;
use crate::common::{self, expected_bytes, statfs, Source};
use crate::options::{Config, Kernel, Target};
use crate::readback::check_file;
use crate::{fail, MIB};

pub(crate) struct Case {
    pub(crate) lines: u32,
    pub(crate) width: u32,
    pub(crate) target: Target,
    pub(crate) threads: u32,
}

impl Case {
    pub(crate) fn name(&self) -> String {
        format!("L={} W={} {}", self.lines, self.width, self.target.name())
    }
    pub(crate) fn total(&self) -> u64 {
        u64::from(self.lines) * u64::from(self.threads)
    }
}

#[derive(Default)]
pub(crate) struct GpuioResult {
    /// Median of the reps.
    pub(crate) time: Option<Duration>,
    /// Lines lost, summed over the reps.
    pub(crate) lost: u64,
    /// SQEs of the median rep.
    pub(crate) sqes: Option<u64>,
    /// The median rep's host CPU time, ns: all threads, the SQPOLL threads, the waker.
    pub(crate) cpu: Option<[u64; 3]>,
    pub(crate) error: Option<String>,
}

pub(crate) enum PrintfResult {
    Measured {
        time: Duration,
        /// `None`: into /dev/null, not checkable.
        lost: Option<u64>,
    },
    Skipped(String),
    Timeout(Duration),
    Failed(String),
}

pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) target: Target,
    pub(crate) width: u32,
    pub(crate) lines: u64,
    pub(crate) bytes: u64,
    pub(crate) gpuio: GpuioResult,
    pub(crate) printf: PrintfResult,
    /// Into a tmpfs file: `dd bs=4M` writing as many bytes to a fresh file there, GB/s
    /// (median of `--reps`), or why not.
    pub(crate) dd: Option<Result<f64, String>>,
    /// Into a tmpfs file: what the file system alone takes from host memory, or why not.
    pub(crate) host_write: Option<Result<HostWrite, String>>,
}

/// As many bytes as a case prints, `pwrite`n by the host into a fresh file in `--dir`
/// ([`common::write_fresh`], 4 MiB writes), `--reps` times each way, the ways taking turns.
pub(crate) struct HostWrite {
    /// GB/s, medians: one thread from a buffer it reuses (hot), one thread from a source as
    /// large as the file (cold), [`HOST_WRITERS`] threads from that source.
    pub(crate) medians: [f64; 3],
    /// The fastest single run of any way, GB/s.
    pub(crate) best: f64,
}

/// The larger writer count of [`Row::host_write`].
pub(crate) const HOST_WRITERS: usize = 4;

/// The children's `module=` argument: `--kernel cpp`'s joined PTX file, or empty.
fn module_arg(cfg: &Config) -> String {
    format!(
        "module={}",
        cfg.module
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    )
}

pub(crate) fn out_path(cfg: &Config, target: Target, what: &str, case: &Case) -> String {
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
pub(crate) fn room_for(cfg: &Config, bytes: u64) -> Result<(), String> {
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

pub(crate) fn bench_case(cfg: &Config, case: &Case) -> Row {
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
    let dd = (case.target == Target::Shm && room.is_ok()).then(|| run_dd(cfg, bytes));
    let host_write = (case.target == Target::Shm && room.is_ok()).then(|| run_host_write(cfg, bytes));
    let printf = if cfg.kernel.printf_twin().is_none() {
        PrintfResult::Skipped("--kernel literal has no printf twin".into())
    } else if cfg.skip_printf_above > 0 && total > cfg.skip_printf_above {
        PrintfResult::Skipped(format!("more than --skip-printf-above {}", cfg.skip_printf_above))
    } else if let Err(why) = room {
        PrintfResult::Skipped(why)
    } else {
        run_printf(cfg, case, bytes)
    };
    Row {
        name: match cfg.kernel {
            Kernel::Stress => case.name(),
            Kernel::Literal => format!("{} literal", case.name()),
            Kernel::Cpp => format!("{} C++", case.name()),
        },
        target: case.target,
        width: case.width,
        lines: total,
        bytes,
        gpuio,
        printf,
        dd,
        host_write,
    }
}

pub(crate) fn run_gpuio(cfg: &Config, case: &Case, bytes: u64) -> GpuioResult {
    let path = out_path(cfg, case.target, "gpuio", case);
    let args = [
        format!("lines={}", case.lines),
        format!("width={}", case.width),
        format!("threads={}", case.threads),
        format!("block={}", cfg.block),
        format!("reps={}", cfg.reps),
        format!("log_mib={}", cfg.log_mib),
        format!("kernel={}", cfg.kernel.name()),
        module_arg(cfg),
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
                "  gpuio: runtime build {:.1} ms, module load {:.1} ms, warm-up {:.1} ms; the kernel: {} registers, \
                 {} bytes of local memory per thread",
                r.u64("build_ns").unwrap_or(0) as f64 / 1e6,
                r.u64("load_ns").unwrap_or(0) as f64 / 1e6,
                r.u64("warm_ns").unwrap_or(0) as f64 / 1e6,
                r.fields.get("regs").map_or("?", String::as_str),
                r.fields.get("local").map_or("?", String::as_str),
            ),
            "rep" => {
                let t = Duration::from_nanos(r.u64("ns").unwrap_or(0));
                let lost = match r.u64("good") {
                    Some(good) => total.saturating_sub(good),
                    None => r.u64("rt_lost").unwrap_or(0),
                };
                res.lost += lost;
                let check = match r.fields.get("good") {
                    Some(_) => r.check().to_string(),
                    None => "not read back (/dev/null)".into(),
                };
                let cpu = [r.u64("cpu_ns"), r.u64("sqpoll_ns"), r.u64("waker_ns")].map(|v| v.unwrap_or(0));
                eprintln!(
                    "  gpuio rep {}: {:.2} ms, {:.1} M lines/s, {} SQEs, {} lost by the runtime's count; {check}; lost {lost}; \
                     host CPU {:.1} ms (SQPOLL {:.1}, waker {:.2})",
                    r.fields.get("rep").map_or("?", String::as_str),
                    t.as_secs_f64() * 1e3,
                    total as f64 / t.as_secs_f64() / 1e6,
                    r.u64("sqes").unwrap_or(0),
                    r.u64("rt_lost").unwrap_or(0),
                    cpu[0] as f64 / 1e6,
                    cpu[1] as f64 / 1e6,
                    cpu[2] as f64 / 1e6,
                );
                if r.u64("good").is_some() && r.u64("bytes") != Some(bytes) && lost == 0 {
                    eprintln!(
                        "  gpuio: {} bytes in the file, expected {bytes}",
                        r.u64("bytes").unwrap_or(0)
                    );
                }
                reps.push((t, r.u64("sqes").unwrap_or(0), cpu));
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
        let (t, sqes, cpu) = reps[reps.len() / 2];
        res.time = Some(t);
        res.sqes = Some(sqes);
        res.cpu = Some(cpu);
    }
    res
}

/// `dd if=/dev/zero bs=4M` writing at least `bytes` to a fresh file in `--dir`, `--reps`
/// times: the median rate in GB/s (10^9 bytes a second), process start to exit.
pub(crate) fn run_dd(cfg: &Config, bytes: u64) -> Result<f64, String> {
    const BS: u64 = 4 * MIB;
    let count = bytes.div_ceil(BS);
    let path = cfg.dir.join(format!("bench_gpu-{}-dd.out", std::process::id()));
    let mut rates = Vec::new();
    for _ in 0..cfg.reps {
        let _ = std::fs::remove_file(&path);
        let t = std::time::Instant::now();
        let status = std::process::Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", path.display()))
            .arg("bs=4M")
            .arg(format!("count={count}"))
            .arg("status=none")
            .stdin(Stdio::null())
            .status();
        let elapsed = t.elapsed();
        let _ = std::fs::remove_file(&path);
        match status {
            Ok(s) if s.success() => rates.push((count * BS) as f64 / elapsed.as_secs_f64() / 1e9),
            Ok(s) => return Err(format!("dd exited with {s}")),
            Err(e) => return Err(format!("running dd: {e}")),
        }
    }
    rates.sort_by(f64::total_cmp);
    eprintln!(
        "  dd bs=4M count={count} into a fresh file in {}: {} GB/s",
        cfg.dir.display(),
        rates.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ")
    );
    Ok(rates[rates.len() / 2])
}

/// [`HostWrite`] for `bytes`. The cold source is filled once, for every run (it takes as
/// much memory as the output, beside it).
pub(crate) fn run_host_write(cfg: &Config, bytes: u64) -> Result<HostWrite, String> {
    let cold: Vec<u8> = (0..bytes).map(|i| b'a' + (i % 26) as u8).collect();
    let ways = [
        (1, Source::Hot),
        (1, Source::Cold(&cold)),
        (HOST_WRITERS, Source::Cold(&cold)),
    ];
    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..cfg.reps {
        for (k, (threads, source)) in ways.into_iter().enumerate() {
            let r = common::write_fresh(&cfg.dir, bytes, threads, (4 * MIB) as usize, source)
                .map_err(|e| format!("host pwrite into {}: {e}", cfg.dir.display()))?;
            rates[k].push(r);
        }
    }
    let shown = |v: &[f64]| v.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ");
    eprintln!(
        "  host pwrite of as many bytes into a fresh file in {}, GB/s: 1 thread hot {}; 1 thread cold {}; \
         {HOST_WRITERS} threads cold {}",
        cfg.dir.display(),
        shown(&rates[0]),
        shown(&rates[1]),
        shown(&rates[2])
    );
    let best = rates.iter().flatten().fold(0.0f64, |a, &b| a.max(b));
    let [a, b, c] = rates;
    Ok(HostWrite {
        medians: [common::median(a), common::median(b), common::median(c)],
        best,
    })
}

/// The printf FIFO: the records hold the format's address, the arguments at 8-byte slots
/// and a copy of the `%s` string, with headers; twice a generous estimate of that per line.
pub(crate) fn fifo_bytes(cfg: &Config, case: &Case) -> u64 {
    match cfg.fifo_mib {
        Some(m) => m * MIB,
        None => case.total() * (u64::from(case.width) + 64) * 2 + 64 * MIB,
    }
}

pub(crate) fn run_printf(cfg: &Config, case: &Case, bytes: u64) -> PrintfResult {
    let path = out_path(cfg, case.target, "printf", case);
    let file = open_target_parent(&path);
    let fifo = fifo_bytes(cfg, case);
    let args = [
        format!("lines={}", case.lines),
        format!("width={}", case.width),
        format!("threads={}", case.threads),
        format!("block={}", cfg.block),
        format!("fifo={fifo}"),
        format!("kernel={}", cfg.kernel.printf_twin().unwrap_or_default()),
        module_arg(cfg),
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

pub(crate) fn open_target_parent(path: &str) -> File {
    let r = if path == "/dev/null" {
        File::options().write(true).open(path)
    } else {
        File::create(path)
    };
    r.unwrap_or_else(|e| fail(&format!("open {path}: {e}")))
}

/// Cold start, `cfg.cold_reps` fresh processes: each rep's (runtime build, module load,
/// launch to the first line, total, the bare CUDA context made before it all).
pub(crate) struct Cold {
    pub(crate) reps: Vec<[Duration; 5]>,
    pub(crate) seen_by_sync: bool,
    pub(crate) errors: Vec<String>,
}

pub(crate) fn cold_start(cfg: &Config) -> Cold {
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
            &[
                format!("out={path}"),
                format!("log_mib={}", cfg.log_mib),
                // `stress(1, 0)`'s line, or `cpp_stress(1, 0)`'s (the same).
                format!(
                    "kernel={}",
                    if cfg.kernel == Kernel::Cpp {
                        "cpp_stress"
                    } else {
                        "stress"
                    }
                ),
                module_arg(cfg),
            ],
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
        let v = [d("build_ns"), d("load_ns"), d("first_ns"), d("total_ns"), d("ctx_ns")];
        let by = r.fields.get("seen_by").map_or("?", String::as_str);
        cold.seen_by_sync |= by != "poll";
        eprintln!(
            "cold start rep {rep}: (bare CUDA context {:.1} ms, before) build {:.1} ms + load {:.1} ms + launch to first line {:.3} ms = {:.1} ms (seen by {by})",
            ms(v[4]),
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
pub(crate) fn ratio(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.1}")
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
