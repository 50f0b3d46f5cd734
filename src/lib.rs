//! gpuio: GPU kernels do their own I/O.
pub use gpuio_device as device;
pub use gpuio_host::*;
