//! gpuio's device runtime for kernels written in CUDA C++, HIP or C: built for a GPU, its
//! code object holds no kernel, only the C ABI of `device/include/gpuio/device.h`
//! (`gpuio_printf_args`, `gpuio_puts`, `gpuio_pwrite`, ...), the runtime's context and the
//! panic report, for a C++ kernel's code to be joined with (`gpuio::link_ptx` makes the two
//! PTX texts one, which `Runtime::load_module` loads).
#![no_std]

pub use gpuio_device::c_abi;

gpuio_device::panic_handler!();
