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
pub mod code_object;
pub mod cuda;
mod dl;
pub mod error;
pub mod fallback;
#[cfg(feature = "hip")]
pub mod hip;
pub mod host_buffer;
pub mod hsa;
pub mod memory;
pub mod runtime;
pub mod sandbox;
pub mod scheduling;
pub mod submission;
pub mod uring;
mod waker;
mod watchdog;

pub use backend::Backend;
pub use cuda::{Arg, Jit};
pub use error::{
    Error, HangReport, OutputErrors, PrintErrors, Refused, Result, RingWords, StreamPositions, Tickets, Waiting,
};
pub use host_buffer::HostBuffer;
pub use runtime::{Builder, GpuModule, Runtime, Stats};
pub use sandbox::Sandbox;
pub use scheduling::Scheduling;
pub use submission::Submission;
