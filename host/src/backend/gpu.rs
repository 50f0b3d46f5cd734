//! The face every GPU backend shows the runtime: [`GpuBackend`] (memory, copies, waiting
//! for kernels) and [`LoadedModule`] (a code object's kernels and globals), and the
//! kernel arguments they take ([`Arg`]).

use std::ffi::c_void;

use gpuio_device::protocol::context::CONTEXT_LAYOUT;

use crate::error::{Error, Result};
use crate::launch::LaunchConfig;

/// The watchdog's loop as [`GpuBackend::synchronize_with`] runs it: it calls the question
/// it is given ("is the GPU done?", never blocking) until that says yes, gives up, or fails.
pub(crate) type Wait<'a> = &'a mut dyn FnMut(&mut dyn FnMut() -> Result<bool>) -> Result<()>;

/// A GPU the runtime runs kernels on: CUDA's driver or HSA's runtime.
pub(crate) trait GpuBackend: Send + Sync {
    /// The GPU's name.
    fn name(&self) -> &str;

    /// The GPU's PCI address as sysfs names it (`0000:1b:00.0`), where the backend says.
    fn pci_bus_id(&self) -> Option<&str> {
        None
    }

    /// Makes host memory GPU-visible; returns the address the GPU sees it at.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is mapped memory that stays mapped until `unmap_host`.
    unsafe fn map_host(&self, ptr: *mut u8, len: usize) -> Result<*mut u8>;

    /// Undoes `map_host`.
    ///
    /// # Safety
    /// `ptr` was mapped with `map_host`, and no kernel that may touch it runs.
    unsafe fn unmap_host(&self, ptr: *mut u8);

    /// Allocates zeroed device memory.
    fn alloc_zeroed(&self, len: usize) -> Result<u64>;

    /// Frees device memory from `alloc_zeroed`.
    fn free(&self, d: u64);

    /// Copies host bytes to the device.
    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()>;

    /// Copies device bytes to the host.
    fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()>;

    /// Makes the per-thread stack of kernels at least `bytes` (core::fmt needs more than the
    /// defaults); a larger one already set stays.
    fn set_stack_size(&self, bytes: usize) -> Result<()>;

    /// Waits for every kernel (and copy) on the GPU: `wait` runs the watchdog's loop with
    /// the "done?" question it is given (`cuStreamQuery` on CUDA's null stream and the
    /// context's other streams, the completion signal on HSA), which never blocks; then
    /// errors surface as [`Error::Kernel`]. On [`Error::Hang`] nothing is released that a
    /// running kernel may use. `only` (CUDA streams, as addresses) narrows the host's
    /// streams waited for to those, besides gpuio's own.
    fn synchronize_with(&self, wait: Wait<'_>, only: Option<&[usize]>) -> Result<()>;
}

/// A code object loaded on a GPU backend (or attached: loaded by the host program).
pub(crate) trait LoadedModule: Send + Sync {
    /// Launches kernel `name` on the blocks and threads of `cfg` (asynchronous).
    fn launch(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg]) -> Result<()>;

    /// As [`LoadedModule::launch`], on `stream` (a `CUstream` of the runtime's context, as an
    /// address; 0: the null stream, where `launch` goes). Only CUDA modules have streams.
    fn launch_on(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg], stream: usize) -> Result<()> {
        if stream == 0 {
            return self.launch(name, cfg, args);
        }
        Err(crate::error::Error::Config(format!(
            "kernel {name}: a launch on a named stream is CUDA's; this module has no streams"
        )))
    }

    /// The device address and size of a global variable.
    fn global(&self, name: &str) -> Result<(u64, usize)>;

    /// Whether the module has kernel `name` (an error saying why not).
    fn check_kernel(&self, name: &str) -> Result<()>;

    /// How long the driver compiled the module at load, in milliseconds, where known.
    fn jit_ms(&self) -> Option<f32> {
        None
    }

    /// What a thread of kernel `name` holds (registers, local and shared memory), where the
    /// backend tells.
    fn resources(&self, name: &str) -> Result<Option<crate::launch::KernelResources>> {
        self.check_kernel(name).map(|()| None)
    }

    /// Copies from a global of the module, through `gpu` unless the module's memory
    /// belongs to another runtime (HIP's).
    fn copy_from_global(&self, gpu: &dyn GpuBackend, dst: &mut [u8], src: u64) -> Result<()> {
        gpu.copy_from_device(dst, src)
    }

    /// Copies to a global of the module, as [`LoadedModule::copy_from_global`].
    fn copy_to_global(&self, gpu: &dyn GpuBackend, dst: u64, src: &[u8]) -> Result<()> {
        gpu.copy_to_device(dst, src)
    }

    /// Every copy of the global `name` (address and size): one, unless the module was
    /// loaded as several programs, each with its own (a CUDA module compiled whole, one
    /// program per kernel).
    fn global_copies(&self, name: &str) -> Result<Vec<(u64, usize)>> {
        Ok(vec![self.global(name)?])
    }

    /// Points the module's `gpuio_context` (each copy of it) at `context` (a device address).
    fn install_context(&self, gpu: &dyn GpuBackend, context: u64) -> Result<()> {
        for (global, size) in self.global_copies("gpuio_context")? {
            if size != 8 {
                return Err(Error::Config(format!(
                    "gpuio_context is {size} bytes, expected a pointer"
                )));
            }
            self.copy_to_global(gpu, global, &context.to_ne_bytes())?;
        }
        Ok(())
    }
}

