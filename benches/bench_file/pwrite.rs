//! The pwrite workload: `--threads` GPU threads write device memory (holding the file's
//! pattern) into a fresh file, against the host pipelines x1 and xN (a copy from the device,
//! then `pwrite`); then the file system alone, the host writing from host memory.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::common::{write_fresh, Source};
use crate::device::{launch, DevBuf};
use crate::setup::{check, gbps, host_pipeline, pattern, rw, Data};
use crate::Bench;

/// GB/s of each rep, each way.
#[derive(Default)]
pub(crate) struct Rates {
    /// The GPU's threads from device memory (staged).
    pub(crate) gpu_w: Vec<f64>,
    /// Host x1.
    pub(crate) host_w: Vec<f64>,
    /// Host xN.
    pub(crate) host_w_n: Vec<f64>,
    /// The file system alone: one host thread from host memory, no device copy.
    pub(crate) fs_w: Vec<f64>,
    /// The same on `--host-threads` threads.
    pub(crate) fs_w_n: Vec<f64>,
    /// The file system alone failed (said on stderr); its rates are incomplete.
    pub(crate) fs_failed: bool,
}

/// Runs `--reps` reps, each way in turn, and checks the first rep's file of the GPU and of
/// host xN; sets `failed` on wrong bytes or failed transfers.
pub(crate) fn run(b: &Bench, data: &mut Data, failed: &mut bool) -> Rates {
    let cfg = &b.cfg;
    let out_path = cfg.dir.join(format!("gpuio-bench-out-{}", std::process::id()));
    let mut r = Rates::default();
    fill(&mut data.dev, cfg.size);
    for rep in 0..cfg.reps {
        device_rep(b, data, &out_path, rep, &mut r, failed);
        // Not beside the file system alone's file: the next rep makes it again.
        let _ = std::fs::remove_file(&out_path);
        fs_alone(b, &mut r, failed);
        let shown = |v: &[f64]| match v.get(rep) {
            Some(x) if !r.fs_failed => format!("{x:.2}"),
            _ => "failed".to_string(),
        };
        eprintln!(
            "pwrite rep {rep}: gpuio {:.2} GB/s, host x1 {:.2} GB/s, host x{} {:.2} GB/s; from host memory: x1 {}, x{} {}",
            r.gpu_w[rep],
            r.host_w[rep],
            cfg.host_threads,
            r.host_w_n[rep],
            shown(&r.fs_w),
            cfg.host_threads,
            shown(&r.fs_w_n)
        );
    }
    let mut e = [0u8; 8];
    data.errs.download(0, &mut e);
    if u64::from_le_bytes(e) != 0 {
        eprintln!("bench_file: {} GPU transfers failed", u64::from_le_bytes(e));
        *failed = true;
    }
    let _ = std::fs::remove_file(&out_path);
    r
}

/// Writes the file's pattern into the first `size` bytes of `dev`: what the pwrites write
/// out and the checks expect.
fn fill(dev: &mut DevBuf, size: usize) {
    let mut at = 0;
    let mut buf = vec![0u8; 16 << 20];
    while at < size {
        let n = buf.len().min(size - at);
        pattern(at, &mut buf[..n]);
        dev.upload(at, &buf[..n]);
        at += n;
    }
}

/// Reads `out` back, for [`check`].
fn read_back(out: &File) -> impl Fn(usize, &mut [u8]) + '_ {
    move |at, buf| out.read_exact_at(buf, at as u64).expect("read back")
}

/// One rep of the GPU, host x1 and host xN, each into a fresh `out_path`; rep 0 checks the
/// GPU's file and host xN's.
fn device_rep(b: &Bench, data: &mut Data, out_path: &Path, rep: usize, r: &mut Rates, failed: &mut bool) {
    let cfg = &b.cfg;
    let out = rw(out_path);
    let (a, e2) = (data.dev.addr(), data.errs.addr());
    r.gpu_w.push(gbps(
        cfg.size,
        launch(
            b.rt,
            &b.g,
            "pwrite_bulk",
            cfg.threads,
            [out.as_raw_fd() as u64, a, cfg.size as u64, cfg.chunk as u64, e2],
        ),
    ));
    if rep == 0 {
        check(cfg.size, "pwrite from device memory", &read_back(&out), failed);
    }
    drop(out);
    let out = File::create(out_path).expect("create");
    r.host_w.push(gbps(
        cfg.size,
        host_pipeline(&out, &mut data.dev, &mut data.pins1, cfg.size, true),
    ));
    drop(out);
    let out = rw(out_path);
    r.host_w_n.push(gbps(
        cfg.size,
        host_pipeline(&out, &mut data.dev, &mut data.pins_n, cfg.size, true),
    ));
    if rep == 0 {
        let what = format!("host x{} pwrite from device memory", cfg.host_threads);
        check(cfg.size, &what, &read_back(&out), failed);
    }
}

/// The file system alone, once on one thread and once on `--host-threads`: `pwrite` of as
/// many bytes into a fresh file from a buffer each thread reuses (hot: the most any writer
/// gets there). After a failure, no more.
fn fs_alone(b: &Bench, r: &mut Rates, failed: &mut bool) {
    let cfg = &b.cfg;
    for (rates, threads) in [(&mut r.fs_w, 1), (&mut r.fs_w_n, cfg.host_threads)] {
        if r.fs_failed {
            break;
        }
        match write_fresh(&cfg.dir, cfg.size as u64, threads, cfg.block, Source::Hot) {
            Ok(rate) => rates.push(rate),
            Err(e) => {
                eprintln!(
                    "bench_file: the file system alone (host pwrite into {}): {e}",
                    cfg.dir.display()
                );
                (*failed, r.fs_failed) = (true, true);
            }
        }
    }
}
