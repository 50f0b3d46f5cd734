//! Runs `my-kernels` on the GPU when there is one, else on the CPU backend.
//!
//! `my-app` prints a table from 100 threads; `my-app panic` runs a kernel in which thread
//! 5 indexes past the end of an array.
use gpuio::{Arg, Backend, Runtime};

/// The kernels built for the GPUs by build.rs: `NVPTX` and `AMDGCN`.
mod kernels {
    include!(concat!(env!("OUT_DIR"), "/gpuio_kernels.rs"));
}

fn main() {
    let panic = std::env::args().nth(1).as_deref() == Some("panic");
    if let Err(e) = run(panic) {
        eprintln!("my-app: {e}");
        std::process::exit(1);
    }
}

fn run(panic: bool) -> Result<(), gpuio::Error> {
    let rt = Runtime::new()?;
    let (grid, block, n, bad) = (2, 64, 100u32, 5u32);
    match rt.backend() {
        Backend::Cpu if panic => rt.launch(1, 8, move || my_kernels::lookup(bad))?,
        Backend::Cpu => rt.launch(grid, block, move || my_kernels::table(n))?,
        gpu => {
            let objects = if gpu == Backend::Hsa { kernels::AMDGCN } else { kernels::NVPTX };
            let module = rt.load_matching(objects)?;
            if panic {
                module.launch("lookup", 1, 8, &[Arg::from(bad)])?;
            } else {
                module.launch("table", grid, block, &[Arg::from(n)])?;
            }
        }
    }
    rt.synchronize()?;
    eprintln!("my-app: ran on the {} backend", rt.backend().name());
    Ok(())
}
