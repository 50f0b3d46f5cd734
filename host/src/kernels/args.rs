//! A typed launch's arguments: how each travels ([`RawArg`]), how a host value becomes one
//! ([`KernelParam`]: numbers as themselves, strings and slices copied into [`Staging`]), and
//! a tuple of them for a kernel's parameters ([`KernelArgs`]).

use gpuio_device::param::{Plain, RawSlice};

use super::Launch;
use crate::backend::gpu::Arg;
use crate::error::Result;

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
    /// ([`Kernels::launch_on`](super::Kernels::launch_on)); else the null stream.
    #[cfg(feature = "cudarc")]
    pub(crate) stream: Option<std::sync::Arc<cudarc::driver::CudaStream>>,
}

impl Staging {
    /// `len` bytes at `host`, which kernels address as `device`.
    pub(super) fn new(host: *mut u8, device: u64, len: usize) -> Staging {
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
    pub(super) fn empty() -> Staging {
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
