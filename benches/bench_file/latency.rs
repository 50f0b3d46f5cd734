//! The latency workload: one GPU thread `pwrite`s 64 bytes and waits, `--iters` times, two
//! ways (three on a GPU with nvcc: `gpuio_pwrite` from a CUDA C++ kernel, latency.cu, with
//! its verdict: within 1.3x the Rust `pwrite`'s p50); then the same round trip in phases, the floor (one thread alone on a ring, none of
//! the protocol's steps), the kernel's part alone (a host thread on a host SQPOLL ring), and
//! the round-trip target.
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::time::Instant;

use gpuio::Arg;
use gpuio_test_kernels as k;

use crate::common::{self, write_table};
use crate::device::{download_u64, one_thread, DevBuf};
use crate::setup::{quantile_us, threads_named};
use crate::uring::{self, SQ_IDLE_MS};
use crate::Bench;

/// One way of the GPU's round trip, as measured.
struct Way {
    /// The kernel that made the writes.
    name: &'static str,
    /// Each round trip that succeeded, ns, sorted.
    ns: Vec<u64>,
    /// Round trips that failed.
    errors: usize,
    /// Writes that went through the solo ring.
    solo: u64,
}

/// The `p` quantile of `ns` (sorted, not empty) in us.
fn q(ns: &[u64], p: f64) -> f64 {
    ns[((ns.len() - 1) as f64 * p) as usize] as f64 / 1e3
}

/// Runs the workload and prints its tables and the round-trip target; sets `failed` if a
/// round trip failed or the file did not get every write.
pub(crate) fn run(b: &Bench, failed: &mut bool) {
    let cfg = &b.cfg;
    let lat_path = match &cfg.lat_file {
        Some(p) => p.clone(),
        None => cfg.dir.join(format!("gpuio-bench-lat-{}", std::process::id())),
    };
    let lat_file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lat_path)
        .expect("create");
    let mut lat = DevBuf::new(&b.g, cfg.iters as usize * 8);
    let (fd, iters) = (lat_file.as_raw_fd(), cfg.iters);
    let ways = ways(b, fd, &mut lat);
    let meta = std::fs::metadata(&lat_path).expect("stat");
    let written = if meta.is_file() {
        meta.len()
    } else {
        cfg.iters as u64 * 64
    };
    print_ways(b, &ways, written);
    if ways.iter().any(|w| w.errors > 0) || written != cfg.iters as u64 * 64 {
        *failed = true;
    }

    // The same round trip, in phases (diagnostic), into the same file.
    let mut ph = DevBuf::new(&b.g, cfg.iters as usize * k::LATENCY_ROW * 8);
    one_thread(b.rt, &b.g, k::latency_phases, fd, iters, ph.addr());
    // The floor (diagnostic): the same writes with none of the protocol's steps.
    let mut fl = DevBuf::new(&b.g, cfg.iters as usize * k::FLOOR_ROW * 8);
    one_thread(b.rt, &b.g, k::latency_floor, fd, iters, fl.addr());
    drop(lat_file);
    if cfg.lat_file.is_none() {
        let _ = std::fs::remove_file(&lat_path);
    }
    phases_table(&ph, cfg.iters);
    let floor = floor_table(&fl, cfg.iters);
    *failed |= floor.is_none();

    let host = host_part(b);
    *failed |= host.failed > 0;
    verdict(b, &ways[0], &host, floor);
    if let Some(cpp) = ways.iter().find(|w| w.name == CPP_KERNEL) {
        let (rust, c) = (q(&ways[0].ns, 0.5), q(&cpp.ns, 0.5));
        println!(
            "the C++ round trip within 1.3x the Rust pwrite's (p50): {} (gpuio_pwrite from CUDA C++ p50 {c:.2} us, \
             Rust pwrite {rust:.2} us: {:.2}x)",
            if cpp.errors == 0 && c <= 1.3 * rust {
                "MET"
            } else {
                "NOT MET"
            },
            c / rust
        );
    }
}

