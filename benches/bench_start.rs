//! `cargo bench --bench bench_start [-- OPTIONS]`
//!
//! Time to a kernel's first line in a fresh process with no JIT cache (`CUDA_CACHE_DISABLE=1`),
//! on a CUDA GPU: what a user waits for the first time a module runs.
//!
//! For each module and each JIT mode (`--jit`, default `whole,separate`; see `gpuio::Jit`),
//! `--reps` fresh processes (default 3) each build a runtime, load the module (the driver
//! compiles its PTX), launch one kernel on one block of 32 threads and wait for its first
//! line in a tmpfs file. Each prints its breakdown; the table gives the median and range:
//!
//! - **init**: process start to the runtime built (CUDA's initialisation and gpuio's rings,
//!   arena and context);
//! - **JIT**: the driver's compile time, as it reports it (`CU_JIT_WALL_TIME`);
//! - **load**: the whole module load (JIT, link, module load, gpuio's checks);
//! - **first line**: launch to the first line in the file;
//! - **total**: process start to the first line.
//!
//! Modules: `examples`, the example kernels (`hello`), always; `--module NAME=PATH:KERNEL[:N]`
//! adds a PTX file whose kernel `KERNEL` takes no arguments, or one `u32`, `N` (e.g. the
//! template's float kernel: `--module floats=my_kernels-sm_70.ptx:table:32`). Verdicts: the examples' total at most 2 s and their JIT at most 1.5 s (every rep); any other module's total at most 10 s.
//!
//! Options: `--reps 3`, `--jit whole,separate`, `--module NAME=PATH:KERNEL` (repeatable),
//! `--dir /dev/shm`. Without a CUDA GPU it says so and exits 0.
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpuio::{Backend, Error, Jit, Runtime};

const USAGE: &str =
    "usage: bench_start [--reps N] [--jit whole,separate] [--module NAME=PATH:KERNEL[:N]]... [--dir DIR]";

/// The example kernels' PTX, by processor.
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::NVPTX;

/// A child's report line starts with this.
const REPORT: &str = "bench_start: ";

fn fail(msg: &str) -> ! {
    eprintln!("bench_start: {msg}\n{USAGE}");
    std::process::exit(2)
}

struct Module {
    name: String,
    /// `None`: the example kernels.
    path: Option<String>,
    kernel: String,
    /// The kernel's one `u32` argument, if it takes one.
    arg: Option<u32>,
    /// The verdict's limit on the total.
    limit: Duration,
    /// The verdict's limit on the driver's JIT, if any.
    jit_limit: Option<Duration>,
}

