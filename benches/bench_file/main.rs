//! Device file I/O: GPU-initiated `pwrite`/`pread` against the host doing the same work
//! with syscalls and CUDA copies, side by side in one run.
//!
//! `cargo bench --bench bench_file [-- OPTIONS]`
//!
//! On the CUDA backend (a GPU present) it measures, in this order:
//! - **latency**: one GPU thread `pwrite`s 64 bytes (from its stack: device memory, so
//!   staged) at `i * 64` of a fresh file and waits for the completion, `--iters` times
//!   (default 10000); each round trip timed on the GPU's clock (`%globaltimer`). Two ways,
//!   one after the other: `pwrite` (which takes the solo ring, `Builder::solo`, when the
//!   runtime has one: `GPUIO_SOLO=off` runs without; its holder waits on each CQE's result
//!   on x86-64 hosts, on the CQ tail with `--solo-wait tail`), then `pwrite_async` and its wait (the
//!   shared rings, through the arena). Prints p50, p99, min, max of each, and how many
//!   writes went through the solo ring. `--lat-file PATH` writes there instead (an
//!   existing file is overwritten from offset 0; `/dev/null` works). Then the shared
//!   rings' round trip again, timed in phases (`latency_phases`): a diagnostic. Then the
//!   floor (`latency_floor`, a diagnostic): the same writes by one thread alone on a ring,
//!   with none of the protocol's steps (the SQE, one release of the SQ tail, acquires of
//!   the CQ tail, the CQE, one release of the CQ head), what PCIe and the kernel allow.
//!   Then the kernel's part alone: a host thread writes the same 64 bytes as often on a
//!   host SQPOLL ring, spinning on its CQ, and how often that ring's io-wq workers slept
//!   (about once per write when io_uring hands each write to one). Then the round-trip target
//!   (GPU only, on `pwrite`): p50 at most 8 us and p99 at most 15 us, `MET` or `NOT MET`.
//! - **pread**: a `--size-mib` file (default 1024) in `--dir` (default the temp dir),
//!   written and read once by the host first so that it is page-cached. `--threads` GPU
//!   threads (default 1024, blocks of 128) read chunks of `--chunk-kib` (default 1024) with
//!   `File::read_exact_at` into device memory (staged through an arena of `--arena-mib`,
//!   default 256, in blocks of `--block-kib`, default 256), and again into a host buffer
//!   (direct: no copy). Two host pipelines do the same: **host x1**, one thread, `pread`
//!   into a pinned (`cuMemHostRegister`ed) buffer of `--block-kib`, then `cuMemcpyHtoD`,
//!   until the file is in device memory; and **host xN**, `--host-threads` threads (default
//!   4) doing the same, each with its own pinned buffer, thread `j` taking blocks
//!   `j, j + N, ...`. Each GPU result, and host xN's, is checked against the file.
//! - **random 4 KiB pread**: `--rand-threads` GPU threads (default 4096; at most 128 or a
//!   multiple of 128) each `pread` 4 KiB `--rand-reads` times (default 64) at random
//!   page-aligned offsets of the same page-cached file (`pread_random`, the access pattern
//!   of BaM and GIDS), into their own 4 KiB slot of device memory (staged), each read timed
//!   on the GPU's clock; each thread's last read is checked against the file. Against it,
//!   a fio-like loop on host io_uring: as many threads as the runtime has rings, each with its own
//!   SQPOLL ring (raw `io_uring_setup`/`io_uring_enter`), together keeping as many 4 KiB
//!   reads in flight as there are GPU threads (the same total queue depth), for the same
//!   total number of reads; each read timed from submission to completion, and its first
//!   8 bytes checked. The GPU's reads run a second time into the host buffer (direct: no
//!   copy out of the arena), a diagnostic row, and once more in phases
//!   (`pread_random_phases`: taking a block and a slot, submitting, waiting, copying out;
//!   not in the lockstep build), a diagnostic table with that run's IOPS. With
//!   `GPUIO_BENCH_PARTS` set, also the same reads through the runtime's parts, untimed
//!   (`pread_random_parts`), once with `Context::wait` and once with the phases kernel's
//!   wait: the cost of the runtime's wait. Prints IOPS (reads / wall time; the GPU's
//!   includes the launch and synchronize), p50 and p99, and the target: gpuio >=
//!   0.8x the host's IOPS, `MET` or `NOT MET`. (The arena's blocks bound the staged reads
//!   in flight: one each; the settings line says when there are fewer blocks than GPU
//!   threads.)
//! - **pwrite**: the same sizes the other way: GPU threads `write_all_at` from device
//!   memory into a fresh file; host x1 `cuMemcpyDtoH` into the pinned buffer, then
//!   `pwrite`; host xN the same on `--host-threads` threads. The file is checked after the
//!   GPU run and after host xN's. Then the file system alone: one host thread and
//!   `--host-threads` `pwrite` as many bytes into a fresh file from a buffer each reuses (no
//!   device copy), the most any writer could get there; where the 2x target asks more of the file
//!   than that, its verdict says so.
//!
//! `--rings N` (default: as many as the runtime takes when not told, `Builder::rings`)
//! gives the gpuio runtime N rings (`Builder::rings`: a block's
//! requests go to ring `block_idx % N`) of `--sq-entries` SQEs (default: the
//! runtime's, `Builder::sq_entries`), and the host's random-read loop as many rings; the
//! machine line says which CPUs the runtime's SQPOLL threads were bound to. After the
//! throughput table come the targets for several rings: pread into device memory
//! at least 2.5x host x1 and 1.0x host xN, pwrite at least 2x host x1, `MET` or `NOT MET`.
//!
//! Each case runs `--reps` times (default 3) alternating gpuio and host; the throughput
//! table shows the median GB/s (10^9 bytes/s) of gpuio, host x1 and host xN and the ratios
//! gpuio / host; the random-read table the median IOPS and the latencies of all reps. Without
//! a GPU the same runs on the CPU backend (kernels on host threads, "device memory" a host
//! vector, `memcpy` for the copies), default `--size-mib 64`, and says so.
//!
//! Exits 1 if a check failed, 2 on bad options.
//!
//! The workloads are modules: `latency`, `pread`, `random` (the host's loop in
//! `random_host`), `pwrite`; `device` and `setup` hold what they share, `uring` the host's raw
//! io_uring rings.
use std::path::PathBuf;
use std::time::Duration;

