//! The driver itself: loaded, initialised, with one device's primary context; memory,
//! copies and waiting for the GPU.

use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex, Weak};

use super::ffi::*;
use crate::backend::dl::Library;
use crate::backend::gpu::{GpuBackend, Wait};
use crate::error::{DriverError, Error, Result};

/// Where the thread waiting in `cuCtxSynchronize` leaves the driver's code once it returns.
type ContextAnswer = Arc<Mutex<Option<CuResult>>>;

/// The CUDA driver with one device's primary context, made current on the calling thread
/// by every call that needs it.
pub struct Cuda {
    pub(super) api: Api,
    device: CuDevice,
    context: CuContext,
    name: String,
    /// `domain:bus:device.function`, lower case, as sysfs names PCI devices.
    pci_bus_id: Option<String>,
    /// This `Cuda` itself, for the thread that waits in `cuCtxSynchronize` ([`Cuda::context_idle`]).
    this: Weak<Cuda>,
    /// That thread's answer (`None` until it returns, then the driver's code), and whether
    /// it was asked during the current wait (a thread from a wait that gave up, started
    /// before later launches, cannot answer for them).
    context_wait: Mutex<Option<(ContextAnswer, bool)>>,
    _lib: Library,
}

// SAFETY: driver API handles may be used from any thread; every call first makes the
// primary context current on the calling thread (`bind`).
unsafe impl Send for Cuda {}
// SAFETY: as for `Send`: driver API handles may be used from any thread; every call first makes the primary context current on the calling thread (`bind`).
unsafe impl Sync for Cuda {}

impl Cuda {
    /// Loads the driver, initialises it and retains device 0's primary context.
    pub fn open() -> std::result::Result<Arc<Cuda>, String> {
        Cuda::open_device(0)
    }

    /// How many devices the driver sees (0 where it loads but lists none), or why the
    /// driver could not be asked.
    pub fn device_count() -> std::result::Result<u32, String> {
        let cuda = Cuda::load()?;
        let mut n = 0;
        // SAFETY: documented calls with a valid out-pointer, after cuInit.
        let rc = unsafe { (cuda.api.cuDeviceGetCount)(&mut n) };
        cuda.check_str(rc, "cuDeviceGetCount")?;
        Ok(n.max(0) as u32)
    }

    /// The driver loaded and initialised, with no device chosen yet.
    fn load() -> std::result::Result<Cuda, String> {
        let lib = Library::open(c"libcuda.so.1").ok_or("libcuda.so.1 not found (no NVIDIA driver installed)")?;
        let api = Api::load(&lib)?;
        let cuda = Cuda {
            api,
            device: 0,
            context: std::ptr::null_mut(),
            name: String::new(),
            pci_bus_id: None,
            this: Weak::new(),
            context_wait: Mutex::new(None),
            _lib: lib,
        };
        // SAFETY: a documented call, no pointers.
        let rc = unsafe { (cuda.api.cuInit)(0) };
        if rc != 0 {
            return Err(format!("cuInit failed: {}", cuda.error_name(rc)));
        }
        Ok(cuda)
    }

