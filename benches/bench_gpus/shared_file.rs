//! The last check: every GPU prints into one fresh file at once, through runtimes of their
//! own whose stdout it is, and every line is checked, whole and there once per GPU.

use std::os::fd::AsRawFd;
use std::time::Instant;

use gpuio::{Backend, GpuModule, Runtime};

use crate::common::parse_line;
use crate::{Print, CLI};

/// Every GPU prints `p`'s lines into one fresh file in `dir` at once, through runtimes of
/// their own with that file as stdout (so they append: `Builder::gpu`'s docs); then every
/// line is checked: whole, and each `(t, i)` once per GPU. Prints what it found; returns
/// whether all was well.
pub(crate) fn shared_file(n: u32, p: &Print, dir: &std::path::Path) -> bool {
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