/// A kernel argument, passed by value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// `u32`/`i32` (as its bits).
    U32(u32),
    /// `u64`/`i64`, or a device pointer.
    U64(u64),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
    /// A `&str` or `&[T]` parameter (`gpuio_device::param::RawSlice`): `len` elements (bytes
    /// of UTF-8 for `str`) at `addr`, aligned for the element type, in memory the GPU reads,
    /// alive and unchanged until the kernel ends (the kernel trusts all of it). One 16-byte
    /// parameter in PTX; two 8-byte arguments, address then length, in an AMD code object.
    Slice {
        /// The address of the first element.
        addr: u64,
        /// The number of elements (bytes for `str`).
        len: u64,
    },
}

impl Arg {
    /// The parameter's size in bytes: 4 for `u32`/`f32`, 8 for `u64`/`f64` and pointers,
    /// 16 for a slice.
    pub fn size(&self) -> usize {
        match self {
            Arg::U32(_) | Arg::F32(_) => 4,
            Arg::U64(_) | Arg::F64(_) => 8,
            Arg::Slice { .. } => 16,
        }
    }

    /// The value's bytes, in the first [`Arg::size`] of 16 (the rest zero): what a driver
    /// copies into the kernel's parameter.
    pub(crate) fn bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        match *self {
            Arg::U32(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
            Arg::U64(v) => b[..8].copy_from_slice(&v.to_ne_bytes()),
            Arg::F32(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
            Arg::F64(v) => b[..8].copy_from_slice(&v.to_ne_bytes()),
            Arg::Slice { addr, len } => {
                b[..8].copy_from_slice(&addr.to_ne_bytes());
                b[8..].copy_from_slice(&len.to_ne_bytes());
            }
        }
        b
    }

    /// The arguments as an AMD code object takes them: the LLVM AMDGPU backend passes a
    /// 16-byte aggregate as two 8-byte arguments (the same bytes in the kernarg segment),
    /// so a slice becomes its address and its length.
    pub(crate) fn amdgcn(args: &[Arg]) -> Vec<Arg> {
        args.iter()
            .flat_map(|a| match *a {
                Arg::Slice { addr, len } => vec![Arg::U64(addr), Arg::U64(len)],
                a => vec![a],
            })
            .collect()
    }
}

/// A driver's kernel-launch entry point, of the shape CUDA's `cuLaunchKernel` and HIP's
/// `hipModuleLaunchKernel` share: the kernel `F`, the grid's and the block's x, y and z,
/// the bytes of dynamic shared memory, the stream `S`, the parameters and the extra
/// options; it returns the driver's status `R`.
pub(crate) type LaunchFn<F, S, R> =
    unsafe extern "C" fn(F, u32, u32, u32, u32, u32, u32, u32, S, *mut *mut c_void, *mut *mut c_void) -> R;

/// Kernel arguments packed as a driver's launch call takes them: each value's bytes in a
/// 16-byte buffer of its own ([`Arg::bytes`]), and the array of pointers to those buffers,
/// one per parameter.
pub(crate) struct PackedArgs {
    /// The values' bytes: read by the driver through `ptrs`, never here (heap buffers,
    /// which stay put when `self` moves).
    _values: Vec<[u8; 16]>,
    /// One pointer into `_values` per argument, in order.
    ptrs: Vec<*mut c_void>,
}

impl PackedArgs {
    /// Packs `args`, one parameter each (for an AMD code object, pass [`Arg::amdgcn`]'s).
    pub(crate) fn new(args: &[Arg]) -> PackedArgs {
        let mut values: Vec<[u8; 16]> = args.iter().map(Arg::bytes).collect();
        let ptrs = values.iter_mut().map(|v| v.as_mut_ptr() as *mut c_void).collect();
        PackedArgs { _values: values, ptrs }
    }

    /// Launches `f` through `launch` on `cfg`'s grid, block and dynamic shared memory, on
    /// `stream`, with these arguments (no extra options); returns the driver's status.
    ///
    /// # Safety
    /// `launch` is the driver's launch entry point and `f` a kernel of it, whose
    /// parameters these arguments are: one argument per parameter, and no parameter larger
    /// than the 16 bytes each argument's buffer holds; `stream` is one the driver takes for
    /// `f` (or its null stream), alive for the call.
    pub(crate) unsafe fn launch<F, S, R>(
        mut self,
        launch: LaunchFn<F, S, R>,
        f: F,
        cfg: &LaunchConfig,
        stream: S,
    ) -> R {
        let (grid, block) = (cfg.grid, cfg.block);
        // SAFETY: the caller vouches for `launch`, `f`, `stream` and that the arguments
        // match the parameters; `ptrs` points into `self`'s buffers, which `self` (owned
        // here) keeps alive until the call returns (the driver copies the values).
        unsafe {
            launch(
                f,
                grid.x,
                grid.y,
                grid.z,
                block.x,
                block.y,
                block.z,
                cfg.shared_mem_bytes,
                stream,
                self.ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    }
}

impl From<u32> for Arg {
    fn from(v: u32) -> Arg {
        Arg::U32(v)
    }
}
impl From<i32> for Arg {
    fn from(v: i32) -> Arg {
        Arg::U32(v as u32)
    }
}
impl From<u64> for Arg {
    fn from(v: u64) -> Arg {
        Arg::U64(v)
    }
}
impl From<f32> for Arg {
    fn from(v: f32) -> Arg {
        Arg::F32(v)
    }
}
impl From<f64> for Arg {
    fn from(v: f64) -> Arg {
        Arg::F64(v)
    }
}

/// Refuses a code object whose `gpuio_layout` is not this build's: one built against
/// another version of the device crate would read the context at the wrong offsets.
pub(crate) fn check_layout(layout: u64) -> Result<()> {
    if layout == CONTEXT_LAYOUT {
        return Ok(());
    }
    Err(Error::Config(format!(
        "the code object was built with another version of gpuio's device crate (context \
         layout {layout:#x}, this runtime's {CONTEXT_LAYOUT:#x}): rebuild it against this gpuio"
    )))
}
