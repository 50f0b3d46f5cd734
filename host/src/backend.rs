//! Choosing where kernels run: a CUDA GPU, then an AMD GPU, then the CPU.
//!
//! `GPUIO_BACKEND=cpu|cuda|hsa` (or [`crate::Builder::backend`]) forces one; a forced
//! backend that cannot run here is an error that says why. Detection loads the driver
//! libraries at run time: building needs neither CUDA nor ROCm.

use std::sync::Arc;

use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::hsa::Hsa;

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
    Hsa(Arc<Hsa>),
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
        Some(Backend::Hsa) => Hsa::open()
            .map(|h| (Opened::Hsa(h), None))
            .map_err(|reason| Error::BackendUnavailable { backend: "hsa", reason }),
        None => {
            let cuda = match Cuda::open() {
                Ok(c) => return Ok((Opened::Cuda(c), None)),
                Err(e) => e,
            };
            let hsa = match Hsa::open() {
                Ok(h) => return Ok((Opened::Hsa(h), None)),
                Err(e) => e,
            };
            Ok((
                Opened::Cpu,
                Some(format!(
                    "gpuio: running kernels on the CPU backend (cuda: {cuda}; hsa: {hsa})"
                )),
            ))
        }
    }
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
        // Each GPU backend either opens (a GPU machine) or says why not.
        match open(Some(Backend::Hsa)) {
            Err(Error::BackendUnavailable { backend: "hsa", reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("wrong error: {e}"),
            Ok((Opened::Hsa(h), None)) => assert!(h.agent_name().starts_with("gfx")),
            Ok(_) => panic!("forcing HSA gave another backend"),
        }
        if let Err(e) = open(Some(Backend::Cuda)) {
            assert!(matches!(e, Error::BackendUnavailable { backend: "cuda", ref reason } if !reason.is_empty()));
        }
        assert!(matches!(open(Some(Backend::Cpu)).unwrap().0, Opened::Cpu));
    }
}
