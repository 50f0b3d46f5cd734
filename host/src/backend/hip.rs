//! HIP hosts (the `hip` feature, on `hip-runtime-sys`): a program that loaded a gpuio code
//! object itself with `hipModuleLoadData` attaches it to a runtime
//! ([`Runtime::attach_hip_module`](crate::Runtime::attach_hip_module), the C API's
//! `gpuio_attach_hip_module`), as CUDA programs do with `gpuio_attach_cuda_module`.
//!
//! HIP on AMD GPUs runs on the same ROCr (HSA) runtime as gpuio's HSA backend, in the same
//! process: the runtime's shared memory, made visible to its GPU agent through HSA, is
//! visible at the same addresses to kernels HIP launches on that agent. So the runtime
//! stays on the HSA backend; HIP is used only for what belongs to the host's own module:
//! finding its globals, copying to them, launching its kernels and waiting for the host's
//! HIP work before draining. The module must be loaded on the HIP device that is the
//! runtime's GPU agent; `HipDevice::open` checks this by PCI location.
//!
//! `hip-runtime-sys` gives the types, the header discovery and the link to `libamdhip64`.
//! The functions called here are declared again below (`api`) returning the status as a
//! plain `c_int`: the crate declares `hipError_t` as a Rust enum generated from one HIP
//! release's header, and a status a newer HIP returns that the enum lacks (HIP 6 added
//! some) would be undefined behaviour.
//!
//! Every call takes the device explicitly (`hipSetDevice` first): HIP's current device is
//! per host thread, and the runtime's synchronize may run on another thread than the one
//! that loaded the module.

use std::ffi::{c_int, c_void, CStr, CString};

/// The HIP runtime's bindings this module is built on (`hip-runtime-sys`), for hosts that
/// load and launch through HIP themselves.
pub use hip_runtime_sys as sys;

use crate::backend::gpu::{Arg, GpuBackend, LoadedModule, PackedArgs};
use crate::error::{DriverError, Error, Result};

/// `hipSuccess`.
const SUCCESS: Status = 0;
/// `hipErrorNoDevice`: HIP finds no GPU.
const NO_DEVICE: Status = 100;
/// `hipErrorNotReady`: work is still running.
const NOT_READY: Status = 600;

/// A `hipError_t` as the integer HIP returns.
type Status = c_int;

/// The HIP functions gpuio calls, with `hipError_t` as [`Status`] (see the module's docs).
/// The symbols are those `hip-runtime-sys` links; the parameters are its types.
#[allow(non_snake_case)]
mod api {
    use super::{sys, Status};
    use std::ffi::{c_char, c_int, c_uint, c_void};

    extern "C" {
        pub fn hipGetDeviceCount(count: *mut c_int) -> Status;
        pub fn hipDeviceGetPCIBusId(pciBusId: *mut c_char, len: c_int, device: c_int) -> Status;
        pub fn hipSetDevice(deviceId: c_int) -> Status;
        pub fn hipStreamQuery(stream: sys::hipStream_t) -> Status;
        pub fn hipDeviceSynchronize() -> Status;
        pub fn hipModuleGetGlobal(
            dptr: *mut sys::hipDeviceptr_t,
            bytes: *mut usize,
            hmod: sys::hipModule_t,
            name: *const c_char,
        ) -> Status;
        pub fn hipModuleGetFunction(
            function: *mut sys::hipFunction_t,
            module: sys::hipModule_t,
            kname: *const c_char,
        ) -> Status;
        pub fn hipMemcpyHtoD(dst: sys::hipDeviceptr_t, src: *mut c_void, sizeBytes: usize) -> Status;
        pub fn hipMemcpyDtoH(dst: *mut c_void, src: sys::hipDeviceptr_t, sizeBytes: usize) -> Status;
        #[allow(clippy::too_many_arguments)]
        pub fn hipModuleLaunchKernel(
            f: sys::hipFunction_t,
            gridDimX: c_uint,
            gridDimY: c_uint,
            gridDimZ: c_uint,
            blockDimX: c_uint,
            blockDimY: c_uint,
            blockDimZ: c_uint,
            sharedMemBytes: c_uint,
            stream: sys::hipStream_t,
            kernelParams: *mut *mut c_void,
            extra: *mut *mut c_void,
        ) -> Status;
        pub fn hipGetErrorName(hip_error: Status) -> *const c_char;
        pub fn hipGetErrorString(hip_error: Status) -> *const c_char;
    }
}

