//! One line from each of 1024 threads, through io_uring.
//!
//! `cargo run --release --example hello`
use gpuio::device::println;

fn main() -> Result<(), gpuio::Error> {
    let rt = gpuio::Runtime::new()?;
    let (grid, block) = (8, 128);
    rt.launch(grid, block, move || {
        println!("hello from thread {} of {}", gpuio::device::global_thread_idx(), grid * block);
    })?;
    rt.synchronize()?;
    Ok(())
}
