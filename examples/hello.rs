//! One line from each of 1024 threads, through io_uring.
//!
//! `cargo run --release --example hello`
fn main() -> Result<(), gpuio::Error> {
    let rt = gpuio::Runtime::new()?;
    let (grid, block) = (8, 128);
    rt.launch(grid, block, gpuio_kernels::hello)?;
    rt.synchronize()?;
    Ok(())
}
