//! cudarc programs (the `cudarc` feature): a runtime attaches to the module of a kernel
//! that cudarc loaded, and waits for cudarc's streams under its hang watchdog.
//!
//! cudarc's `CudaContext::new(ordinal)` and a runtime built with
//! [`Builder::gpu(ordinal)`](crate::Builder::gpu) use the same context, the primary context
//! of that device, so the module's globals, the shared memory gpuio maps and cudarc's
//! streams all live in one context.

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use gpuio_device::param::{Plain, RawSlice};
use gpuio_device::Kernel;

use super::module::GpuModule;
use super::Runtime;
use crate::backend::cuda;
use crate::backend::gpu::{Arg, LoadedModule};
use crate::error::{Error, Result};
use crate::kernels::{KernelArgs, KernelParam, Kernels, Launch, Staging};
use crate::launch::LaunchConfig;

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

/// An error unless `ctx` is the CUDA context `rt` runs in (`what` names what came from it).
fn same_context(rt: &Runtime, ctx: &CudaContext, what: &str) -> Result<()> {
    let (_, c) = rt.cuda_gpu(&format!("{what} is CUDA's; "))?;
    if ctx.cu_ctx() as usize == c.context_address() {
        return Ok(());
    }
    Err(Error::Config(format!(
        "{what} of another CUDA context: this runtime uses the primary context of its GPU \
         (cudarc's CudaContext::new(N) for Builder::gpu(N))"
    )))
}

impl Kernels<'_> {
    /// As [`Kernels::launch`], on cudarc's `stream` (of this runtime's context: cudarc's
    /// `CudaContext::new(N)` for `Builder::gpu(N)`) rather than the null stream: the launch
    /// is ordered with the rest of the stream's work, and [`CudaSlice`] arguments with
    /// cudarc's work on them (by cudarc's events, where it tracks the slice; one it does
    /// not track, give to launches on one stream). [`Runtime::synchronize`] waits for it (and for every stream
    /// of the context), as does [`Runtime::synchronize_streams`] naming the stream, under
    /// the hang watchdog; until then its lines may still be on their way. CUDA only; only
    /// in builds with the `cudarc` feature.
    ///
    /// ```no_run
    /// # mod my_kernels { gpuio_device::kernel! { pub fn scale(x: &[f32], y: gpuio_device::param::Out<f32>) {} } }
    /// # mod kernels { pub const OBJECTS: &[(&str, &[u8])] = &[]; }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use cudarc::driver::CudaContext;
    /// use gpuio_host::{LaunchConfig, Runtime};
    /// let rt = Runtime::builder().gpu(0).build()?;
    /// let kernels = rt.kernels(kernels::OBJECTS)?;
    /// let stream = CudaContext::new(0)?.new_stream()?;
    /// let x = stream.clone_htod(&[1.0f32, 2.0, 3.0])?;
    /// let mut y = stream.alloc_zeros::<f32>(3)?;
    /// // `x` for a `&[f32]` parameter, `&mut y` for an `Out<f32>`: no copies.
    /// kernels.launch_on(&stream, my_kernels::scale, LaunchConfig::for_num_elems(3), (&x, &mut y))?;
    /// rt.synchronize_streams(&[&stream])?;
    /// let y: Vec<f32> = stream.clone_dtoh(&y)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn launch_on<F, A>(
        &self,
        stream: &Arc<CudaStream>,
        kernel: Kernel<F>,
        cfg: impl Into<LaunchConfig>,
        args: A,
    ) -> Result<()>
    where
        F: Copy + Send + Sync + 'static,
        A: KernelArgs<F>,
    {
        same_context(self.runtime(), stream.context(), "a cudarc stream")?;
        let named = stream.clone();
        // Kept alive until a synchronize waited it out (`Gpu::own_streams`).
        let keep: Arc<dyn std::any::Any + Send + Sync> = Arc::new(stream.clone());
        let on = (stream.cu_stream() as usize != 0).then_some((stream.cu_stream() as usize, keep));
        self.launch_on_stream(kernel, cfg.into(), args, on, move |staging| {
            staging.stream = Some(named)
        })
    }
}

/// The stream a launch staged in `staging` goes on, as cudarc sees it: the one named
/// ([`Kernels::launch_on`]), or the null stream of `ctx`, where [`Kernels::launch`] goes.
fn launch_stream(staging: &Staging, ctx: &Arc<CudaContext>) -> Arc<CudaStream> {
    staging.stream.clone().unwrap_or_else(|| ctx.default_stream())
}

/// cudarc's device memory for a `&[T]` parameter: the kernel reads it where it is, no copy.
/// The launch's stream waits for cudarc's last write to it, and cudarc's next write waits
/// for the kernel (cudarc's events, as its own launches use them). A slice of another
/// context, or a runtime not on CUDA, is refused.
// SAFETY: `check` refuses a slice of another context or a runtime not on CUDA; `stage`'s
// after-launch step uses the slice while the launch call, which borrows it, runs.
unsafe impl<T: Plain> KernelParam<RawSlice<[T]>> for &CudaSlice<T> {
    fn check(&self, launch: &Launch<'_>) -> Result<()> {
        same_context(launch.runtime(), self.context(), "a CudaSlice")
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<[T]> {
        let stream = launch_stream(staging, self.context());
        let (ptr, record) = self.device_ptr(&stream);
        // The read is recorded once the launch is enqueued, below, not before it.
        std::mem::forget(record);
        let slice: *const CudaSlice<T> = self;
        staging.after_launch.push(Box::new(move || {
            // SAFETY: `after_launch` runs inside `Kernels::launch_on_stream`, while the
            // caller's borrow of the slice, an argument of that call, is alive (the
            // trait's contract: a forwarding implementation passes nothing shorter-lived).
            let slice = unsafe { &*slice };
            drop(slice.device_ptr(&stream));
        }));
        // SAFETY: `len` elements of `T` at `ptr` in device memory of the runtime's context
        // (checked), which the caller keeps alive while the kernel runs as with any of
        // cudarc's launches.
        unsafe { RawSlice::new(ptr, self.len() as u64) }
    }
}

/// cudarc's device memory for an `Out<T>` parameter: the kernel writes it in place. The
/// launch's stream waits for cudarc's reads and writes of it, and cudarc's next use waits
/// for the kernel; so two launches given one slice run one after the other, on any streams,
/// which `Out::write_own` counts on (with cudarc's event tracking disabled, its `unsafe`
/// `disable_event_tracking`, that is yours to ensure). Refused as for `&CudaSlice<T>`.
// SAFETY: as for `&CudaSlice<T>`.
unsafe impl<T: Plain> KernelParam<RawSlice<[Cell<T>]>> for &mut CudaSlice<T> {
    fn check(&self, launch: &Launch<'_>) -> Result<()> {
        same_context(launch.runtime(), self.context(), "a CudaSlice")
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<[Cell<T>]> {
        let stream = launch_stream(staging, self.context());
        let len = self.len() as u64;
        let (ptr, record) = self.device_ptr_mut(&stream);
        std::mem::forget(record);
        let slice: *mut CudaSlice<T> = self;
        staging.after_launch.push(Box::new(move || {
            // SAFETY: as for `&CudaSlice<T>`: the caller's `&mut` borrow is alive, and
            // nothing else uses it during the launch call.
            let slice = unsafe { &mut *slice };
            drop(slice.device_ptr_mut(&stream));
        }));
        // SAFETY: as for `&CudaSlice<T>`; the caller's `&mut` borrow keeps cudarc from
        // handing the memory to anything else during the launch call.
        unsafe { RawSlice::new(ptr, len) }
    }
}