fn main() {
    // Without the `--bench` that `cargo bench` adds: it changes nothing here.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    if args.first().map(String::as_str) == Some("--child") {
        child(&args[1..]);
    }
    let (mut reps, mut jits, mut dir) = (3u32, vec![Jit::Whole, Jit::Separate], "/dev/shm".to_string());
    let mut modules = vec![Module {
        name: "examples".into(),
        path: None,
        kernel: "hello".into(),
        arg: None,
        limit: Duration::from_secs(2),
        jit_limit: Some(Duration::from_millis(1500)),
    }];
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| fail(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--reps" => {
                reps = value
                    .parse()
                    .ok()
                    .filter(|&r| r > 0)
                    .unwrap_or_else(|| fail("bad --reps"))
            }
            "--dir" => dir = value.clone(),
            "--jit" => {
                jits = value
                    .split(',')
                    .map(|j| match j {
                        "whole" => Jit::Whole,
                        "separate" => Jit::Separate,
                        _ => fail(&format!("--jit: {j:?} is neither whole nor separate")),
                    })
                    .collect()
            }
            "--module" => {
                let (name, rest) = value
                    .split_once('=')
                    .unwrap_or_else(|| fail("--module NAME=PATH:KERNEL"));
                let mut parts = rest.split(':');
                let (path, kernel) = match (parts.next(), parts.next()) {
                    (Some(p), Some(k)) => (p, k),
                    _ => fail("--module NAME=PATH:KERNEL[:N]"),
                };
                let arg = parts
                    .next()
                    .map(|n| n.parse().unwrap_or_else(|_| fail("--module: N is a u32")));
                if !std::path::Path::new(path).is_file() {
                    fail(&format!("--module {name}: no file {path}"));
                }
                modules.push(Module {
                    name: name.into(),
                    path: Some(path.into()),
                    kernel: kernel.into(),
                    arg,
                    limit: Duration::from_secs(10),
                    jit_limit: None,
                });
            }
            _ => fail(&format!("unknown option {flag}")),
        }
    }
    if let Err(e) = Runtime::builder().backend(Backend::Cuda).build() {
        match e {
            Error::BackendUnavailable { reason, .. } => {
                println!("bench_start: skipped: no CUDA GPU ({reason})");
                return;
            }
            e => fail(&format!("CUDA runtime: {e}")),
        }
    }
    println!("bench_start: {reps} fresh processes per row, CUDA_CACHE_DISABLE=1, one block of 32 threads");
    println!(
        "{:<10} {:<9} {:>15} {:>17} {:>17} {:>15} {:>17}  verdict",
        "module", "jit", "init ms", "JIT ms", "load ms", "first line ms", "total ms"
    );
    let mut all_met = true;
    for m in &modules {
        for &jit in &jits {
            // Interleaving the modes rep by rep would not change a cold start: each process
            // starts with nothing cached.
            let mut fields: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
            let mut errors = Vec::new();
            for rep in 0..reps {
                match run_child(m, jit, &dir, rep) {
                    Ok(r) => {
                        for (k, v) in r {
                            fields.entry(k).or_default().push(v);
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
            let cell = |k: &str| -> String {
                let mut v = fields.get(k).cloned().unwrap_or_default();
                if v.is_empty() {
                    return "-".into();
                }
                v.sort_by(f64::total_cmp);
                format!("{:.0} ({:.0}-{:.0})", v[v.len() / 2], v[0], v[v.len() - 1])
            };
            let worst = |k: &str| fields.get(k).and_then(|v| v.iter().copied().reduce(f64::max));
            let (worst_total, worst_jit) = (worst("total_ms"), worst("jit_ms").unwrap_or(0.0));
            let jit_ok = m.jit_limit.is_none_or(|l| worst_jit <= l.as_secs_f64() * 1e3);
            let limits = match m.jit_limit {
                Some(l) => format!("total <= {:?}, JIT <= {:?}", m.limit, l),
                None => format!("total <= {:?}", m.limit),
            };
            let verdict = match (errors.is_empty(), worst_total) {
                (true, Some(t)) if t <= m.limit.as_secs_f64() * 1e3 && jit_ok => format!("MET (every rep: {limits})"),
                (true, Some(_)) => {
                    all_met = false;
                    format!("NOT MET (a rep over: {limits})")
                }
                _ => {
                    all_met = false;
                    format!("FAILED: {}", errors.join("; "))
                }
            };
            println!(
                "{:<10} {:<9} {:>15} {:>17} {:>17} {:>15} {:>17}  {verdict}",
                m.name,
                format!("{jit:?}").to_lowercase(),
                cell("init_ms"),
                cell("jit_ms"),
                cell("load_ms"),
                cell("first_ms"),
                cell("total_ms"),
            );
        }
    }
    println!(
        "bench_start: {}",
        if all_met { "every row MET" } else { "some rows NOT MET" }
    );
}

fn run_child(m: &Module, jit: Jit, dir: &str, rep: u32) -> Result<Vec<(&'static str, f64)>, String> {
    let out = format!("{dir}/bench_start-{}-{}.txt", std::process::id(), rep);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg("--child")
        .arg(&out)
        .arg(&m.kernel)
        .arg(m.path.as_deref().unwrap_or("-"))
        .arg(m.arg.map_or("-".into(), |n| n.to_string()))
        .env("CUDA_CACHE_DISABLE", "1")
        .env("GPUIO_JIT", format!("{jit:?}").to_lowercase())
        .env("GPUIO_QUIET", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let done = cmd.output().map_err(|e| format!("starting a child: {e}"))?;
    let _ = std::fs::remove_file(&out);
    let stderr = String::from_utf8_lossy(&done.stderr);
    let report = stderr.lines().find_map(|l| l.strip_prefix(REPORT));
    match (done.status.success(), report) {
        (true, Some(r)) => Ok(r
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .filter_map(|(k, v)| {
                let key = ["init_ms", "jit_ms", "load_ms", "first_ms", "total_ms"]
                    .into_iter()
                    .find(|&n| n == k)?;
                Some((key, v.parse().ok()?))
            })
            .collect()),
        _ => Err(format!(
            "child {}: {}",
            done.status,
            stderr.lines().last().unwrap_or("(no output)")
        )),
    }
}

/// `--child OUT KERNEL PATH|- N|-`: one cold start, reported on stderr.
fn child(args: &[String]) -> ! {
    let started = Instant::now();
    let [out, kernel, path, arg] = args else {
        fail("--child OUT KERNEL PATH N")
    };
    let args: Vec<gpuio::Arg> = arg.parse::<u32>().ok().map(gpuio::Arg::from).into_iter().collect();
    let die = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("{what}: {e}");
        std::process::exit(1)
    };
    let file = std::fs::File::create(out).unwrap_or_else(|e| die(out, &e));
    let rt = Runtime::builder()
        .backend(Backend::Cuda)
        .stdout_fd(file.as_raw_fd())
        .build()
        .unwrap_or_else(|e| die("runtime", &e));
    let init = started.elapsed();
    let t = Instant::now();
    let ptx;
    let module = if path == "-" {
        rt.load_matching(NVPTX)
    } else {
        ptx = std::fs::read_to_string(path).unwrap_or_else(|e| die(path, &e));
        rt.load_module(&ptx)
    }
    .unwrap_or_else(|e| die("load", &e));
    let load = t.elapsed();
    let t = Instant::now();
    module
        .launch(kernel, 1, 32, &args)
        .unwrap_or_else(|e| die("launch", &e));
    // The first line reaches the file when the kernel's print path submits it, at the
    // latest when synchronize drains: whichever comes first.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let poll = s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if std::fs::metadata(out).map_or(0, |m| m.len()) > 0 {
                    return Some(t.elapsed());
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            None
        });
        let synced = rt.synchronize().map(|()| t.elapsed());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let polled = poll.join().expect("poll thread");
        synced.map(|synced| polled.unwrap_or(synced).min(synced))
    });
    let first = seen.unwrap_or_else(|e| die("synchronize", &e));
    let total = started.elapsed() - (t.elapsed() - first);
    if std::fs::metadata(out).map_or(0, |m| m.len()) == 0 {
        die("first line", &"the file is empty after synchronize");
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "{REPORT}init_ms={:.1} jit_ms={:.1} load_ms={:.1} first_ms={:.1} total_ms={:.1}",
        ms(init),
        module.jit_ms().unwrap_or(f32::NAN),
        ms(load),
        ms(first),
        ms(total)
    );
    drop(module);
    drop(rt);
    std::process::exit(0)
}
