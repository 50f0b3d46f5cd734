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

use gpuio_device::param::{Plain, RawSlice};
use gpuio_device::Kernel;

use crate::backend::gpu::Arg;
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::memory::Mapping;
use crate::runtime::module::GpuModule;
use crate::runtime::Runtime;

/// A kernel parameter's raw form (`gpuio_device::param::Param::Raw`) as a GPU launch passes
/// it.
pub trait RawArg: Copy + Send + Sync + 'static {
    /// The value as the driver copies it into the kernel's parameter.
    fn arg(self) -> Arg;
}

macro_rules! raw_args {
    ($($t:ty => $variant:ident as $as:ty),* $(,)?) => {$(
        impl RawArg for $t {
            fn arg(self) -> Arg {
                // Signed values travel as their bits: the kernel reads the same type back.
                Arg::$variant(self as $as)
            }
        }

        // SAFETY: a number is passed by value: nothing to check, nothing borrowed.
        unsafe impl KernelParam<$t> for $t {
            fn stage(self, _: &mut Staging) -> $t {
                self
            }
        }
    )*};
}

raw_args! {
    u32 => U32 as u32,
    i32 => U32 as u32,
    u64 => U64 as u64,
    i64 => U64 as u64,
    usize => U64 as u64,
    isize => U64 as u64,
    f32 => F32 as f32,
    f64 => F64 as f64,
}

impl<T: ?Sized + 'static> RawArg for RawSlice<T> {
    fn arg(self) -> Arg {
        Arg::Slice {
            addr: self.addr(),
            len: self.len(),
        }
    }
}

/// An argument of a typed launch, for a kernel parameter whose raw form is `R`: a number
/// for a number parameter; for `&str`, a `&str` or a `String`; for `&[T]`, a `&[T]`, a
/// `&[T; N]` or a `Vec<T>`. Strings and slices are copied, at launch, to memory the kernel
/// reads ([`Staging`]), which lives until a synchronize finds no kernel running.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed for a kernel parameter that travels as `{R}`",
    label = "not an argument for this parameter",
    note = "a number parameter takes a number of its own type (u32, i32, u64, i64, usize, isize, f32, f64); a &str parameter (travels as RawSlice<str>) a &str or String; a &[T] parameter (RawSlice<[T]>) a &[T], &[T; N] or Vec<T>; an Out<T> parameter (RawSlice<[Cell<T>]>) a &mut Output<T> from Runtime::output"
)]
///
/// # Safety
/// What the launch does with it is what `stage` says: an implementation's `stage` may count
/// on `check` having returned `Ok` for the same value and launch (an [`Output`](crate::Output)
/// refuses there a launch beside another given it, which `Out::write_own` relies on), and
/// on the value's borrows living until the launch call returns (a cudarc slice's event is
/// recorded after the launch). So an implementation that hands its work to another
/// implementation's `stage` calls that one's `check` from its own `check` and passes a
/// value that lives as long as its own; one that makes the raw parameter itself answers
/// for what the kernel may do with it.
pub unsafe trait KernelParam<R>: Sized {
    /// Bytes it needs in the launch's staging memory (0 for a number).
    fn staged_len(&self) -> usize {
        0
    }

    /// An error if it cannot be passed to `launch` (an [`Output`](crate::Output) of another
    /// runtime, or one an earlier launch may still write beside this one); nothing for
    /// values that are copied.
    fn check(&self, launch: &Launch<'_>) -> Result<()> {
        let _ = launch;
        Ok(())
    }

    /// The raw parameter, the argument's data copied into `staging` if it has any.
    fn stage(self, staging: &mut Staging) -> R;
}

