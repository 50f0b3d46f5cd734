//! Several GPUs in one process: a runtime per GPU, each doing the same work at once, against
//! one GPU doing it alone, side by side in one run.
//!
//! `cargo bench --bench bench_gpus [-- OPTIONS]`
//!
//! Opens a runtime on each of the first `--gpus` CUDA devices (default 2;
//! [`Builder::gpu`](gpuio::Builder::gpu)), each with `--rings` rings (default 4) of
//! `--sq-entries` SQEs (default 1024) and an arena of `--arena-mib` (default 1024), and
//! loads the kernels into each. Then, `--reps` times (default 3), for each case: GPU 0
//! alone, each other GPU alone, and all of them at once (one host thread per runtime
//! launches and synchronizes; the time runs from before the first launch to after the last
//! synchronize returns). Cases:
//! - **print into /dev/null**: `stress(--lines, --width)` (default 16 lines of 32 bytes) on
//!   `--total / --lines` threads (default 16,777,216 lines) in blocks of 256, each runtime's
//!   stdout `/dev/null`; a line lost (what `synchronize` reports) fails the run.
//! - **pread into device memory**: each GPU reads its own page-cached file of `--size-mib`
//!   (default 1024) in `--dir` (default `/dev/shm`) into its own device memory with
//!   `pread_bulk` (`--threads` GPU threads, default 1024, in 1 MiB chunks, staged through
//!   the arena in blocks of `--block-kib`, default 256); every GPU's bytes are checked
//!   against the file after the first run of all GPUs together.
//!
//! Then the host alone: its copy out of the page cache with as many threads as the runtimes
//! have SQPOLL threads, for one file and for every GPU's at once; and, as threads are added
//! (1, 2, 4, ... 32), that copy unbound, bound to CPUs side by side and to every other CPU,
//! beside a plain copy between two host buffers (with the CPU topology sysfs shows).
//!
//! Last, a check: every GPU prints 8 lines of `--width` bytes on each of 65,536 threads (a
//! pass over a 32 MiB log at 32 bytes) into one fresh file in `--dir` at once (runtimes of their own, whose stdout it is, so they append to it), and every line is
//! checked, whole and there once per GPU.
//!
//! Prints each case's median throughput (lines/s, or GB/s of 10^9 bytes) alone and together,
//! the ratio together / GPU 0 alone, and the target: at least 1.8x, `MET` or `NOT MET`.
//! With fewer than `--gpus` CUDA devices it says so and exits 0 (nothing to compare).
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

mod common;
use common::{cpu_list, cpu_model, median, parse_line, uname_release, utc_date, write_table, Cli};

const CLI: Cli = Cli {
    name: "bench_gpus",
    usage: "usage: bench_gpus [--gpus N] [--reps N] [--lines N] [--width N] [--total N] \
            [--size-mib N] [--dir PATH] [--rings N] [--sq-entries N] [--arena-mib N] \
            [--threads N] [--block-kib N]",
};

/// What each GPU runs: the print case's kernel arguments and threads, the pread case's
/// threads and bytes.
#[derive(Clone, Copy)]
struct Print {
    lines: u32,
    width: u32,
    threads: u32,
    readers: u32,
}

/// One GPU: its runtime, its modules, its file and device memory for the pread case.
struct Gpu {
    index: u32,
    // Declared before `rt`: the modules go first.
    print: GpuModule<'static>,
    files: GpuModule<'static>,
    cuda: Arc<Cuda>,
    rt: &'static Runtime,
    file: File,
    path: PathBuf,
    dev: u64,
    errors: u64,
}