/// The number of GPUs HIP sees (`hipGetDeviceCount`). Without a GPU (or without the
/// driver, `/dev/kfd`) this is an [`Error::Hip`] naming HIP's error, e.g.
/// `hipGetDeviceCount failed: hipErrorNoDevice (100): no ROCm-capable device is detected`.
pub fn device_count() -> Result<usize> {
    let mut n: c_int = 0;
    // SAFETY: an out-pointer valid for the call.
    check(unsafe { api::hipGetDeviceCount(&mut n) }, "hipGetDeviceCount")?;
    Ok(n.max(0) as usize)
}

/// Whether `e` is HIP saying that there is no GPU here.
pub fn is_no_device(e: &Error) -> bool {
    matches!(e, Error::Hip(d) if d.code == Some(NO_DEVICE as i64))
}

/// One HIP device, matched to the runtime's HSA agent.
#[derive(Clone, Debug)]
pub(crate) struct HipDevice {
    ordinal: c_int,
}

impl HipDevice {
    /// HIP device `ordinal`, checked to be the GPU at `pci` (`(domain, bus << 8 | device
    /// << 3 | function)`, the runtime's HSA agent; `None`: the agent did not say, and
    /// nothing is checked).
    pub(crate) fn open(ordinal: i32, pci: Option<(u32, u32)>) -> Result<HipDevice> {
        let count = device_count()?;
        if ordinal < 0 || ordinal as usize >= count {
            return Err(Error::Config(format!(
                "HIP device {ordinal} does not exist: HIP sees {count} device(s)"
            )));
        }
        let device = HipDevice { ordinal };
        if let Some(want) = pci {
            let have = device.pci_location()?;
            if have != want {
                return Err(Error::Config(format!(
                    "HIP device {ordinal} is the GPU at PCI {}, but the runtime's GPU agent is at \
                     {} (the HSA backend uses the first GPU agent): load the module on that \
                     device, or make it the first (ROCR_VISIBLE_DEVICES)",
                    pci_string(have),
                    pci_string(want)
                )));
            }
        }
        Ok(device)
    }

    /// `(domain, bus << 8 | device << 3 | function)` from `hipDeviceGetPCIBusId`
    /// (`dddd:bb:dd.f`).
    fn pci_location(&self) -> Result<(u32, u32)> {
        let mut buf = [0 as std::ffi::c_char; 32];
        check(
            // SAFETY: HIP writes at most `len` bytes, NUL included, into `buf`.
            unsafe { api::hipDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, self.ordinal) },
            "hipDeviceGetPCIBusId",
        )?;
        // SAFETY: NUL-terminated within `buf` (HIP's contract; the last byte is never written
        // past `len`, and we zeroed it).
        let id = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
        parse_pci_bus_id(&id).ok_or_else(|| Error::Hip(format!("hipDeviceGetPCIBusId gave {id:?}").into()))
    }

    fn select(&self) -> Result<()> {
        // SAFETY: a device ordinal checked in `open`.
        check(unsafe { api::hipSetDevice(self.ordinal) }, "hipSetDevice")
    }

    /// Whether the device's null stream has finished its work (`hipStreamQuery`). Never
    /// blocks: the runtime's synchronize polls it under its hang watchdog.
    pub(crate) fn idle(&self) -> Result<bool> {
        self.select()?;
        // SAFETY: the null stream always exists.
        match unsafe { api::hipStreamQuery(std::ptr::null_mut()) } {
            SUCCESS => Ok(true),
            NOT_READY => Ok(false),
            e => Err(Error::Kernel(format!("a HIP kernel failed: {}", describe(e)))),
        }
    }

    /// Waits for the host's HIP work: `wait` polls [`HipDevice::idle`] (the null stream, on
    /// which gpuio launches) under the watchdog; then `hipDeviceSynchronize` waits for the
    /// host's other streams too, as `cuCtxSynchronize` does on CUDA.
    pub(crate) fn synchronize_with(
        &self,
        wait: impl FnOnce(&mut dyn FnMut() -> Result<bool>) -> Result<()>,
    ) -> Result<()> {
        wait(&mut || self.idle())?;
        self.select()?;
        // SAFETY: no arguments; blocks until the device's streams are idle.
        check(unsafe { api::hipDeviceSynchronize() }, "hipDeviceSynchronize")
            .map_err(|e| Error::Kernel(format!("a HIP kernel failed: {e}")))
    }
}