use gpuio::cuda::Cuda;
use gpuio::{Backend, Error, Runtime, Sandbox};

#[path = "../common/mod.rs"]
mod common;

mod device;
mod latency;
mod pread;
mod pwrite;
mod random;
mod random_host;
mod setup;
mod uring;

use common::{cpu_list, cpu_model, median, uname_release, utc_date, write_table, Cli};
use device::Gpu;
use setup::{sqpoll_cpu_while_idle, Data};

/// The test and benchmark kernels (`kernels-test/`) as PTX for `sm_90` and `sm_60`
/// (`GPUIO_LOCKSTEP=1` picks the lockstep build), built by kernels-gpu's build.rs.
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_NVPTX;

const CLI: Cli = Cli {
    name: "bench_file",
    usage: "usage: bench_file [--size-mib N] [--chunk-kib N] [--threads N] [--arena-mib N] \
            [--block-kib N] [--iters N] [--reps N] [--dir PATH] [--lat-file PATH] \
            [--host-threads N] [--rand-threads N] [--rand-reads N] [--rings N] [--sq-entries N] \
            [--solo-wait result|tail]",
};

struct Config {
    size: usize,
    chunk: usize,
    threads: u32,
    arena: usize,
    block: usize,
    iters: u32,
    reps: usize,
    dir: PathBuf,
    lat_file: Option<PathBuf>,
    /// Threads of the host xN pipeline.
    host_threads: usize,
    /// GPU threads of the random-read case, and the host loop's total queue depth.
    rand_threads: u32,
    /// 4 KiB reads per GPU thread in the random-read case.
    rand_reads: u64,
    /// io_uring rings (one SQPOLL thread each): the runtime's (`Builder::rings`), and the
    /// host's random-read loop's. Without `--rings`, the runtime's own choice.
    rings: u32,
    /// `--rings` was given (otherwise the runtime chose `rings`).
    rings_named: bool,
    /// SQ entries of each of the runtime's rings (`Builder::sq_entries`; the CQ gets twice
    /// as many, and the completion slots a CQ's worth per ring).
    sq_entries: u32,
    /// The solo ring's holder waits on the CQ tail (`--solo-wait tail`) rather than on each
    /// CQE's result (the default on x86-64 hosts).
    solo_on_tail: bool,
}

