//! Device file I/O: GPU-initiated `pwrite`/`pread` against the host doing the same work
//! with syscalls and CUDA copies, side by side in one run.
//!
//! `cargo run --release --example bench_file [-- OPTIONS]`
//!
//! On the CUDA backend (a GPU present) it measures, in this order:
//! - **latency**: one GPU thread `pwrite`s 64 bytes (from its stack: device memory, so
//!   staged through the arena) at `i * 64` of a fresh file and waits for the completion,
//!   `--iters` times (default 10000); each round trip timed on the GPU's clock
//!   (`%globaltimer`). Prints p50, p99, min, max. `--lat-file PATH` writes there instead
//!   (an existing file is overwritten from offset 0; `/dev/null` works). Then the same
//!   round trip again, timed in phases (`latency_phases`): a diagnostic.
//! - **pread**: a `--size-mib` file (default 1024) in `--dir` (default the temp dir),
//!   written and read once by the host first so that it is page-cached. `--threads` GPU
//!   threads (default 1024, blocks of 128) read chunks of `--chunk-kib` (default 1024) with
//!   `File::read_exact_at` into device memory (staged through an arena of `--arena-mib`,
//!   default 256, in blocks of `--block-kib`, default 256), and again into a host buffer
//!   (direct: no copy). The host pipeline: one thread, `pread` into a pinned
//!   (`cuMemHostRegister`ed) buffer of `--block-kib`, then `cuMemcpyHtoD`, until the file is
//!   in device memory. Each GPU result is checked against the file.
//! - **pwrite**: the same sizes the other way: GPU threads `write_all_at` from device
//!   memory into a fresh file; the host pipeline `cuMemcpyDtoH` into the pinned buffer, then
//!   `pwrite`. The file is checked after the GPU run.
//!
//! Each throughput case runs `--reps` times (default 3) alternating gpuio and host; the
//! table shows the median GB/s (10^9 bytes/s) of each and their ratio. Without a GPU the
//! same runs on the CPU backend (kernels on host threads, "device memory" a host vector,
//! `memcpy` for the copies), default `--size-mib 64`, and says so.
//!
//! Exits 1 if a check failed, 2 on bad options.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use gpuio::cuda::Cuda;
use gpuio::{Arg, Backend, Error, GpuModule, Runtime, Sandbox};
use gpuio_test_kernels as k;

mod common;
use common::{cpu_model, uname_release, utc_date, write_table, Cli};

/// The example kernels (`kernels/`) as PTX for `sm_90` and `sm_60` (`GPUIO_LOCKSTEP=1`
/// picks the lockstep build), built by build.rs.
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_NVPTX;

const CLI: Cli = Cli {
    name: "bench_file",
    usage: "usage: bench_file [--size-mib N] [--chunk-kib N] [--threads N] [--arena-mib N] \
            [--block-kib N] [--iters N] [--reps N] [--dir PATH] [--lat-file PATH]",
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
}

/// Where kernels run, and the memory they address.
struct Gpu<'rt> {
    module: Option<GpuModule<'rt>>,
    cuda: Option<Arc<Cuda>>,
}

/// A buffer in "device memory": CUDA memory, or a host vector on the CPU backend.
enum DevBuf {
    Host(Vec<u8>),
    Cuda(Arc<Cuda>, u64),
}

impl DevBuf {
    fn new(g: &Gpu, len: usize) -> DevBuf {
        match &g.cuda {
            None => DevBuf::Host(vec![0u8; len]),
            Some(c) => DevBuf::Cuda(c.clone(), c.alloc_zeroed(len).expect("cuMemAlloc")),
        }
    }
    fn addr(&mut self) -> u64 {
        match self {
            DevBuf::Host(v) => v.as_mut_ptr() as u64,
            DevBuf::Cuda(_, d) => *d,
        }
    }
    fn upload(&mut self, at: usize, src: &[u8]) {
        match self {
            DevBuf::Host(v) => v[at..at + src.len()].copy_from_slice(src),
            DevBuf::Cuda(c, d) => c.copy_to_device(*d + at as u64, src).expect("cuMemcpyHtoD"),
        }
    }
    fn download(&self, at: usize, dst: &mut [u8]) {
        match self {
            DevBuf::Host(v) => dst.copy_from_slice(&v[at..at + dst.len()]),
            DevBuf::Cuda(c, d) => c.copy_from_device(dst, *d + at as u64).expect("cuMemcpyDtoH"),
        }
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if let DevBuf::Cuda(c, d) = self {
            c.free(*d);
        }
    }
}

