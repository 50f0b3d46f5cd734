//! The random-read workload: `--rand-threads` GPU threads each `pread` 4 KiB `--rand-reads`
//! times at random pages of the page-cached file, into device memory (staged) and into the
//! host buffer (direct), against a fio-like host io_uring loop with the same queue depth;
//! then the same reads in phases (diagnostic) and, with `GPUIO_BENCH_PARTS`, through the
//! runtime's parts.
use gpuio::HostBuffer;
use gpuio_test_kernels as k;

use crate::common::{median, write_table};
use crate::device::{download_u64, launch, DevBuf};
use crate::random_host::host_random;
use crate::setup::{pattern, quantile_us, Data};
use crate::Bench;

/// What the workload measured.
#[derive(Default)]
pub(crate) struct Random {
    /// Reads per run (threads x reads per thread).
    reads: u64,
    /// Pages of the file.
    pages: u64,
    /// IOPS of each rep into device memory (staged), and the round trips (ns) of all reps.
    gpu_iops: Vec<f64>,
    gpu_ns: Vec<u64>,
    /// The same into the host buffer (direct), where it is large enough.
    direct_iops: Vec<f64>,
    direct_ns: Vec<u64>,
    /// The same for the host's io_uring loop.
    uring_iops: Vec<f64>,
    uring_ns: Vec<u64>,
    /// Why the host's loop stopped, if it failed.
    uring_error: Option<std::io::Error>,
    /// The phases run's times per phase (ns, sorted), its reaping sums, and its seconds.
    phases: [Vec<u64>; k::RANDOM_PHASES],
    reaping: [u64; k::RANDOM_REAP],
    phases_secs: f64,
    /// The runs through the runtime's parts: which wait, and their seconds.
    parts: Vec<(&'static str, f64)>,
}

/// The workload's device buffers: each GPU thread's 4 KiB slot, and each read's round trip.
struct Bufs {
    slots: DevBuf,
    lat: DevBuf,
}

/// Runs `--reps` reps, the GPU's and the host's taking turns, then the diagnostics; sets
/// `failed` on failed or wrong reads.
pub(crate) fn run(b: &Bench, data: &Data, host: &HostBuffer, failed: &mut bool) -> Random {
    let cfg = &b.cfg;
    let page = k::RANDOM_READ as usize;
    let mut r = Random {
        reads: cfg.rand_threads as u64 * cfg.rand_reads,
        pages: (cfg.size / page) as u64,
        ..Random::default()
    };
    let mut bufs = Bufs {
        slots: DevBuf::new(&b.g, cfg.rand_threads as usize * page),
        lat: DevBuf::new(&b.g, r.reads as usize * 8),
    };
    // The same reads into the host buffer (direct: no staging copy), where it is large
    // enough: what the protocol costs without the GPU's copy out of the arena.
    let direct = host.len() >= cfg.rand_threads as usize * page;
    for rep in 0..cfg.reps {
        staged_rep(b, data.fd, &mut bufs, &mut r, failed);
        if direct {
            direct_rep(b, data.fd, &mut bufs, host, &mut r, failed);
        }
        if !host_rep(b, data, &mut r, failed) {
            break;
        }
        eprintln!(
            "random pread rep {rep}: gpuio {:.0} IOPS, host io_uring {:.0} IOPS",
            r.gpu_iops[rep], r.uring_iops[rep]
        );
    }
    diagnostics(b, data.fd, &mut bufs.slots, &mut r, failed);
    r
}

/// `pread_random` into `to` (the slots, or the host buffer), each read's round trip into
/// `lat`; returns the IOPS and the round trips (`u64::MAX` where a read failed).
fn pread_random(b: &Bench, fd: u64, to: u64, lat: &mut DevBuf, r: &Random) -> (f64, Vec<u64>) {
    let cfg = &b.cfg;
    let secs = launch(
        b.rt,
        &b.g,
        "pread_random",
        cfg.rand_threads,
        [fd, to, r.pages, cfg.rand_reads, lat.addr()],
    );
    (r.reads as f64 / secs, download_u64(lat, r.reads as usize))
}

/// How many of `lat`'s reads failed, and how many threads' last reads that succeeded do not
/// hold the file's page at the place `got` copies thread `t`'s slot from.
fn faults(b: &Bench, lat: &[u64], pages: u64, mut got: impl FnMut(u64, &[u8]) -> bool) -> (usize, usize) {
    let cfg = &b.cfg;
    let page = k::RANDOM_READ as usize;
    let bad = lat.iter().filter(|&&v| v == u64::MAX).count();
    // Each thread's slot holds its last read: the file at the page it drew.
    let last = cfg.rand_reads - 1;
    let mut want = vec![0u8; page];
    let mut wrong = 0;
    for t in 0..cfg.rand_threads as u64 {
        if lat[(t * cfg.rand_reads + last) as usize] == u64::MAX {
            continue;
        }
        pattern(k::random_page(t, last, pages) as usize * page, &mut want);
        wrong += usize::from(!got(t, &want));
    }
    (bad, wrong)
}

/// One rep into device memory (staged), its last reads checked.
fn staged_rep(b: &Bench, fd: u64, bufs: &mut Bufs, r: &mut Random, failed: &mut bool) {
    let page = k::RANDOM_READ as usize;
    let s = bufs.slots.addr();
    let (iops, lat) = pread_random(b, fd, s, &mut bufs.lat, r);
    r.gpu_iops.push(iops);
    r.gpu_ns.extend(lat.iter().copied().filter(|&v| v != u64::MAX));
    let mut got = vec![0u8; page];
    let (bad, wrong) = faults(b, &lat, r.pages, |t, want| {
        bufs.slots.download(t as usize * page, &mut got);
        got == want
    });
    if bad + wrong > 0 {
        eprintln!("bench_file: random pread: {bad} GPU reads failed, {wrong} last reads wrong");
        *failed = true;
    }
}

/// One rep into the host buffer (direct), its last reads checked.
fn direct_rep(b: &Bench, fd: u64, bufs: &mut Bufs, host: &HostBuffer, r: &mut Random, failed: &mut bool) {
    let page = k::RANDOM_READ as usize;
    let (iops, lat) = pread_random(b, fd, host.device_ptr(), &mut bufs.lat, r);
    r.direct_iops.push(iops);
    r.direct_ns.extend(lat.iter().copied().filter(|&v| v != u64::MAX));
    let hs = host.as_slice();
    let (bad, wrong) = faults(b, &lat, r.pages, |t, want| {
        hs[t as usize * page..(t as usize + 1) * page] == want[..]
    });
    if bad + wrong > 0 {
        eprintln!("bench_file: random pread into the host buffer: {bad} GPU reads failed, {wrong} last reads wrong");
        *failed = true;
    }
}

/// One rep of the host's io_uring loop; false (having said why) if it could not run.
fn host_rep(b: &Bench, data: &Data, r: &mut Random, failed: &mut bool) -> bool {
    match host_random(&data.file, r.pages, b.cfg.rings, b.cfg.rand_threads, r.reads) {
        Ok(run) => {
            if run.failed + run.wrong > 0 {
                eprintln!(
                    "bench_file: host io_uring random pread: {} reads failed, {} wrong",
                    run.failed, run.wrong
                );
                *failed = true;
            }
            r.uring_iops.push(r.reads as f64 / run.secs);
            r.uring_ns.extend(run.lat_ns);
            true
        }
        Err(e) => {
            eprintln!("bench_file: host io_uring: {e}");
            r.uring_error = Some(e);
            *failed = true;
            false
        }
    }
}

/// The same reads once more, in phases (a diagnostic; the kernel holds what it took outside
/// the wait, so it runs only with independent scheduling), and with `GPUIO_BENCH_PARTS`
/// through the runtime's parts.
fn diagnostics(b: &Bench, fd: u64, slots: &mut DevBuf, r: &mut Random, failed: &mut bool) {
    let cfg = &b.cfg;
    let lockstep =
        b.g.module
            .as_ref()
            .and_then(|m| m.scheduling())
            .is_some_and(|s| s == gpuio::Scheduling::Lockstep);
    if lockstep {
        return;
    }
    if std::env::var_os("GPUIO_BENCH_PARTS").is_some() {
        // Diagnostic (GPUIO_BENCH_PARTS): the same reads through the runtime's parts,
        // untimed, with the runtime's wait and with the phases kernel's.
        for (mode, what) in [(0u64, "Context::wait"), (1, "the phases kernel's wait")] {
            let secs = launch(
                b.rt,
                &b.g,
                "pread_random_parts",
                cfg.rand_threads,
                [fd, slots.addr(), r.pages, cfg.rand_reads, mode],
            );
            r.parts.push((what, secs));
        }
    }
    phases(b, fd, slots, r, failed);
}

/// `pread_random_phases`: each read's time in each phase, and the sums of its waits' reaping.
fn phases(b: &Bench, fd: u64, slots: &mut DevBuf, r: &mut Random, failed: &mut bool) {
    let cfg = &b.cfg;
    let mut out = DevBuf::new(&b.g, r.reads as usize * k::RANDOM_ROW * 8);
    let o = out.addr();
    r.phases_secs = launch(
        b.rt,
        &b.g,
        "pread_random_phases",
        cfg.rand_threads,
        [fd, slots.addr(), r.pages, cfg.rand_reads, o],
    );
    let v = download_u64(&out, r.reads as usize * k::RANDOM_ROW);
    let bad = v.chunks(k::RANDOM_ROW).filter(|row| row[0] == u64::MAX).count();
    if bad > 0 {
        eprintln!("bench_file: random pread in phases: {bad} GPU reads failed");
        *failed = true;
    }
    for row in v.chunks(k::RANDOM_ROW).filter(|row| row[0] != u64::MAX) {
        for (p, x) in r.phases.iter_mut().zip(row) {
            p.push(*x);
        }
        for (sum, x) in r.reaping.iter_mut().zip(&row[k::RANDOM_PHASES..]) {
            *sum += x;
        }
    }
    for p in &mut r.phases {
        p.sort_unstable();
    }
}

/// Prints the random-read table, the phases run's table and its reaping, the runs through
/// the runtime's parts, and the target.
pub(crate) fn report(b: &Bench, mut r: Random) {
    let cfg = &b.cfg;
    r.gpu_ns.sort_unstable();
    r.direct_ns.sort_unstable();
    r.uring_ns.sort_unstable();
    println!();
    println!(
        "## random 4 KiB pread: {} threads x {} reads, host io_uring {} SQPOLL rings; median IOPS of {} reps, latency over all reads",
        cfg.rand_threads, cfg.rand_reads, cfg.rings, cfg.reps
    );
    let (gi, hi) = (
        median(r.gpu_iops.clone()),
        (!r.uring_iops.is_empty()).then(|| median(r.uring_iops.clone())),
    );
    print_table(&r, gi, hi);
    if !r.phases[0].is_empty() {
        print_phases(&r);
        print_reaping(&r.reaping, r.phases_secs, cfg.rings, r.reads);
    }
    for (what, secs) in &r.parts {
        println!(
            "the runtime's parts, {what}: {} reads in {:.1} ms, {:.0} IOPS",
            r.reads,
            secs * 1e3,
            r.reads as f64 / secs
        );
    }
    println!(
        "target (random 4 KiB pread, gpuio IOPS >= 0.8x host io_uring with {} rings){}: {}",
        cfg.rings,
        if b.gpu_present {
            ""
        } else {
            " [CPU backend: not the GPU's figure]"
        },
        match (hi, &r.uring_error) {
            (Some(hi), _) if gi >= 0.8 * hi => format!("MET (gpuio/host {:.2})", gi / hi),
            (Some(hi), _) => format!("NOT MET (gpuio/host {:.2})", gi / hi),
            (None, Some(e)) => format!("NOT MEASURED (host io_uring: {e})"),
            (None, None) => "NOT MEASURED".into(),
        }
    );
}

/// The table: median IOPS (`gi` the GPU's staged, `hi` the host's, if it ran) and the
/// latencies of all reps, a row for each way the GPU read.
fn print_table(r: &Random, gi: f64, hi: Option<f64>) {
    let di = if r.direct_iops.is_empty() {
        f64::NAN
    } else {
        median(r.direct_iops.clone())
    };
    let or_dash = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let host_lat = |p: f64| (!r.uring_ns.is_empty()).then(|| quantile_us(&r.uring_ns, p));
    write_table(
        &mut std::io::stdout(),
        &[
            "case",
            "gpuio IOPS",
            "gpuio p50 us",
            "gpuio p99 us",
            "host io_uring IOPS",
            "host p50 us",
            "host p99 us",
            "gpuio / host",
        ],
        [
            ("device memory (staged)", gi, &r.gpu_ns),
            ("host buffer (direct)", di, &r.direct_ns),
        ]
        .into_iter()
        .filter(|(_, _, ns)| !ns.is_empty())
        .map(|(to, iops, ns)| {
            vec![
                format!("random 4 KiB pread -> {to}"),
                format!("{iops:.0}"),
                format!("{:.2}", quantile_us(ns, 0.5)),
                format!("{:.2}", quantile_us(ns, 0.99)),
                or_dash(hi, 0),
                or_dash(host_lat(0.5), 2),
                or_dash(host_lat(0.99), 2),
                or_dash(hi.map(|hi| iops / hi), 2),
            ]
        })
        .collect(),
        1,
    );
}

/// The phases run's table: each phase's p50, p99 and mean.
fn print_phases(r: &Random) {
    println!();
    println!("## random 4 KiB pread -> device memory, in phases (diagnostic: one run, all reads)");
    // Timed as the staged row above is (reads / the launch's wall time), for the same
    // reads made with the runtime's parts instead of `io::pread`.
    println!(
        "this run: {} reads in {:.1} ms, {:.0} IOPS",
        r.phases[0].len(),
        r.phases_secs * 1e3,
        r.phases[0].len() as f64 / r.phases_secs
    );
    let names = [
        "take an arena block and a slot",
        "Context::submit",
        "wait for the completion",
        "copy out of the block",
    ];
    write_table(
        &mut std::io::stdout(),
        &["phase", "p50 us", "p99 us", "mean us"],
        names
            .iter()
            .zip(&r.phases)
            .map(|(name, ns)| {
                vec![
                    name.to_string(),
                    format!("{:.2}", quantile_us(ns, 0.5)),
                    format!("{:.2}", quantile_us(ns, 0.99)),
                    format!("{:.2}", ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e3),
                ]
            })
            .collect(),
        1,
    );
}

/// How the waits of `pread_random_phases` reaped ([`k::RANDOM_REAP`] sums over every read),
/// in a run of `secs` over `rings` rings that made `reads` reads.
fn print_reaping(sums: &[u64; k::RANDOM_REAP], secs: f64, rings: u32, reads: u64) {
    let [full, cqes, to_first, first_to_last, last_to_end, empty, empty_ns, busy, batches, dispatch_ns, looks_ns, prepare_ns, fence_ns, finish_ns] =
        *sums;
    let per = |ns: u64, n: u64| {
        if n == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", ns as f64 / n as f64 / 1e3)
        }
    };
    // The reaps that found CQEs only: the empty ones include every lost try-lock.
    let held_ns = to_first + first_to_last + last_to_end;
    println!();
    println!(
        "## the reaping in those waits (diagnostic: sums over every wait; the rounds are those \
         of the lanes that went round for the lanes waiting with them, arch::by_one_lane)"
    );
    write_table(
        &mut std::io::stdout(),
        &["what", "value"],
        vec![
            vec!["reaps that found CQEs".into(), full.to_string()],
            vec![
                "CQEs they took (per read made)".into(),
                format!("{cqes} ({:.3})", cqes as f64 / reads.max(1) as f64),
            ],
            vec![
                "CQEs per reap".into(),
                if full == 0 {
                    "-".into()
                } else {
                    format!("{:.2}", cqes as f64 / full as f64)
                },
            ],
            vec![
                "us per reap: try-lock to the first batch of CQEs in hand".into(),
                per(to_first, full),
            ],
            vec![
                "us per reap: first batch to last (dispatches, further batches)".into(),
                per(first_to_last, full),
            ],
            vec![
                "us per reap: last batch's dispatch, head stores, unlock".into(),
                per(last_to_end, full),
            ],
            vec![
                "us per CQE, whole reaps".into(),
                per(to_first + first_to_last + last_to_end, cqes),
            ],
            vec!["reaps that found none".into(), empty.to_string()],
            vec!["us per empty reap".into(), per(empty_ns, empty)],
            vec!["rounds that found the reaper busy".into(), busy.to_string()],
            vec!["batches dispatched".into(), batches.to_string()],
            vec!["us per batch in Context::dispatch".into(), per(dispatch_ns, batches)],
            vec!["us per batch: looks".into(), per(looks_ns, batches)],
            vec!["us per batch: prepare".into(), per(prepare_ns, batches)],
            vec!["us per batch: fence".into(), per(fence_ns, batches)],
            vec!["us per batch: finish".into(), per(finish_ns, batches)],
            vec![
                "reaper held by reaps that found CQEs, share of the run per ring".into(),
                format!("{:.2}", held_ns as f64 / (secs * 1e9 * rings.max(1) as f64)),
            ],
        ],
        1,
    );
}