/// What every workload runs with.
struct Bench<'rt> {
    /// The options, with the runtime's rings and SQ entries.
    cfg: Config,
    rt: &'rt Runtime,
    /// Where the kernels run.
    g: Gpu<'rt>,
    /// A CUDA GPU runs them (otherwise the CPU backend).
    gpu_present: bool,
}

fn main() {
    let (mut cfg, gpu_present) = parse_config(&common::args());
    let backend = if gpu_present { Backend::Cuda } else { Backend::Cpu };
    let rt = build_runtime(&mut cfg, backend);
    let module = gpu_present.then(|| rt.load_matching(NVPTX).expect("load PTX"));
    let cuda = module.as_ref().and_then(|m| m.cuda().cloned());
    let b = Bench {
        cfg,
        rt: &rt,
        g: Gpu { module, cuda },
        gpu_present,
    };
    print_header(&b, backend);
    let mut failed = false;
    latency::run(&b, &mut failed);
    let mut data = Data::new(&b);
    let host = rt.host_buffer(b.cfg.size).expect("host buffer");
    let pread = pread::run(&b, &mut data, &host, &mut failed);
    let random = random::run(&b, &data, &host, &mut failed);
    let pwrite = pwrite::run(&b, &mut data, &mut failed);
    let _ = std::fs::remove_file(&data.path);
    let stats = rt.stats();
    drop(host);
    print_throughput(&b, pread, pwrite);
    random::report(&b, random);
    println!(
        "bytes staged {} / direct {}; stray completions {}",
        stats.staged_bytes, stats.direct_bytes, stats.stray_completions
    );
    let (threads, idle) = sqpoll_cpu_while_idle(Duration::from_secs(1));
    println!(
        "idle cost: the runtime's {threads} SQPOLL thread(s) ran {:.2} ms on a CPU in 1 s with no requests ({} ring(s), {:.3}% of one core)",
        idle.as_secs_f64() * 1e3,
        b.cfg.rings,
        idle.as_secs_f64() * 100.0
    );
    if failed {
        println!("FAILED: see stderr");
        std::process::exit(1);
    }
    println!("all GPU transfers checked: correct");
}

/// The options (`args`, without the program's name), checked, and whether a CUDA GPU is
/// here; fails with the usage on an unknown option or a bad value. Without a GPU the file is
/// 64 MiB unless told.
fn parse_config(args: &[String]) -> (Config, bool) {
    CLI.only_known(
        args,
        &[
            "--size-mib",
            "--chunk-kib",
            "--threads",
            "--arena-mib",
            "--block-kib",
            "--iters",
            "--reps",
            "--dir",
            "--lat-file",
            "--host-threads",
            "--rand-threads",
            "--rand-reads",
            "--rings",
            "--sq-entries",
            "--solo-wait",
        ],
    );
    let gpu_present = Cuda::open().is_ok();
    let mib = |n: usize| n << 20;
    let cfg = Config {
        size: mib(CLI
            .opt(args, "--size-mib")
            .unwrap_or(if gpu_present { 1024 } else { 64 })),
        chunk: CLI.opt::<usize>(args, "--chunk-kib").unwrap_or(1024) << 10,
        threads: CLI.opt(args, "--threads").unwrap_or(1024),
        arena: mib(CLI.opt(args, "--arena-mib").unwrap_or(256)),
        block: CLI.opt::<usize>(args, "--block-kib").unwrap_or(256) << 10,
        iters: CLI.opt(args, "--iters").unwrap_or(10_000),
        reps: CLI.opt(args, "--reps").unwrap_or(3),
        dir: CLI.opt(args, "--dir").unwrap_or_else(std::env::temp_dir),
        lat_file: CLI.opt(args, "--lat-file"),
        host_threads: CLI.opt(args, "--host-threads").unwrap_or(4),
        rand_threads: CLI.opt(args, "--rand-threads").unwrap_or(4096),
        rand_reads: CLI.opt(args, "--rand-reads").unwrap_or(64),
        rings: CLI.opt(args, "--rings").unwrap_or(1),
        rings_named: CLI.opt::<u32>(args, "--rings").is_some(),
        sq_entries: CLI.opt(args, "--sq-entries").unwrap_or(0),
        solo_on_tail: match CLI.opt::<String>(args, "--solo-wait").as_deref() {
            None | Some("result") => false,
            Some("tail") => true,
            Some(other) => CLI.fail(&format!("--solo-wait: expected result or tail, got {other:?}")),
        },
    };
    if cfg.size == 0 || cfg.chunk == 0 || cfg.threads == 0 || cfg.reps == 0 || cfg.iters == 0 {
        CLI.fail("sizes, threads, iters and reps must be positive");
    }
    if cfg.host_threads == 0 || cfg.rand_threads == 0 || cfg.rand_reads == 0 || cfg.rings == 0 {
        CLI.fail("--host-threads, --rand-threads, --rand-reads and --rings must be positive");
    }
    // `launch` runs blocks of 128 threads; pread_random has every thread of the grid read.
    if cfg.rand_threads > 128 && !cfg.rand_threads.is_multiple_of(128) {
        CLI.fail("--rand-threads must be at most 128 or a multiple of 128");
    }
    if cfg.rings > cfg.rand_threads {
        CLI.fail("--rings must not exceed --rand-threads (the total queue depth)");
    }
    (cfg, gpu_present)
}

