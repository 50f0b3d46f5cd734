//! Who runs kernels: host threads (`cpu`), an NVIDIA GPU through the CUDA driver
//! ([`cuda`]) or an AMD GPU through the HSA runtime ([`hsa`]; modules the host loaded with
//! HIP through `hip`, with the `hip` feature), and choosing among them: a CUDA GPU, then an AMD GPU, then the CPU.
//!
//! `GPUIO_BACKEND=cpu|cuda|hsa` (or [`crate::Builder::backend`]) forces one; a forced
//! backend that cannot run here is an error that says why. Detection loads the driver
//! libraries at run time (`dl`): building needs neither CUDA nor ROCm. The GPU backends
//! show the runtime one face (`gpu`: the `GpuBackend` and `LoadedModule` traits).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::scheduling::Scheduling;
use cuda::Cuda;
use gpu::{GpuBackend, LoadedModule};
use hsa::Hsa;

pub mod code_object;
pub(crate) mod cpu;
pub mod cuda;
pub(crate) mod dl;
pub(crate) mod gpu;
#[cfg(feature = "hip")]
pub mod hip;
pub mod hsa;

pub use gpu::Arg;

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
            other => Err(crate::settings::invalid("GPUIO_BACKEND", other)),
        }
    }

    /// The backend `GPUIO_BACKEND` asks for, if any.
    pub fn from_env() -> Result<Option<Backend>> {
        Ok(crate::settings::var("GPUIO_BACKEND")?
            .map(|v| Backend::parse(&v))
            .transpose()?
            .flatten())
    }
}

/// The GPU a runtime runs kernels on, opened: through [`GpuBackend`] (which it
/// dereferences to) for what every GPU does, by its kind where one backend's API is asked
/// for.
#[derive(Clone)]
pub(crate) enum Device {
    Cuda(Arc<Cuda>),
    Hsa(Arc<Hsa>),
}

impl std::ops::Deref for Device {
    type Target = dyn GpuBackend;

    fn deref(&self) -> &(dyn GpuBackend + 'static) {
        match self {
            Device::Cuda(c) => &**c,
            Device::Hsa(h) => &**h,
        }
    }
}

impl Device {
    /// The backend it is.
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Device::Cuda(_) => Backend::Cuda,
            Device::Hsa(_) => Backend::Hsa,
        }
    }

    /// Loads a code object for this GPU (PTX text on CUDA, compiled as `jit` says, an
    /// AMDGPU ELF code object on HSA), for a runtime that asked for `lockstep` scheduling or
    /// not; with the scheduling its code runs with, where that can be told (an AMD
    /// wavefront's lanes: lockstep).
    pub(crate) fn load(
        &self,
        image: &[u8],
        lockstep: bool,
        jit: cuda::Jit,
    ) -> Result<(Box<dyn LoadedModule>, Option<Scheduling>)> {
        Ok(match self {
            Device::Cuda(c) => {
                let (module, scheduling) = cuda::load_ptx_image(c, image, lockstep, jit)?;
                (Box::new(module), scheduling)
            }
            Device::Hsa(h) => (Box::new(hsa::Executable::load(h, image)?), Some(Scheduling::Lockstep)),
        })
    }

    /// Among code objects built for several GPUs (`(processor, bytes)`), the one for this
    /// GPU: on HSA the one whose processor is the agent's (`gfx90a`); on CUDA the first PTX
    /// whose target's scheduling is the one asked for (sm_70 or newer: independent; before
    /// sm_70: lockstep), or else, unless lockstep was asked for, the first PTX there is.
    pub(crate) fn pick<'a>(&self, objects: &[(&str, &'a [u8])], lockstep: bool) -> Option<&'a [u8]> {
        let found = match self {
            Device::Hsa(h) => {
                let want = code_object::processor_of_isa(h.agent_name());
                objects.iter().find(|(arch, _)| *arch == want)
            }
            Device::Cuda(_) => {
                let want = if lockstep {
                    Scheduling::Lockstep
                } else {
                    Scheduling::Independent
                };
                let ptx = || objects.iter().filter(|(arch, _)| arch.starts_with("sm_"));
                ptx()
                    .find(|(arch, _)| Scheduling::of_sm(arch) == Some(want))
                    .or_else(|| ptx().next().filter(|_| !lockstep))
            }
        };
        found.map(|(_, image)| *image)
    }

    /// This GPU and the code object it wants, for [`Error::NoCodeObject`].
    pub(crate) fn wants(&self, lockstep: bool) -> String {
        match self {
            Device::Hsa(h) => format!("{} ({})", h.agent_name(), h.isa()),
            Device::Cuda(c) if lockstep => format!(
                "{} (CUDA, lockstep scheduling asked for: wants PTX for a target before sm_70, e.g. sm_60)",
                c.device_name()
            ),
            Device::Cuda(c) => format!("{} (CUDA: wants PTX, sm_NN)", c.device_name()),
        }
    }
}

