//! One line from each of 1024 threads, through io_uring: on the GPU when there is one
//! (CUDA), else on the CPU backend.
//!
//! `cargo run --release --example hello`
use gpuio::{Backend, Runtime};

/// The example kernels (`kernels/`), built for sm_90 by build.rs.
const PTX: &str = include_str!(env!("GPUIO_KERNELS_PTX"));

fn main() -> Result<(), gpuio::Error> {
    let rt = Runtime::new()?;
    let (grid, block) = (8, 128);
    match rt.backend() {
        Backend::Cuda => rt.load_module(PTX)?.launch("hello", grid, block, &[])?,
        _ => rt.launch(grid, block, gpuio_kernels::hello)?,
    }
    rt.synchronize()?;
    Ok(())
}