/// The runtime the options ask for; `cfg` then holds its rings and SQ entries.
fn build_runtime(cfg: &mut Config, backend: Backend) -> Runtime {
    let mut builder = Runtime::builder().backend(backend);
    if cfg.rings_named {
        builder = builder.rings(cfg.rings);
    }
    if cfg.sq_entries != 0 {
        builder = builder.sq_entries(cfg.sq_entries);
    }
    let rt = match builder
        .sandbox(Sandbox::FileIo)
        .arena_bytes(cfg.arena)
        .arena_block_bytes(cfg.block)
        .solo_waits_on_tail(cfg.solo_on_tail)
        .build()
    {
        Ok(rt) => rt,
        Err(e @ Error::Config(_)) => CLI.fail(&e.to_string()),
        Err(e) => panic!("runtime: {e}"),
    };
    cfg.rings = rt.stats().rings;
    cfg.sq_entries = rt.stats().sq_entries;
    if cfg.rings > cfg.rand_threads {
        CLI.fail("--rand-threads must be at least the runtime's rings (the total queue depth)");
    }
    rt
}

/// The machine, the settings and the random-read workload's shape.
fn print_header(b: &Bench, backend: Backend) {
    let (cfg, rt, gpu_present) = (&b.cfg, b.rt, b.gpu_present);
    println!("# bench_file ({})", utc_date());
    println!(
        "machine: {} | {} | kernel {} | backend {:?} ({}) | submission {:?}, {} ring(s), SQPOLL CPUs {}",
        rt.device_name().unwrap_or("CPU"),
        cpu_model(),
        uname_release(),
        backend,
        if gpu_present {
            "GPU"
        } else {
            "no GPU: kernels on host threads"
        },
        rt.submission(),
        cfg.rings,
        cpu_list(rt.sqpoll_cpus())
    );
    println!(
        "settings: {} ring(s){} of {} SQEs | file {} MiB in {} | GPU threads {} x chunk {} KiB | arena {} MiB in {} KiB blocks | host pinned buffer {} KiB, host xN {} threads | {} reps",
        cfg.rings,
        if cfg.rings_named { "" } else { " (the runtime's default)" },
        cfg.sq_entries,
        cfg.size >> 20,
        cfg.dir.display(),
        cfg.threads,
        cfg.chunk >> 10,
        cfg.arena >> 20,
        cfg.block >> 10,
        cfg.block >> 10,
        cfg.host_threads,
        cfg.reps
    );
    let arena_blocks = cfg.arena / cfg.block.max(1);
    println!(
        "random reads: {} GPU threads x {} reads of 4 KiB | host io_uring {} SQPOLL rings, {} reads in flight in all{}",
        cfg.rand_threads,
        cfg.rand_reads,
        cfg.rings,
        cfg.rand_threads,
        if arena_blocks < cfg.rand_threads as usize {
            format!(" | NOTE: {arena_blocks} arena blocks: at most that many staged GPU reads in flight")
        } else {
            String::new()
        }
    );
}