/// A `hipModule_t` the host program loaded; gpuio never unloads it.
pub(crate) struct HipModule {
    module: sys::hipModule_t,
    device: HipDevice,
}

// SAFETY: a hipModule_t is a handle HIP accepts from any host thread; every use goes
// through HIP calls, which are thread-safe, after selecting the module's device.
unsafe impl Send for HipModule {}
// SAFETY: as for Send; `HipModule` has no interior state of its own.
unsafe impl Sync for HipModule {}

impl HipModule {
    /// # Safety
    /// `module` is a `hipModule_t` loaded with HIP on `device`, alive while the returned
    /// value is, and its kernels take the arguments they are launched with here.
    pub(crate) unsafe fn borrow_raw(module: *mut c_void, device: HipDevice) -> HipModule {
        HipModule {
            module: module as sys::hipModule_t,
            device,
        }
    }

    /// The device address and size of global `name` (`hipModuleGetGlobal`).
    pub(crate) fn global(&self, name: &str) -> Result<(u64, usize)> {
        let cname = c_name(name)?;
        let (mut ptr, mut size): (sys::hipDeviceptr_t, usize) = (std::ptr::null_mut(), 0);
        self.device.select()?;
        check(
            // SAFETY: out-pointers valid for the call; a module the caller vouched for.
            unsafe { api::hipModuleGetGlobal(&mut ptr, &mut size, self.module, cname.as_ptr()) },
            &format!("hipModuleGetGlobal({name})"),
        )?;
        Ok((ptr as u64, size))
    }

    /// Copies host bytes to device memory of this module's device (`hipMemcpyHtoD`).
    pub(crate) fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.device.select()?;
        // SAFETY: `src` is valid for its length (HIP only reads it, whatever the pointer's
        // mutability says); `dst` is device memory the caller owns, at least as long.
        check(
            unsafe { api::hipMemcpyHtoD(dst as sys::hipDeviceptr_t, src.as_ptr() as *mut c_void, src.len()) },
            "hipMemcpyHtoD",
        )
    }

    /// Copies device memory of this module's device to host bytes (`hipMemcpyDtoH`).
    pub(crate) fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        self.device.select()?;
        // SAFETY: `dst` is valid for its length; `src` is device memory at least as long.
        check(
            unsafe { api::hipMemcpyDtoH(dst.as_mut_ptr() as *mut c_void, src as sys::hipDeviceptr_t, dst.len()) },
            "hipMemcpyDtoH",
        )
    }

    /// Checks that the module has a kernel `name`.
    pub(crate) fn check_kernel(&self, name: &str) -> Result<()> {
        self.function(name).map(|_| ())
    }

    fn function(&self, name: &str) -> Result<sys::hipFunction_t> {
        let cname = c_name(name)?;
        let mut f: sys::hipFunction_t = std::ptr::null_mut();
        self.device.select()?;
        check(
            // SAFETY: out-pointer valid for the call; a module the caller vouched for.
            unsafe { api::hipModuleGetFunction(&mut f, self.module, cname.as_ptr()) },
            &format!("hipModuleGetFunction({name})"),
        )?;
        Ok(f)
    }

    /// Launches kernel `name` on the null stream (`hipModuleLaunchKernel`), on the blocks
    /// and threads of `cfg`.
    pub(crate) fn launch(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg]) -> Result<()> {
        let f = self.function(name)?;
        cfg.refuse_shared_mem("an AMD GPU (HIP)")?;
        // An AMD code object's parameters: a slice is two of them.
        let packed = PackedArgs::new(&Arg::amdgcn(args));
        // SAFETY: `hipModuleLaunchKernel` is HIP's launch entry point and `f` a kernel of
        // this module; the arguments are one per kernel parameter (`borrow_raw`'s caller
        // vouches for the count: HIP reads each parameter's size from the code object's
        // metadata), each 16 bytes, at least as many as any parameter `Arg` stands for, and
        // `PackedArgs::launch` keeps them alive until the call returns (HIP copies them);
        // the stream is the null stream (and `cfg` asks for no shared memory, refused above).
        check(
            unsafe { packed.launch(api::hipModuleLaunchKernel, f, &cfg, std::ptr::null_mut()) },
            &format!("hipModuleLaunchKernel({name})"),
        )
    }
}

