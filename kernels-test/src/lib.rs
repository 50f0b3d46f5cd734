//! Kernels for gpuio's tests and benchmarks: the GPU suite's odd-shaped kernels (`suite`)
//! and the device file API end to end (`files`), with the example kernels of
//! `gpuio-kernels` (re-exported: on the GPUs this crate's code objects export them too).
//!
//! They live apart from the example kernels so that the examples' module stays small: the
//! driver compiles a module's PTX at its first load, and every kernel adds to that wait.
#![no_std]

pub use gpuio_kernels::*;

mod files;
pub use files::*;
mod suite;
pub use suite::*;
