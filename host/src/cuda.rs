//! The few CUDA driver API calls gpuio needs, loaded from `libcuda.so.1` at run time.
//!
//! Building needs no CUDA; where the driver or a GPU is absent, [`Cuda::open`] says why.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::Arc;

use crate::dl::Library;
use crate::error::{Error, Result};

type CuResult = i32;
type CuDevice = i32;
type CuContext = *mut c_void;
type CuModule = *mut c_void;
type CuFunction = *mut c_void;
/// A device address.
pub type CuDevicePtr = u64;

const CUDA_ERROR_NOT_READY: CuResult = 600;
const CU_MEMHOSTREGISTER_PORTABLE: u32 = 1;
const CU_MEMHOSTREGISTER_DEVICEMAP: u32 = 2;
const CU_STREAM_NON_BLOCKING: u32 = 1;
/// An exception while a kernel ran (a `trap`, and so a gpuio panic, reports this one).
const CUDA_ERROR_LAUNCH_FAILED: CuResult = 719;
const CU_LIMIT_STACK_SIZE: i32 = 0;
const CU_LIMIT_PRINTF_FIFO_SIZE: i32 = 1;
// CUjit_option values (cuda.h).
const CU_JIT_WALL_TIME: u32 = 2;
const CU_JIT_ERROR_LOG_BUFFER: u32 = 5;
const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: u32 = 6;
// CUjitInputType (cuda.h).
const CU_JIT_INPUT_PTX: u32 = 1;

macro_rules! driver_api {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// Driver entry points (signatures from `cuda.h`).
        #[allow(non_snake_case)]
        struct Api {
            $($name: unsafe extern "C" fn($($arg),*) -> CuResult,)*
        }

        impl Api {
            fn load(lib: &Library) -> std::result::Result<Api, String> {
                // SAFETY: each symbol is declared with its documented `cuda.h` signature.
                unsafe {
                    Ok(Api {
                        $($name: lib
                            .symbol(&CString::new(stringify!($name)).unwrap())
                            .ok_or(concat!("libcuda.so.1 lacks ", stringify!($name)))?,)*
                    })
                }
            }
        }
    };
}

driver_api! {
    cuInit: fn(u32);
    cuDeviceGet: fn(*mut CuDevice, i32);
    cuDeviceGetCount: fn(*mut i32);
    cuDeviceGetName: fn(*mut c_char, i32, CuDevice);
    cuDevicePrimaryCtxRetain: fn(*mut CuContext, CuDevice);
    cuDevicePrimaryCtxRelease_v2: fn(CuDevice);
    cuCtxSetCurrent: fn(CuContext);
    cuCtxSynchronize: fn();
    cuCtxSetLimit: fn(i32, usize);
    cuStreamQuery: fn(*mut c_void);
    cuStreamCreate: fn(*mut *mut c_void, u32);
    cuStreamDestroy_v2: fn(*mut c_void);
    cuStreamSynchronize: fn(*mut c_void);
    cuMemcpyDtoHAsync_v2: fn(*mut c_void, CuDevicePtr, usize, *mut c_void);
    cuModuleLoadDataEx: fn(*mut CuModule, *const c_void, u32, *mut u32, *mut *mut c_void);
    cuModuleLoadData: fn(*mut CuModule, *const c_void);
    cuLinkCreate_v2: fn(u32, *mut u32, *mut *mut c_void, *mut *mut c_void);
    cuLinkAddData_v2: fn(*mut c_void, u32, *mut c_void, usize, *const c_char, u32, *mut u32, *mut *mut c_void);
    cuLinkComplete: fn(*mut c_void, *mut *mut c_void, *mut usize);
    cuLinkDestroy: fn(*mut c_void);
    cuModuleUnload: fn(CuModule);
    cuModuleGetFunction: fn(*mut CuFunction, CuModule, *const c_char);
    cuModuleGetGlobal_v2: fn(*mut CuDevicePtr, *mut usize, CuModule, *const c_char);
    cuMemAlloc_v2: fn(*mut CuDevicePtr, usize);
    cuMemFree_v2: fn(CuDevicePtr);
    cuMemsetD8_v2: fn(CuDevicePtr, u8, usize);
    cuMemcpyHtoD_v2: fn(CuDevicePtr, *const c_void, usize);
    cuMemcpyDtoH_v2: fn(*mut c_void, CuDevicePtr, usize);
    cuMemHostRegister_v2: fn(*mut c_void, usize, u32);
    cuMemHostUnregister: fn(*mut c_void);
    cuMemHostGetDevicePointer_v2: fn(*mut CuDevicePtr, *mut c_void, u32);
    cuLaunchKernel: fn(CuFunction, u32, u32, u32, u32, u32, u32, u32, *mut c_void, *mut *mut c_void, *mut *mut c_void);
    cuGetErrorName: fn(CuResult, *mut *const c_char);
}

