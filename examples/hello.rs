//! One line from each of 1024 threads, through io_uring: on the GPU when there is one
//! (CUDA, or HSA on AMD GPUs), else on the CPU backend. Says on stderr where it ran.
//!
//! `cargo run --release --example hello` (`GPUIO_LOCKSTEP=1`: on CUDA, the lockstep build)
use gpuio::{Backend, Runtime};

/// The example kernels (`kernels/`) as PTX for `sm_90` and `sm_60`, built by build.rs.
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::NVPTX;
/// The same kernels for AMD GPUs, one code object per processor (gfx90a, gfx942, gfx1100).
const AMDGCN: &[(&str, &[u8])] = gpuio_kernels_gpu::AMDGCN;

fn main() -> Result<(), gpuio::Error> {
    let rt = Runtime::new()?;
    let (grid, block) = (8, 128);
    let device = rt.device_name().map(|d| format!(" on {d}")).unwrap_or_default();
    let scheduling = match rt.backend() {
        Backend::Cpu => {
            rt.launch(grid, block, gpuio_kernels::hello)?;
            gpuio::Scheduling::Independent.to_string()
        }
        gpu => {
            let m = rt.load_matching(if gpu == Backend::Hsa { AMDGCN } else { NVPTX })?;
            m.launch("hello", grid, block, &[])?;
            m.scheduling().map_or("unknown scheduling".into(), |s| s.to_string())
        }
    };
    rt.synchronize()?;
    eprintln!("hello: {} backend{device}, {scheduling}", rt.backend().name());
    Ok(())
}
