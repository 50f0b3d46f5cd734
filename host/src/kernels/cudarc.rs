//! Typed launches with cudarc's habits (the `cudarc` feature): [`Kernels::launch_on`] a
//! cudarc stream, and cudarc's device memory as kernel parameters (`&CudaSlice<T>` for a
//! `&[T]`, `&mut CudaSlice<T>` for an `Out<T>`), ordered with cudarc's own work by its
//! events.

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use gpuio_device::param::{Plain, RawSlice};
use gpuio_device::Kernel;

use super::{KernelArgs, KernelParam, Kernels, Launch, Staging};
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::runtime::Runtime;

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
