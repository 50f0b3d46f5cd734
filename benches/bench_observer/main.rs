//! CUDA backend: what a print costs the kernel around it, against CUDA C's `printf`.
//!
//! `cargo bench --bench bench_observer [-- OPTIONS]`
//!
//! Needs an NVIDIA GPU; elsewhere it prints `bench_observer: skipped: ...` and exits 0. The
//! CUDA C side needs `nvcc` (`--nvcc PATH`, else `$NVCC`, `/usr/local/cuda/bin/nvcc`, or the
//! one on `PATH`); without one, or where it fails, its columns say `n/a` (the header says
//! why) and its verdicts are not given.
//!
//! Kernel shapes that people instrument (`kernels-observer/`: the Rust kernels through
//! gpuio; `observer.cu` beside this file: the same in CUDA C, built by nvcc in the same run),
//! each in four variants that differ only in their print: `plain` (none), `never` (a print
//! behind a test that never passes), `thread` (one line per thread), `block` (one line per
//! block):
//!
//! - `fma`: a chain of `--fma-steps` fused multiply-adds per thread (default `200000,20000`:
//!   one row each), 1,024 blocks of 256 threads (latency-bound);
//! - `saxpy`: `y = a * x + y` over 2^26 floats, grid-stride, 1,024 x 256 threads
//!   (memory-bound; the never-taken check is inside the loop, on every element);
//! - `reduce`: each block sums a grid-stride share of 2^26 floats through 1 KiB of shared
//!   memory, 1,024 x 256 threads;
//! - `tile`: a 1,024 x 1,024 matrix product, each thread a 4 x 4 tile of the result in
//!   registers, 256 x 256 threads;
//! - `tile256`: the same, each kernel declared for blocks of at most 256 threads
//!   (`#[launch_bounds(256)]`; CUDA C: `__launch_bounds__(256)`), as register-heavy kernels
//!   often are.
//!
//! Both sides time each kernel the same way: launch until the host's synchronize returned
//! (gpuio's `Runtime::synchronize`, CUDA's `cudaDeviceSynchronize` and a flush of stdout),
//! `--reps` times (default 5) after one warm-up launch, less what the same costs for an
//! empty kernel on that side (printed in the header: gpuio's synchronize launches its drain
//! kernel too); both print into `/dev/null` (gpuio:
//! `stdout_fd`; printf: the child's stdout, its FIFO set to 256 MiB so that it drops
//! nothing). Columns: time (median, and the range), ratio to the plain kernel's median,
//! registers and local memory per thread (`cuFuncGetAttribute`; CUDA C:
//! `cudaFuncGetAttributes`), and the kernel's own PTX (its `.entry`; the functions it calls
//! are shared, and the header gives the module's size), then printf's time over gpuio's.
//!
//! Verdicts (gpuio's issue of record: a print never taken costs at most 3% and leaves the
//! kernel its registers; one that runs costs little):
//! - equal work: each shape's plain kernels within 5% of each other;
//! - a print never taken costs at most 3% of the plain kernel's time, and a kernel whose
//!   plain form needs at most 32 registers keeps to 32 with it (a larger one gains at most 8);
//! - one line per thread in the FMA shape at most 1.3x the plain kernel's time (the verdict
//!   gives the floor beside it: CUDA C's chain storing each thread's 20 bytes raw into host
//!   memory, in whole 16-byte units, no format and no protocol, over its plain kernel);
//! - one line per thread at least 20x faster than printf's, in every shape;
//! - nothing lost (gpuio's `synchronize` reports every lost line).
//!
//! **C++ + gpuio**, a second table: observer.cu built with `-DOBSERVER_GPUIO`, its prints
//! `gpuio_printf` (nvcc `-rdc=true -ptx -O3`, the PTX joined with gpuio's device library for
//! C++ kernels, loaded and timed through gpuio as the Rust kernels are), against the CUDA C
//! side, the same source with `printf`. Verdicts: a `gpuio_printf` never taken costs at most
//! what printf's does (its ratio to the plain kernel at most printf's + 0.03, its registers
//! at most printf's).
//!
//! `GPUIO_LOCKSTEP=1` runs gpuio's sides on the `sm_60` PTX, which the GPU runs with each
//! warp's lanes in lockstep (as AMD GPUs run wavefronts; C++: nvcc's sm_75 PTX retargeted);
//! the CUDA C side stays sm_90.
//!
//! Options: `--reps 5`, `--fma-steps 200000,20000`, `--shapes fma,saxpy,reduce,tile,tile256`,
//! `--variants plain,never,thread,block`, `--nvcc PATH` (`none`: the Rust kernels' side only).

