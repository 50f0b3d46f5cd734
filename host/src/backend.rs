//! Choosing where kernels run: a CUDA GPU, then an AMD GPU, then the CPU.
//!
//! `GPUIO_BACKEND=cpu|cuda|hsa` (or [`crate::Builder::backend`]) forces one; a forced
//! backend that cannot run here is an error that says why. Detection loads the driver
//! libraries at run time: building needs neither CUDA nor ROCm.

use std::ffi::{c_void, CStr};

use crate::error::{Error, Result};

/// Where kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Host threads run the device code (always available where io_uring is).
    Cpu,
    /// NVIDIA GPUs through the CUDA driver API.
    Cuda,
    /// AMD GPUs through the HSA runtime.
    Hsa,
}

impl Backend {
    /// The name used by `GPUIO_BACKEND`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
            Backend::Hsa => "hsa",
        }
    }

    /// Parses a `GPUIO_BACKEND` value; `auto` and the empty string mean "choose".
    pub fn parse(s: &str) -> Result<Option<Backend>> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(None),
            "cpu" => Ok(Some(Backend::Cpu)),
            "cuda" => Ok(Some(Backend::Cuda)),
            "hsa" | "amd" | "rocm" => Ok(Some(Backend::Hsa)),
            other => Err(Error::Config(format!(
                "GPUIO_BACKEND={other:?}: expected cpu, cuda, hsa or auto"
            ))),
        }
    }

    /// The backend `GPUIO_BACKEND` asks for, if any.
    pub fn from_env() -> Result<Option<Backend>> {
        match std::env::var("GPUIO_BACKEND") {
            Ok(v) => Backend::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(e) => Err(Error::Config(format!("GPUIO_BACKEND: {e}"))),
        }
    }
}

/// Picks the backend: `requested`, else `GPUIO_BACKEND`, else the first available.
/// Returns the backend and, when the choice fell back, a one-line notice of why.
pub fn select(requested: Option<Backend>) -> Result<(Backend, Option<String>)> {
    let requested = match requested {
        Some(b) => Some(b),
        None => Backend::from_env()?,
    };
    match requested {
        Some(Backend::Cpu) => Ok((Backend::Cpu, None)),
        Some(b) => Err(Error::BackendUnavailable {
            backend: b.name(),
            reason: availability(b).unwrap_err(),
        }),
        None => {
            let mut why = Vec::new();
            for b in [Backend::Cuda, Backend::Hsa] {
                match availability(b) {
                    Ok(()) => return Ok((b, None)),
                    Err(e) => why.push(format!("{}: {e}", b.name())),
                }
            }
            Ok((
                Backend::Cpu,
                Some(format!(
                    "gpuio: running kernels on the CPU backend ({})",
                    why.join("; ")
                )),
            ))
        }
    }
}

/// Whether `b` can run kernels here; the error says why not.
pub fn availability(b: Backend) -> std::result::Result<(), String> {
    match b {
        Backend::Cpu => Ok(()),
        Backend::Cuda => {
            let n = probe_cuda()?;
            Err(format!(
                "{n} CUDA device(s) found, but this build has no CUDA backend yet"
            ))
        }
        Backend::Hsa => {
            probe_hsa()?;
            Err("an AMD GPU agent was found, but this build has no HSA backend yet".into())
        }
    }
}

/// A library opened with `dlopen`, closed on drop.
struct Library(*mut c_void);

impl Library {
    fn open(name: &CStr) -> Option<Library> {
        // SAFETY: dlopen with a valid C string; the handle is closed on drop.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            None
        } else {
            Some(Library(h))
        }
    }

    /// # Safety
    /// `T` must be the symbol's real type (a function pointer type).
    unsafe fn symbol<T: Copy>(&self, name: &CStr) -> Option<T> {
        // SAFETY: valid handle and C string.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        // SAFETY: the caller guarantees `T` is a pointer-sized function type.
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen.
        unsafe { libc::dlclose(self.0) };
    }
}

/// Number of CUDA devices, or why there are none.
fn probe_cuda() -> std::result::Result<i32, String> {
    let lib = Library::open(c"libcuda.so.1").ok_or("libcuda.so.1 not found (no NVIDIA driver installed)")?;
    type CuInit = unsafe extern "C" fn(u32) -> i32;
    type CuDeviceGetCount = unsafe extern "C" fn(*mut i32) -> i32;
    // SAFETY: the CUDA driver API's documented signatures.
    let (init, count) = unsafe {
        (
            lib.symbol::<CuInit>(c"cuInit"),
            lib.symbol::<CuDeviceGetCount>(c"cuDeviceGetCount"),
        )
    };
    let (init, count) = init.zip(count).ok_or("libcuda.so.1 lacks cuInit/cuDeviceGetCount")?;
    // SAFETY: documented calls with valid arguments.
    let rc = unsafe { init(0) };
    if rc != 0 {
        return Err(format!("cuInit failed with CUresult {rc} (100 = no device)"));
    }
    let mut n = 0;
    // SAFETY: as above.
    let rc = unsafe { count(&mut n) };
    if rc != 0 || n == 0 {
        return Err(format!("no CUDA device (cuDeviceGetCount: CUresult {rc}, {n} devices)"));
    }
    Ok(n)
}

/// Whether HSA initialises, or why not.
fn probe_hsa() -> std::result::Result<(), String> {
    let lib =
        Library::open(c"libhsa-runtime64.so.1").ok_or("libhsa-runtime64.so.1 not found (no ROCm runtime installed)")?;
    type HsaInit = unsafe extern "C" fn() -> u32;
    // SAFETY: documented HSA signatures.
    let (init, shut) = unsafe {
        (
            lib.symbol::<HsaInit>(c"hsa_init"),
            lib.symbol::<HsaInit>(c"hsa_shut_down"),
        )
    };
    let (init, shut) = init.zip(shut).ok_or("libhsa-runtime64.so.1 lacks hsa_init")?;
    // SAFETY: documented calls.
    let rc = unsafe { init() };
    if rc == 0x1008 {
        return Err(
            "hsa_init failed with 0x1008 (HSA_STATUS_ERROR_OUT_OF_RESOURCES): /dev/kfd is absent, no AMD GPU driver"
                .into(),
        );
    }
    if rc != 0 {
        return Err(format!("hsa_init failed with status {rc:#x}"));
    }
    // SAFETY: balanced with the successful hsa_init.
    unsafe { shut() };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_backend_names() {
        assert_eq!(Backend::parse("CPU").unwrap(), Some(Backend::Cpu));
        assert_eq!(Backend::parse("auto").unwrap(), None);
        assert!(matches!(Backend::parse("tpu"), Err(Error::Config(m)) if m.contains("expected cpu")));
    }

    #[test]
    fn forced_unavailable_backend_says_why() {
        // No GPU backend exists in this build, so forcing one is always an explained error.
        for b in [Backend::Cuda, Backend::Hsa] {
            match select(Some(b)) {
                Err(Error::BackendUnavailable { backend, reason }) => {
                    assert_eq!(backend, b.name());
                    assert!(!reason.is_empty());
                }
                other => panic!("expected an explained error, got {other:?}"),
            }
        }
        assert_eq!(select(Some(Backend::Cpu)).unwrap().0, Backend::Cpu);
    }
}
