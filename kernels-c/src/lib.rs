//! gpuio's device runtime for kernels written in CUDA C++, HIP or C: built for a GPU, its
//! code holds the C ABI of `device/include/gpuio/device.h` (`gpuio_printf_args`, `gpuio_puts`,
//! `gpuio_pwrite`, ...), the runtime's context, the panic report and the drain kernel, for a
//! C++ kernel's code to be joined with (NVIDIA: `gpuio::link_ptx`, PTX text at load time; AMD:
//! `gpuio-linker --join`, bitcode at build time).
#![no_std]

pub use gpuio_device::c_abi;

gpuio_device::panic_handler!();
