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
//!
//! Here: the options, the cases and the run. `gpu.rs`: one GPU's runtime, modules, file and
//! device memory, and the cases run on several at once; `host.rs`: the host alone, its copy
//! out of the page cache and how it scales with threads; `shared_file.rs`: the last check,
//! every GPU printing into one file.
use std::fs::File;
use std::path::PathBuf;
use std::time::Instant;

use gpuio::cuda::Cuda;

#[path = "../common/mod.rs"]
mod common;
mod gpu;
mod host;
mod shared_file;
use common::{cpu_list, cpu_model, median, uname_release, utc_date, write_table, Cli};
use gpu::{pattern, together, Gpu};
use host::{host_reads, host_scaling};
use shared_file::shared_file;

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

#[derive(Clone, Copy, PartialEq)]
enum Case {
    Print,
    Pread,
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