// SAFETY: copied into the launch's staging memory: nothing to check, nothing borrowed
// past `stage`.
unsafe impl KernelParam<RawSlice<str>> for &str {
    fn staged_len(&self) -> usize {
        Staging::room_for(self.as_bytes())
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<str> {
        let at = staging.put(self.as_bytes());
        // SAFETY: `put` copied the string's bytes (UTF-8) to `at` in the launch's staging
        // memory, which the runtime keeps until no kernel runs.
        unsafe { RawSlice::new(at, self.len() as u64) }
    }
}

// SAFETY: copied into the launch's staging memory: nothing to check, nothing borrowed
// past `stage`.
unsafe impl KernelParam<RawSlice<str>> for &&str {
    fn staged_len(&self) -> usize {
        (**self).staged_len()
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<str> {
        (*self).stage(staging)
    }
}

// SAFETY: copied into the launch's staging memory: nothing to check, nothing borrowed
// past `stage`.
unsafe impl KernelParam<RawSlice<str>> for String {
    fn staged_len(&self) -> usize {
        self.as_str().staged_len()
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<str> {
        self.as_str().stage(staging)
    }
}

// SAFETY: copied into the launch's staging memory: nothing to check, nothing borrowed
// past `stage`.
unsafe impl KernelParam<RawSlice<str>> for &String {
    fn staged_len(&self) -> usize {
        self.as_str().staged_len()
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<str> {
        self.as_str().stage(staging)
    }
}

// SAFETY: copied into the launch's staging memory: nothing to check, nothing borrowed
// past `stage`.
unsafe impl<T: Plain> KernelParam<RawSlice<[T]>> for &[T] {
    fn staged_len(&self) -> usize {
        Staging::room_for(self)
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<[T]> {
        let at = staging.put(self);
        // SAFETY: `put` copied the elements to `at`, aligned to 8 (at least `T`'s, `Plain`),
        // in the launch's staging memory, which the runtime keeps until no kernel runs.
        unsafe { RawSlice::new(at, self.len() as u64) }
    }
}

// SAFETY: copied into the launch's staging memory: nothing to check, nothing borrowed
// past `stage`.
unsafe impl<T: Plain, const N: usize> KernelParam<RawSlice<[T]>> for &[T; N] {
    fn staged_len(&self) -> usize {
        Staging::room_for(&self[..])
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<[T]> {
        (&self[..]).stage(staging)
    }
}

// SAFETY: copied into the launch's staging memory: nothing to check, nothing borrowed
// past `stage`.
unsafe impl<T: Plain> KernelParam<RawSlice<[T]>> for Vec<T> {
    fn staged_len(&self) -> usize {
        Staging::room_for(&self[..])
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<[T]> {
        (&self[..]).stage(staging)
    }
}

// SAFETY: copied into the launch's staging memory: nothing to check, nothing borrowed
// past `stage`.
unsafe impl<T: Plain> KernelParam<RawSlice<[T]>> for &Vec<T> {
    fn staged_len(&self) -> usize {
        Staging::room_for(&self[..])
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<[T]> {
        (&self[..]).stage(staging)
    }
}

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

/// A launch's staging memory: host memory the kernel can address (mapped for the GPU on a
/// GPU backend), into which the launch copies its string and slice arguments, each aligned
/// to 8 bytes. The runtime keeps it until a synchronize finds no kernel running: one
/// mapping per launch that has strings or slices, so a program that launches on and on
/// without such a synchronize keeps them all (and each counts against
/// `vm.max_map_count`).
pub struct Staging {
    host: *mut u8,
    device: u64,
    used: usize,
    len: usize,
    /// What arguments do once the launch is enqueued (a cudarc slice records that the
    /// kernel uses it, so that cudarc's later work on it waits for the kernel).
    pub(crate) after_launch: Vec<Box<dyn FnOnce()>>,
    /// The in-order queue the launch goes on ([`Launch::queue`]).
    pub(crate) queue: Option<usize>,
    /// The cudarc stream the launch goes on, where the caller named one
    /// ([`Kernels::launch_on`]); else the null stream.
    #[cfg(feature = "cudarc")]
    pub(crate) stream: Option<std::sync::Arc<cudarc::driver::CudaStream>>,
}

impl Staging {
    /// `len` bytes at `host`, which kernels address as `device`.
    fn new(host: *mut u8, device: u64, len: usize) -> Staging {
        Staging {
            host,
            device,
            used: 0,
            len,
            after_launch: Vec::new(),
            queue: None,
            #[cfg(feature = "cudarc")]
            stream: None,
        }
    }