    /// Loads the driver, initialises it and retains the primary context of device
    /// `ordinal` (numbered from 0 as the driver lists them: `CUDA_VISIBLE_DEVICES` applies).
    /// Several `Cuda`s, of one device or of several, may be open at once in a process.
    pub fn open_device(ordinal: u32) -> std::result::Result<Arc<Cuda>, String> {
        let mut cuda = Cuda::load()?;
        // SAFETY: documented calls with valid out-pointers.
        unsafe {
            let mut n = 0;
            let rc = (cuda.api.cuDeviceGetCount)(&mut n);
            if rc != 0 || n == 0 {
                return Err(format!("no CUDA device ({}, {n} devices)", cuda.error_name(rc)));
            }
            if ordinal >= n as u32 {
                return Err(format!(
                    "CUDA device {ordinal} does not exist: the driver sees {n} device(s), numbered from 0"
                ));
            }
            let mut device = 0;
            cuda.check_str((cuda.api.cuDeviceGet)(&mut device, ordinal as i32), "cuDeviceGet")?;
            cuda.device = device;
            let mut ctx = std::ptr::null_mut();
            cuda.check_str(
                (cuda.api.cuDevicePrimaryCtxRetain)(&mut ctx, cuda.device),
                "cuDevicePrimaryCtxRetain",
            )?;
            cuda.context = ctx;
            let mut name = [0 as c_char; 256];
            (cuda.api.cuDeviceGetName)(name.as_mut_ptr(), 256, cuda.device);
            cuda.name = CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
            let mut bus = [0 as c_char; 64];
            if (cuda.api.cuDeviceGetPCIBusId)(bus.as_mut_ptr(), 64, cuda.device) == 0 {
                let bus = CStr::from_ptr(bus.as_ptr()).to_string_lossy().to_ascii_lowercase();
                cuda.pci_bus_id = Some(bus);
            }
        }
        cuda.bind().map_err(|e| e.to_string())?;
        Ok(Arc::new_cyclic(|this| {
            cuda.this = this.clone();
            cuda
        }))
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.name
    }

    fn error_name(&self, rc: CuResult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
        unsafe { (self.api.cuGetErrorName)(rc, &mut p) };
        if p.is_null() {
            format!("CUresult {rc}")
        } else {
            // SAFETY: a NUL-terminated static string from the driver.
            format!("{} ({rc})", unsafe { CStr::from_ptr(p) }.to_string_lossy())
        }
    }

    pub(super) fn check_str(&self, rc: CuResult, what: &str) -> std::result::Result<(), DriverError> {
        if rc == 0 {
            return Ok(());
        }
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
        unsafe { (self.api.cuGetErrorName)(rc, &mut p) };
        let name = if p.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated static string from the driver.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(DriverError::call(what, rc as i64, &name, &rc.to_string()))
    }

    pub(super) fn check(&self, rc: CuResult, what: &str) -> Result<()> {
        self.check_str(rc, what).map_err(Error::Cuda)
    }

    /// Lets kernel `f` (`name`) take `bytes` of dynamic shared memory, past the 48 KiB a
    /// launch gets without asking (`MAX_DYNAMIC_SHARED_SIZE_BYTES`). More than the GPU
    /// gives a block is an [`Error::Config`] naming its limit.
    pub(super) fn opt_in_shared_mem(&self, f: CuFunction, name: &str, bytes: u32) -> Result<()> {
        let (mut most, mut fixed) = (0i32, 0i32);
        // SAFETY: attribute queries of a live device and of a function of a loaded module,
        // each writing one int.
        let rc = unsafe {
            (self.api.cuDeviceGetAttribute)(
                &mut most,
                CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                self.device,
            )
        };
        self.check(rc, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)")?;
        // SAFETY: as above.
        let rc = unsafe { (self.api.cuFuncGetAttribute)(&mut fixed, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f) };
        self.check(rc, "cuFuncGetAttribute(SHARED_SIZE_BYTES)")?;
        let room = most.saturating_sub(fixed).max(0) as u32;
        if bytes > room {
            return Err(Error::Config(format!(
                "kernel {name}: a launch with {bytes} bytes of dynamic shared memory per block, \
                 more than {} gives: {most} bytes per block, less the kernel's {fixed} of static \
                 shared memory, leaves {room}; launch with at most {room}",
                self.name
            )));
        }
        // SAFETY: sets an attribute of a function of a loaded module; `bytes` fits an i32
        // (at most `room`).
        let rc =
            unsafe { (self.api.cuFuncSetAttribute)(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32) };
        self.check(
            rc,
            &format!("cuFuncSetAttribute({name}, MAX_DYNAMIC_SHARED_SIZE_BYTES, {bytes})"),
        )
    }