/// The same writes two ways: `pwrite` (the solo ring while no other thread holds it), then
/// `pwrite_async` and its wait (always the shared rings); each round trip into `lat`. On a
/// GPU with nvcc at hand, a third: `gpuio_pwrite` from a CUDA C++ kernel ([`cpp_way`]).
fn ways(b: &Bench, fd: i32, lat: &mut DevBuf) -> Vec<Way> {
    let mut ways = Vec::new();
    let out = lat.addr();
    let lat = &*lat;
    let mut timed = |name: &'static str, run: &dyn Fn() -> Result<(), String>| {
        let solo_before = b.rt.stats().solo_requests;
        if let Err(e) = run() {
            println!("{name}: failed, not measured: {e}");
            return;
        }
        let solo = b.rt.stats().solo_requests.wrapping_sub(solo_before);
        let mut ns = download_u64(lat, b.cfg.iters as usize);
        let errors = ns.iter().filter(|&&v| v == u64::MAX).count();
        ns.sort_unstable();
        ways.push(Way { name, ns, errors, solo });
    };
    for kernel in [k::pwrite_latency, k::pwrite_latency_shared] {
        timed(kernel.name(), &|| {
            one_thread(b.rt, &b.g, kernel, fd, b.cfg.iters, out);
            Ok(())
        });
    }
    if let Some(module) = cpp_way(b) {
        timed(CPP_KERNEL, &|| {
            module
                .launch(
                    CPP_KERNEL,
                    1,
                    1,
                    &[Arg::U32(fd as u32), Arg::U32(b.cfg.iters), Arg::U64(out)],
                )
                .and_then(|_| b.rt.synchronize())
                .map_err(|e| e.to_string())
        });
    }
    ways
}

/// The C++ way's kernel, in latency.cu.
const CPP_KERNEL: &str = "cpp_pwrite_latency";

/// latency.cu built with nvcc and joined with gpuio's device library for the scheduling the
/// Rust kernels run (`common::cpp_module`), loaded; `None` (having said why) on the CPU
/// backend, without nvcc, or where the build failed.
fn cpp_way<'rt>(b: &Bench<'rt>) -> Option<gpuio::GpuModule<'rt>> {
    let rust = b.g.module.as_ref()?;
    let Some(nvcc) = common::find_nvcc() else {
        println!("C++ round trip: not measured (no nvcc: $NVCC, /usr/local/cuda/bin/nvcc or PATH)");
        return None;
    };
    let arch = match rust.scheduling() {
        Some(gpuio::Scheduling::Lockstep) => "sm_60",
        _ => "sm_90",
    };
    let dir = std::env::temp_dir().join(format!("bench_file-cpp-{}", std::process::id()));
    let built = common::cpp_module(&nvcc, include_str!("latency.cu"), arch, &[], &dir);
    let _ = std::fs::remove_dir_all(&dir);
    match built.and_then(|(ptx, _)| b.rt.load_module(&ptx).map_err(|e| e.to_string())) {
        Ok(m) => Some(m),
        Err(e) => {
            println!("C++ round trip: not measured (latency.cu: {e})");
            None
        }
    }
}

/// Prints the table of the two ways (`written`: the file's length after them).
fn print_ways(b: &Bench, ways: &[Way], written: u64) {
    let stats = b.rt.stats();
    println!();
    println!(
        "## one thread: pwrite 64 B and wait, {} times each way (file {} bytes)",
        b.cfg.iters, written
    );
    write_table(
        &mut std::io::stdout(),
        &[
            "way",
            "p50 us",
            "p99 us",
            "min us",
            "max us",
            "mean us",
            "clock step ns",
            "failed",
            "via the solo ring",
        ],
        ways.iter()
            .map(|Way { name, ns, errors, solo }| {
                let step = ns.windows(2).map(|w| w[1] - w[0]).filter(|&d| d > 0).min().unwrap_or(0);
                vec![
                    match *name {
                        "pwrite_latency" if !stats.solo => "pwrite (no solo ring)",
                        "pwrite_latency" if stats.solo_waits_on_results => {
                            "pwrite (solo ring where free, waiting on the result)"
                        }
                        "pwrite_latency" => "pwrite (solo ring where free, waiting on the CQ tail)",
                        CPP_KERNEL => "gpuio_pwrite from CUDA C++ (as pwrite)",
                        _ => "pwrite_async + wait (shared rings)",
                    }
                    .to_string(),
                    format!("{:.2}", q(ns, 0.5)),
                    format!("{:.2}", q(ns, 0.99)),
                    format!("{:.2}", q(ns, 0.0)),
                    format!("{:.2}", q(ns, 1.0)),
                    format!("{:.2}", ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e3),
                    step.to_string(),
                    errors.to_string(),
                    solo.to_string(),
                ]
            })
            .collect(),
        1,
    );
}