use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use gpuio::{Arg, Backend, LaunchConfig, Runtime, Scheduling};

#[path = "../common/mod.rs"]
mod common;

const USAGE: &str =
    "usage: bench_observer [--reps N] [--fma-steps 200000,20000] [--shapes fma,saxpy,reduce,tile,tile256] \
                     [--variants plain,never,thread,block] [--nvcc PATH|none]";

/// The observer kernels' PTX, by processor.
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::OBSERVER_NVPTX;

/// The CUDA C side's source.
const OBSERVER_CU: &str = include_str!("observer.cu");

const SHAPES: [&str; 5] = ["fma", "saxpy", "reduce", "tile", "tile256"];
const VARIANTS: [&str; 4] = ["plain", "never", "thread", "block"];

/// Launch shapes (observer.cu's are the same).
const BLOCKS: u32 = 1024;
const THREADS: u32 = 256;
const ELEMS: u32 = 1 << 26;
const TILE_N: u32 = 1024;

fn fail(msg: &str) -> ! {
    eprintln!("bench_observer: {msg}\n{USAGE}");
    std::process::exit(2)
}

struct Config {
    reps: usize,
    fma_steps: Vec<u32>,
    shapes: Vec<String>,
    variants: Vec<String>,
    nvcc: Option<PathBuf>,
}

/// One kernel's figures on one side.
#[derive(Default, Clone)]
struct Figures {
    ms: Vec<f64>,
    regs: Option<i32>,
    local: Option<i32>,
    ptx_bytes: Option<usize>,
    error: Option<String>,
}

impl Figures {
    fn median(&self) -> Option<f64> {
        (!self.ms.is_empty()).then(|| common::median(self.ms.clone()))
    }
    fn range(&self) -> String {
        let lo = self.ms.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.ms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.3}-{hi:.3}")
    }
}

fn parse_config(args: &[String]) -> Config {
    let o = common::Cli {
        name: "bench_observer",
        usage: USAGE,
    };
    o.only_known(args, &["--reps", "--fma-steps", "--shapes", "--variants", "--nvcc"]);
    let list = |name: &str, default: &[&str], known: &[&str]| -> Vec<String> {
        let v: Vec<String> = o
            .opt::<String>(args, name)
            .map(|s| s.split(',').map(String::from).collect())
            .unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
        if let Some(bad) = v.iter().find(|s| !known.contains(&s.as_str())) {
            fail(&format!("{name}: unknown {bad:?} (known: {})", known.join(",")));
        }
        v
    };
    let fma_steps = o
        .opt::<String>(args, "--fma-steps")
        .unwrap_or_else(|| "200000,20000".into())
        .split(',')
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| fail(&format!("--fma-steps: {s:?} is not a number")))
        })
        .collect();
    let nvcc = match o.opt::<PathBuf>(args, "--nvcc") {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(p),
        None => common::find_nvcc(),
    };
    Config {
        reps: match o.opt(args, "--reps").unwrap_or(5) {
            0 => fail("--reps: at least 1"),
            n => n,
        },
        fma_steps,
        shapes: list("--shapes", &SHAPES, &SHAPES),
        variants: list("--variants", &VARIANTS, &VARIANTS),
        nvcc,
    }
}

