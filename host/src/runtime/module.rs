//! GPU code objects in a runtime: loading them (PTX on CUDA, AMDGPU ELF on HSA), attaching
//! those the host program loaded itself, and pointing each one's `gpuio_context` at the
//! runtime's context ([`GpuModule`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Gpu, Runtime};
use crate::backend::cuda::{self, Cuda};
use crate::backend::gpu::{check_layout, Arg, LoadedModule};
use crate::backend::hsa::{self, Hsa};
use crate::backend::Device;
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::scheduling::Scheduling;
use crate::shared::State;

/// A GPU code object loaded into a runtime, with its context global set: a PTX module on
/// CUDA, an HSA executable on AMD GPUs.
pub struct GpuModule<'rt> {
    rt: &'rt Runtime,
    module: Arc<dyn LoadedModule>,
    scheduling: Option<Scheduling>,
}

impl<'rt> GpuModule<'rt> {
    /// The runtime the module is loaded into.
    pub(crate) fn runtime(&self) -> &'rt Runtime {
        self.rt
    }

    /// Launches kernel `name` on `grid` blocks of `block` threads (asynchronous;
    /// [`Runtime::synchronize`] waits). `args` must match the kernel's parameters (on HSA
    /// they are checked against the code object's metadata).
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        self.launch_with(name, LaunchConfig::linear(grid, block), args)
    }

    /// Launches kernel `name` on the blocks and threads of `cfg`, in up to three
    /// dimensions (asynchronous; [`Runtime::synchronize`] waits), on every backend (HSA's
    /// dispatch packet and hidden arguments carry all three).
    pub fn launch_with(&self, name: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        self.launch_on_stream(name, cfg, args, None)
    }

    /// As [`GpuModule::launch_with`], on `stream` (a `CUstream` of the runtime's context as
    /// an address; 0: the null stream, where gpuio's launches go). A launch on another
    /// stream is waited for as a host program's own ([`Runtime::prepare_external_launch`]):
    /// the next synchronize waits for every stream of the context.
    pub(crate) fn launch_on_stream(
        &self,
        name: &str,
        cfg: LaunchConfig,
        args: &[Arg],
        on: Option<&super::OwnStream>,
    ) -> Result<()> {
        let stream = on.map_or(0, |s| s.0);
        cfg.check()?;
        let gpu = self.rt.gpu.as_ref().expect("a GpuModule exists only on a GPU runtime");
        gpu.usable()?;
        let first = !gpu.launched.load(Ordering::Acquire);
        if first {
            self.rt.rebase_positions()?;
        }
        if stream != 0 {
            // Before the launch, as `prepare_external_launch` does: a synchronize that
            // claims it waits for the context's streams, and for this one whatever it names.
            let mut own = gpu.own_streams.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = on.filter(|s| !own.iter().any(|o| o.0 == s.0)) {
                own.push(s.clone());
            }
            drop(own);
            gpu.external.store(true, Ordering::Release);
        }
        // The waker looks from before the launch call: a call that returns only once its
        // kernel has ended (`CUDA_LAUNCH_BLOCKING=1`, Nsight Compute, compute-sanitizer)
        // would otherwise run the whole kernel with the waker parked, and the kernel's last
        // flush, which waits for its write to land, would wait for the parked waker's look
        // (`PARKED`: up to 100 ms) wherever SQPOLL had gone to sleep (after `sq_thread_idle`
        // without work).
        let _looking = self.rt.waker.looking();
        if let Err(e) = self.module.launch_on(name, cfg, args, stream) {
            if first && !gpu.launched.load(Ordering::Acquire) {
                // Nothing runs: the files this launch would have printed to are free again.
                self.rt.print_files.end();
            }
            return Err(e);
        }
        // Before `launched`: a synchronize that claims this launch drains it.
        gpu.drained.store(false, Ordering::Release);
        if !gpu.launched.swap(true, Ordering::AcqRel) {
            self.rt.waker.activate();
        }
        Ok(())
    }

    /// How the GPU runs the lanes of a warp for this module's kernels: lockstep on AMD GPUs
    /// and for PTX built before sm_70, independently otherwise; `None` for a CUDA module
    /// attached with [`Runtime::attach_cuda_module`], whose PTX target is not known here.
    pub fn scheduling(&self) -> Option<Scheduling> {
        self.scheduling
    }

    /// On CUDA, how long the driver spent compiling the module's PTX when it was loaded, in
    /// milliseconds (close to 0 when the driver's JIT cache had it).
    pub fn jit_ms(&self) -> Option<f32> {
        self.module.jit_ms()
    }

    /// What a thread of kernel `name` holds on the GPU: its registers, local memory (stack
    /// and spills) and static shared memory, as the driver compiled it; `None` where the
    /// backend does not tell (HSA). An error where the module has no such kernel.
    ///
    /// ```no_run
    /// # fn main() -> gpuio_host::Result<()> {
    /// # let ptx = "";
    /// let rt = gpuio_host::Runtime::builder().build()?;
    /// let module = rt.load_module(ptx)?;
    /// if let Some(r) = module.resources("my_kernel")? {
    ///     println!("{} registers, {} bytes of local memory a thread", r.registers, r.local_bytes);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn resources(&self, name: &str) -> Result<Option<crate::launch::KernelResources>> {
        self.module.resources(name)
    }

    /// The device address and size of a global variable of the module.
    pub fn global(&self, name: &str) -> Result<(u64, usize)> {
        self.module.global(name)
    }

    /// The CUDA driver (for copies to and from the module's globals, say), on CUDA.
    pub fn cuda(&self) -> Option<&Arc<Cuda>> {
        match &self.rt.gpu.as_ref()?.device {
            Device::Cuda(c) => Some(c),
            Device::Hsa(_) => None,
        }
    }

    /// The HSA runtime (for copies to and from the module's globals, say), on HSA.
    pub fn hsa(&self) -> Option<&Arc<Hsa>> {
        match &self.rt.gpu.as_ref()?.device {
            Device::Hsa(h) => Some(h),
            Device::Cuda(_) => None,
        }
    }
}