/// Opens the backend: `requested` (the builder's, else `GPUIO_BACKEND`'s), else the first
/// available (`None`: the CPU), on GPU `gpu` of that backend (`None`: the first). Returns
/// it and, when the choice fell back to the CPU, a one-line notice of why. A GPU named by
/// its index is never replaced by the CPU: where it cannot be opened, that is an error.
pub(crate) fn open(requested: Option<Backend>, named: Option<u32>) -> Result<(Option<Device>, Option<String>)> {
    let gpu = named.unwrap_or(0);
    match requested {
        Some(Backend::Cpu) if named.is_some() => Err(Error::Config(format!(
            "GPU {gpu} was named (Builder::gpu or GPUIO_GPU), but the CPU backend was asked for"
        ))),
        Some(Backend::Cpu) => Ok((None, None)),
        Some(Backend::Cuda) => Cuda::open_device(gpu)
            .map(|c| (Some(Device::Cuda(c)), None))
            .map_err(|reason| Error::BackendUnavailable {
                backend: "cuda",
                reason,
            }),
        Some(Backend::Hsa) => Hsa::open_gpu(gpu)
            .map(|h| (Some(Device::Hsa(h)), None))
            .map_err(|reason| Error::BackendUnavailable { backend: "hsa", reason }),
        None => {
            let cuda = match Cuda::open_device(gpu) {
                Ok(c) => return Ok((Some(Device::Cuda(c)), None)),
                Err(e) => e,
            };
            let hsa = match Hsa::open_gpu(gpu) {
                Ok(h) => return Ok((Some(Device::Hsa(h)), None)),
                Err(e) => e,
            };
            if named.is_some() {
                return Err(Error::Config(format!(
                    "GPU {gpu} was named (Builder::gpu or GPUIO_GPU), but neither backend opens it \
                     (cuda: {cuda}; hsa: {hsa})"
                )));
            }
            // The usual case on a machine without a GPU, said calmly; anything else in full.
            let cuda = if cuda.contains("not found") {
                "no NVIDIA driver".to_string()
            } else {
                format!("cuda: {cuda}")
            };
            let hsa = if hsa.contains("/dev/kfd is absent") {
                "no AMD GPU driver".to_string()
            } else {
                format!("hsa: {hsa}")
            };
            Ok((
                None,
                Some(format!("gpuio: kernels run on the CPU backend ({cuda}; {hsa})")),
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
        match open(Some(Backend::Hsa), None) {
            Err(Error::BackendUnavailable { backend: "hsa", reason }) => assert!(!reason.is_empty()),
            Err(e) => panic!("wrong error: {e}"),
            Ok((Some(Device::Hsa(h)), None)) => assert!(h.agent_name().starts_with("gfx")),
            Ok(_) => panic!("forcing HSA gave another backend"),
        }
        if let Err(e) = open(Some(Backend::Cuda), None) {
            assert!(matches!(e, Error::BackendUnavailable { backend: "cuda", ref reason } if !reason.is_empty()));
        }
        assert!(open(Some(Backend::Cpu), None).unwrap().0.is_none());
    }

    #[test]
    fn a_named_gpu_is_opened_or_refused_never_replaced_by_the_cpu() {
        assert!(matches!(open(Some(Backend::Cpu), Some(0)), Err(Error::Config(m)) if m.contains("CPU backend")));
        // No machine has 4096 GPUs: each backend says so, and auto-detection does not fall
        // back to the CPU.
        match open(Some(Backend::Cuda), Some(4096)) {
            Err(Error::BackendUnavailable {
                backend: "cuda",
                reason,
            }) => assert!(!reason.is_empty()),
            other => panic!("CUDA device 4096: {:?}", other.map(|_| ())),
        }
        match open(None, Some(4096)) {
            Err(Error::Config(m)) => assert!(
                m.contains("GPU 4096") && m.contains("cuda:") && m.contains("hsa:"),
                "{m}"
            ),
            other => panic!("GPU 4096: {:?}", other.map(|_| ())),
        }
    }
}
