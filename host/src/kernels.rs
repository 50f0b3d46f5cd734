//! Typed launches: a kernel crate's kernels, launched on whichever backend the runtime has,
//! with their arguments checked by the compiler ([`Kernels`], [`KernelArgs`]).
//!
//! `gpuio_device::kernel!` gives each kernel, in the host build of its crate, a
//! [`Kernel`]`<fn(..)>` constant: the GPU entry point's name and the host function. A launch
//! takes that constant and a tuple of arguments; the tuple must be the function's
//! parameters, in order, or the call does not compile. On a GPU the runtime launches the
//! entry point by name with those arguments; on the CPU backend each thread calls the
//! function with them.

use gpuio_device::Kernel;

use crate::backend::gpu::Arg;
use crate::error::Result;
use crate::launch::LaunchConfig;
use crate::runtime::module::GpuModule;
use crate::runtime::Runtime;

/// A kernel parameter a typed launch passes: a plain number, copied to every thread.
///
/// Raw pointers are not parameters here: a GPU kernel's pointer is a device address, which
/// the host holds as a `u64` (a kernel that takes one declares it `u64`), and a by-name
/// launch ([`GpuModule::launch`]) still passes any [`Arg`].
pub trait KernelParam: Copy + Send + Sync + 'static {
    /// The value as the driver copies it into the kernel's parameter.
    fn arg(self) -> Arg;
}

macro_rules! kernel_params {
    ($($t:ty => $variant:ident as $as:ty),* $(,)?) => {$(
        impl KernelParam for $t {
            fn arg(self) -> Arg {
                // Signed values travel as their bits: the kernel reads the same type back.
                Arg::$variant(self as $as)
            }
        }
    )*};
}

kernel_params! {
    u32 => U32 as u32,
    i32 => U32 as u32,
    u64 => U64 as u64,
    i64 => U64 as u64,
    f32 => F32 as f32,
    f64 => F64 as f64,
}

/// The arguments of a launch of a kernel whose host function is `F`: a tuple of its
/// parameters' types, in order (`()` for none, `(n,)` for one).
#[diagnostic::on_unimplemented(
    message = "a kernel of type `{F}` cannot be launched with the arguments `{Self}`",
    label = "these arguments do not match the kernel's parameters",
    note = "pass a tuple of the kernel's parameters, in order and of the same types: `()` for none, `(n,)` for one; each a u32, i32, u64, i64, f32 or f64"
)]
pub trait KernelArgs<F>: Copy + Send + Sync + 'static {
    /// The arguments as a by-name GPU launch passes them.
    fn args(&self) -> Vec<Arg>;

    /// Calls `f` with the arguments (one CPU-backend thread's kernel).
    fn call(&self, f: &F);
}

macro_rules! kernel_args {
    ($(($($a:ident),*)),* $(,)?) => {$(
        impl<$($a: KernelParam),*> KernelArgs<fn($($a),*)> for ($($a,)*) {
            fn args(&self) -> Vec<Arg> {
                #[allow(non_snake_case)]
                let ($($a,)*) = *self;
                vec![$($a.arg()),*]
            }

            fn call(&self, f: &fn($($a),*)) {
                #[allow(non_snake_case)]
                let ($($a,)*) = *self;
                f($($a),*)
            }
        }
    )*};
}

kernel_args! {
    (),
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, G),
    (A, B, C, D, E, G, H),
    (A, B, C, D, E, G, H, I),
    (A, B, C, D, E, G, H, I, J),
    (A, B, C, D, E, G, H, I, J, K),
    (A, B, C, D, E, G, H, I, J, K, L),
    (A, B, C, D, E, G, H, I, J, K, L, M),
}

/// A kernel crate's kernels in a runtime, launched the same way on every backend: on a GPU
/// the code object [`Runtime::kernels`] loaded for it, on the CPU backend the host build of
/// the kernels, which needs nothing loaded.
///
/// ```
/// # mod my_kernels {
/// #     gpuio_device::kernel! {
/// #         pub fn table(n: u32, scale: f64) {
/// #             let i = gpuio_device::global_thread_idx();
/// #             if i < u64::from(n) {
/// #                 gpuio_device::println!("{i} {}", i as f64 * scale);
/// #             }
/// #         }
/// #     }
/// # }
/// # mod kernels { pub const OBJECTS: &[(&str, &[u8])] = &[]; }
/// use gpuio_host::{Backend, LaunchConfig, Runtime};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// // `kernels::OBJECTS`: the table gpuio-linker's `Kernels::build` writes.
/// let kernels = rt.kernels(kernels::OBJECTS)?;
/// kernels.launch(my_kernels::table, LaunchConfig::linear(1, 8), (8, 0.5))?;
/// rt.synchronize()?;
/// # Ok::<(), gpuio_host::Error>(())
/// ```
///
/// A wrong argument does not compile:
///
/// ```compile_fail
/// # mod my_kernels { gpuio_device::kernel! { pub fn table(n: u32, scale: f64) {} } }
/// # let rt = gpuio_host::Runtime::builder().backend(gpuio_host::Backend::Cpu).build()?;
/// let kernels = rt.kernels(&[])?;
/// kernels.launch(my_kernels::table, gpuio_host::LaunchConfig::linear(1, 8), (8,))?; // one missing
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
    pub fn launch<F, A>(&self, kernel: Kernel<F>, cfg: LaunchConfig, args: A) -> Result<()>
    where
        F: Copy + Send + Sync + 'static,
        A: KernelArgs<F>,
    {
        match &self.module {
            Some(module) => module.launch_with(kernel.name(), cfg, &args.args()),
            None => {
                let f = *kernel.function();
                self.rt.launch_with(cfg, move || args.call(&f))
            }
        }
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

impl Runtime {
    /// The kernels of a kernel crate, for typed launches ([`Kernels::launch`]): on a GPU
    /// runtime, the code object among `objects` for this GPU, as
    /// [`Runtime::load_matching`] picks it (the `OBJECTS` table gpuio-linker writes holds
    /// every target built); on the CPU backend nothing is loaded and `objects` is not read.
    pub fn kernels(&self, objects: &[(&str, &[u8])]) -> Result<Kernels<'_>> {
        let module = match self.backend() {
            crate::Backend::Cpu => None,
            _ => Some(self.load_matching(objects)?),
        };
        Ok(Kernels { rt: self, module })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three(_: u32, _: i64, _: f32) {}

    #[test]
    fn arguments_travel_as_the_kernels_parameters() {
        let args = (7u32, -2i64, 1.5f32).args();
        assert_eq!(args.len(), 3);
        assert!(matches!(args[0], Arg::U32(7)));
        assert!(matches!(args[1], Arg::U64(v) if v as i64 == -2));
        assert!(matches!(args[2], Arg::F32(v) if v == 1.5));
        assert!(KernelArgs::<fn()>::args(&()).is_empty());
    }

    #[test]
    fn a_cpu_thread_calls_the_function_with_the_arguments() {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEEN: AtomicU64 = AtomicU64::new(0);
        fn add(a: u32, b: u64) {
            SEEN.store(u64::from(a) + b, Ordering::Relaxed);
        }
        (3u32, 4u64).call(&(add as fn(u32, u64)));
        assert_eq!(SEEN.load(Ordering::Relaxed), 7);
        let _: fn(u32, i64, f32) = three;
    }
}