/// Pinned host memory for the host pipeline (plain memory on the CPU backend).
struct Pinned {
    map: gpuio::memory::Mapping,
    cuda: Option<Arc<Cuda>>,
}

impl Pinned {
    fn new(cuda: Option<Arc<Cuda>>, len: usize) -> Pinned {
        let map = gpuio::memory::Mapping::new(len).expect("mmap");
        if let Some(c) = &cuda {
            // SAFETY: the mapping lives until Drop, which unregisters it first.
            unsafe { c.register(map.as_ptr(), len) }.expect("cuMemHostRegister");
        }
        Pinned { map, cuda }
    }
    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: our mapping, `len` bytes.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.map.len()) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(c) = &self.cuda {
            // SAFETY: registered in `new`; no copy uses it any more.
            unsafe { c.unregister(self.map.as_ptr()) };
        }
    }
}

/// The file's contents: 8 bytes per index, from a splitmix of the index.
fn pattern(at: usize, buf: &mut [u8]) {
    for (i, w) in buf.chunks_mut(8).enumerate() {
        let mut z = ((at / 8 + i) as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let b = (z ^ (z >> 31)).to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
}

/// A new empty file, open for reading and writing.
fn rw(path: &std::path::Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("create")
}

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn launch(rt: &Runtime, g: &Gpu, name: &str, threads: u32, args: [u64; 5]) -> f64 {
    let block = threads.min(128);
    let grid = threads.div_ceil(block);
    let t0 = Instant::now();
    match &g.module {
        Some(m) => {
            let a = [
                Arg::U32(args[0] as u32),
                Arg::U64(args[1]),
                Arg::U64(args[2]),
                Arg::U64(args[3]),
                Arg::U64(args[4]),
            ];
            m.launch(name, grid, block, &a).expect("launch");
        }
        None => {
            let [fd, at, total, chunk, errors] = args;
            let write = name == "pwrite_bulk";
            rt.launch(grid, block, move || {
                if write {
                    k::pwrite_bulk(fd as i32, at, total, chunk, errors)
                } else {
                    k::pread_bulk(fd as i32, at, total, chunk, errors)
                }
            })
            .expect("launch");
        }
    }
    rt.synchronize().expect("synchronize");
    t0.elapsed().as_secs_f64()
}

/// Runs kernel `name` (`cpu` on the CPU backend) on one thread with `(fd, iters, out)`,
/// and waits for it.
fn one_thread(rt: &Runtime, g: &Gpu, name: &str, cpu: fn(i32, u32, u64), fd: i32, iters: u32, out: u64) {
    match &g.module {
        Some(m) => m
            .launch(name, 1, 1, &[Arg::U32(fd as u32), Arg::U32(iters), Arg::U64(out)])
            .expect("launch"),
        None => rt.launch(1, 1, move || cpu(fd, iters, out)).expect("launch"),
    }
    rt.synchronize().expect("synchronize");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    CLI.only_known(
        &args,
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
        ],
    );
    let gpu_present = Cuda::open().is_ok();
    let mib = |n: usize| n << 20;
    let cfg = Config {
        size: mib(CLI
            .opt(&args, "--size-mib")
            .unwrap_or(if gpu_present { 1024 } else { 64 })),
        chunk: CLI.opt::<usize>(&args, "--chunk-kib").unwrap_or(1024) << 10,
        threads: CLI.opt(&args, "--threads").unwrap_or(1024),
        arena: mib(CLI.opt(&args, "--arena-mib").unwrap_or(256)),
        block: CLI.opt::<usize>(&args, "--block-kib").unwrap_or(256) << 10,
        iters: CLI.opt(&args, "--iters").unwrap_or(10_000),
        reps: CLI.opt(&args, "--reps").unwrap_or(3),
        dir: CLI.opt(&args, "--dir").unwrap_or_else(std::env::temp_dir),
        lat_file: CLI.opt(&args, "--lat-file"),
    };
    if cfg.size == 0 || cfg.chunk == 0 || cfg.threads == 0 || cfg.reps == 0 || cfg.iters == 0 {
        CLI.fail("sizes, threads, iters and reps must be positive");
    }
    let backend = if gpu_present { Backend::Cuda } else { Backend::Cpu };
    let rt = match Runtime::builder()
        .backend(backend)
        .sandbox(Sandbox::FileIo)
        .arena_bytes(cfg.arena)
        .arena_block_bytes(cfg.block)
        .build()
    {
        Ok(rt) => rt,
        Err(e @ Error::Config(_)) => CLI.fail(&e.to_string()),
        Err(e) => panic!("runtime: {e}"),
    };
    let module = gpu_present.then(|| rt.load_matching(NVPTX).expect("load PTX"));
    let cuda = module.as_ref().and_then(|m| m.cuda().cloned());
    let g = Gpu { module, cuda };
    println!("# bench_file ({})", utc_date());
    println!(
        "machine: {} | {} | kernel {} | backend {:?} ({}) | submission {:?}",
        rt.device_name().unwrap_or("CPU"),
        cpu_model(),
        uname_release(),
        backend,
        if gpu_present {
            "GPU"
        } else {
            "no GPU: kernels on host threads"
        },
        rt.submission()
    );
    println!(
        "settings: file {} MiB in {} | GPU threads {} x chunk {} KiB | arena {} MiB in {} KiB blocks | host pinned buffer {} KiB | {} reps",
        cfg.size >> 20,
        cfg.dir.display(),
        cfg.threads,
        cfg.chunk >> 10,
        cfg.arena >> 20,
        cfg.block >> 10,
        cfg.block >> 10,
        cfg.reps
    );
    let mut failed = false;

    // ---- latency
    let lat_path = match &cfg.lat_file {
        Some(p) => p.clone(),
        None => cfg.dir.join(format!("gpuio-bench-lat-{}", std::process::id())),
    };
    let lat_file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lat_path)
        .expect("create");
    let mut lat = DevBuf::new(&g, cfg.iters as usize * 8);
    let (fd, iters) = (lat_file.as_raw_fd(), cfg.iters);
    one_thread(&rt, &g, "pwrite_latency", k::pwrite_latency, fd, iters, lat.addr());
    let mut raw = vec![0u8; cfg.iters as usize * 8];
    lat.download(0, &mut raw);
    let mut ns: Vec<u64> = raw
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let errors = ns.iter().filter(|&&v| v == u64::MAX).count();
    let meta = std::fs::metadata(&lat_path).expect("stat");
    let written = if meta.is_file() {
        meta.len()
    } else {
        cfg.iters as u64 * 64
    };
    ns.sort_unstable();
    let pct = |p: f64| ns[((ns.len() - 1) as f64 * p) as usize] as f64 / 1e3;
    let granularity = ns.windows(2).map(|w| w[1] - w[0]).filter(|&d| d > 0).min().unwrap_or(0);
    println!();
    println!(
        "## one thread: pwrite 64 B and wait, {} times ({} failed; file {} bytes)",
        cfg.iters, errors, written
    );
    write_table(
        &mut std::io::stdout(),
        &["p50 us", "p99 us", "min us", "max us", "mean us", "clock step ns"],
        vec![vec![
            format!("{:.2}", pct(0.5)),
            format!("{:.2}", pct(0.99)),
            format!("{:.2}", pct(0.0)),
            format!("{:.2}", pct(1.0)),
            format!("{:.2}", ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e3),
            granularity.to_string(),
        ]],
        0,
    );
    if errors > 0 || written != cfg.iters as u64 * 64 {
        failed = true;
    }

    // ---- the same round trip, in phases (diagnostic), into the same file.
    let mut ph = DevBuf::new(&g, cfg.iters as usize * 48);
    one_thread(&rt, &g, "latency_phases", k::latency_phases, fd, iters, ph.addr());
    drop(lat_file);
    if cfg.lat_file.is_none() {
        let _ = std::fs::remove_file(&lat_path);
    }
    let mut raw = vec![0u8; cfg.iters as usize * 48];
    ph.download(0, &mut raw);
    let words: Vec<u64> = raw
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let names = [
        "PCIe read (SQ head)",
        "system fence",
        "block + slot + stage 64 B",
        "Ring::submit",
        "wait for the CQE",
    ];
    let mut rows = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let mut v: Vec<u64> = words.chunks(6).map(|r| r[k]).collect();
        v.sort_unstable();
        let q = |p: f64| v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3;
        rows.push(vec![
            name.to_string(),
            format!("{:.2}", q(0.5)),
            format!("{:.2}", q(0.99)),
        ]);
    }
    let bad = words.chunks(6).filter(|r| r[5] != 64).count();
    println!();
    println!(
        "## the same round trip in phases ({} iterations, {} results not 64)",
        cfg.iters, bad
    );
    write_table(&mut std::io::stdout(), &["phase", "p50 us", "p99 us"], rows, 1);

    // ---- the file for pread, page-cached.
    let path = cfg.dir.join(format!("gpuio-bench-file-{}", std::process::id()));
    {
        let f = rw(&path);
        let mut buf = vec![0u8; 16 << 20];
        let mut at = 0;
        while at < cfg.size {
            let n = buf.len().min(cfg.size - at);
            pattern(at, &mut buf[..n]);
            f.write_all_at(&buf[..n], at as u64).expect("write");
            at += n;
        }
        let mut sink = vec![0u8; 16 << 20];
        let mut at = 0;
        while at < cfg.size {
            at += f.read_at(&mut sink, at as u64).expect("read");
        }
    }
    let file = File::open(&path).expect("open");
    let fd = file.as_raw_fd() as u64;
    let mut dev = DevBuf::new(&g, cfg.size);
    let mut errs = DevBuf::new(&g, 8);
    let mut pinned = Pinned::new(g.cuda.clone(), cfg.block);
    let host = rt.host_buffer(cfg.size).expect("host buffer");
    let check = |what: &str, got: &dyn Fn(usize, &mut [u8]), failed: &mut bool| {
        let mut a = vec![0u8; 16 << 20];
        let mut b = vec![0u8; 16 << 20];
        let mut at = 0;
        while at < cfg.size {
            let n = a.len().min(cfg.size - at);
            got(at, &mut a[..n]);
            pattern(at, &mut b[..n]);
            if a[..n] != b[..n] {
                eprintln!("bench_file: {what}: wrong bytes in [{at}, {})", at + n);
                *failed = true;
                return;
            }
            at += n;
        }
    };
    let (mut gpu_dev, mut gpu_host, mut host_pipe) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..cfg.reps {
        let (a, e) = (dev.addr(), errs.addr());
        gpu_dev.push(gbps(
            cfg.size,
            launch(
                &rt,
                &g,
                "pread_bulk",
                cfg.threads,
                [fd, a, cfg.size as u64, cfg.chunk as u64, e],
            ),
        ));
        let ha = host.device_ptr();
        gpu_host.push(gbps(
            cfg.size,
            launch(
                &rt,
                &g,
                "pread_bulk",
                cfg.threads,
                [fd, ha, cfg.size as u64, cfg.chunk as u64, e],
            ),
        ));
        let t0 = Instant::now();
        let mut at = 0;
        while at < cfg.size {
            let n = cfg.block.min(cfg.size - at);
            let buf = &mut pinned.slice()[..n];
            file.read_exact_at(buf, at as u64).expect("pread");
            dev.upload(at, buf);
            at += n;
        }
        host_pipe.push(gbps(cfg.size, t0.elapsed().as_secs_f64()));
        if rep == 0 {
            // The host pipeline just rewrote `dev`; check the GPU's copy in a separate run.
            dev.upload(0, &vec![0u8; 1 << 20]);
            launch(
                &rt,
                &g,
                "pread_bulk",
                cfg.threads,
                [fd, a, cfg.size as u64, cfg.chunk as u64, e],
            );
            check(
                "pread into device memory",
                &|at, buf| dev.download(at, buf),
                &mut failed,
            );
            let hs = host.as_slice();
            check(
                "pread into a host buffer",
                &|at, buf| buf.copy_from_slice(&hs[at..at + buf.len()]),
                &mut failed,
            );
        }
        eprintln!(
            "pread rep {rep}: gpuio device {:.2} GB/s, gpuio host buffer {:.2} GB/s, host pipeline {:.2} GB/s",
            gpu_dev[rep], gpu_host[rep], host_pipe[rep]
        );
    }
    let mut e = [0u8; 8];
    errs.download(0, &mut e);
    if u64::from_le_bytes(e) != 0 {
        eprintln!("bench_file: {} GPU reads failed", u64::from_le_bytes(e));
        failed = true;
    }

    // ---- pwrite from device memory (holding the pattern, from the checked pread).
    let out_path = cfg.dir.join(format!("gpuio-bench-out-{}", std::process::id()));
    let (mut gpu_w, mut host_w) = (Vec::new(), Vec::new());
    {
        let mut at = 0;
        let mut buf = vec![0u8; 16 << 20];
        while at < cfg.size {
            let n = buf.len().min(cfg.size - at);
            pattern(at, &mut buf[..n]);
            dev.upload(at, &buf[..n]);
            at += n;
        }
    }
    for rep in 0..cfg.reps {
        let out = rw(&out_path);
        let (a, e2) = (dev.addr(), errs.addr());
        gpu_w.push(gbps(
            cfg.size,
            launch(
                &rt,
                &g,
                "pwrite_bulk",
                cfg.threads,
                [out.as_raw_fd() as u64, a, cfg.size as u64, cfg.chunk as u64, e2],
            ),
        ));
        if rep == 0 {
            check(
                "pwrite from device memory",
                &|at, buf| out.read_exact_at(buf, at as u64).expect("read back"),
                &mut failed,
            );
        }
        drop(out);
        let out = File::create(&out_path).expect("create");
        let t0 = Instant::now();
        let mut at = 0;
        while at < cfg.size {
            let n = cfg.block.min(cfg.size - at);
            let buf = &mut pinned.slice()[..n];
            dev.download(at, buf);
            out.write_all_at(buf, at as u64).expect("pwrite");
            at += n;
        }
        host_w.push(gbps(cfg.size, t0.elapsed().as_secs_f64()));
        eprintln!(
            "pwrite rep {rep}: gpuio {:.2} GB/s, host pipeline {:.2} GB/s",
            gpu_w[rep], host_w[rep]
        );
    }
    errs.download(0, &mut e);
    if u64::from_le_bytes(e) != 0 {
        eprintln!("bench_file: {} GPU transfers failed", u64::from_le_bytes(e));
        failed = true;
    }
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&path);
    let stats = rt.stats();
    drop(host);
    let (d, h, p) = (median(gpu_dev), median(gpu_host), median(host_pipe));
    let (w, hw) = (median(gpu_w), median(host_w));
    println!();
    println!("## {} MiB, median of {} reps, GB/s", cfg.size >> 20, cfg.reps);
    write_table(
        &mut std::io::stdout(),
        &["case", "gpuio (GPU threads)", "host pipeline", "gpuio / host"],
        vec![
            vec![
                "pread -> device memory (staged)".into(),
                format!("{d:.2}"),
                format!("{p:.2}"),
                format!("{:.2}", d / p),
            ],
            vec![
                "pread -> host buffer (direct)".into(),
                format!("{h:.2}"),
                format!("{p:.2}"),
                format!("{:.2}", h / p),
            ],
            vec![
                "pwrite <- device memory (staged)".into(),
                format!("{w:.2}"),
                format!("{hw:.2}"),
                format!("{:.2}", w / hw),
            ],
        ],
        1,
    );
    println!(
        "bytes staged {} / direct {}; stray completions {}",
        stats.staged_bytes, stats.direct_bytes, stats.stray_completions
    );
    if failed {
        println!("FAILED: see stderr");
        std::process::exit(1);
    }
    println!("all GPU transfers checked: correct");
}