/// The kernels each row runs: `(row name, kernel name, fma steps)`.
fn rows(cfg: &Config) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    for shape in &cfg.shapes {
        let steps: Vec<Option<u32>> = if shape == "fma" {
            cfg.fma_steps.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        for s in steps {
            for v in &cfg.variants {
                let kernel = format!("{shape}_{v}");
                let row = match s {
                    Some(s) => format!("{kernel}@{s}"),
                    None => kernel.clone(),
                };
                out.push((row, kernel, s.unwrap_or(0)));
            }
        }
    }
    out
}

fn main() {
    let started = Instant::now();
    let args = common::args();
    let cfg = parse_config(&args);
    let Some(common::CudaTarget {
        gpu_name,
        scheduling,
        arch,
        ptx,
    }) = common::cuda_target("bench_observer", NVPTX).unwrap_or_else(|e| fail(&e))
    else {
        return;
    };
    println!("date (UTC):     {}", common::utc_date());
    println!("gpu:            {gpu_name}");
    println!(
        "gpuio:          {scheduling} ({arch} PTX, {} bytes; GPUIO_LOCKSTEP={}), into /dev/null",
        ptx.len(),
        (scheduling == Scheduling::Lockstep) as u8
    );
    let print_regs = std::env::var("GPUIO_PRINT_REGISTERS").unwrap_or_else(|_| "unset".into());
    println!(
        "settings:       GPUIO_PRINT_REGISTERS={print_regs}, GPUIO_JIT={}",
        std::env::var("GPUIO_JIT").unwrap_or_else(|_| "unset".into())
    );
    println!(
        "work:           {} reps after a warm-up, launch .. synchronize on the host, less an empty kernel's",
        cfg.reps
    );
    let rows = rows(&cfg);
    let gpuio = run_gpuio(&cfg, "gpuio", &ptx, &rows);
    let (cuda, cpp) = match &cfg.nvcc {
        Some(nvcc) => (run_cuda_c(&cfg, nvcc), run_cpp(&cfg, nvcc, arch, &rows)),
        None => {
            println!("CUDA C:         n/a (no nvcc found, or --nvcc none: --nvcc PATH or $NVCC names one)");
            (BTreeMap::new(), BTreeMap::new())
        }
    };
    let ok = report(&cfg, &rows, &gpuio, &cuda, &cpp);
    println!("total run time: {:.1} s", started.elapsed().as_secs_f64());
    if !ok {
        std::process::exit(1);
    }
}

