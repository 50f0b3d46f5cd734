//! Typed launches: a kernel crate's kernels, launched on whichever backend the runtime has,
//! with their arguments checked by the compiler ([`Kernels`], [`KernelArgs`]).
//!
//! `gpuio_device::kernel!` gives each kernel, in the host build of its crate, a
//! [`Kernel`]`<fn(..)>` constant: the GPU entry point's name and the host function, which
//! takes the parameters as they travel (`gpuio_device::param::Param::Raw`: numbers as
//! themselves, `&str` and `&[T]` as a `RawSlice`). A launch takes that constant and a tuple
//! of arguments, one [`KernelParam`] per parameter, or the call does not compile. Strings
//! and slices are copied into host memory the kernel can address ([`Staging`]), kept until a
//! synchronize finds no kernel running. On a GPU the runtime launches the entry point by
//! name; on the CPU backend each thread calls the function.

use gpuio_device::Kernel;

use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::memory::Mapping;
use crate::runtime::module::GpuModule;
use crate::runtime::Runtime;

mod args;
#[cfg(feature = "cudarc")]
mod cudarc;

pub use args::{KernelArgs, KernelParam, RawArg, Staging};

/// A launch as its arguments' checks see it ([`KernelParam::check`]).
pub struct Launch<'a> {
    rt: &'a Runtime,
    queue: Option<usize>,
}

impl<'a> Launch<'a> {
    /// The runtime it goes to.
    pub fn runtime(&self) -> &'a Runtime {
        self.rt
    }

    /// The in-order queue it goes on, where it has one: a CUDA stream, by its address (0:
    /// the null stream, where `Kernels::launch` goes), after every earlier launch on that
    /// stream. `None` where a launch may run beside earlier ones: the CPU backend (each
    /// launch on threads of its own), AMD GPUs (gpuio's HSA queue, and HIP's streams for
    /// attached modules).
    pub fn queue(&self) -> Option<usize> {
        self.queue
    }
}

/// Runs a launch's `after_launch` steps when dropped: after the launch, and also where it
/// failed or unwound once the kernel may have been enqueued.
struct AfterLaunch(Vec<Box<dyn FnOnce()>>);

impl Drop for AfterLaunch {
    fn drop(&mut self) {
        for after in self.0.drain(..) {
            after();
        }
    }
}

/// A kernel crate's kernels in a runtime, launched the same way on every backend: on a GPU
/// the code object [`Runtime::kernels`] loaded for it, on the CPU backend the host build of
/// the kernels, which needs nothing loaded.
///
/// ```
/// # mod my_kernels {
/// #     gpuio_device::kernel! {
/// #         pub fn table(label: &str, n: u32, scale: f64) {
/// #             let i = gpuio_device::global_thread_idx();
/// #             if i < u64::from(n) {
/// #                 gpuio_device::println!("{label} {i} {}", i as f64 * scale);
/// #             }
/// #         }
/// #     }
/// # }
/// # mod kernels { pub const OBJECTS: &[(&str, &[u8])] = &[]; }
/// use gpuio_host::{Backend, LaunchConfig, Runtime};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// // `kernels::OBJECTS`: the table gpuio-linker's `KernelCrate::build` writes.
/// let kernels = rt.kernels(kernels::OBJECTS)?;
/// let label = String::from("row");
/// kernels.launch(my_kernels::table, LaunchConfig::linear(1, 8), (&label, 8, 0.5))?;
/// rt.synchronize()?;
/// # Ok::<(), gpuio_host::Error>(())
/// ```
///
/// A wrong argument does not compile:
///
/// ```compile_fail
/// # mod my_kernels { gpuio_device::kernel! { pub fn table(label: &str, n: u32, scale: f64) {} } }
/// # let rt = gpuio_host::Runtime::builder().backend(gpuio_host::Backend::Cpu).build()?;
/// let kernels = rt.kernels(&[])?;
/// kernels.launch(my_kernels::table, gpuio_host::LaunchConfig::linear(1, 8), ("row", 8))?; // one missing
/// # Ok::<(), gpuio_host::Error>(())
/// ```
pub struct Kernels<'rt> {
    rt: &'rt Runtime,
    module: Option<GpuModule<'rt>>,
}

impl<'rt> Kernels<'rt> {
    /// Launches `kernel` on the threads of `cfg` with `args` (asynchronous;
    /// [`Runtime::synchronize`] waits). On a GPU, as [`GpuModule::launch_with`] by the
    /// kernel's name; on the CPU backend, as [`Runtime::launch_with`], every thread calling
    /// the kernel's host function.
    ///
    /// `cfg` is a [`LaunchConfig`], or with the `cudarc` feature cudarc's.
    pub fn launch<F, A>(&self, kernel: Kernel<F>, cfg: impl Into<LaunchConfig>, args: A) -> Result<()>
    where
        F: Copy + Send + Sync + 'static,
        A: KernelArgs<F>,
    {
        self.launch_on_stream(kernel, cfg.into(), args, None, |_| {})
    }

