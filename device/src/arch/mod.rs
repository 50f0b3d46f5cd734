//! Everything target-specific, and nothing else.
//!
//! Each target module provides the same small surface:
//! - `atomic`: `AtomicU32`, `AtomicU64`, `AtomicI32`, `fence` with **system scope** for
//!   every ordering other than `Relaxed` (and system-scope coherence for `Relaxed`);
//! - `relax()`: what a spinning thread does;
//! - `clock_ns()`: a nanosecond clock for measurements (GPU-wide on GPUs);
//! - `context()`: the runtime context the host installed (a device global on GPUs, a
//!   thread-local on the CPU backend);
//! - ids: `thread_idx`, `block_idx`, `block_dim`, `grid_dim` (x dimension);
//! - `Warp`: the lanes executing a call together, as a [`crate::group::Group`].

#[cfg(target_arch = "amdgpu")]
mod amdgcn;
#[cfg(target_arch = "amdgpu")]
pub use amdgcn::*;

#[cfg(target_arch = "nvptx64")]
mod nvptx;
#[cfg(target_arch = "nvptx64")]
pub use nvptx::*;

#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub mod host;
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub use host::*;