/// Prints the table of `latency_phases`' round trips (`ph` holds [`k::LATENCY_ROW`] words
/// per round trip).
fn phases_table(ph: &DevBuf, iters: u32) {
    let row = k::LATENCY_ROW;
    let mut raw = vec![0u8; iters as usize * row * 8];
    ph.download(0, &mut raw);
    let words: Vec<u64> = raw
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let names = [
        "PCIe read (the CQ tail)",
        "system fence",
        "block + slot + stage 64 B",
        "Ring::submit",
        "until the CQ tail moves",
        "reap, dispatch, result",
    ];
    let mut rows = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let mut v: Vec<u64> = words.chunks(row).map(|r| r[k]).collect();
        v.sort_unstable();
        let q = |p: f64| v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3;
        rows.push(vec![
            name.to_string(),
            format!("{:.2}", q(0.5)),
            format!("{:.2}", q(0.99)),
        ]);
    }
    let bad = words.chunks(row).filter(|r| r[row - 1] != 64).count();
    println!();
    println!("## the same round trip in phases ({iters} iterations, {bad} results not 64)");
    write_table(&mut std::io::stdout(), &["phase", "p50 us", "p99 us"], rows, 1);
}

/// Prints the table of `latency_floor`'s round trips (`out` holds [`k::FLOOR_ROW`] words per
/// round trip); returns the whole round trip's p50 and p99 (us), or `None` (having said why)
/// if a write came back other than 64 or the kernel found the ring busy.
fn floor_table(out: &DevBuf, iters: u32) -> Option<(f64, f64)> {
    let row = k::FLOOR_ROW;
    let words = download_u64(out, iters as usize * row);
    let busy = words.chunks(row).filter(|r| r[0] == u64::MAX).count();
    let bad = words.chunks(row).filter(|r| r[row - 1] != 64).count();
    let names = [
        "stage 64 B, write the SQE",
        "store the SQ tail (Release)",
        "until the CQ tail moves (Acquire loads)",
        "load the CQE, store the CQ head (Release)",
        "whole round trip",
    ];
    let q = |k: usize, p: f64| {
        let mut v: Vec<u64> = words.chunks(row).map(|r| r[k]).collect();
        v.sort_unstable();
        v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3
    };
    println!();
    println!(
        "## the floor: the same writes, one thread alone on the ring with none of the protocol's steps \
         ({iters} iterations, {bad} results not 64)"
    );
    if busy > 0 {
        println!("the floor did not run: the ring was not idle at its launch");
        return None;
    }
    let rows = names
        .iter()
        .enumerate()
        .map(|(k, name)| {
            vec![
                name.to_string(),
                format!("{:.2}", q(k, 0.5)),
                format!("{:.2}", q(k, 0.99)),
            ]
        })
        .collect();
    write_table(&mut std::io::stdout(), &["phase", "p50 us", "p99 us"], rows, 1);
    (bad == 0).then(|| (q(row - 2, 0.5), q(row - 2, 0.99)))
}

/// The kernel's part alone: the same writes from a host thread on a host SQPOLL ring, into
/// `--lat-file` or a file of its own; prints their p50 and p99.
fn host_part(b: &Bench) -> HostLatency {
    let cfg = &b.cfg;
    let host_lat_path = match &cfg.lat_file {
        Some(p) => p.clone(),
        None => cfg.dir.join(format!("gpuio-bench-lat-host-{}", std::process::id())),
    };
    let host = host_write_latency(&host_lat_path, cfg.iters).expect("host io_uring round trip");
    if cfg.lat_file.is_none() {
        let _ = std::fs::remove_file(&host_lat_path);
    }
    let (host_p50, host_p99) = (quantile_us(&host.lat_ns, 0.5), quantile_us(&host.lat_ns, 0.99));
    println!();
    println!(
        "## the kernel's part alone: a host thread writes the same 64 B {} times on a host SQPOLL ring \
         and spins on the CQ ({} failed; io-wq workers of that ring: {}, which slept {} times)",
        cfg.iters, host.failed, host.io_wq_workers, host.io_wq_sleeps
    );
    write_table(
        &mut std::io::stdout(),
        &["p50 us", "p99 us"],
        vec![vec![format!("{host_p50:.2}"), format!("{host_p99:.2}")]],
        0,
    );
    host
}