/// The CUDA driver with device 0's primary context current on the calling thread.
pub struct Cuda {
    api: Api,
    device: CuDevice,
    context: CuContext,
    name: String,
    _lib: Library,
}

// SAFETY: driver API handles may be used from any thread; every call first makes the
// primary context current on the calling thread (`bind`).
unsafe impl Send for Cuda {}
unsafe impl Sync for Cuda {}

impl Cuda {
    /// Loads the driver, initialises it and retains device 0's primary context.
    pub fn open() -> std::result::Result<Arc<Cuda>, String> {
        let lib = Library::open(c"libcuda.so.1").ok_or("libcuda.so.1 not found (no NVIDIA driver installed)")?;
        let api = Api::load(&lib)?;
        let mut cuda = Cuda {
            api,
            device: 0,
            context: std::ptr::null_mut(),
            name: String::new(),
            _lib: lib,
        };
        // SAFETY: documented calls with valid out-pointers.
        unsafe {
            let rc = (cuda.api.cuInit)(0);
            if rc != 0 {
                return Err(format!("cuInit failed: {}", cuda.error_name(rc)));
            }
            let mut n = 0;
            let rc = (cuda.api.cuDeviceGetCount)(&mut n);
            if rc != 0 || n == 0 {
                return Err(format!("no CUDA device ({}, {n} devices)", cuda.error_name(rc)));
            }
            let mut device = 0;
            cuda.check_str((cuda.api.cuDeviceGet)(&mut device, 0), "cuDeviceGet")?;
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
        }
        cuda.bind().map_err(|e| e.to_string())?;
        Ok(Arc::new(cuda))
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

    fn check_str(&self, rc: CuResult, what: &str) -> std::result::Result<(), String> {
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("{what} failed: {}", self.error_name(rc)))
        }
    }

    fn check(&self, rc: CuResult, what: &str) -> Result<()> {
        self.check_str(rc, what).map_err(Error::Cuda)
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
        // SAFETY: the caller keeps the range mapped.
        self.check(
            unsafe { (self.api.cuMemHostRegister_v2)(ptr as *mut c_void, len, flags) },
            "cuMemHostRegister",
        )?;
        let mut dptr = 0;
        // SAFETY: a registered host pointer.
        self.check(
            unsafe { (self.api.cuMemHostGetDevicePointer_v2)(&mut dptr, ptr as *mut c_void, 0) },
            "cuMemHostGetDevicePointer",
        )?;
        if dptr != ptr as u64 {
            // SAFETY: registered just above.
            unsafe { (self.api.cuMemHostUnregister)(ptr as *mut c_void) };
            return Err(Error::Cuda(format!(
                "registered host memory {ptr:p} has device address {dptr:#x}: gpuio needs unified addressing"
            )));
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

    /// Sets the per-thread stack size (core::fmt needs more than the 1 KiB default).
    pub fn set_stack_size(&self, bytes: usize) -> Result<()> {
        self.bind()?;
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
    pub fn idle(&self) -> Result<bool> {
        self.bind()?;
        // SAFETY: the null stream is always valid.
        match unsafe { (self.api.cuStreamQuery)(std::ptr::null_mut()) } {
            0 => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            rc => Err(Error::Kernel(self.kernel_error(rc))),
        }
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

    /// Waits for all work on the context (`cuCtxSynchronize`), for as long as it takes. The
    /// runtime's synchronize polls [`Cuda::idle`] first, under its hang watchdog.
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
        // SAFETY: balanced with the retain in `open`.
        unsafe { (self.api.cuDevicePrimaryCtxRelease_v2)(self.device) };
    }
}

/// A loaded PTX module.
pub struct Module {
    cuda: Arc<Cuda>,
    handle: CuModule,
    /// Unloaded on drop (false for a module the caller loaded: [`Module::borrow_raw`]).
    owned: bool,
    /// The driver's compile time at load, in milliseconds.
    jit_ms: Option<f32>,
    /// Each kernel's parameter sizes in bytes, from the PTX (`None` for a borrowed module).
    params: Option<std::collections::HashMap<String, Vec<usize>>>,
}

/// Each `.entry`'s parameter sizes in bytes, from PTX text: `.param .u32 x` is 4 bytes,
/// `.param .align 8 .b8 x[24]` 24. An entry whose parameters cannot be read is left out.
pub(crate) fn ptx_entry_params(ptx: &str) -> std::collections::HashMap<String, Vec<usize>> {
    let mut entries = std::collections::HashMap::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        rest = &rest[at + ".entry ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let Some(close) = rest[open..].find(')') else { break };
        let list = &rest[open + 1..open + close];
        let sizes: Option<Vec<usize>> = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                let words: Vec<&str> = p.split_whitespace().collect();
                // The type: `.u32`, `.b64`, `.f32`, ... (`.ptr`, `.align N` may follow it).
                let ty = words.iter().find(|w| {
                    w.len() > 2
                        && w.starts_with(['.'])
                        && matches!(w.as_bytes()[1], b'b' | b'u' | b's' | b'f')
                        && w[2..].bytes().all(|b| b.is_ascii_digit())
                })?;
                let scalar = match &ty[2..] {
                    "8" => 1,
                    "16" => 2,
                    "32" => 4,
                    "64" => 8,
                    _ => return None,
                };
                let last = words.last()?;
                Some(match last.split_once('[') {
                    Some((_, n)) => scalar * n.trim_end_matches(']').parse::<usize>().ok()?,
                    None => scalar,
                })
            })
            .collect();
        if let (false, Some(sizes)) = (name.is_empty(), sizes) {
            entries.insert(name, sizes);
        }
        rest = &rest[open + close..];
    }
    entries
}

