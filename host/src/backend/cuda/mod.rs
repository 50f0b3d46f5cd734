//! The few CUDA driver API calls gpuio needs, loaded from `libcuda.so.1` at run time.
//!
//! Building needs no CUDA; where the driver or a GPU is absent, [`Cuda::open`] says why.
//! [`Module`] is a loaded PTX module, [`Peek`] reads device memory while kernels run.

mod driver;
mod ffi;
pub(crate) mod jit;
mod launch_bounds;
mod library;
mod link;
mod module;
mod peek;
mod split;

pub use driver::Cuda;
pub use ffi::CuDevicePtr;
pub use jit::Jit;
pub use link::link_ptx;
pub(crate) use module::load_ptx_image;
pub use module::Module;
pub use peek::Peek;
