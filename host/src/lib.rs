//! gpuio's host runtime: creates the rings (io_uring in memory we own, polled by SQPOLL on a
//! GPU; on the CPU backend by default performed by the kernel threads themselves, else
//! io_uring entered by the runtime's waker), fills the device context, runs kernels on a
//! backend and drains their I/O.
//!
//! ```
//! use gpuio_host::{Backend, Runtime};
//! // Closures run on the CPU backend; GPU kernels come from a code object (`load_module`).
//! let rt = Runtime::builder().backend(Backend::Cpu).build()?;
//! rt.launch(2, 4, || gpuio_device::println!("hello from thread {}", gpuio_device::global_thread_idx()))?;
//! rt.synchronize()?; // every line is out, or the error says which were lost
//! # Ok::<(), gpuio_host::Error>(())
//! ```
//!
//! The public face, in layers (everything else: the rings' consumers, the shared memory,
//! the waker and the watchdog, is the crate's own):
//! - [`Runtime`], made by [`Builder`]: `launch` on the CPU backend, `load_module`,
//!   `synchronize`, [`Stats`]; settings [`Backend`], [`Sandbox`] (the [`sandbox`] module
//!   says what each policy lets through), [`Submission`], [`Scheduling`], [`Jit`].
//! - Kernels: [`Kernels`] for typed launches with a [`LaunchConfig`] ([`Dim3`]),
//!   [`GpuModule`] for launches by name ([`Arg`]), [`Output`] for kernels' results,
//!   [`HostBuffer`] for direct transfers.
//! - Errors: [`Error`] and [`Result`]; the reports they carry are in [`error`].
//! - Backends by name, for hosts that load code objects themselves: [`cuda`], [`hsa`],
//!   `hip` (its feature), [`code_object`].
//!
//! On disk, from the face down: the root holds what a host program uses (`builder/`, with
//! how its settings resolve and the CPU backend's print rescue; `kernels/`, `launch`,
//! `output`, `host_buffer`, `error/`, `sandbox`, `scheduling`, `settings`); `runtime/` the
//! machinery a built runtime runs on (synchronize, loaded modules, the files it prints to);
//! `shared/` the memory it shares with the device (and `memory`, beside it: the mappings); `consumer/` the
//! rings and whoever consumes them (io_uring, the fallback's threads, the waker, the
//! restrictions); `backend/` each backend's driver (CUDA, HSA, HIP, the CPU); `watchdog`
//! (how every wait is bounded) and `notice` (what the runtime tells a person), which several
//! layers use.

mod backend;
mod builder;
mod consumer;
pub mod error;
mod host_buffer;
mod kernels;
mod launch;
mod memory;
mod notice;
mod output;
mod runtime;
// The sandbox is a setting a host chooses; its module says what each policy lets through
// (the kernel's enforcement of it is the consumer's: `consumer::restrictions`).
pub mod sandbox;
mod scheduling;
mod settings;
mod shared;
mod watchdog;

// Each backend by its own name: what a host that loads its own code objects uses.
#[cfg(feature = "hip")]
pub use backend::hip;
pub use backend::{code_object, cuda, hsa};
use consumer::submission;

pub use backend::{Arg, Backend};
pub use builder::Builder;
pub use cuda::{link_ptx, Jit};
pub use error::{
    DriverError, Error, HangReport, OtherRing, OutputErrors, PrintErrors, Refused, Result, RingWords, RunningBlocks,
    RunningThreads, SoloRing, StreamPositions, Tickets, Waiting,
};
pub use gpuio_device::Kernel;
pub use host_buffer::HostBuffer;
pub use kernels::{KernelArgs, KernelParam, Kernels, Launch, RawArg, Staging};
pub use launch::{Dim3, KernelResources, LaunchConfig};
pub use output::Output;
pub use runtime::module::GpuModule;
pub use runtime::{HostThread, Runtime, Stats};
pub use sandbox::Sandbox;
pub use scheduling::Scheduling;
pub use submission::Submission;
