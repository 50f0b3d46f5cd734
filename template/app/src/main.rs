//! Runs `my-kernels` on the GPU when there is one, else on the CPU backend.
//!
//! `my-app` prints a table from 100 threads; `my-app panic` runs a kernel in which thread
//! 5 indexes past the end of an array; `my-app save FILE` has a kernel write the table to
//! FILE, whose path it passes as a `&str`.
use gpuio::{LaunchConfig, Runtime, Sandbox};

/// The kernels built for the GPUs by build.rs: `OBJECTS` (and its parts `NVPTX`, `AMDGCN`).
mod kernels {
    include!(concat!(env!("OUT_DIR"), "/gpuio_kernels.rs"));
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mode = match &args[..] {
        [] => Mode::Table,
        [a] if a == "panic" => Mode::Panic,
        [a, path] if a == "save" => match path.to_str() {
            Some(path) => Mode::Save(path.to_string()),
            None => {
                eprintln!("my-app: the path {path:?} is not UTF-8 (a kernel takes it as a &str)");
                std::process::exit(2);
            }
        },
        _ => {
            eprintln!("usage: my-app [panic | save FILE]");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(mode) {
        eprintln!("my-app: {e}");
        std::process::exit(1);
    }
}

enum Mode {
    Table,
    Panic,
    Save(String),
}

fn run(mode: Mode) -> Result<(), gpuio::Error> {
    let mut builder = Runtime::builder();
    if let Mode::Save(_) = mode {
        // Kernels open files only under `Sandbox::FileIo` (the default allows prints only).
        builder = builder.sandbox(Sandbox::FileIo);
    }
    let rt = builder.build()?;
    // The code object for this GPU; on the CPU backend, the kernels' host build.
    let kernels = rt.kernels(kernels::OBJECTS)?;
    let (grid, block, n, bad) = (2, 64, 100, 5);
    match &mode {
        Mode::Table => kernels.launch(my_kernels::table, LaunchConfig::linear(grid, block), (n,))?,
        Mode::Panic => kernels.launch(my_kernels::lookup, LaunchConfig::linear(1, 8), (bad,))?,
        Mode::Save(path) => kernels.launch(my_kernels::save, LaunchConfig::linear(1, 1), (path, n))?,
    }
    rt.synchronize()?;
    eprintln!("my-app: ran on the {} backend", rt.backend().name());
    Ok(())
}
