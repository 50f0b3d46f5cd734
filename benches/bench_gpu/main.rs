//! CUDA backend: gpuio's `println!` against CUDA's own device `printf`, side by side.
//!
//! `cargo bench --bench bench_gpu [-- OPTIONS]`
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
//! - **cold start** (`--cold-reps`, default 3, fresh processes, a tmpfs file): on a bare
//!   CUDA context made first (timed apart), time from before `Runtime::builder().build()`
//!   (`--log-mib` if given) until the first line of a one-thread `stress(1, 0)`
//!   launch is in the file (its size polled every 50 us, no `synchronize`), split into
//!   runtime build, module load (includes the driver's PTX JIT, which it may cache in
//!   `~/.nv/ComputeCache`) and launch-to-line.
//!
//! Each gpuio row also gives the host CPU time per GB (every thread of the child over launch
//! .. synchronize: the SQPOLL thread, the waker, the rest), and each tmpfs row what `dd
//! bs=4M` writes into a fresh file there, as many bytes, in the same run, and what the file
//! system takes alone: the host `pwrite`s as many bytes into a fresh file, one thread from a
//! buffer it reuses (hot, the most any writer gets), one and four from a source as large as
//! the file, each byte read once (cold: gpuio's log, which the GPU writes over PCIe and the
//! kernel reads once, is neither, and how warm its bytes are was not measured). After the
//! verdicts, each tmpfs case beside the file system alone, and what an unmet printf ratio
//! asks of it beside the fastest host writer's run.
//!
//! Output: machine and settings, one table (stdout), the targets' verdicts (the print targets:
//! 32-byte lines into /dev/null at least 250 M lines/s, 128-byte lines at least 12 GB/s,
//! tmpfs at least 1.0x dd, at least 80x (32 B) and 40x (128 B) CUDA printf in every case,
//! setup on a bare CUDA context at most 20 ms, nothing lost); per-rep details on stderr.
//! Exits 1 if gpuio lost a line or a gpuio case failed, 2 on bad options.
//!
//! `GPUIO_LOCKSTEP=1` runs every case on the `sm_60` PTX, which the GPU runs with the lanes
//! of each warp in lockstep (as AMD GPUs run wavefronts); the header says which ran.
//!
//! `--kernel cpp` runs the same cases from a CUDA C++ kernel (`stress.cu` beside this file,
//! built by nvcc in the same run as a CUDA C++ programmer builds it for gpuio: `-rdc=true
//! -ptx`, joined with gpuio's device library): `cpp_stress` through `gpuio_printf`, against
//! `cpp_printf_stress`, the same source through printf. Its verdicts: at least 50x printf in
//! every case, nothing lost (the Rust kernel's rate targets are not given). Without nvcc it
//! says it skipped.
//!
//! Options: `--kernel stress|literal|cpp` (`literal`: a 32-byte literal with no formatting, to
//! tell formatting from the rest; only with `--widths 32 --targets null`), `--total N`,
//! `--lines 1,16`, `--widths 32,128`, `--targets shm,null`,
//! `--dir /dev/shm`, `--block 256`, `--reps 3`, `--cold-reps 3`, `--timeout-s 120`,
//! `--log-mib N` (gpuio log per stream, a power of two), `--printf-fifo-mib N` (override the
//! FIFO size), `--skip-printf-above N` (no printf for cases of more than N lines; 0, the
//! default, never skips).
use std::time::Instant;

use gpuio::Scheduling;

#[path = "../common/mod.rs"]
mod common;

mod cases;
mod child;
mod machine;
mod options;
mod readback;
mod table;

use cases::{bench_case, cold_start, Case};
use child::{child_args, cold_child, gpuio_child, printf_child};
use machine::machine_info;
use options::{parse_config, Kernel};
use table::print_table;

/// The example kernels (`kernels/`) as PTX, built by build.rs for `sm_90` and for `sm_60`
/// (the lockstep build, which `GPUIO_LOCKSTEP=1` selects: `Runtime::load_matching`).
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::NVPTX;

/// `--kernel cpp`'s CUDA C++ kernels.
const STRESS_CU: &str = include_str!("stress.cu");

const USAGE: &str =
    "usage: bench_gpu [--kernel stress|literal|cpp] [--total N] [--lines 1,16] [--widths 32,128] [--targets shm,null] \
                     [--dir /dev/shm] [--block 256] [--reps 3] [--cold-reps 3] [--timeout-s 120] [--log-mib N] \
                     [--printf-fifo-mib N] [--skip-printf-above N]";

/// Child reports on stderr start with this; everything else a child writes there is passed on.
const REPORT: &str = "@bench ";

const MIB: u64 = 1 << 20;

const CLI: common::Cli = common::Cli {
    name: "bench_gpu",
    usage: USAGE,
};

/// The scratch directory `--kernel cpp` builds in, removed on the way out, also by [`fail`].
static SCRATCH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

fn fail(msg: &str) -> ! {
    if let Some(dir) = SCRATCH.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
    CLI.fail(msg)
}

fn main() {
    let args: Vec<String> = common::args();
    match args.first().map(String::as_str) {
        Some("--gpuio-child") => gpuio_child(&child_args(&args[1..])),
        Some("--printf-child") => printf_child(&child_args(&args[1..])),
        Some("--cold-child") => cold_child(&child_args(&args[1..])),
        _ => {}
    }
    let mut cfg = parse_config(&args);
    let started = Instant::now();

    // Is there a CUDA GPU? (The children force the CUDA backend.)
    let Some(common::CudaTarget {
        gpu_name,
        scheduling,
        arch,
        ptx,
    }) = common::cuda_target("bench_gpu", NVPTX).unwrap_or_else(|e| fail(&e))
    else {
        return;
    };
    if !ptx.contains(".entry printf_stress(") || !ptx.contains(".entry stress(") {
        fail("the kernels' PTX lacks `stress` or `printf_stress`: rebuild without GPUIO_SKIP_GPU_BUILD=1");
    }
    println!(
        "scheduling:     {scheduling} ({arch} PTX; GPUIO_LOCKSTEP={})",
        (scheduling == Scheduling::Lockstep) as u8
    );
    // `--kernel cpp`: stress.cu built and joined here, once; the children load the file.
    let scratch = SCRATCH.get_or_init(|| std::env::temp_dir().join(format!("bench_gpu-cpp-{}", std::process::id())));
    if cfg.kernel == Kernel::Cpp {
        let Some(nvcc) = common::find_nvcc() else {
            println!("bench_gpu: skipped: --kernel cpp needs nvcc to build stress.cu ($NVCC, /usr/local/cuda/bin/nvcc, or PATH)");
            return;
        };
        let (joined, secs) = common::cpp_module(&nvcc, STRESS_CU, arch, &[], scratch)
            .unwrap_or_else(|e| fail(&format!("stress.cu: {e}")));
        let path = scratch.join("joined.ptx");
        std::fs::write(&path, &joined).unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
        println!(
            "C++ kernels:    stress.cu, {} -rdc=true -ptx -O3 ({secs:.1} s), joined with the {arch} device library: \
             {} bytes",
            nvcc.display(),
            joined.len()
        );
        cfg.module = Some(path);
    }

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
    let _ = std::fs::remove_dir_all(scratch);
    let failed = rows.iter().any(|r| r.gpuio.error.is_some() || r.gpuio.lost != 0);
    println!("total run time: {:.1} s", started.elapsed().as_secs_f64());
    if failed {
        eprintln!("bench_gpu: gpuio lost lines or a gpuio case failed (see above): exit 1");
        std::process::exit(1);
    }
}