// SAFETY: module handles are context-wide, usable from any thread with the context bound.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

/// How the driver compiles a module's PTX at its first load (later loads take the result
/// from the driver's JIT cache, either way).
///
/// As one whole program (`ptxas` without `-c`), every kernel is compiled with its own copy
/// of every function it calls (the print path, the ring, `core::fmt`, the panic report), so
/// a module's JIT time grows as kernels x shared code: on the H100, about 0.9-1.5 s per
/// kernel (`ptxas -v`), 60-65 s for a module of 19 kernels and 6-9 s for the 6 of gpuio's
/// example module (`bench_start`). Compiled separately (relocatable code, which the
/// driver's linker then links), each function is compiled once: 1.2-1.7 s for the example
/// module. Calls between functions then follow the standard ABI: printing 32-byte lines
/// ran 3.6-5.0% slower on the H100 (`bench_gpu`; BENCHMARKS.md has the runs).
///
/// PTX for a target before sm_70 (the lockstep build) is always compiled whole: compiled
/// separately, it ran with independent thread scheduling on the H100.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jit {
    /// `cuModuleLoadDataEx`: one whole program.
    Whole,
    /// `cuLinkCreate` / `cuLinkAddData` / `cuLinkComplete`: separate compilation.
    Separate,
}

impl Jit {
    /// `GPUIO_JIT=whole` or `GPUIO_JIT=separate`; unset (or empty): [`Jit::Separate`].
    pub fn from_env() -> Result<Jit> {
        match std::env::var("GPUIO_JIT") {
            Err(_) => Ok(Jit::Separate),
            Ok(v) if v.is_empty() => Ok(Jit::Separate),
            Ok(v) if v == "whole" => Ok(Jit::Whole),
            Ok(v) if v == "separate" => Ok(Jit::Separate),
            Ok(v) => Err(Error::Config(format!(
                "GPUIO_JIT={v:?}: expected \"whole\" or \"separate\""
            ))),
        }
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
}

impl Arg {
    /// The parameter's size in bytes: 4 for `u32`/`f32`, 8 for `u64`/`f64` and pointers.
    pub fn size(&self) -> usize {
        match self {
            Arg::U32(_) | Arg::F32(_) => 4,
            Arg::U64(_) | Arg::F64(_) => 8,
        }
    }