fn c_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::Config(format!("bad symbol name {name:?}")))
}

/// `hipErrorNoDevice`.
fn plain_name(e: Status) -> String {
    // SAFETY: hipGetErrorName returns a static NUL-terminated string for any error value.
    let p = unsafe { api::hipGetErrorName(e) };
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// `hipErrorNoDevice (100)`.
fn name(e: Status) -> String {
    // SAFETY: hipGetErrorName returns a static NUL-terminated string for any error value.
    let p = unsafe { api::hipGetErrorName(e) };
    let n = if p.is_null() {
        "hipError_t".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    format!("{n} ({e})")
}

/// `hipErrorNoDevice (100): no ROCm-capable device is detected`.
fn describe(e: Status) -> String {
    // SAFETY: hipGetErrorString returns a static NUL-terminated string for any error value.
    let p = unsafe { api::hipGetErrorString(e) };
    if p.is_null() {
        return name(e);
    }
    // SAFETY: as above.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    let n = name(e);
    // Some HIP releases describe an error by its name alone.
    if n.starts_with(&*s) {
        n
    } else {
        format!("{n}: {s}")
    }
}

fn check(e: Status, what: &str) -> Result<()> {
    if e == SUCCESS {
        Ok(())
    } else {
        let mut d = DriverError::call(what, e as i64, &plain_name(e), &(e as i64).to_string());
        d.message = format!("{what} failed: {}", describe(e));
        Err(Error::Hip(d))
    }
}

/// `dddd:bb:dd.f` (hex) as `(domain, bus << 8 | device << 3 | function)`.
fn parse_pci_bus_id(id: &str) -> Option<(u32, u32)> {
    let (domain, rest) = id.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    let (bus, device, function) = (hex(bus)?, hex(device)?, hex(function)?);
    if bus > 0xff || device > 0x1f || function > 7 {
        return None;
    }
    Some((hex(domain)?, bus << 8 | device << 3 | function))
}

fn pci_string((domain, bdf): (u32, u32)) -> String {
    format!("{domain:04x}:{:02x}:{:02x}.{:x}", bdf >> 8, (bdf >> 3) & 0x1f, bdf & 7)
}

impl LoadedModule for HipModule {
    fn launch(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg]) -> Result<()> {
        HipModule::launch(self, name, cfg, args)
    }

    fn global(&self, name: &str) -> Result<(u64, usize)> {
        HipModule::global(self, name)
    }

    fn check_kernel(&self, name: &str) -> Result<()> {
        HipModule::check_kernel(self, name)
    }

    /// Through HIP, whose device memory HIP owns.
    fn copy_from_global(&self, _gpu: &dyn GpuBackend, dst: &mut [u8], src: u64) -> Result<()> {
        self.copy_from_device(dst, src)
    }

    /// Through HIP, as [`LoadedModule::copy_from_global`].
    fn copy_to_global(&self, _gpu: &dyn GpuBackend, dst: u64, src: &[u8]) -> Result<()> {
        self.copy_to_device(dst, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_bus_ids_match_hsa_bdfid() {
        assert_eq!(parse_pci_bus_id("0000:c1:00.0"), Some((0, 0xc1 << 8)));
        assert_eq!(parse_pci_bus_id("0001:03:1f.7\n"), Some((1, 0x03 << 8 | 0x1f << 3 | 7)));
        assert_eq!(parse_pci_bus_id("03:00.0"), None);
        assert_eq!(parse_pci_bus_id("0000:100:00.0"), None);
        assert_eq!(pci_string((1, 0x03 << 8 | 0x1f << 3 | 7)), "0001:03:1f.7");
    }

    #[test]
    fn device_count_names_the_cause_without_a_gpu() {
        match device_count() {
            Ok(n) => eprintln!("HIP sees {n} device(s)"),
            Err(e) => {
                let text = e.to_string();
                assert!(text.starts_with("HIP: hipGetDeviceCount failed: hip"), "{text}");
                eprintln!("{text} (no device: {})", is_no_device(&e));
            }
        }
    }
}
