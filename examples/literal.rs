//! Diagnostic: GPU print throughput without formatting (a literal line) beside `stress`'s
//! formatted lines of the same size. `cargo run --release --example literal -- THREADS LINES`
use gpuio::{Backend, Runtime};
use std::os::fd::AsRawFd;

/// The example kernels (`kernels/`) as PTX for `sm_90` and `sm_60` (`GPUIO_LOCKSTEP=1`
/// picks the lockstep build), built by build.rs.
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::NVPTX;

fn main() -> Result<(), gpuio::Error> {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("THREADS LINES"))
        .collect();
    let (threads, lines) = (
        args.first().copied().unwrap_or(1 << 20),
        args.get(1).copied().unwrap_or(16),
    );
    for (name, kernel_args) in [
        ("literal", vec![lines.into()]),
        ("stress", vec![lines.into(), 32u32.into()]),
    ] {
        let file = std::fs::File::create("/dev/shm/gpuio-literal.txt").expect("create");
        let rt = Runtime::builder().stdout_fd(file.as_raw_fd()).build()?;
        if rt.backend() != Backend::Cuda {
            eprintln!("literal: skipped: no CUDA GPU");
            return Ok(());
        }
        let m = rt.load_matching(NVPTX)?;
        let t = std::time::Instant::now();
        m.launch(name, threads / 256, 256, &kernel_args)?;
        rt.synchronize()?;
        let s = t.elapsed().as_secs_f64();
        let bytes = std::fs::metadata("/dev/shm/gpuio-literal.txt")
            .map(|m| m.len())
            .unwrap_or(0);
        let n = threads as u64 * lines as u64;
        println!(
            "{name:8} {n} lines, {bytes} bytes in {s:.3} s: {:.2} M lines/s",
            n as f64 / s / 1e6
        );
    }
    std::fs::remove_file("/dev/shm/gpuio-literal.txt").ok();
    Ok(())
}