impl Gpu {
    fn open(
        index: u32,
        rings: u32,
        sq_entries: u32,
        (arena, block): (usize, usize),
        size: usize,
        dir: &std::path::Path,
    ) -> Gpu {
        let rt = match Runtime::builder()
            .backend(Backend::Cuda)
            .gpu(index)
            .rings(rings)
            .sq_entries(sq_entries)
            .sandbox(Sandbox::FileIo)
            .arena_bytes(arena)
            .arena_block_bytes(block)
            .stdout_fd(devnull().as_raw_fd())
            .build()
        {
            Ok(rt) => rt,
            Err(e @ Error::Config(_)) => CLI.fail(&e.to_string()),
            Err(e) => panic!("GPU {index}: runtime: {e}"),
        };
        // The runtimes live as long as the process: `'static` modules borrow them.
        let rt: &'static Runtime = Box::leak(Box::new(rt));
        let print = rt
            .load_matching(gpuio_kernels_gpu::NVPTX)
            .expect("load the print kernels");
        let files = rt
            .load_matching(gpuio_kernels_gpu::TEST_NVPTX)
            .expect("load the file kernels");
        let cuda = files.cuda().expect("a CUDA module").clone();
        let path = dir.join(format!("gpuio-bench-gpus-{}-{index}", std::process::id()));
        let file = write_cached(&path, size, index);
        let dev = cuda.alloc_zeroed(size).expect("device memory");
        let errors = cuda.alloc_zeroed(8).expect("device memory");
        Gpu {
            index,
            print,
            files,
            cuda,
            rt,
            file,
            path,
            dev,
            errors,
        }
    }