    /// No memory: for arguments that need none.
    fn empty() -> Staging {
        Staging::new(std::ptr::null_mut(), 0, 0)
    }

    /// Bytes `items` takes, with its alignment padding.
    fn room_for<T: Copy>(items: &[T]) -> usize {
        std::mem::size_of_val(items).next_multiple_of(8)
    }

    /// Copies `items` in; their address in device code (for none, 8: an aligned address
    /// that the kernel never reads).
    fn put<T: Copy>(&mut self, items: &[T]) -> u64 {
        let n = std::mem::size_of_val(items);
        if n == 0 {
            return 8;
        }
        assert!(
            self.used + n <= self.len,
            "staging overflow: the staged lengths were summed wrong"
        );
        // SAFETY: `host + used .. + n` lies in the staging mapping (checked above), which no
        // kernel reads yet; `items` is `n` readable bytes; they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(items.as_ptr() as *const u8, self.host.add(self.used), n) };
        let at = self.device + self.used as u64;
        self.used += n.next_multiple_of(8);
        at
    }
}

/// The arguments of a launch of a kernel whose host function is `F`: a tuple of one
/// [`KernelParam`] per parameter, in order (`()` for none, `(n,)` for one).
#[diagnostic::on_unimplemented(
    message = "a kernel of type `{F}` cannot be launched with the arguments `{Self}`",
    label = "these arguments do not match the kernel's parameters",
    note = "pass a tuple of the kernel's parameters, in order: `()` for none, `(n,)` for one; a number of the parameter's own type (u32, i32, u64, i64, usize, isize, f32, f64), a &str or String for &str, a &[T], &[T; N] or Vec<T> for &[T]"
)]
///
/// # Safety
/// `check` checks every argument ([`KernelParam::check`]) and `stage` stages them in order:
/// the launch calls `stage` only after `check` returned `Ok`. The tuples of
/// [`KernelParam`]s implement it; a type of your own has no need to.
pub unsafe trait KernelArgs<F>: Sized {
    /// The parameters as they travel (a tuple of `Param::Raw`s).
    type Raw: Copy + Send + Sync + 'static;

    /// Bytes the arguments need in the launch's staging memory.
    fn staged_len(&self) -> usize;