/// Prints the round-trip target's verdict on `way` (`pwrite`'s), beside the kernel's part
/// alone (`host`) and the floor.
fn verdict(b: &Bench, way: &Way, host: &HostLatency, floor: Option<(f64, f64)>) {
    let host_p50 = quantile_us(&host.lat_ns, 0.5);
    // An io-wq worker that slept about once per write took most of them, each after a wake-up.
    let io_wq = if host.io_wq_sleeps >= b.cfg.iters as u64 / 2 {
        ": io_uring handed the writes to an io-wq worker thread"
    } else {
        ""
    };
    let (gpu_p50, gpu_p99) = (q(&way.ns, 0.5), q(&way.ns, 0.99));
    let errors = way.errors;
    if !b.gpu_present {
        println!("the round-trip target (p50 <= 8 us, p99 <= 15 us): no verdict: it is for a GPU, and none is here");
    } else if errors > 0 {
        println!("the round-trip target (p50 <= 8 us, p99 <= 15 us): no verdict: {errors} round trip(s) failed");
    } else {
        println!(
            "the round-trip target (p50 <= 8 us, p99 <= 15 us): {} (p50 {gpu_p50:.2}, p99 {gpu_p99:.2}; of the p50, \
             the kernel's part alone is {host_p50:.2}{io_wq}; the floor, one thread alone on the ring \
             with none of the protocol's steps, {})",
            if gpu_p50 <= 8.0 && gpu_p99 <= 15.0 {
                "MET"
            } else {
                "NOT MET"
            },
            match floor {
                Some((p50, p99)) => format!("p50 {p50:.2}, p99 {p99:.2}"),
                None => "failed".to_string(),
            },
        );
    }
}

/// What [`host_write_latency`] measured.
struct HostLatency {
    /// Each round trip, ns, sorted.
    lat_ns: Vec<u64>,
    /// Writes that failed or came back short.
    failed: u64,
    /// The io-wq worker threads of this ring (`iou-wrk-<its SQPOLL thread>`) afterwards.
    io_wq_workers: usize,
    /// How often they went to sleep waiting for work (`voluntary_ctxt_switches`): about
    /// once per write handed to them, when writes come one at a time.
    io_wq_sleeps: u64,
}

/// The 64-byte `pwrite` round trip of the GPU's latency run, from a host thread: `iters`
/// writes at `i * 64` of `path` (created, or overwritten from its start) on a host SQPOLL
/// ring, each timed from the SQ tail's store to the CQE, the thread spinning on the CQ.
/// The kernel's part of the GPU's round trip alone, with no PCIe between.
fn host_write_latency(path: &std::path::Path, iters: u32) -> std::io::Result<HostLatency> {
    use gpuio_device::protocol::uapi::{Sqe, IORING_OP_WRITE};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    // The ring's SQPOLL thread is the one that is new after the writes (just after the
    // setup it may not be listed yet); the io-wq workers it starts are named after its
    // thread id (the runtime's rings have theirs too).
    let before = threads_named("iou-sqp");
    let mut ring = uring::Ring::new(8, SQ_IDLE_MS)?;
    let buf = [b'h'; 64];
    let (mut lat_ns, mut failed) = (Vec::with_capacity(iters as usize), 0);
    for i in 0..iters {
        let sqe = Sqe {
            opcode: IORING_OP_WRITE,
            fd: file.as_raw_fd(),
            off: i as u64 * 64,
            addr: buf.as_ptr() as u64,
            len: 64,
            ..Sqe::default()
        };
        assert!(ring.push(&sqe), "an empty 8-entry SQ has room");
        let t0 = Instant::now();
        ring.submit()?;
        let mut res = None;
        while res.is_none() {
            ring.reap(|c| res = Some(c.res));
        }
        lat_ns.push(t0.elapsed().as_nanos() as u64);
        failed += (res != Some(64)) as u64;
    }
    lat_ns.sort_unstable();
    let sqpoll: Vec<u64> = threads_named("iou-sqp")
        .into_iter()
        .filter(|t| !before.contains(t))
        .map(|(tid, _)| tid)
        .collect();
    let workers: Vec<u64> = threads_named("iou-wrk")
        .into_iter()
        .filter(|(_, comm)| sqpoll.iter().any(|t| comm.trim_end() == format!("iou-wrk-{t}")))
        .map(|(tid, _)| tid)
        .collect();
    let io_wq_sleeps = workers.iter().map(|&tid| voluntary_switches(tid)).sum();
    Ok(HostLatency {
        lat_ns,
        failed,
        io_wq_workers: workers.len(),
        io_wq_sleeps,
    })
}

/// Thread `tid`'s `voluntary_ctxt_switches` (0 if it is gone).
fn voluntary_switches(tid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}