    /// Runs the case's kernel and waits for it; lines lost, if any, are an error.
    fn run(&self, case: Case, p: &Print, size: usize) -> Result<(), String> {
        match case {
            Case::Print => self
                .print
                .launch("stress", p.threads / 256, 256, &[p.lines.into(), p.width.into()])
                .map_err(|e| e.to_string())?,
            Case::Pread => self
                .files
                .launch(
                    "pread_bulk",
                    p.readers.div_ceil(128),
                    p.readers.min(128),
                    &[
                        Arg::U32(self.file.as_raw_fd() as u32),
                        Arg::U64(self.dev),
                        Arg::U64(size as u64),
                        Arg::U64(1 << 20),
                        Arg::U64(self.errors),
                    ],
                )
                .map_err(|e| e.to_string())?,
        }
        match self.rt.synchronize() {
            Ok(()) => Ok(()),
            Err(Error::Print(p)) => Err(format!("lost lines: {p}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Whether the device memory holds the file's bytes and no read failed.
    fn check(&self, size: usize) -> bool {
        let mut errors = [0u8; 8];
        self.cuda.copy_from_device(&mut errors, self.errors).expect("copy");
        let errors = u64::from_le_bytes(errors);
        if errors != 0 {
            eprintln!("bench_gpus: GPU {}: {errors} failed reads", self.index);
            return false;
        }
        let (mut got, mut want) = (vec![0u8; 16 << 20], vec![0u8; 16 << 20]);
        let mut at = 0;
        while at < size {
            let n = got.len().min(size - at);
            self.cuda
                .copy_from_device(&mut got[..n], self.dev + at as u64)
                .expect("copy");
            pattern(self.index, at, &mut want[..n]);
            if got[..n] != want[..n] {
                eprintln!("bench_gpus: GPU {}: wrong bytes in [{at}, {})", self.index, at + n);
                return false;
            }
            at += n;
        }
        true
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        self.cuda.free(self.dev);
        self.cuda.free(self.errors);
        let _ = std::fs::remove_file(&self.path);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Case {
    Print,
    Pread,
}

fn devnull() -> &'static File {
    static NULL: std::sync::OnceLock<File> = std::sync::OnceLock::new();
    NULL.get_or_init(|| {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .expect("/dev/null")
    })
}

/// Bytes unique to GPU `gpu`'s file at each offset, so that a GPU that read another's file
/// fails its check.
fn pattern(gpu: u32, at: usize, buf: &mut [u8]) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let v = ((at / 8 + i) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(gpu);
        chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
    }
}

/// A file of `size` bytes of GPU `index`'s pattern, read once so that it is page-cached.
fn write_cached(path: &std::path::Path, size: usize, index: u32) -> File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap_or_else(|e| CLI.fail(&format!("{}: {e}", path.display())));
    let mut buf = vec![0u8; 16 << 20];
    let mut at = 0;
    while at < size {
        let n = buf.len().min(size - at);
        pattern(index, at, &mut buf[..n]);
        f.write_all_at(&buf[..n], at as u64).expect("write");
        at += n;
    }
    let mut at = 0;
    while at < size {
        at += f.read_at(&mut buf, at as u64).expect("read");
    }
    f
}

/// Runs the case on `gpus` at once, each from its own host thread; seconds from before the
/// first launch to after the last synchronize.
fn together(gpus: &[&Gpu], case: Case, p: &Print, size: usize) -> Result<f64, String> {
    let t0 = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = gpus.iter().map(|g| s.spawn(move || g.run(case, p, size))).collect();
        handles.into_iter().map(|h| h.join().expect("runner thread")).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    for (g, r) in gpus.iter().zip(results) {
        r.map_err(|e| format!("GPU {}: {e}", g.index))?;
    }
    Ok(secs)
}

/// The host alone doing what the SQPOLL threads do in the pread case: `threads` threads per
/// file `pread` 1 MiB chunks of `files` (chunk `j` by thread `j % threads`) into a host
/// buffer of the file's size each, all files at once; seconds. With `pins`, the `k`-th
/// thread started runs on CPU `pins[k % pins.len()]` only.
fn host_reads(files: &[&File], threads: usize, size: usize, dst: &mut [Vec<u8>], pins: &[usize]) -> f64 {
    const CHUNK: usize = 1 << 20;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let mut k = 0;
        for (file, buf) in files.iter().zip(dst.iter_mut()) {
            // Each thread's chunks, as disjoint slices of the buffer.
            let mut mine: Vec<Vec<(usize, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
            for (j, c) in buf[..size].chunks_mut(CHUNK).enumerate() {
                mine[j % threads].push((j * CHUNK, c));
            }
            for chunks in mine {
                let pin = (!pins.is_empty()).then(|| pins[k % pins.len()]);
                k += 1;
                s.spawn(move || {
                    if let Some(cpu) = pin {
                        pin_to(cpu);
                    }
                    for (at, c) in chunks {
                        file.read_exact_at(c, at as u64).expect("host pread");
                    }
                });
            }
        }
    });
    t0.elapsed().as_secs_f64()
}

/// Binds the calling thread to `cpu` (a failure is reported and ignored: the thread runs
/// where the scheduler puts it).
fn pin_to(cpu: usize) {
    // SAFETY: sched_setaffinity reads the set we own, zeroed and then given one CPU below
    // CPU_SETSIZE (the caller's CPUs come from sched_getaffinity).
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        eprintln!(
            "bench_gpus: binding a thread to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// `threads` threads copy `src` into `dst` in 1 MiB chunks (chunk `j` by thread
/// `j % threads`), as [`host_reads`] does from a file but in user space (the kernel copies
/// out of the page cache with its own routine, so this is a reference, not the same
/// copy); seconds.
fn host_copies(src: &[u8], dst: &mut [u8], threads: usize) -> f64 {
    const CHUNK: usize = 1 << 20;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let mut mine: Vec<Vec<(&[u8], &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
        for (j, (a, b)) in src.chunks(CHUNK).zip(dst.chunks_mut(CHUNK)).enumerate() {
            mine[j % threads].push((a, b));
        }
        for chunks in mine {
            s.spawn(move || {
                for (a, b) in chunks {
                    b.copy_from_slice(a);
                }
            });
        }
    });
    t0.elapsed().as_secs_f64()
}

/// How the host's copy out of the page cache scales as threads are added, 1, 2, 4, ... up
/// to 32 or the CPUs this process may use: GB/s of [`host_reads`] of one page-cached file
/// into host memory, unbound, bound to that many CPUs from the end of the list one after
/// the other (where the runtimes put their SQPOLL threads), and bound to every other CPU
/// from the end (while there are enough); beside a plain copy of as many bytes between two
/// host buffers ([`host_copies`]). Medians of `reps`, the ways taking turns. A thread that
/// slows as others are added, in every column, points at what they share (memory, caches,
/// or the physical cores under a VM's vCPUs); one that slows only on adjacent CPUs, at
/// vCPUs that share a core. Prints the table and the CPU topology sysfs shows.
/// `dst[0]` is overwritten; `dst[1]` (the other GPU's bytes) is the copies' source.
fn host_scaling(file: &File, size: usize, reps: usize, dst: &mut [Vec<u8>]) {
    // CPU 0 alone where the set cannot be read: one row, unbound and bound alike.
    let cpus = common::allowed_cpus().unwrap_or_else(|_| vec![0]);
    let (first, rest) = dst.split_at_mut(1);
    let (copy_dst, src) = (&mut first[0], &rest[0]);
    let mut rows = Vec::new();
    let (mut base_copy, mut base_read) = (0.0, 0.0);
    let mut threads = 1;
    while threads <= cpus.len().min(32) {
        let adjacent: Vec<usize> = cpus.iter().rev().take(threads).copied().collect();
        let spread: Vec<usize> = cpus.iter().rev().step_by(2).take(threads).copied().collect();
        let spread = (spread.len() == threads).then_some(spread);
        let (mut c, mut r, mut ra, mut rs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            c.push(size as f64 / host_copies(&src[..size], &mut copy_dst[..size], threads) / 1e9);
            let mut read = |pins: &[usize]| {
                size as f64 / host_reads(&[file], threads, size, std::slice::from_mut(copy_dst), pins) / 1e9
            };
            r.push(read(&[]));
            ra.push(read(&adjacent));
            if let Some(spread) = &spread {
                rs.push(read(spread));
            }
        }
        let (c, r, ra) = (median(c), median(r), median(ra));
        if threads == 1 {
            (base_copy, base_read) = (c, r);
        }
        let list = |v: &[usize]| match v {
            [one] => one.to_string(),
            _ => format!("{}..{}", v[0], v[v.len() - 1]),
        };
        rows.push(vec![
            threads.to_string(),
            format!("{r:.2}"),
            format!("{:.2}x", r / base_read),
            format!("{ra:.2} ({})", list(&adjacent)),
            match &spread {
                Some(sp) => format!("{:.2} ({}, every other)", median(rs), list(sp)),
                None => "-".to_string(),
            },
            format!("{c:.2}"),
            format!("{:.2}x", c / base_copy),
        ]);
        threads *= 2;
    }
    println!();
    println!(
        "## the host's copy as threads are added: {} MiB in 1 MiB chunks, GB/s, medians of {reps}",
        size >> 20
    );
    write_table(
        &mut std::io::stdout(),
        &[
            "threads",
            "pread of a page-cached file",
            "vs 1",
            "bound to CPUs side by side",
            "bound to every other CPU",
            "memory to memory",
            "vs 1",
        ],
        rows,
        1,
    );
    println!("CPU topology (sysfs): {}", common::topology());
}

/// Every GPU prints `p`'s lines into one fresh file in `dir` at once, through runtimes of
/// their own with that file as stdout (so they append: `Builder::gpu`'s docs); then every
/// line is checked: whole, and each `(t, i)` once per GPU. Prints what it found; returns
/// whether all was well.
fn shared_file(n: u32, p: &Print, dir: &std::path::Path) -> bool {
    let path = dir.join(format!("gpuio-bench-gpus-shared-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap_or_else(|e| CLI.fail(&format!("{}: {e}", path.display())));
    let rts: Vec<Runtime> = (0..n)
        .map(|i| {
            Runtime::builder()
                .backend(Backend::Cuda)
                .gpu(i)
                .stdout_fd(file.as_raw_fd())
                .build()
                .unwrap_or_else(|e| panic!("GPU {i}: runtime: {e}"))
        })
        .collect();
    let modules: Vec<GpuModule> = rts
        .iter()
        .map(|rt| {
            rt.load_matching(gpuio_kernels_gpu::NVPTX)
                .expect("load the print kernels")
        })
        .collect();
    let t0 = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = rts
            .iter()
            .zip(&modules)
            .map(|(rt, m)| {
                s.spawn(move || {
                    m.launch("stress", p.threads / 256, 256, &[p.lines.into(), p.width.into()])
                        .map_err(|e| e.to_string())?;
                    rt.synchronize().map_err(|e| e.to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("runner thread")).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    drop(modules);
    drop(rts);
    let data = std::fs::read(&path).expect("read the shared file");
    let _ = std::fs::remove_file(&path);
    let per_gpu = u64::from(p.threads) * u64::from(p.lines);
    let mut counts = vec![0u8; per_gpu as usize];
    let (mut read, mut malformed, mut out_of_range) = (0u64, 0u64, 0u64);
    for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        read += 1;
        match parse_line(line, p.width as usize) {
            Ok((t, i)) if t < u64::from(p.threads) && i < u64::from(p.lines) => {
                let c = &mut counts[(t * u64::from(p.lines) + i) as usize];
                *c = c.saturating_add(1);
            }
            Ok(_) => out_of_range += 1,
            Err(_) => malformed += 1,
        }
    }
    let wrong = counts.iter().filter(|&&c| c != n as u8).count();
    let ok =
        results.iter().all(Result::is_ok) && malformed == 0 && out_of_range == 0 && wrong == 0 && data.ends_with(b"\n");
    for (i, r) in results.iter().enumerate() {
        if let Err(e) = r {
            println!("GPU {i}: {e}");
        }
    }
    println!(
        "print into one tmpfs file from {n} GPUs at once (each appends): {:.1} ms, {:.2} M lines/s; {read} lines read of {}, {malformed} torn or malformed, {wrong} (t, i) not seen exactly {n} times: {}",
        secs * 1e3,
        (per_gpu * u64::from(n)) as f64 / secs / 1e6,
        per_gpu * u64::from(n),
        if ok { "OK" } else { "FAILED" }
    );
    ok
}

fn main() {
    let args: Vec<String> = common::args();
    CLI.only_known(
        &args,
        &[
            "--gpus",
            "--reps",
            "--lines",
            "--width",
            "--total",
            "--size-mib",
            "--dir",
            "--rings",
            "--sq-entries",
            "--arena-mib",
            "--threads",
            "--block-kib",
        ],
    );
    let n: u32 = CLI.opt(&args, "--gpus").unwrap_or(2);
    let reps: usize = CLI.opt(&args, "--reps").unwrap_or(3);
    let lines: u32 = CLI.opt(&args, "--lines").unwrap_or(16);
    let width: u32 = CLI.opt(&args, "--width").unwrap_or(32);
    let total: u64 = CLI.opt(&args, "--total").unwrap_or(16 << 20);
    let size: usize = CLI.opt::<usize>(&args, "--size-mib").unwrap_or(1024) << 20;
    let dir: PathBuf = CLI.opt(&args, "--dir").unwrap_or_else(|| PathBuf::from("/dev/shm"));
    let rings: u32 = CLI.opt(&args, "--rings").unwrap_or(4);
    let sq_entries: u32 = CLI.opt(&args, "--sq-entries").unwrap_or(1024);
    let arena: usize = CLI.opt::<usize>(&args, "--arena-mib").unwrap_or(1024) << 20;
    let readers: u32 = CLI.opt(&args, "--threads").unwrap_or(1024);
    let block: usize = CLI.opt::<usize>(&args, "--block-kib").unwrap_or(256) << 10;
    if readers == 0 || (readers > 128 && !readers.is_multiple_of(128)) {
        CLI.fail("--threads must be 1 to 128 or a multiple of 128");
    }
    if n < 2 || reps == 0 || lines == 0 || size == 0 {
        CLI.fail("--gpus must be at least 2; --reps, --lines and --size-mib positive");
    }
    let threads = total / u64::from(lines);
    if threads * u64::from(lines) != total || threads == 0 || !threads.is_multiple_of(256) || threads > u32::MAX as u64
    {
        CLI.fail("--total must be --lines x T, T a multiple of 256 (blocks of 256 threads)");
    }
    let print = Print {
        lines,
        width,
        threads: threads as u32,
        readers,
    };
    println!("# bench_gpus ({})", utc_date());
    match Cuda::device_count() {
        Ok(have) if have >= n => {}
        Ok(have) => {
            println!("bench_gpus: skipped: {have} CUDA device(s) here, {n} needed (--gpus)");
            return;
        }
        Err(why) => {
            println!("bench_gpus: skipped: no CUDA ({why})");
            return;
        }
    }
    let t = Instant::now();
    let gpus: Vec<Gpu> = (0..n)
        .map(|i| Gpu::open(i, rings, sq_entries, (arena, block), size, &dir))
        .collect();
    println!(
        "setup: {} runtimes, modules and files in {:.1} s",
        n,
        t.elapsed().as_secs_f64()
    );
    for g in &gpus {
        println!(
            "GPU {}: {} | PCI {} | SQPOLL CPUs {}",
            g.index,
            g.rt.device_name().unwrap_or("?"),
            g.rt.pci_bus_id().unwrap_or("?"),
            cpu_list(g.rt.sqpoll_cpus())
        );
    }
    println!(
        "machine: {} | kernel {} | {} ring(s) of {} SQEs per runtime | print: {} threads x {} lines of {} B per GPU into /dev/null | pread: {} MiB per GPU from {} ({} threads, 1 MiB chunks, arena {} MiB in {} KiB blocks) | {} reps",
        cpu_model(),
        uname_release(),
        rings,
        sq_entries,
        print.threads,
        lines,
        width,
        size >> 20,
        dir.display(),
        readers,
        arena >> 20,
        block >> 10,
        reps
    );
    let all: Vec<&Gpu> = gpus.iter().collect();
    // Warm-up: each kernel once on every GPU together.
    for case in [Case::Print, Case::Pread] {
        if let Err(e) = together(&all, case, &Print { lines: 1, ..print }, size) {
            eprintln!("bench_gpus: warm-up: {e}");
            std::process::exit(1);
        }
    }
    let mut failed = false;
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for (case, name) in [
        (Case::Print, "print into /dev/null"),
        (Case::Pread, "pread into device memory"),
    ] {
        // alone[i]: GPU i's seconds by itself; both: all GPUs together.
        let mut alone: Vec<Vec<f64>> = vec![Vec::new(); gpus.len()];
        let mut both = Vec::new();
        for rep in 0..reps {
            for (i, g) in gpus.iter().enumerate() {
                match together(&[g], case, &print, size) {
                    Ok(s) => alone[i].push(s),
                    Err(e) => {
                        eprintln!("bench_gpus: {name}: {e}");
                        std::process::exit(1);
                    }
                }
            }
            if case == Case::Pread && rep == 0 {
                // So that the check below sees only what the run together wrote.
                for g in &gpus {
                    g.cuda.copy_to_device(g.dev, &vec![0u8; size]).expect("zero");
                }
            }
            match together(&all, case, &print, size) {
                Ok(s) => both.push(s),
                Err(e) => {
                    eprintln!("bench_gpus: {name}: {e}");
                    std::process::exit(1);
                }
            }
            if case == Case::Pread && rep == 0 {
                for g in &gpus {
                    failed |= !g.check(size);
                }
            }
        }
        // Work per GPU, and its unit.
        let (work, unit, scale) = match case {
            Case::Print => (total as f64, "M lines/s", 1e6),
            Case::Pread => (size as f64, "GB/s", 1e9),
        };
        let rate = |secs: f64, gpus: usize| work * gpus as f64 / secs / scale;
        let one = rate(median(alone[0].clone()), 1);
        let all_rate = rate(median(both.clone()), gpus.len());
        let ratio = all_rate / one;
        let mut row = vec![name.to_string(), unit.to_string()];
        for a in &alone {
            row.push(format!("{:.2}", rate(median(a.clone()), 1)));
        }
        let range = |v: &[f64], k: usize| {
            let r: Vec<f64> = v.iter().map(|&s| rate(s, k)).collect();
            let (lo, hi) = r.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            format!("{lo:.2}-{hi:.2}")
        };
        row.push(format!("{all_rate:.2}"));
        row.push(range(&alone[0], 1));
        row.push(range(&both, gpus.len()));
        row.push(format!("{ratio:.2}x"));
        rows.push(row);
        verdicts.push(format!(
            "{name}: {} GPUs together {:.2}x GPU 0 alone (target >= 1.8x): {}",
            gpus.len(),
            ratio,
            if ratio >= 1.8 { "MET" } else { "NOT MET" }
        ));
    }
    // What the host alone copies out of the page cache with as many threads as the runtimes
    // have SQPOLL threads: one GPU's share, then every GPU's at once.
    let mut dst: Vec<Vec<u8>> = gpus.iter().map(|_| vec![1u8; size]).collect();
    let files: Vec<&File> = gpus.iter().map(|g| &g.file).collect();
    let (mut one, mut every) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        one.push(host_reads(&files[..1], rings as usize, size, &mut dst[..1], &[]));
        every.push(host_reads(&files, rings as usize, size, &mut dst, &[]));
    }
    for (i, d) in dst.iter().enumerate() {
        let mut want = vec![0u8; 1 << 20];
        for (j, c) in d.chunks(1 << 20).enumerate() {
            pattern(i as u32, j << 20, &mut want[..c.len()]);
            if c != &want[..c.len()] {
                eprintln!("bench_gpus: host reads of file {i}: wrong bytes in chunk {j}");
                failed = true;
                break;
            }
        }
    }
    let host_one = size as f64 / median(one.clone()) / 1e9;
    let host_every = (size * gpus.len()) as f64 / median(every.clone()) / 1e9;
    let mut header = vec!["case".to_string(), "unit".to_string()];
    for g in &gpus {
        header.push(format!("GPU {} alone", g.index));
    }
    header.push(format!("{} together", gpus.len()));
    header.push("GPU 0 alone, range".to_string());
    header.push("together, range".to_string());
    header.push("together / GPU 0".to_string());
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    println!();
    println!("## {} GPUs, a runtime each: medians of {reps} reps", gpus.len());
    write_table(&mut std::io::stdout(), &header, rows, 2);
    println!();
    for v in verdicts {
        println!("{v}");
    }
    println!();
    println!(
        "host alone, {rings} threads pread 1 MiB chunks of a page-cached file into host memory (the SQPOLL threads' copy): \
         one file {host_one:.2} GB/s, {} files at once ({} threads) {host_every:.2} GB/s: {:.2}x (medians of {reps})",
        gpus.len(),
        rings as usize * gpus.len(),
        host_every / host_one
    );
    host_scaling(files[0], size, reps, &mut dst);
    println!();
    // 8 lines on each of 65,536 threads: 16 MiB of 32-byte lines per GPU, inside the default
    // 32 MiB log, so that no line straddles the log's end (two writes, between which another
    // runtime's may land: `Stream`'s docs).
    let check = Print {
        lines: 8,
        threads: 65536,
        ..print
    };
    failed |= !shared_file(n, &check, &dir);
    if failed {
        println!("bench_gpus: a check FAILED (above)");
    }
    // The runtimes were leaked for `'static` modules: drop the modules and files, then exit.
    drop(gpus);
    std::process::exit(i32::from(failed));
}