    /// An error if one of them cannot be passed to `launch` ([`KernelParam::check`]).
    fn check(&self, launch: &Launch<'_>) -> Result<()>;

    /// The raw parameters, strings and slices copied into `staging`.
    fn stage(self, staging: &mut Staging) -> Self::Raw;

    /// The raw parameters as a by-name GPU launch passes them.
    fn args(raw: &Self::Raw) -> Vec<Arg>;

    /// Calls `f` with the raw parameters (one CPU-backend thread's kernel).
    fn call(raw: &Self::Raw, f: &F);
}

macro_rules! kernel_args {
    ($(($($a:ident $r:ident),*)),* $(,)?) => {$(
        #[allow(non_snake_case, clippy::unused_unit)]
        // SAFETY: `check` checks each argument, `stage` stages each in order.
        unsafe impl<$($a: KernelParam<$r>, $r: RawArg),*> KernelArgs<fn($($r),*)> for ($($a,)*) {
            type Raw = ($($r,)*);

            fn staged_len(&self) -> usize {
                let ($($a,)*) = self;
                0 $(+ $a.staged_len())*
            }

            #[allow(unused_variables)]
            fn check(&self, launch: &Launch<'_>) -> Result<()> {
                let ($($a,)*) = self;
                $($a.check(launch)?;)*
                Ok(())
            }

            #[allow(unused_variables)]
            fn stage(self, staging: &mut Staging) -> Self::Raw {
                let ($($a,)*) = self;
                ($($a.stage(staging),)*)
            }

            fn args(raw: &Self::Raw) -> Vec<Arg> {
                let ($($r,)*) = *raw;
                vec![$($r.arg()),*]
            }

            fn call(raw: &Self::Raw, f: &fn($($r),*)) {
                let ($($r,)*) = *raw;
                f($($r),*)
            }
        }
    )*};
}

kernel_args! {
    (),
    (A RA),
    (A RA, B RB),
    (A RA, B RB, C RC),
    (A RA, B RB, C RC, D RD),
    (A RA, B RB, C RC, D RD, E RE),
    (A RA, B RB, C RC, D RD, E RE, G RG),
    (A RA, B RB, C RC, D RD, E RE, G RG, H RH),
    (A RA, B RB, C RC, D RD, E RE, G RG, H RH, I RI),
    (A RA, B RB, C RC, D RD, E RE, G RG, H RH, I RI, J RJ),
    (A RA, B RB, C RC, D RD, E RE, G RG, H RH, I RI, J RJ, K RK),
    (A RA, B RB, C RC, D RD, E RE, G RG, H RH, I RI, J RJ, K RK, L RL),
    (A RA, B RB, C RC, D RD, E RE, G RG, H RH, I RI, J RJ, K RK, L RL, M RM),
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
/// // `kernels::OBJECTS`: the table gpuio-linker's `Kernels::build` writes.
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

#[cfg(test)]
mod tests {
    use super::*;

    type Three = fn(u32, i64, f32);

    #[test]
    fn numbers_travel_as_the_kernels_parameters() {
        let raw = <(u32, i64, f32) as KernelArgs<Three>>::stage((7, -2, 1.5), &mut Staging::empty());
        let args = <(u32, i64, f32) as KernelArgs<Three>>::args(&raw);
        assert_eq!(args.len(), 3);
        assert!(matches!(args[0], Arg::U32(7)));
        assert!(matches!(args[1], Arg::U64(v) if v as i64 == -2));
        assert!(matches!(args[2], Arg::F32(v) if v == 1.5));
        assert!(<() as KernelArgs<fn()>>::args(&()).is_empty());
    }

    #[test]
    fn strings_and_slices_are_copied_aligned_into_the_staging_memory() {
        type F = fn(RawSlice<str>, u32, RawSlice<[f64]>, RawSlice<[u8]>);
        let args = ("héllo", 3u32, vec![1.5f64, -2.0], &[][..]);
        let len = KernelArgs::<F>::staged_len(&args);
        assert_eq!(len, 8 + 16);
        let mut memory = vec![0u64; len / 8];
        let base = memory.as_mut_ptr() as u64;
        let mut staging = Staging::new(memory.as_mut_ptr() as *mut u8, base, len);
        type Args<'a> = (&'a str, u32, Vec<f64>, &'a [u8]);
        let (s, n, v, e) = KernelArgs::<F>::stage(args, &mut staging);
        assert_eq!((s.addr(), s.len(), n), (base, 6, 3));
        assert_eq!((v.addr(), v.len()), (base + 8, 2));
        assert!(e.is_empty());
        // SAFETY: `memory` holds what was staged, at the addresses given.
        unsafe {
            assert_eq!(<&str as gpuio_device::param::Param>::from_raw(s), "héllo");
            assert_eq!(<&[f64] as gpuio_device::param::Param>::from_raw(v), [1.5, -2.0]);
        }
        let gpu = <Args as KernelArgs<F>>::args(&(s, n, v, e));
        assert!(matches!(gpu[0], Arg::Slice { addr, len: 6 } if addr == base));
        assert_eq!(Arg::amdgcn(&gpu).len(), 7);
    }
}