    /// The value's bytes, in the first [`Arg::size`] of 8 (the rest zero): what a driver
    /// copies into the kernel's parameter.
    pub(crate) fn bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        match *self {
            Arg::U32(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
            Arg::U64(v) => b = v.to_ne_bytes(),
            Arg::F32(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
            Arg::F64(v) => b = v.to_ne_bytes(),
        }
        b
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

impl Module {
    /// Loads PTX text (the driver compiles it for the GPU, or takes the result from its JIT
    /// cache). Where the driver refuses it, the error carries the compiler's log.
    ///
    /// How it is compiled is [`Jit::from_env`]'s choice: see [`Jit`].
    pub fn load(cuda: &Arc<Cuda>, ptx: &str) -> Result<Module> {
        Module::load_with(cuda, ptx, Jit::from_env()?)
    }

    /// [`Module::load`], compiled as `jit` says.
    pub fn load_with(cuda: &Arc<Cuda>, ptx: &str, jit: Jit) -> Result<Module> {
        cuda.bind()?;
        let text = CString::new(ptx).map_err(|_| Error::Config("PTX text contains a NUL byte".into()))?;
        let mut log = vec![0u8; 16 << 10];
        let mut options = [
            CU_JIT_ERROR_LOG_BUFFER,
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            CU_JIT_WALL_TIME,
        ];
        let mut values: [*mut c_void; 3] = [
            log.as_mut_ptr() as *mut c_void,
            log.len() as *mut c_void,
            std::ptr::null_mut(),
        ];
        let failed = |rc: CuResult, what: &str, log: &[u8]| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(&log[..end]);
            let mut why = cuda.check_str(rc, what).unwrap_err();
            if !log.trim().is_empty() {
                why.push_str(":\n");
                why.push_str(log.trim_end());
            }
            Error::Cuda(why)
        };
        let mut handle = std::ptr::null_mut();
        match jit {
            Jit::Whole => {
                // SAFETY: a NUL-terminated PTX image, a valid out-pointer, and one value per
                // option: the error log buffer (alive for the call) with its size, and a
                // slot the driver writes the compile time into.
                let rc = unsafe {
                    (cuda.api.cuModuleLoadDataEx)(
                        &mut handle,
                        text.as_ptr() as *const c_void,
                        options.len() as u32,
                        options.as_mut_ptr(),
                        values.as_mut_ptr(),
                    )
                };
                if rc != 0 {
                    return Err(failed(rc, "cuModuleLoadDataEx", &log));
                }
            }
            Jit::Separate => {
                let mut state = std::ptr::null_mut();
                // SAFETY: one value per option, as above; the log buffer and `values` outlive
                // the link state (destroyed below, on every path).
                let rc = unsafe {
                    (cuda.api.cuLinkCreate_v2)(
                        options.len() as u32,
                        options.as_mut_ptr(),
                        values.as_mut_ptr(),
                        &mut state,
                    )
                };
                if rc != 0 {
                    return Err(failed(rc, "cuLinkCreate", &log));
                }
                let linked = (|| {
                    // SAFETY: `state` is a live link state; the PTX image is `size` bytes
                    // including its NUL, and the name is a NUL-terminated string; no
                    // per-input options.
                    let rc = unsafe {
                        (cuda.api.cuLinkAddData_v2)(
                            state,
                            CU_JIT_INPUT_PTX,
                            text.as_ptr() as *mut c_void,
                            text.as_bytes_with_nul().len(),
                            c"gpuio kernels".as_ptr(),
                            0,
                            std::ptr::null_mut(),
                            std::ptr::null_mut(),
                        )
                    };
                    if rc != 0 {
                        return Err(failed(rc, "cuLinkAddData", &log));
                    }
                    let (mut cubin, mut size) = (std::ptr::null_mut(), 0usize);
                    // SAFETY: valid out-pointers; the cubin belongs to `state` and is loaded
                    // before `state` is destroyed.
                    let rc = unsafe { (cuda.api.cuLinkComplete)(state, &mut cubin, &mut size) };
                    if rc != 0 {
                        return Err(failed(rc, "cuLinkComplete", &log));
                    }
                    // SAFETY: `cubin` is the image cuLinkComplete produced, still owned by
                    // the live `state`.
                    let rc = unsafe { (cuda.api.cuModuleLoadData)(&mut handle, cubin) };
                    if rc != 0 {
                        return Err(failed(rc, "cuModuleLoadData (linked image)", &log));
                    }
                    Ok(())
                })();
                // SAFETY: `state` came from cuLinkCreate and is destroyed once.
                unsafe { (cuda.api.cuLinkDestroy)(state) };
                linked?;
            }
        }
        Ok(Module {
            cuda: cuda.clone(),
            handle,
            owned: true,
            // The driver writes a float (milliseconds) into the pointer-sized slot.
            jit_ms: Some(f32::from_bits(values[2] as usize as u32)),
            params: Some(ptx_entry_params(ptx)),
        })
    }

    /// How long the driver spent compiling the PTX when it loaded this module, in
    /// milliseconds (close to 0 when its JIT cache had it); `None` for a borrowed module.
    pub fn jit_ms(&self) -> Option<f32> {
        self.jit_ms
    }

    /// A module the caller loaded itself; it is not unloaded when this drops.
    ///
    /// # Safety
    /// `handle` is a `CUmodule` loaded in `cuda`'s context (device 0's primary context),
    /// and stays loaded as long as this `Module` (and anything launched from it) is used.
    /// Launches through it pass each kernel's parameters exactly (their PTX is not known
    /// here to check them).
    pub unsafe fn borrow_raw(cuda: &Arc<Cuda>, handle: *mut c_void) -> Module {
        Module {
            cuda: cuda.clone(),
            handle,
            owned: false,
            jit_ms: None,
            params: None,
        }
    }

    /// The address and size of a global variable.
    pub fn global(&self, name: &str) -> Result<(CuDevicePtr, usize)> {
        self.cuda.bind()?;
        let cname = CString::new(name).map_err(|_| Error::Config(format!("bad symbol name {name:?}")))?;
        let (mut d, mut n) = (0, 0);
        // SAFETY: valid out-pointers and a loaded module.
        self.cuda.check(
            unsafe { (self.cuda.api.cuModuleGetGlobal_v2)(&mut d, &mut n, self.handle, cname.as_ptr()) },
            &format!("cuModuleGetGlobal({name})"),
        )?;
        Ok((d, n))
    }

    pub(crate) fn function(&self, name: &str) -> Result<CuFunction> {
        self.cuda.bind()?;
        let cname = CString::new(name).map_err(|_| Error::Config(format!("bad kernel name {name:?}")))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: valid out-pointer and a loaded module.
        self.cuda.check(
            unsafe { (self.cuda.api.cuModuleGetFunction)(&mut f, self.handle, cname.as_ptr()) },
            &format!("cuModuleGetFunction({name})"),
        )?;
        Ok(f)
    }

    /// Launches `name` on `grid` blocks of `block` threads with `args` (asynchronous).
    ///
    /// `args` must match the kernel's parameters in number and size (a `u32` or `f32` for a
    /// 4-byte parameter, a `u64`, `f64` or pointer for an 8-byte one): checked against the
    /// PTX, an [`Error::Config`] names the difference. (A borrowed module has no PTX here:
    /// [`Module::borrow_raw`]'s caller vouches for its launches.)
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        let f = self.function(name)?;
        if let Some(params) = &self.params {
            let Some(sizes) = params.get(name) else {
                return Err(Error::Config(format!(
                    "kernel {name}: its parameters could not be read from the PTX, so it cannot \
                     be launched safely with arguments from here"
                )));
            };
            let given: Vec<usize> = args.iter().map(Arg::size).collect();
            if &given != sizes {
                return Err(Error::Config(format!(
                    "kernel {name} takes {} parameter(s) of {sizes:?} bytes; the launch passed {} \
                     argument(s) of {given:?} bytes (u32/f32: 4, u64/f64/pointers: 8)",
                    sizes.len(),
                    given.len()
                )));
            }
        }
        let mut values: Vec<[u8; 8]> = args.iter().map(Arg::bytes).collect();
        let mut ptrs: Vec<*mut c_void> = values.iter_mut().map(|v| v.as_mut_ptr() as *mut c_void).collect();
        // SAFETY: `ptrs` holds one pointer per kernel parameter, each to a buffer at least
        // as large as the parameter (checked above against the PTX; for a borrowed module,
        // `borrow_raw`'s caller vouches), alive until the call returns (the driver copies
        // them).
        self.cuda.check(
            unsafe {
                (self.cuda.api.cuLaunchKernel)(
                    f,
                    grid,
                    1,
                    1,
                    block,
                    1,
                    1,
                    0,
                    std::ptr::null_mut(),
                    ptrs.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            &format!("cuLaunchKernel({name})"),
        )
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = self.cuda.bind();
        // SAFETY: loaded in `load`; no kernel of it runs once the runtime synchronized.
        unsafe { (self.cuda.api.cuModuleUnload)(self.handle) };
    }
}

/// Reads device memory while kernels run: a copy on a stream of its own, which does not
/// wait for the null stream that gpuio's kernels run on, into pinned host memory, waited
/// for at most a given time. For diagnostics (what a hung kernel left in the context):
/// whatever the copy finds, mid-update or not, is what it returns.
pub struct Peek {
    cuda: Arc<Cuda>,
    stream: *mut c_void,
    buf: crate::memory::Mapping,
    /// A copy was started and not seen finished: `buf` is still the copy's.
    busy: bool,
}

// SAFETY: the stream and the pinned buffer are used only through `&mut self`; driver
// handles are usable from any thread with the context bound.
unsafe impl Send for Peek {}

impl Peek {
    /// A peek of up to `len` bytes.
    pub fn new(cuda: &Arc<Cuda>, len: usize) -> Result<Peek> {
        cuda.bind()?;
        let buf = crate::memory::Mapping::new(len).map_err(|e| Error::Os {
            what: "mmap of the peek buffer",
            source: e,
        })?;
        // SAFETY: `buf` stays mapped until `Drop`, which unregisters it first.
        unsafe { cuda.register(buf.as_ptr(), buf.len())? };
        let mut stream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and a documented flag.
        if let Err(e) = cuda.check(
            unsafe { (cuda.api.cuStreamCreate)(&mut stream, CU_STREAM_NON_BLOCKING) },
            "cuStreamCreate",
        ) {
            // SAFETY: registered just above; nothing uses it.
            unsafe { cuda.unregister(buf.as_ptr()) };
            return Err(e);
        }
        Ok(Peek {
            cuda: cuda.clone(),
            stream,
            buf,
            busy: false,
        })
    }

    /// Copies `len` bytes from `src`; `Ok(None)` if the copy did not finish within
    /// `patience` (then a later call waits for it to finish first, within its own
    /// patience).
    pub fn read(&mut self, src: CuDevicePtr, len: usize, patience: std::time::Duration) -> Result<Option<&[u8]>> {
        assert!(len <= self.buf.len(), "peek of {len} bytes into {}", self.buf.len());
        self.cuda.bind()?;
        let until = std::time::Instant::now() + patience;
        let done = |p: &Peek| -> Result<bool> {
            // SAFETY: a stream created in `new`.
            match unsafe { (p.cuda.api.cuStreamQuery)(p.stream) } {
                0 => Ok(true),
                CUDA_ERROR_NOT_READY => Ok(false),
                rc => Err(Error::Cuda(p.cuda.check_str(rc, "cuStreamQuery (peek)").unwrap_err())),
            }
        };
        let wait = |p: &Peek| -> Result<bool> {
            while !done(p)? {
                if std::time::Instant::now() >= until {
                    return Ok(false);
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            Ok(true)
        };
        if self.busy {
            if !wait(self)? {
                return Ok(None);
            }
            self.busy = false;
        }
        // SAFETY: `buf` is pinned (registered) and `len` bytes long at least; the driver
        // checks `src`. The copy runs on our stream; `busy` keeps `buf` its own until it is
        // seen finished.
        self.cuda.check(
            unsafe { (self.cuda.api.cuMemcpyDtoHAsync_v2)(self.buf.as_ptr() as *mut c_void, src, len, self.stream) },
            "cuMemcpyDtoHAsync (peek)",
        )?;
        self.busy = true;
        if !wait(self)? {
            return Ok(None);
        }
        self.busy = false;
        // SAFETY: the copy finished: `buf[..len]` holds its bytes and nothing writes them.
        Ok(Some(unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), len) }))
    }
}

impl Drop for Peek {
    fn drop(&mut self) {
        let _ = self.cuda.bind();
        // SAFETY: our stream; a copy still running on it finishes before the buffer goes
        // (a copy engine's transfer does not wait for kernels).
        unsafe {
            (self.cuda.api.cuStreamSynchronize)(self.stream);
            (self.cuda.api.cuStreamDestroy_v2)(self.stream);
            self.cuda.unregister(self.buf.as_ptr());
        }
    }
}

#[cfg(test)]
mod param_tests {
    use super::ptx_entry_params;

    #[test]
    fn entry_parameters_are_read_from_the_ptx() {
        let ptx = ".visible .entry hello()\n{\n\tret;\n}\n\
                   .visible .entry table(\n\t.param .u32 table_param_0\n)\n{\n}\n\
                   .visible .entry mix(\n\t.param .u64 .ptr .align 1 mix_param_0,\n\t.param .f32 mix_param_1,\n\
                   \t.param .align 8 .b8 mix_param_2[24]\n)\n{\n}\n";
        let p = ptx_entry_params(ptx);
        assert_eq!(p["hello"], Vec::<usize>::new());
        assert_eq!(p["table"], [4]);
        assert_eq!(p["mix"], [8, 4, 24]);
    }
}
