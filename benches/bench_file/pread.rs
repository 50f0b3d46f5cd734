//! The sequential pread workload: `--threads` GPU threads read the page-cached file in
//! `--chunk-kib` chunks into device memory (staged) and into a host buffer (direct), against
//! the host pipelines x1 and xN (`pread`, then a copy to the device).
use gpuio::HostBuffer;

use crate::device::{launch, zero};
use crate::setup::{check, gbps, host_pipeline, Data};
use crate::Bench;

/// GB/s of each rep, each way.
#[derive(Default)]
pub(crate) struct Rates {
    /// The GPU's threads into device memory (staged).
    pub(crate) gpu_dev: Vec<f64>,
    /// The GPU's threads into the host buffer (direct).
    pub(crate) gpu_host: Vec<f64>,
    /// Host x1.
    pub(crate) host_pipe: Vec<f64>,
    /// Host xN.
    pub(crate) host_pipe_n: Vec<f64>,
}

/// Runs `--reps` reps, each way in turn, and checks the first rep's bytes of each GPU run and
/// of host xN's; sets `failed` on wrong bytes or failed GPU reads.
pub(crate) fn run(b: &Bench, data: &mut Data, host: &HostBuffer, failed: &mut bool) -> Rates {
    let cfg = &b.cfg;
    let mut r = Rates::default();
    for rep in 0..cfg.reps {
        one_rep(b, data, host, rep, &mut r, failed);
        eprintln!(
            "pread rep {rep}: gpuio device {:.2} GB/s, gpuio host buffer {:.2} GB/s, host x1 {:.2} GB/s, host x{} {:.2} GB/s",
            r.gpu_dev[rep], r.gpu_host[rep], r.host_pipe[rep], cfg.host_threads, r.host_pipe_n[rep]
        );
    }
    let mut e = [0u8; 8];
    data.errs.download(0, &mut e);
    if u64::from_le_bytes(e) != 0 {
        eprintln!("bench_file: {} GPU reads failed", u64::from_le_bytes(e));
        *failed = true;
    }
    r
}

/// `pread_bulk` of the whole file by `--threads` GPU threads into `to`, counting failures at
/// `errs`; returns the seconds it took.
fn bulk(b: &Bench, fd: u64, to: u64, errs: u64) -> f64 {
    let cfg = &b.cfg;
    launch(
        b.rt,
        &b.g,
        "pread_bulk",
        cfg.threads,
        [fd, to, cfg.size as u64, cfg.chunk as u64, errs],
    )
}

/// One rep of each way, into `r`; rep 0 checks the bytes.
fn one_rep(b: &Bench, data: &mut Data, host: &HostBuffer, rep: usize, r: &mut Rates, failed: &mut bool) {
    let size = b.cfg.size;
    let (a, e) = (data.dev.addr(), data.errs.addr());
    r.gpu_dev.push(gbps(size, bulk(b, data.fd, a, e)));
    r.gpu_host.push(gbps(size, bulk(b, data.fd, host.device_ptr(), e)));
    r.host_pipe.push(gbps(
        size,
        host_pipeline(&data.file, &mut data.dev, &mut data.pins1, size, false),
    ));
    if rep == 0 {
        // So that the check below sees only what host xN wrote.
        zero(&mut data.dev, size);
    }
    r.host_pipe_n.push(gbps(
        size,
        host_pipeline(&data.file, &mut data.dev, &mut data.pins_n, size, false),
    ));
    if rep == 0 {
        check_bytes(b, data, host, failed);
    }
}

/// Checks host xN's bytes in device memory (just written), then the GPU's in a run of its
/// own, and the GPU's in the host buffer (from this rep's run).
fn check_bytes(b: &Bench, data: &mut Data, host: &HostBuffer, failed: &mut bool) {
    let size = b.cfg.size;
    let dev = &mut data.dev;
    check(
        size,
        &format!("host x{} pread into device memory", b.cfg.host_threads),
        &|at, buf| dev.download(at, buf),
        failed,
    );
    // The host pipeline just rewrote `dev`; check the GPU's copy in a separate run.
    dev.upload(0, &vec![0u8; 1 << 20]);
    bulk(b, data.fd, dev.addr(), data.errs.addr());
    check(
        size,
        "pread into device memory",
        &|at, buf| dev.download(at, buf),
        failed,
    );
    let hs = host.as_slice();
    check(
        size,
        "pread into a host buffer",
        &|at, buf| buf.copy_from_slice(&hs[at..at + buf.len()]),
        failed,
    );
}
