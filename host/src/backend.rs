//! Choosing where kernels run: a CUDA GPU, then an AMD GPU, then the CPU.
//!
//! `GPUIO_BACKEND=cpu|cuda|hsa` (or [`crate::Builder::backend`]) forces one; a forced
//! backend that cannot run here is an error that says why. Detection loads the driver
//! libraries at run time: building needs neither CUDA nor ROCm.

use std::sync::Arc;

use crate::cuda::Cuda;
use crate::dl::Library;

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

/// A backend, ready to run kernels.
pub(crate) enum Opened {
    Cpu,
    Cuda(Arc<Cuda>),
}

/// Opens the backend: `requested`, else `GPUIO_BACKEND`, else the first available.
/// Returns it and, when the choice fell back to the CPU, a one-line notice of why.
pub(crate) fn open(requested: Option<Backend>) -> Result<(Opened, Option<String>)> {
    let requested = match requested {
        Some(b) => Some(b),
        None => Backend::from_env()?,
    };
    match requested {
        Some(Backend::Cpu) => Ok((Opened::Cpu, None)),
        Some(Backend::Cuda) => {
            Cuda::open()
                .map(|c| (Opened::Cuda(c), None))
                .map_err(|reason| Error::BackendUnavailable {
                    backend: "cuda",
                    reason,
                })
        }
        Some(Backend::Hsa) => Err(Error::BackendUnavailable {
            backend: "hsa",
            reason: hsa_unavailable(),
        }),
        None => {
            let cuda = match Cuda::open() {
                Ok(c) => return Ok((Opened::Cuda(c), None)),
                Err(e) => e,
            };
            let why = format!("cuda: {cuda}; hsa: {}", hsa_unavailable());
            Ok((
                Opened::Cpu,
                Some(format!("gpuio: running kernels on the CPU backend ({why})")),
            ))
        }
    }
}

/// Why the HSA backend cannot run here.
fn hsa_unavailable() -> String {
    match probe_hsa() {
        Ok(()) => "an AMD GPU agent was found, but this build has no HSA backend yet".into(),
        Err(e) => e,
    }
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
        // This build has no HSA backend, so forcing it is always an explained error.
        match open(Some(Backend::Hsa)) {
            Err(Error::BackendUnavailable { backend: "hsa", reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("HSA accepted, but this build has no HSA backend"),
        }
        // CUDA either opens (a GPU machine) or says why not.
        if let Err(e) = open(Some(Backend::Cuda)) {
            assert!(matches!(e, Error::BackendUnavailable { backend: "cuda", ref reason } if !reason.is_empty()));
        }
        assert!(matches!(open(Some(Backend::Cpu)).unwrap().0, Opened::Cpu));
    }
}
