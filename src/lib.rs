//! gpuio lets GPU kernels written in Rust do I/O themselves: `println!`, `pread`/`pwrite`,
//! `open`/`close`/`fsync` and a `File` type, from GPU threads. A thread formats its text and
//! writes io_uring submission queue entries straight into host memory the GPU can address;
//! the Linux kernel's SQPOLL thread consumes them. No RPC mailbox and no host thread on the
//! data path. The same kernel source runs on NVIDIA GPUs (CUDA), AMD GPUs (HSA) and, for
//! development and CI, on host threads (the CPU backend, whose kernel threads by default
//! perform the ring's requests themselves with ordinary syscalls: a CPU can make the
//! syscall a GPU cannot).
//!
//! ```
//! use gpuio::device::println;
//!
//! let rt = gpuio::Runtime::builder().backend(gpuio::Backend::Cpu).build()?;
//! rt.launch(2, 4, || {
//!     let t = gpuio::device::global_thread_idx();
//!     println!("thread {t}: {:?}", (t * 2, "any Display or Debug"));
//! })?;
//! rt.synchronize()?; // every line is out, or the error says what was lost
//! # Ok::<(), gpuio::Error>(())
//! ```
//!
//! This crate is the one to depend on: it re-exports the host runtime ([`Runtime`],
//! [`Builder`], [`Error`], ...; the crate `gpuio-host`) and, as [`device`], the device
//! runtime that kernels use (`gpuio-device`: `no_std`, core only). Kernel crates depend on
//! `gpuio-device` alone, and `gpuio-linker` builds them into code objects (`.ptx`,
//! `.hsaco`) from a build script; `gpuio-capi` is the C API for C and C++ hosts.
//!
//! Where to read on, in the package and the repository: `README.md` (requirements, the
//! first commands, status), `docs/USAGE.md` (what you can rely on, your own kernels, files
//! from device code, the sandbox, C hosts), `docs/PROTOCOL.md` (the ring protocol),
//! `BENCHMARKS.md` and `RELIABILITY.md` (figures and the faults tried), `CHANGELOG.md`.
pub use gpuio_device as device;
pub use gpuio_host::*;
