//! One line from each of 1024 threads, through io_uring: on the GPU when there is one
//! (CUDA, or HSA on AMD GPUs), else on the CPU backend. Says on stderr where it ran.
//!
//! `cargo run --release --example hello` (`GPUIO_LOCKSTEP=1`: on CUDA, the lockstep build)
use gpuio::{LaunchConfig, Runtime};

fn main() -> Result<(), gpuio::Error> {
    let rt = Runtime::new()?;
    // The example kernels (`kernels/`) as built by build.rs: PTX for sm_90 and sm_60, code
    // objects for gfx90a, gfx942 and gfx1100. The runtime loads this GPU's; on the CPU
    // backend it loads nothing and runs the kernels' host build.
    let kernels = rt.kernels(gpuio_kernels_gpu::OBJECTS)?;
    kernels.launch(gpuio_kernels::hello, LaunchConfig::linear(8, 128), ())?;
    let device = rt.device_name().map(|d| format!(" on {d}")).unwrap_or_default();
    let scheduling = match kernels.module() {
        Some(m) => m.scheduling().map_or("unknown scheduling".into(), |s| s.to_string()),
        None => gpuio::Scheduling::Independent.to_string(),
    };
    rt.synchronize()?;
    eprintln!("hello: {} backend{device}, {scheduling}", rt.backend().name());
    Ok(())
}