/// The throughput table (median GB/s of the pread and pwrite workloads), the file system
/// alone, and the targets for several rings.
fn print_throughput(b: &Bench, pread: pread::Rates, pwrite: pwrite::Rates) {
    let cfg = &b.cfg;
    let (d, h) = (median(pread.gpu_dev), median(pread.gpu_host));
    let (p, pn) = (median(pread.host_pipe), median(pread.host_pipe_n));
    let (w, hw, hwn) = (median(pwrite.gpu_w), median(pwrite.host_w), median(pwrite.host_w_n));
    // `None` when a run failed (said above).
    let fs = (!pwrite.fs_failed).then(|| {
        let best = pwrite.fs_w.iter().chain(&pwrite.fs_w_n).fold(0.0f64, |a, &b| a.max(b));
        (median(pwrite.fs_w), median(pwrite.fs_w_n), best)
    });
    let xn = format!("host x{}", cfg.host_threads);
    let ratio_n = format!("gpuio / host x{}", cfg.host_threads);
    let row = |case: &str, gpu: f64, x1: f64, xn: f64| {
        vec![
            case.to_string(),
            format!("{gpu:.2}"),
            format!("{x1:.2}"),
            format!("{xn:.2}"),
            format!("{:.2}", gpu / x1),
            format!("{:.2}", gpu / xn),
        ]
    };
    println!();
    println!("## {} MiB, median of {} reps, GB/s", cfg.size >> 20, cfg.reps);
    write_table(
        &mut std::io::stdout(),
        &[
            "case",
            "gpuio (GPU threads)",
            "host x1",
            &xn,
            "gpuio / host x1",
            &ratio_n,
        ],
        vec![
            row("pread -> device memory (staged)", d, p, pn),
            row("pread -> host buffer (direct)", h, p, pn),
            row("pwrite <- device memory (staged)", w, hw, hwn),
        ],
        1,
    );
    match fs {
        Some((fw, fwn, _)) => println!(
            "the file system alone (the host's pwrite into a fresh file from a buffer each thread reuses, no device \
             copy): x1 {fw:.2} GB/s, x{} {fwn:.2} GB/s",
            cfg.host_threads
        ),
        None => println!("the file system alone: not measured (the error is above)"),
    }
    print_targets(b, (d, p, pn), (w, hw), fs.map(|(_, _, best)| best));
}

/// The targets for several rings (N = 4 rings and 4 host threads): `pread` the medians of
/// pread into device memory, host x1 and host xN; `pwrite` those of pwrite and host x1;
/// `fs_best` the file system alone's best rate, if it ran.
fn print_targets(b: &Bench, pread: (f64, f64, f64), pwrite: (f64, f64), fs_best: Option<f64>) {
    let cfg = &b.cfg;
    let ((d, p, pn), (w, hw)) = (pread, pwrite);
    let backend_note = if b.gpu_present {
        ""
    } else {
        " [CPU backend: not the GPU's figure]"
    };
    let verdict = |ok: bool, ratio: f64| format!("{} ({ratio:.2})", if ok { "MET" } else { "NOT MET" });
    println!(
        "target (pread -> device memory >= 2.5x host x1, {} ring(s)){backend_note}: {}",
        cfg.rings,
        verdict(d >= 2.5 * p, d / p)
    );
    println!(
        "target (pread -> device memory >= 1.0x host x{}, {} ring(s)){backend_note}: {}",
        cfg.host_threads,
        cfg.rings,
        verdict(d >= pn, d / pn)
    );
    println!(
        "target (pwrite <- device memory >= 2x host x1, {} ring(s)){backend_note}: {}{}",
        cfg.rings,
        verdict(w >= 2.0 * hw, w / hw),
        match fs_best {
            Some(best) if w < 2.0 * hw && 2.0 * hw > best => format!(
                "; it asks {:.2} GB/s of the file, more than the file system alone took from the host in any rep \
                 (at most {best:.2})",
                2.0 * hw
            ),
            _ => String::new(),
        }
    );
}
