//! gpuio's device runtime for kernels written in CUDA C++, HIP or C: built for a GPU, its
//! code object holds no kernel, only the C ABI of `device/include/gpuio/device.h`
//! (`gpuio_printf_args`, `gpuio_puts`, `gpuio_pwrite`, ...), the runtime's context and the
//! panic report, for a C++ kernel's code to be linked with (gpuio's loader merges the two
//! PTX texts into one module: `Runtime::load_module_with`).
#![no_std]

pub use gpuio_device::c_abi;

gpuio_device::panic_handler!();
