//! One line from each of 1024 threads, through io_uring: on the GPU when there is one
//! (CUDA, or HSA on AMD GPUs), else on the CPU backend.
//!
//! `cargo run --release --example hello`
use gpuio::{Backend, Runtime};

/// The example kernels (`kernels/`), built for sm_90 by build.rs.
const PTX: &str = include_str!(env!("GPUIO_KERNELS_PTX"));
/// The same kernels for AMD GPUs, one code object per processor (gfx90a, gfx942, gfx1100).
const AMDGCN: &[(&str, &[u8])] = include!(env!("GPUIO_KERNELS_AMDGCN"));

fn main() -> Result<(), gpuio::Error> {
    let rt = Runtime::new()?;
    let (grid, block) = (8, 128);
    match rt.backend() {
        Backend::Cuda => rt.load_module(PTX)?.launch("hello", grid, block, &[])?,
        Backend::Hsa => rt.load_matching(AMDGCN)?.launch("hello", grid, block, &[])?,
        Backend::Cpu => rt.launch(grid, block, gpuio_kernels::hello)?,
    }
    rt.synchronize()?;
    Ok(())
}
