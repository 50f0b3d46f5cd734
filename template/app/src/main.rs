//! Runs `my-kernels` on the GPU when there is one, else on the CPU backend.
//!
//! `my-app` prints a table from 100 threads; `my-app panic` runs a kernel in which thread
//! 5 indexes past the end of an array.
use gpuio::{LaunchConfig, Runtime};

/// The kernels built for the GPUs by build.rs: `OBJECTS` (and its parts `NVPTX`, `AMDGCN`).
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
    // The code object for this GPU; on the CPU backend, the kernels' host build.
    let kernels = rt.kernels(kernels::OBJECTS)?;
    let (grid, block, n, bad) = (2, 64, 100, 5);
    if panic {
        kernels.launch(my_kernels::lookup, LaunchConfig::linear(1, 8), (bad,))?;
    } else {
        kernels.launch(my_kernels::table, LaunchConfig::linear(grid, block), (n,))?;
    }
    rt.synchronize()?;
    eprintln!("my-app: ran on the {} backend", rt.backend().name());
    Ok(())
}
