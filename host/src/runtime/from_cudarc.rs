//! cudarc programs (the `cudarc` feature): a runtime attaches to the module of a kernel
//! that cudarc loaded, and waits for cudarc's streams under its hang watchdog.
//!
//! cudarc's `CudaContext::new(ordinal)` and a runtime built with
//! [`Builder::gpu(ordinal)`](crate::Builder::gpu) use the same context, the primary context
//! of that device, so the module's globals, the shared memory gpuio maps and cudarc's
//! streams all live in one context.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream};

use super::module::GpuModule;
use super::Runtime;
use crate::backend::cuda;
use crate::backend::gpu::{Arg, LoadedModule};
use crate::error::{Error, Result};

/// A module cudarc loaded, borrowed: the function handle keeps cudarc's module loaded for
/// as long as gpuio holds it.
struct Attached {
    module: cuda::Module,
    _function: CudaFunction,
}

impl LoadedModule for Attached {
    fn launch(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg]) -> Result<()> {
        // gpuio does not know the parameters of a module it did not load, so it cannot
        // check a launch's arguments; cudarc's launch is where they are the caller's.
        // gpuio's own drain kernel takes none.
        if name == "gpuio_drain" && args.is_empty() {
            return self.module.launch_with(name, cfg, args);
        }
        Err(Error::Config(format!(
            "kernel {name}: a module attached from cudarc is launched with cudarc \
             (stream.launch_builder), after Runtime::prepare_external_launch; gpuio cannot \
             check its parameters"
        )))
    }

    fn global(&self, name: &str) -> Result<(u64, usize)> {
        self.module.global(name)
    }

    fn check_kernel(&self, name: &str) -> Result<()> {
        LoadedModule::check_kernel(&self.module, name)
    }
}

impl Runtime {
    /// Attaches this runtime to the module holding `function`, a kernel that cudarc
    /// loaded (`CudaModule::load_function`): the module's `gpuio_context` now points here,
    /// so its kernels print and do file I/O through this runtime, launched by cudarc on
    /// any of its streams. Before each such launch call
    /// [`Runtime::prepare_external_launch`]; after, [`Runtime::synchronize`] (every
    /// stream of the context) or [`Runtime::synchronize_streams`] (those named) waits for
    /// the kernels and their output under the hang watchdog.
    ///
    /// The module must come from gpuio's device crate (kernels built with `gpuio-linker`),
    /// loaded by cudarc in the primary context of this runtime's GPU (cudarc's
    /// `CudaContext::new(ordinal)` with [`Builder::gpu(ordinal)`](crate::Builder::gpu));
    /// the module stays loaded while the runtime holds it. Its kernels are launched with
    /// cudarc: the returned handle's `launch` refuses them, since gpuio does not know
    /// their parameters. Only in builds with the `cudarc` feature.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
    /// let ctx = CudaContext::new(0)?;
    /// let stream = ctx.new_stream()?;
    /// let ptx = std::fs::read_to_string("my_kernels-sm_70.ptx")?;
    /// let module = ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx))?;
    /// let table = module.load_function("table")?;
    ///
    /// let rt = gpuio_host::Runtime::builder().gpu(0).build()?;
    /// rt.attach_cudarc(&table)?;
    /// rt.prepare_external_launch()?;
    /// let n = 100u32;
    /// // SAFETY: `table` takes one u32.
    /// unsafe { stream.launch_builder(&table).arg(&n).launch(LaunchConfig::for_num_elems(n))? };
    /// rt.synchronize_streams(&[&stream])?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn attach_cudarc(&self, function: &CudaFunction) -> Result<GpuModule<'_>> {
        let (gpu, c) = self.cuda_gpu("a cudarc module is attached to a runtime on the CUDA backend; ")?;
        let handle = c.module_of(function.cu_function() as *mut std::ffi::c_void)?;
        // SAFETY: the handle is the module of a live cudarc function, which `Attached`
        // keeps (and with it cudarc's module) for as long as the runtime holds the module.
        let module = unsafe { cuda::Module::borrow_raw(c, handle) };
        if let Err(e) = module.global_copies("gpuio_layout") {
            return Err(Error::Config(format!(
                "the cudarc function's module has no `gpuio_layout` in this runtime's context ({e}): \
                 build its kernels with gpuio's device crate (gpuio-linker), and load them with \
                 cudarc's CudaContext::new(N) for the GPU this runtime uses (Builder::gpu(N))"
            )));
        }
        let attached = Attached {
            module,
            _function: function.clone(),
        };
        self.install(gpu, Box::new(attached), None)
    }

    /// As [`Runtime::synchronize`], waiting, besides gpuio's own launches, for the work on
    /// `streams` (cudarc streams of this runtime's context) rather than on every stream of
    /// the context: work on other streams may still run when it returns. Under the same
    /// hang watchdog. Like `synchronize`, it waits only where a launch was announced
    /// ([`Runtime::prepare_external_launch`] before each of cudarc's launches): without
    /// that, it returns at once. Only in builds with the `cudarc` feature.
    pub fn synchronize_streams(&self, streams: &[&Arc<CudaStream>]) -> Result<()> {
        let (_, c) = self.cuda_gpu("cudarc streams are waited for on the CUDA backend; ")?;
        for s in streams {
            if s.context().cu_ctx() as usize != c.context_address() {
                return Err(Error::Config(
                    "a stream of another CUDA context was named: this runtime uses the primary \
                     context of its GPU (cudarc's CudaContext::new(N) for Builder::gpu(N))"
                        .into(),
                ));
            }
        }
        let only: Vec<usize> = streams.iter().map(|s| s.cu_stream() as usize).collect();
        self.synchronize_only(Some(&only))
    }
}