    /// Makes the primary context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: a context retained in `open`.
        self.check(unsafe { (self.api.cuCtxSetCurrent)(self.context) }, "cuCtxSetCurrent")
    }

    /// Makes host memory GPU-visible at the same address (unified addressing).
    ///
    /// # Safety
    /// `ptr .. ptr + len` is mapped memory that stays mapped until `unregister`.
    pub unsafe fn register(&self, ptr: *mut u8, len: usize) -> Result<()> {
        self.bind()?;
        let flags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;
        self.check(
            // SAFETY: the caller keeps the range mapped.
            unsafe { (self.api.cuMemHostRegister_v2)(ptr as *mut c_void, len, flags) },
            "cuMemHostRegister",
        )?;
        let mut dptr = 0;
        self.check(
            // SAFETY: a registered host pointer.
            unsafe { (self.api.cuMemHostGetDevicePointer_v2)(&mut dptr, ptr as *mut c_void, 0) },
            "cuMemHostGetDevicePointer",
        )?;
        if dptr != ptr as u64 {
            // SAFETY: registered just above.
            unsafe { (self.api.cuMemHostUnregister)(ptr as *mut c_void) };
            return Err(Error::Cuda(
                format!("registered host memory {ptr:p} has device address {dptr:#x}: gpuio needs unified addressing")
                    .into(),
            ));
        }
        Ok(())
    }

    /// Undoes `register`.
    ///
    /// # Safety
    /// `ptr` was registered, and no kernel that may touch it is running.
    pub unsafe fn unregister(&self, ptr: *mut u8) {
        let _ = self.bind();
        // SAFETY: the caller's contract.
        unsafe { (self.api.cuMemHostUnregister)(ptr as *mut c_void) };
    }

    /// Allocates zeroed device memory.
    pub fn alloc_zeroed(&self, len: usize) -> Result<CuDevicePtr> {
        self.bind()?;
        let mut d = 0;
        // SAFETY: valid out-pointer.
        self.check(unsafe { (self.api.cuMemAlloc_v2)(&mut d, len) }, "cuMemAlloc")?;
        // SAFETY: `d` is a fresh allocation of `len` bytes.
        self.check(unsafe { (self.api.cuMemsetD8_v2)(d, 0, len) }, "cuMemsetD8")?;
        Ok(d)
    }

    /// Frees device memory.
    pub fn free(&self, d: CuDevicePtr) {
        let _ = self.bind();
        // SAFETY: `d` came from `alloc_zeroed`; the caller no longer uses it.
        unsafe { (self.api.cuMemFree_v2)(d) };
    }

    /// Copies host bytes to the device.
    pub fn copy_to_device(&self, dst: CuDevicePtr, src: &[u8]) -> Result<()> {
        self.bind()?;
        // SAFETY: `src` is valid for its length; the driver checks `dst`.
        self.check(
            unsafe { (self.api.cuMemcpyHtoD_v2)(dst, src.as_ptr() as *const c_void, src.len()) },
            "cuMemcpyHtoD",
        )
    }

    /// Copies device bytes to the host.
    pub fn copy_from_device(&self, dst: &mut [u8], src: CuDevicePtr) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst` is valid for its length; the driver checks `src`.
        self.check(
            unsafe { (self.api.cuMemcpyDtoH_v2)(dst.as_mut_ptr() as *mut c_void, src, dst.len()) },
            "cuMemcpyDtoH",
        )
    }

    /// Makes the per-thread stack at least `bytes` (core::fmt needs more than the 1 KiB
    /// default). The context is the device's primary one, which other libraries of the
    /// process (cudarc, the runtime API) share: a larger limit that one of them set is kept,
    /// never lowered under its kernels.
    pub fn set_stack_size(&self, bytes: usize) -> Result<()> {
        self.bind()?;
        let mut now = 0usize;
        // SAFETY: an out-pointer valid for the call; a documented limit.
        let rc = unsafe { (self.api.cuCtxGetLimit)(&mut now, CU_LIMIT_STACK_SIZE) };
        self.check(rc, "cuCtxGetLimit(stack)")?;
        if now >= bytes {
            return Ok(());
        }
        // SAFETY: a documented limit.
        self.check(
            unsafe { (self.api.cuCtxSetLimit)(CU_LIMIT_STACK_SIZE, bytes) },
            "cuCtxSetLimit(stack)",
        )
    }

    /// Sets the device printf FIFO size (for comparisons with CUDA's own printf).
    pub fn set_printf_fifo(&self, bytes: usize) -> Result<()> {
        self.bind()?;
        // SAFETY: a documented limit.
        self.check(
            unsafe { (self.api.cuCtxSetLimit)(CU_LIMIT_PRINTF_FIFO_SIZE, bytes) },
            "cuCtxSetLimit(printf)",
        )
    }

    /// Whether the default stream has finished its work (errors surface as `Err`). Never
    /// blocks: the runtime's synchronize polls it (`cuStreamQuery` on the null stream)
    /// under its hang watchdog.
    fn idle(&self) -> Result<bool> {
        // The null stream's address is 0.
        self.stream_idle(0)
    }

    /// Whether `stream` (a `CUstream` of this context, as an address; 0, the null stream)
    /// has finished its work.
    fn stream_idle(&self, stream: usize) -> Result<bool> {
        self.bind()?;
        // SAFETY: the null stream is always valid; another is the caller's, live while it is
        // waited for (`Runtime::synchronize_streams`).
        match unsafe { (self.api.cuStreamQuery)(stream as *mut c_void) } {
            0 => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            rc => Err(Error::Kernel(self.kernel_error(rc))),
        }
    }

    /// The primary context this `Cuda` uses, as an address (to compare with another
    /// library's: cudarc's `CudaContext::cu_ctx`).
    #[cfg(feature = "cudarc")]
    pub(crate) fn context_address(&self) -> usize {
        self.context as usize
    }

    /// The module a kernel function belongs to (`cuFuncGetModule`).
    #[cfg(feature = "cudarc")]
    pub(crate) fn module_of(&self, function: *mut c_void) -> Result<*mut c_void> {
        self.bind()?;
        let mut module = std::ptr::null_mut();
        self.check(
            // SAFETY: a valid out-pointer; the caller's function handle.
            unsafe { (self.api.cuFuncGetModule)(&mut module, function) },
            "cuFuncGetModule",
        )?;
        Ok(module)
    }

    /// Why a kernel failed, from the driver's error code.
    fn kernel_error(&self, rc: CuResult) -> String {
        let name = self.error_name(rc);
        match rc {
            CUDA_ERROR_LAUNCH_FAILED => format!(
                "{name}: a kernel trapped (a panic: a kernel crate with gpuio_device::panic_handler! \
                 printed where and why on stderr) or faulted"
            ),
            _ => name,
        }
    }

    /// Whether every stream of the context has finished its work (errors surface as
    /// `Err`), asked without blocking. The driver has no such question for a context's
    /// streams (a non-blocking stream of the host program's, cudarc's for one, is not
    /// ordered with the null stream), so a thread of its own waits in `cuCtxSynchronize`
    /// and this looks at whether it returned. Where a kernel hangs, that thread waits on
    /// (holding this `Cuda`), and the next call looks at the same one.
    fn context_idle(&self) -> Result<bool> {
        let mut slot = self.context_wait.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((answer, false)) = slot.as_ref() {
            // An earlier wait's thread: once it has returned, ask anew.
            if answer.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                *slot = None;
            } else {
                return Ok(false);
            }
        }
        let answer = match slot.as_ref() {
            Some((answer, _)) => answer.clone(),
            None => {
                let answer = Arc::new(Mutex::new(None));
                let Some(me) = self.this.upgrade() else {
                    // Not opened through `open_device` (a test's `Cuda`): wait here.
                    self.synchronize()?;
                    return Ok(true);
                };
                let theirs = answer.clone();
                std::thread::Builder::new()
                    .name("gpuio-cuda-sync".into())
                    .spawn(move || {
                        let rc = me.bind().map_or(CUDA_ERROR_INVALID_CONTEXT, |()| {
                            // SAFETY: no arguments; the context is current on this thread.
                            unsafe { (me.api.cuCtxSynchronize)() }
                        });
                        *theirs.lock().unwrap_or_else(|e| e.into_inner()) = Some(rc);
                    })
                    .map_err(|e| Error::Config(format!("starting a thread to wait for the GPU: {e}")))?;
                *slot = Some((answer.clone(), true));
                answer
            }
        };
        let rc = *answer.lock().unwrap_or_else(|e| e.into_inner());
        match rc {
            None => Ok(false),
            Some(rc) => {
                *slot = None;
                match rc {
                    0 => Ok(true),
                    rc => Err(Error::Kernel(self.kernel_error(rc))),
                }
            }
        }
    }

    /// Waits for all work on the context (`cuCtxSynchronize`), for as long as it takes. The
    /// runtime's synchronize asks whether it has (`context_idle`) instead, under its hang watchdog.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: no arguments.
        let rc = unsafe { (self.api.cuCtxSynchronize)() };
        if rc != 0 {
            return Err(Error::Kernel(self.kernel_error(rc)));
        }
        Ok(())
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        if self.context.is_null() {
            return; // never retained: `open_device` failed before, or `device_count`
        }
        // SAFETY: balanced with the retain in `open_device`.
        unsafe { (self.api.cuDevicePrimaryCtxRelease_v2)(self.device) };
    }
}

impl GpuBackend for Cuda {
    fn name(&self) -> &str {
        self.device_name()
    }

    fn pci_bus_id(&self) -> Option<&str> {
        self.pci_bus_id.as_deref()
    }

    unsafe fn map_host(&self, ptr: *mut u8, len: usize) -> Result<*mut u8> {
        // SAFETY: the caller keeps the range mapped until `unmap_host` (the trait's
        // contract, `register`'s). CUDA maps it at the same address: unified addressing,
        // checked in `register`.
        unsafe { self.register(ptr, len) }.map(|_| ptr)
    }

    unsafe fn unmap_host(&self, ptr: *mut u8) {
        // SAFETY: mapped by `map_host`, and no kernel that may touch it runs (the trait's
        // contract, `unregister`'s).
        unsafe { self.unregister(ptr) }
    }

    fn alloc_zeroed(&self, len: usize) -> Result<u64> {
        Cuda::alloc_zeroed(self, len)
    }

    fn free(&self, d: u64) {
        Cuda::free(self, d)
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        Cuda::copy_to_device(self, dst, src)
    }

    fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        Cuda::copy_from_device(self, dst, src)
    }

    fn set_stack_size(&self, bytes: usize) -> Result<()> {
        Cuda::set_stack_size(self, bytes)
    }

    fn synchronize_with(&self, wait: Wait<'_>, only: Option<&[usize]>) -> Result<()> {
        // gpuio's launches are on the null stream; the host's own streams (cudarc's
        // non-blocking ones among them) are waited for too, under the same watchdog: all
        // of them, or those named.
        match only {
            None => {
                // A thread still waiting from an earlier wait answers for the work before
                // it only.
                if let Some((_, current)) = self.context_wait.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                    *current = false;
                }
                wait(&mut || Ok(self.idle()? && self.context_idle()?))
            }
            Some(streams) => wait(&mut || {
                Ok(self.idle()?
                    && streams
                        .iter()
                        .try_fold(true, |all, &s| Ok(all && self.stream_idle(s)?))?)
            }),
        }
    }
}
