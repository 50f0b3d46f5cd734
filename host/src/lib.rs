//! gpuio's host runtime: creates the io_uring (SQPOLL, rings in memory we own), fills the
//! device context, runs kernels on a backend and drains their I/O.
//!
//! ```
//! use gpuio_host::{Backend, Runtime};
//! // Closures run on the CPU backend; GPU kernels come from a code object (`load_module`).
//! let rt = Runtime::builder().backend(Backend::Cpu).build()?;
//! rt.launch(2, 4, || gpuio_device::println!("hello from thread {}", gpuio_device::global_thread_idx()))?;
//! rt.synchronize()?; // every line is out, or the error says which were lost
//! # Ok::<(), gpuio_host::Error>(())
//! ```

pub mod backend;
mod builder;
pub mod consumer;
pub mod error;
pub mod host_buffer;
mod kernels;
mod launch;
pub mod memory;
mod notice;
mod print_files;
pub mod runtime;
pub mod scheduling;
mod settings;
mod shared;
mod watchdog;

// The paths hosts use: each backend and each ring consumer by its own name.
#[cfg(feature = "hip")]
pub use backend::hip;
pub use backend::{code_object, cuda, hsa};
pub use consumer::{fallback, sandbox, submission, uring};

pub use backend::{Arg, Backend};
pub use builder::Builder;
pub use cuda::Jit;
pub use error::{
    DriverError, Error, HangReport, OtherRing, OutputErrors, PrintErrors, Refused, Result, RingWords, RunningThreads,
    SoloRing, StreamPositions, Tickets, Waiting,
};
pub use gpuio_device::Kernel;
pub use host_buffer::HostBuffer;
pub use kernels::{KernelArgs, KernelParam, Kernels, RawArg, Staging};
pub use launch::{Dim3, LaunchConfig};
pub use runtime::module::GpuModule;
pub use runtime::{Runtime, Stats};
pub use sandbox::Sandbox;
pub use scheduling::Scheduling;
pub use submission::Submission;