    /// Launches on `stream` (a `CUstream` as an address; 0: the null stream), after
    /// `name_stream` told the staging which cudarc stream that is.
    pub(crate) fn launch_on_stream<F, A>(
        &self,
        kernel: Kernel<F>,
        cfg: LaunchConfig,
        args: A,
        on: Option<crate::runtime::OwnStream>,
        name_stream: impl FnOnce(&mut Staging),
    ) -> Result<()>
    where
        F: Copy + Send + Sync + 'static,
        A: KernelArgs<F>,
    {
        crate::launch::check_launch_bounds(kernel.name(), &cfg, kernel.max_block_threads())?;
        // In order after earlier launches on its stream: CUDA's (not the CPU backend's
        // threads, nor AMD's queues).
        let queue = self
            .module
            .as_ref()
            .and_then(|m| m.cuda())
            .map(|_| on.as_ref().map_or(0, |s| s.0));
        let launch = Launch { rt: self.rt, queue };
        args.check(&launch)?;
        let len = args.staged_len();
        let mut staged = if len == 0 { None } else { Some(self.rt.staging(len)?) };
        let mut nothing = Staging::empty();
        let staging = staged.as_mut().map_or(&mut nothing, |(_, s)| s);
        staging.queue = queue;
        name_stream(staging);
        let raw = args.stage(staging);
        // Run after the launch, whatever becomes of it.
        let _after = AfterLaunch(std::mem::take(&mut staging.after_launch));
        let launch = || match &self.module {
            Some(module) => module.launch_on_stream(kernel.name(), cfg, &A::args(&raw), on.as_ref()),
            None => {
                let (f, call): (F, fn(&A::Raw, &F)) = (*kernel.function(), A::call);
                self.rt.launch_with(cfg, move || call(&raw, &f))
            }
        };
        match staged {
            None => launch(),
            Some((memory, _)) => self.rt.launch_staged(memory, launch),
        }
    }

    /// The runtime the kernels run in.
    #[cfg(feature = "cudarc")]
    pub(crate) fn runtime(&self) -> &'rt Runtime {
        self.rt
    }

    /// The GPU code object the kernels run from; `None` on the CPU backend.
    pub fn module(&self) -> Option<&GpuModule<'rt>> {
        self.module.as_ref()
    }
}

impl<'rt> From<GpuModule<'rt>> for Kernels<'rt> {
    /// Typed launches of the kernels in a module loaded or attached by other means.
    fn from(module: GpuModule<'rt>) -> Kernels<'rt> {
        Kernels {
            rt: module.runtime(),
            module: Some(module),
        }
    }
}

/// A launch's staging memory: the mapping, and whether it is mapped for the GPU.
pub(crate) type StagedMemory = (Mapping, bool);

impl Runtime {
    /// Staging memory of `len` bytes for one launch's strings and slices.
    fn staging(&self, len: usize) -> Result<(StagedMemory, Staging)> {
        let map = Mapping::new(len).map_err(|source| Error::Os {
            what: "mmap of a launch's string and slice arguments",
            source,
        })?;
        let device = match self.device() {
            None => map.as_ptr(),
            // SAFETY: the mapping lives until it is unmapped: in `Shared::staged` once its
            // launch was tried (`launch_staged`), until no kernel runs.
            Some(d) => unsafe { d.map_host(map.as_ptr(), len)? },
        } as u64;
        let staging = Staging::new(map.as_ptr(), device, len);
        Ok(((map, self.device().is_some()), staging))
    }

    /// Runs `launch`, which reads `memory`, and keeps `memory` until a synchronize finds no
    /// kernel running ([`Runtime::release_staged`]), whether the launch succeeded or not (a
    /// CPU launch that failed part-way may have started threads). The list's lock is held
    /// across the launch, so that a synchronize that releases the list either ran before
    /// this launch or sees it pending.
    fn launch_staged(&self, memory: StagedMemory, launch: impl FnOnce() -> Result<()>) -> Result<()> {
        let shared = self.shared();
        let mut staged = shared.staged.lock().unwrap_or_else(|e| e.into_inner());
        let result = launch();
        staged.push(memory);
        result
    }

    /// Frees the staging memory of launches that have ended: all of it, when no kernel is
    /// pending. Under the list's lock (see `launch_staged`), taken only if free: a launch
    /// that fails part-way synchronizes from inside `launch_staged`, which holds it, and a
    /// later synchronize frees what this one leaves.
    pub(crate) fn release_staged(&self) {
        let shared = self.shared();
        let mut staged = match shared.staged.try_lock() {
            Ok(staged) => staged,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        if staged.is_empty() || self.kernels_pending() {
            return;
        }
        for (map, mapped) in staged.drain(..) {
            if let (true, Some(d)) = (mapped, self.device()) {
                // SAFETY: mapped in `staging`; no kernel is pending, so none reads it.
                unsafe { d.unmap_host(map.as_ptr()) };
            }
        }
    }

    /// The kernels of a kernel crate, for typed launches ([`Kernels::launch`]): on a GPU
    /// runtime, the code object among `objects` for this GPU, as
    /// [`Runtime::load_matching`] picks it (the `OBJECTS` table gpuio-linker writes holds
    /// every target built); on the CPU backend nothing is loaded and `objects` is not read.
    pub fn kernels(&self, objects: &[(&str, &[u8])]) -> Result<Kernels<'_>> {
        let module = match self.backend() {
            crate::backend::Backend::Cpu => None,
            _ => Some(self.load_matching(objects)?),
        };
        Ok(Kernels { rt: self, module })
    }
}