/// Runs every row's kernel of `ptx` (the Rust kernels, or observer.cu's through gpuio:
/// `side` says which in the header) through gpuio, in this process.
fn run_gpuio(cfg: &Config, side: &str, ptx: &str, rows: &[(String, String, u32)]) -> BTreeMap<String, Figures> {
    let devnull = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap_or_else(|e| fail(&format!("/dev/null: {e}")));
    let rt = Runtime::builder()
        .backend(Backend::Cuda)
        .stdout_fd(devnull.as_raw_fd())
        .build()
        .unwrap_or_else(|e| fail(&format!("runtime: {e}")));
    let t = Instant::now();
    let module = rt
        .load_module(ptx)
        .unwrap_or_else(|e| fail(&format!("loading the observer kernels: {e}")));
    println!(
        "{:<16}{:.2} s (the driver's JIT of the module)",
        format!("{side} load:"),
        t.elapsed().as_secs_f64()
    );
    let cuda = module
        .cuda()
        .unwrap_or_else(|| fail("the module is not on CUDA"))
        .clone();
    let alloc = |bytes: u64| {
        cuda.alloc_zeroed(bytes as usize)
            .unwrap_or_else(|e| fail(&format!("device memory: {e}")))
    };
    let (x, y) = (alloc(u64::from(ELEMS) * 4), alloc(u64::from(ELEMS) * 4));
    let out = alloc(u64::from(BLOCKS * THREADS) * 4);
    let c = alloc(u64::from(TILE_N * TILE_N) * 4);
    module
        .launch("observer_fill", BLOCKS, THREADS, &[ELEMS.into(), x.into(), y.into()])
        .and_then(|_| rt.synchronize())
        .unwrap_or_else(|e| fail(&format!("observer_fill: {e}")));
    let mut res = BTreeMap::new();
    // What launch .. synchronize costs with no work (gpuio's synchronize runs its drain
    // kernel too): subtracted from every time, and printed.
    let mut empty = Vec::new();
    for _ in 0..=4 * cfg.reps {
        let t = Instant::now();
        module
            .launch("observer_empty", BLOCKS, THREADS, &[])
            .and_then(|_| rt.synchronize())
            .unwrap_or_else(|e| fail(&format!("observer_empty: {e}")));
        empty.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let overhead = common::median(empty[1..].to_vec());
    println!(
        "{:<16}{overhead:.3} ms launch .. synchronize of an empty kernel (subtracted below)",
        format!("{side} empty:")
    );
    for (row, kernel, steps) in rows {
        let (cfg_launch, args): (LaunchConfig, Vec<Arg>) = match kernel.split('_').next() {
            Some("fma") => (LaunchConfig::new(BLOCKS, THREADS), vec![(*steps).into(), out.into()]),
            Some("saxpy") => (
                LaunchConfig::new(BLOCKS, THREADS),
                vec![ELEMS.into(), 1.0001f32.into(), x.into(), y.into()],
            ),
            Some("reduce") => {
                let mut l = LaunchConfig::new(BLOCKS, THREADS);
                l.shared_mem_bytes = THREADS * 4;
                (l, vec![ELEMS.into(), x.into(), out.into()])
            }
            _ => (
                LaunchConfig::new(TILE_N / 4 * (TILE_N / 4) / THREADS, THREADS),
                vec![TILE_N.into(), x.into(), y.into(), c.into()],
            ),
        };
        let mut f = Figures {
            ptx_bytes: Some(entry_bytes(ptx, kernel)),
            ..Figures::default()
        };
        if let Ok(Some(r)) = module.resources(kernel) {
            f.regs = Some(r.registers as i32);
            f.local = Some(r.local_bytes as i32);
        }
        let launch = || {
            module
                .launch_with(kernel, cfg_launch, &args)
                .and_then(|_| rt.synchronize())
        };
        match launch() {
            Err(e) => f.error = Some(format!("warm-up: {e}")),
            Ok(()) => {
                for _ in 0..cfg.reps {
                    let t = Instant::now();
                    if let Err(e) = launch() {
                        f.error = Some(e.to_string());
                        break;
                    }
                    f.ms.push(t.elapsed().as_secs_f64() * 1e3 - overhead);
                }
            }
        }
        res.insert(row.clone(), f);
    }
    for p in [x, y, out, c] {
        cuda.free(p);
    }
    res
}

/// observer.cu built with `-DOBSERVER_GPUIO` (its prints are `gpuio_printf`) for `arch` as a
/// CUDA C++ programmer builds it for gpuio ([`common::cpp_module`]), run through gpuio as
/// the Rust kernels are; its figures by row name (none where the build failed: the header
/// says why).
fn run_cpp(
    cfg: &Config,
    nvcc: &std::path::Path,
    arch: &str,
    rows: &[(String, String, u32)],
) -> BTreeMap<String, Figures> {
    let dir = std::env::temp_dir().join(format!("bench_observer-cpp-{}", std::process::id()));
    let built = common::cpp_module(nvcc, OBSERVER_CU, arch, &["OBSERVER_GPUIO"], &dir);
    let _ = std::fs::remove_dir_all(&dir);
    match built {
        Ok((ptx, secs)) => {
            println!(
                "C++ + gpuio:    observer.cu -DOBSERVER_GPUIO, nvcc -rdc=true -ptx -O3 ({secs:.1} s), joined with the \
                 {arch} device library: {} bytes",
                ptx.len()
            );
            run_gpuio(cfg, "C++ + gpuio", &ptx, rows)
        }
        Err(e) => {
            println!("C++ + gpuio:    n/a ({e})");
            BTreeMap::new()
        }
    }
}

/// Builds observer.cu with nvcc and runs it; its figures by row name.
fn run_cuda_c(cfg: &Config, nvcc: &std::path::Path) -> BTreeMap<String, Figures> {
    let dir = std::env::temp_dir().join(format!("bench_observer-{}", std::process::id()));
    let (exe, ptx_path) = (dir.join("observer"), dir.join("observer.ptx"));
    let built = build_cuda_c(nvcc, &dir, &exe, &ptx_path);
    let secs = match built {
        Ok(secs) => secs,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            println!("CUDA C:         n/a ({e})");
            return BTreeMap::new();
        }
    };
    let ptx = std::fs::read_to_string(&ptx_path).unwrap_or_default();
    println!(
        "CUDA C:         {} -O3 -arch=sm_90 ({:.1} s; PTX {} bytes), printf into /dev/null",
        nvcc.display(),
        secs,
        ptx.len()
    );
    let steps: Vec<String> = cfg.fma_steps.iter().map(u32::to_string).collect();
    let o = Command::new(&exe)
        .args([
            cfg.reps.to_string(),
            steps.join(","),
            cfg.shapes.join(","),
            cfg.variants.join(","),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let o = match o {
        Ok(o) => o,
        Err(e) => {
            println!("CUDA C:         n/a (running {}: {e})", exe.display());
            return BTreeMap::new();
        }
    };
    let mut res = BTreeMap::new();
    for line in String::from_utf8_lossy(&o.stderr).lines() {
        let Some(rest) = line.strip_prefix("R ") else {
            eprintln!("    [cuda c] {line}");
            continue;
        };
        let kv: HashMap<&str, &str> = rest.split(' ').filter_map(|p| p.split_once('=')).collect();
        let name = kv.get("name").copied().unwrap_or_default().to_string();
        let kernel = name.split('@').next().unwrap_or_default();
        res.insert(
            name.clone(),
            Figures {
                ms: kv
                    .get("ms")
                    .map_or(vec![], |m| m.split(',').filter_map(|v| v.parse().ok()).collect()),
                regs: kv.get("regs").and_then(|v| v.parse().ok()),
                local: kv.get("local").and_then(|v| v.parse().ok()),
                ptx_bytes: Some(entry_bytes(&ptx, kernel)),
                error: None,
            },
        );
    }
    if !o.status.success() {
        eprintln!("bench_observer: the CUDA C side exited with {}", o.status);
    }
    match res.remove("observer_empty").and_then(|f| f.median()) {
        Some(overhead) => {
            println!("CUDA C empty:   {overhead:.3} ms launch .. synchronize of an empty kernel (subtracted below)");
            for f in res.values_mut() {
                f.ms.iter_mut().for_each(|m| *m -= overhead);
            }
        }
        None => println!("CUDA C empty:   not measured (nothing subtracted)"),
    }
    res
}

/// Writes observer.cu into `dir` and builds it with `nvcc`: the program `exe` and its PTX
/// `ptx`. Returns the build's seconds, or what went wrong.
fn build_cuda_c(
    nvcc: &std::path::Path,
    dir: &std::path::Path,
    exe: &std::path::Path,
    ptx: &std::path::Path,
) -> Result<f64, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cu = dir.join("observer.cu");
    std::fs::write(&cu, OBSERVER_CU).map_err(|e| format!("{}: {e}", cu.display()))?;
    let t = Instant::now();
    for out in [["-o", exe.to_str().unwrap_or_default()], ["-ptx", "-o"]] {
        let mut cmd = Command::new(nvcc);
        cmd.args(["-O3", "-arch=sm_90"]).args(out);
        if out[0] == "-ptx" {
            cmd.arg(ptx);
        }
        let o = cmd
            .arg(&cu)
            .output()
            .map_err(|e| format!("{}: {e} (--nvcc PATH names another)", nvcc.display()))?;
        if !o.status.success() {
            return Err(format!("nvcc failed: {}", String::from_utf8_lossy(&o.stderr).trim()));
        }
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The bytes of `kernel`'s own PTX (its `.entry` through the closing brace; the functions it
/// calls are shared by the module's kernels and counted in the header's module size); 0
/// where it is not found.
fn entry_bytes(ptx: &str, kernel: &str) -> usize {
    let Some(start) = ptx.find(&format!(".entry {kernel}(")) else {
        return 0;
    };
    ptx[start..].find("\n}").map_or(0, |end| end + 2)
}

/// Prints the table and the verdicts; returns false if gpuio failed a kernel.
fn report(
    cfg: &Config,
    rows: &[(String, String, u32)],
    gpuio: &BTreeMap<String, Figures>,
    cuda: &BTreeMap<String, Figures>,
    cpp: &BTreeMap<String, Figures>,
) -> bool {
    let plain_of = |row: &str| {
        let (kernel, steps) = row.split_once('@').map_or((row, None), |(k, s)| (k, Some(s)));
        let shape = kernel.split('_').next().unwrap_or_default();
        match steps {
            Some(s) => format!("{shape}_plain@{s}"),
            None => format!("{shape}_plain"),
        }
    };
    let ratio = |m: &BTreeMap<String, Figures>, row: &str| -> Option<f64> {
        Some(m.get(row)?.median()? / m.get(&plain_of(row))?.median()?)
    };
    let opt = |v: Option<String>| v.unwrap_or_else(|| "n/a".into());
    let (mut cells, mut cpp_cells) = (Vec::new(), Vec::new());
    for (row, _, _) in rows {
        let g = gpuio.get(row).cloned().unwrap_or_default();
        let c = cuda.get(row).cloned().unwrap_or_default();
        let k = cpp.get(row).cloned().unwrap_or_default();
        let side = |f: &Figures, m: &BTreeMap<String, Figures>| -> Vec<String> {
            if let Some(e) = &f.error {
                return vec![
                    format!("FAILED: {e}"),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ];
            }
            vec![
                opt(f.median().map(|v| format!("{v:.3} ({})", f.range()))),
                opt(ratio(m, row).map(|r| format!("{r:.2}x"))),
                opt(f.regs.map(|r| r.to_string())),
                opt(f.local.map(|r| r.to_string())),
                opt(f
                    .ptx_bytes
                    .filter(|&b| b > 0)
                    .map(|b| format!("{:.1} K", b as f64 / 1e3))),
            ]
        };
        let mut line = vec![row.clone()];
        line.extend(side(&g, gpuio));
        line.extend(side(&c, cuda));
        line.push(opt(c.median().zip(g.median()).map(|(c, g)| format!("{:.1}x", c / g))));
        cells.push(line);
        let mut line = vec![row.clone()];
        line.extend(side(&k, cpp));
        line.push(opt(c.median().zip(k.median()).map(|(c, k)| format!("{:.1}x", c / k))));
        cpp_cells.push(line);
    }
    println!();
    common::write_table(
        &mut std::io::stdout(),
        &[
            "kernel",
            "gpuio ms (range)",
            "/plain",
            "regs",
            "local B",
            "entry PTX",
            "CUDA C ms (range)",
            "/plain",
            "regs",
            "local B",
            "entry PTX",
            "printf/gpuio",
        ],
        cells,
        1,
    );
    if !cpp.is_empty() {
        // observer.cu's kernels with gpuio_printf where the CUDA C side has printf.
        println!();
        common::write_table(
            &mut std::io::stdout(),
            &[
                "kernel",
                "C++ + gpuio ms (range)",
                "/plain",
                "regs",
                "local B",
                "entry PTX",
                "printf/gpuio",
            ],
            cpp_cells,
            1,
        );
    }
    println!();
    // Verdicts.
    if !cfg.variants.iter().any(|v| v == "plain") {
        println!("(no ratio verdicts: --variants lacks plain, the kernels they compare with)");
    }
    let verdict = |met: bool, what: String| println!("{} {what}", if met { "MET    " } else { "NOT MET" });
    let shapes: Vec<String> = rows
        .iter()
        .map(|(r, _, _)| plain_of(r))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for plain in &shapes {
        let (g, c) = (gpuio.get(plain), cuda.get(plain));
        if let (Some(gm), Some(cm)) = (g.and_then(Figures::median), c.and_then(Figures::median)) {
            verdict(
                (gm / cm - 1.0).abs() <= 0.05,
                format!(
                    "equal work: {plain} gpuio {gm:.3} ms, CUDA C {cm:.3} ms ({:.2}x; within 5%)",
                    gm / cm
                ),
            );
        }
        let never = plain.replace("_plain", "_never");
        if let Some(r) = ratio(gpuio, &never) {
            verdict(
                r <= 1.03,
                format!("{never}: {r:.3}x the plain kernel's time (at most 1.03x)"),
            );
        }
        if let (Some(p), Some(n)) = (
            gpuio.get(plain).and_then(|f| f.regs),
            gpuio.get(&never).and_then(|f| f.regs),
        ) {
            let limit = if p <= 32 { 32 } else { p + 8 };
            verdict(
                n <= limit,
                format!("{never}: {n} registers, plain {p} (at most {limit})"),
            );
        }
        let thread = plain.replace("_plain", "_thread");
        if plain.starts_with("fma") {
            // observer.cu's `fma_floor`: the same chain, its 20 bytes a thread stored raw
            // into host memory in whole 16-byte units, against CUDA C's plain kernel: what
            // moving the lines over PCIe during the kernel costs before any print's own.
            let floor = ratio(cuda, &plain.replace("_plain", "_floor")).map_or(String::new(), |f| {
                format!("; the floor, raw stores to host memory: {f:.2}x")
            });
            if let Some(r) = ratio(gpuio, &thread) {
                verdict(
                    r <= 1.3,
                    format!("{thread}: {r:.2}x the plain kernel's time (at most 1.3x{floor})"),
                );
            }
        }
        if let (Some(c), Some(g)) = (
            cuda.get(&thread).and_then(Figures::median),
            gpuio.get(&thread).and_then(Figures::median),
        ) {
            verdict(
                c / g >= 20.0,
                format!("{thread}: printf takes {:.1}x gpuio's time (at least 20x)", c / g),
            );
        }
        // The same CUDA C++ source, printing through gpuio_printf or printf: a print never
        // taken costs at most what printf's costs (time within 3% of it, registers at most
        // as many).
        if let (Some(k), Some(c)) = (ratio(cpp, &never), ratio(cuda, &never)) {
            verdict(
                k <= c + 0.03,
                format!("C++ {never}: gpuio_printf {k:.3}x the plain kernel's time, printf {c:.3}x (at most printf's + 0.03)"),
            );
        }
        if let (Some(k), Some(c)) = (
            cpp.get(&never).and_then(|f| f.regs),
            cuda.get(&never).and_then(|f| f.regs),
        ) {
            verdict(
                k <= c,
                format!("C++ {never}: gpuio_printf {k} registers, printf {c} (at most printf's)"),
            );
        }
    }
    let failed: Vec<String> = gpuio
        .iter()
        .map(|(k, f)| (k.clone(), f))
        .chain(cpp.iter().map(|(k, f)| (format!("C++ {k}"), f)))
        .filter(|(_, f)| f.error.is_some())
        .map(|(k, _)| k)
        .collect();
    verdict(
        failed.is_empty(),
        format!("nothing lost, no gpuio kernel failed (failed: {})", failed.len()),
    );
    failed.is_empty()
}