impl Runtime {
    /// Loads a PTX module (CUDA backend) and points its `gpuio_context` at this runtime.
    /// On the HSA backend, load an ELF code object with [`Runtime::load_code_object`] or
    /// [`Runtime::load_matching`] instead.
    pub fn load_module(&self, ptx: &str) -> Result<GpuModule<'_>> {
        self.load_code_object(ptx.as_bytes())
    }

    /// Loads a code object for this runtime's GPU and points its `gpuio_context` at this
    /// runtime: PTX text on CUDA, an AMDGPU ELF code object (`.hsaco`) for the GPU's
    /// processor on HSA.
    pub fn load_code_object(&self, image: &[u8]) -> Result<GpuModule<'_>> {
        let gpu = self.gpu.as_ref().ok_or_else(|| Error::BackendUnavailable {
            backend: "cuda or hsa",
            reason: format!("this runtime runs on the {} backend", self.backend.name()),
        })?;
        gpu.usable()?;
        let (module, scheduling) = gpu.device.load(image, self.lockstep, self.jit)?;
        self.install(gpu, module, scheduling)
    }

    /// Loads, among code objects built for several GPUs (`(processor, bytes)`, like the
    /// tables `gpuio`'s build script generates), the one for this runtime's GPU: on HSA the
    /// one whose processor is the agent's (`gfx90a`); on CUDA the first PTX for sm_70 or
    /// newer (`sm_90`), or, when lockstep scheduling was asked for ([`Builder::lockstep`](crate::Builder::lockstep)),
    /// the first for a target before sm_70 (`sm_60`), or else the first PTX there is.
    /// Where none fits, [`Error::NoCodeObject`] names the GPU and what there was.
    pub fn load_matching(&self, objects: &[(&str, &[u8])]) -> Result<GpuModule<'_>> {
        let gpu = self.gpu.as_ref().ok_or_else(|| Error::BackendUnavailable {
            backend: "cuda or hsa",
            reason: format!("this runtime runs on the {} backend", self.backend.name()),
        })?;
        match gpu.device.pick(objects, self.lockstep) {
            Some(image) => self.load_code_object(image),
            None => Err(Error::NoCodeObject {
                gpu: gpu.device.wants(self.lockstep),
                available: objects.iter().map(|(arch, _)| arch.to_string()).collect(),
            }),
        }
    }

    /// Takes in an HSA executable that the host program loaded and froze itself for this
    /// runtime's agent ([`Hsa::agent`]): points its `gpuio_context` at this runtime and
    /// returns a module to launch its kernels with (explicit arguments in order, naturally
    /// aligned: an attached executable's metadata is not read). The executable is not
    /// destroyed when the module drops.
    ///
    /// # Safety
    /// `executable` is a frozen executable of this process's HSA runtime, loaded for this
    /// runtime's agent, and stays alive while the returned module and this runtime are.
    pub unsafe fn attach_hsa_executable(&self, executable: hsa::Handle) -> Result<GpuModule<'_>> {
        let (gpu, h) = self.hsa_gpu("")?;
        // SAFETY: the caller's contract.
        let exe = unsafe { hsa::Executable::attach(h, executable) };
        self.install(gpu, Box::new(exe), Some(Scheduling::Lockstep))
    }

    /// The GPU and its CUDA driver, for attaching modules the host loaded itself; on another
    /// backend, `BackendUnavailable` whose reason is `why` followed by the backend this
    /// runtime runs on.
    pub(crate) fn cuda_gpu(&self, why: &str) -> Result<(&Gpu, &Arc<Cuda>)> {
        match self.gpu.as_ref() {
            Some(
                gpu @ Gpu {
                    device: Device::Cuda(c),
                    ..
                },
            ) => Ok((gpu, c)),
            _ => Err(Error::BackendUnavailable {
                backend: "cuda",
                reason: format!("{why}this runtime runs on the {} backend", self.backend.name()),
            }),
        }
    }

    /// The GPU and its HSA runtime, for attaching code objects the host loaded itself; on
    /// another backend, `BackendUnavailable` whose reason is `why` followed by the backend
    /// this runtime runs on.
    fn hsa_gpu(&self, why: &str) -> Result<(&Gpu, &Arc<Hsa>)> {
        match self.gpu.as_ref() {
            Some(
                gpu @ Gpu {
                    device: Device::Hsa(h), ..
                },
            ) => Ok((gpu, h)),
            _ => Err(Error::BackendUnavailable {
                backend: "hsa",
                reason: format!("{why}this runtime runs on the {} backend", self.backend.name()),
            }),
        }
    }

    /// Attaches a CUDA module that the caller loaded itself (the C API's
    /// `gpuio_attach_cuda_module`): points its `gpuio_context` at this runtime, as
    /// [`Runtime::load_module`] does for the modules it loads. The module is not unloaded
    /// when the returned handle drops. Kernels of it that the caller launches itself need
    /// [`Runtime::prepare_external_launch`] first.
    ///
    /// # Safety
    /// `cu_module` is a `CUmodule` loaded in the primary context of this runtime's GPU
    /// ([`Builder::gpu`](crate::Builder::gpu); the context this runtime uses), and stays
    /// loaded until this runtime is dropped.
    pub unsafe fn attach_cuda_module(&self, cu_module: *mut std::ffi::c_void) -> Result<GpuModule<'_>> {
        let (gpu, c) = self.cuda_gpu("")?;
        // SAFETY: the caller's contract.
        let module = unsafe { cuda::Module::borrow_raw(c, cu_module) };
        self.install(gpu, Box::new(module), None)
    }

    /// Attaches a module that the host program loaded itself with HIP (`hipModuleLoadData`
    /// on HIP device `hip_device`; the C API's `gpuio_attach_hip_module`): points its
    /// `gpuio_context` at this runtime, as [`Runtime::attach_cuda_module`] does on CUDA.
    /// The runtime runs on the HSA backend (HIP runs on the same HSA runtime, so the shared
    /// memory is visible to HIP's kernels), and `hip_device` must be its GPU agent (checked
    /// by PCI location). Kernels of the module that the host launches itself need
    /// [`Runtime::prepare_external_launch`] first; [`Runtime::synchronize`] then waits for
    /// the device's HIP work too (its null stream, then `hipDeviceSynchronize`) and drains.
    /// [`GpuModule::launch`] launches on HIP's null stream; HIP reads each parameter's size
    /// from the code object, so the arguments must match the kernel's parameters.
    ///
    /// Only in builds with the `hip` feature (it links `libamdhip64`).
    ///
    /// # Safety
    /// `hip_module` is a `hipModule_t` loaded on `hip_device`, stays loaded until this
    /// runtime is dropped, and its kernels are launched with the arguments they take.
    #[cfg(feature = "hip")]
    pub unsafe fn attach_hip_module(
        &self,
        hip_module: *mut std::ffi::c_void,
        hip_device: i32,
    ) -> Result<GpuModule<'_>> {
        let (gpu, h) =
            self.hsa_gpu("a HIP module is attached to a runtime on the HSA backend (the same GPU, through ROCr); ")?;
        if hip_module.is_null() {
            return Err(Error::Config("the HIP module is null".into()));
        }
        let device = crate::backend::hip::HipDevice::open(hip_device, h.pci_location())?;
        let _ = gpu.hip.set(device.clone());
        // SAFETY: the caller's contract.
        let module = unsafe { crate::backend::hip::HipModule::borrow_raw(hip_module, device) };
        self.install(gpu, Box::new(module), Some(Scheduling::Lockstep))
    }

    /// Tells the runtime that the caller is about to launch, itself, a kernel of a module
    /// attached with [`Runtime::attach_cuda_module`] or [`Runtime::attach_hsa_executable`]:
    /// SQPOLL is kept awake while it runs, and the next [`Runtime::synchronize`] waits for it
    /// and drains its prints.
    pub fn prepare_external_launch(&self) -> Result<()> {
        let gpu = self.gpu.as_ref().ok_or_else(|| Error::BackendUnavailable {
            backend: "cuda or hsa",
            reason: format!("this runtime runs on the {} backend", self.backend.name()),
        })?;
        gpu.usable()?;
        if !gpu.launched.load(Ordering::Acquire) {
            self.rebase_positions()?;
        }
        // Before `launched`: a synchronize that claims this launch drains it, and waits for
        // the host's streams.
        gpu.drained.store(false, Ordering::Release);
        gpu.external.store(true, Ordering::Release);
        if !gpu.launched.swap(true, Ordering::AcqRel) {
            self.waker.activate();
        }
        Ok(())
    }

    /// Points a loaded module's `gpuio_context` at this runtime's context, and keeps the
    /// first module as the one whose `gpuio_drain` kernel synchronize launches.
    pub(super) fn install(
        &self,
        gpu: &Gpu,
        module: Box<dyn LoadedModule>,
        scheduling: Option<Scheduling>,
    ) -> Result<GpuModule<'_>> {
        gpu.usable()?;
        let State::Device { dptr, .. } = &self.shared.state else {
            unreachable!("GPU runtimes keep state on the device")
        };
        // A code object built against another version of the device crate would read the
        // context at the wrong offsets: refuse it.
        // Every copy holds the same constant (a module compiled as one program per kernel
        // has one per kernel): the first one says it.
        let first = module
            .global_copies("gpuio_layout")
            .map(|mut copies| copies.swap_remove(0));
        let (layout_at, size) = first.map_err(|e| {
            Error::Config(format!(
                "the code object has no `gpuio_layout` ({e}): it was not built with gpuio's device \
                 crate, or with a version older than this runtime"
            ))
        })?;
        let mut layout = [0u8; 8];
        if size != 8 {
            return Err(Error::Config(format!("gpuio_layout is {size} bytes, expected 8")));
        }
        module.copy_from_global(&*gpu.device, &mut layout, layout_at)?;
        check_layout(u64::from_ne_bytes(layout))?;
        module.install_context(&*gpu.device, *dptr)?;
        let module: Arc<dyn LoadedModule> = Arc::from(module);
        let mut drain = gpu.drain.lock().unwrap_or_else(|e| e.into_inner());
        if drain.is_none() {
            // Every module that links gpuio-device exports the drain kernel; check early.
            module.check_kernel("gpuio_drain")?;
            *drain = Some(module.clone());
        }
        Ok(GpuModule {
            rt: self,
            module,
            scheduling,
        })
    }
}
