//! What a kernel crate declares: its kernels ([`kernel!`](crate::kernel)) and, if it wants
//! panics reported, gpuio's panic handler ([`panic_handler!`](crate::panic_handler)).
//!
//! A kernel crate is `#![no_std]` and builds for the GPUs (with `gpuio-linker`) and for the
//! host, where each kernel is a [`Kernel`]: its name, for a GPU launch, and its function,
//! which the CPU backend calls:
//!
//! ```
//! #![no_std]
//! # extern crate std; // only for this doctest's host build
//! use gpuio_device::{kernel, println};
//!
//! kernel! {
//!     /// Prints one line per thread.
//!     pub fn hello(n: u32) {
//!         println!("hello {n} from thread {}", gpuio_device::global_thread_idx());
//!     }
//! }
//!
//! // On GPU targets a panic then prints `kernel thread T (block B, thread I) panicked at
//! // FILE:LINE:COL: MESSAGE` on the runtime's stderr before the kernel traps.
//! gpuio_device::panic_handler!();
//! # fn main() {}
//! ```

use core::fmt;
use core::panic::Location;
use core::sync::atomic::Ordering;

use crate::protocol::context::STREAMS;

/// What a kernel thread whose body returned `Err` unwinds with on host builds (see
/// [`kernel!`](crate::kernel)): its report's text.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub use crate::protocol::arch::host::KernelFailed;

/// Declares kernels: on GPU targets each becomes an exported (`#[no_mangle]`)
/// `extern "gpu-kernel"` entry point; on the host, a constant of the same name, a
/// [`Kernel`], which the host's typed launch takes (`gpuio_host::Kernels::launch`: the
/// compiler checks the arguments against the parameters; the CPU backend runs it on its
/// threads). A kernel whose parameters are all numbers or raw pointers can also be called
/// as a function on the host, `my_kernels::table(n)`; one with `&str` or `&[T]` parameters
/// takes them there as they travel (a [`RawSlice`](crate::param::RawSlice), made only by
/// `unsafe` code), so it is launched. `*my_kernels::table` is the plain `fn`, for code
/// that wants a function pointer or an `Fn` (`Runtime::launch`).
///
/// Parameters are numbers (`u32`, `i32`, `u64`, `i64`, `usize`, `isize`, `f32`, `f64`;
/// smaller integers and `bool` for direct calls and by-name launches only), raw pointers
/// (passed by a by-name launch on a GPU, or a direct call on the host), `&str` and `&[T]` of
/// plain numbers (which the host's typed launch copies where the kernel reads them), and
/// [`param::Out<T>`](crate::param::Out) for results (the host passes an `Output` and reads
/// it after a synchronize): the types of [`param::Param`](crate::param::Param), which says
/// how each travels. Their
/// lifetimes are the launch's: a kernel cannot keep a `&str` beyond it, unless it declares
/// the parameter `&'static str`, which it must not (the copy goes at the synchronize). A
/// parameter is a name, `mut` and a name, or `_` (`n: u32`, `mut n: u32`, `_: f32`), and each
/// kernel is `pub fn`.
/// The crate using it needs no unstable feature of its own: the `gpu-kernel` ABI is allowed
/// inside this macro.
///
/// A kernel returns nothing or `Result<(), E>` with `E:` [`Display`](fmt::Display), so that
/// its body can use `?` on the device calls, which return `Result`s. A thread whose body
/// returns `Err` is reported as a panic is, on the runtime's stderr, `kernel thread T (block
/// B, thread I) of KERNEL returned Err: ERROR`, and then ends as a panicking thread does: on
/// a GPU it traps (ending the kernel), on the CPU backend it unwinds; the host's
/// `synchronize` returns the kernel failure. As with a panic, on a GPU that trap leaves the
/// GPU context unusable: the runtime refuses any later work, so return `Err` for what ends
/// the program, and handle in the kernel what it can recover from. Called as a function on
/// the host outside a launch, the report goes to std's stderr and the thread unwinds with
/// a [`KernelFailed`](crate::entry::KernelFailed).
///
/// Attributes before a kernel (doc comments, `#[allow]`, `#[cfg]`) go on the entry point on
/// GPU targets and on the constant on the host, so an attribute only functions take
/// (`#[inline]`) is refused on host builds. One is the macro's own:
/// `#[launch_bounds(MAX)]` or `#[launch_bounds(MAX, MIN_BLOCKS)]`, CUDA C++'s
/// `__launch_bounds__` (each a constant expression): the kernel is launched with blocks of
/// at most `MAX` threads (1 to 1,024; and, where given, wants at least `MIN_BLOCKS` blocks
/// an SM). On NVIDIA the JIT compiles the kernel for that (PTX's `.maxntid` and
/// `.minnctapersm`, which `gpuio-linker` writes into the PTX it builds), so it may give each
/// thread up to 65,536 / `MAX` registers and weigh them against loads in flight knowing the
/// block size: a register-heavy kernel with a print that never runs keeps its loop's
/// schedule so (docs/PROTOCOL.md, "A register-heavy loop"). What it costs: a typed launch
/// with larger blocks is refused on every backend (it checks the constant,
/// [`Kernel::max_block_threads`]), and so is a launch by name on NVIDIA (the PTX's
/// directive); a launch the program makes itself (cudarc's, a closure on the CPU backend)
/// is the driver's to refuse. On AMD the bound is checked at the typed launch but not given
/// to the compiler.
///
/// ```
/// gpuio_device::kernel! {
///     /// Adds `a` to `n` floats at `x`.
///     pub fn add(x: *mut f32, n: u32, a: f32) {
///         let i = gpuio_device::global_thread_idx();
///         if i < n as u64 {
///             // SAFETY: the host passes `n` floats at `x`, one per thread.
///             unsafe { *x.add(i as usize) += a };
///         }
///     }
/// }
/// let mut v = [1.0f32; 4];
/// add(v.as_mut_ptr(), 4, 0.5); // on the host, outside a runtime: thread 0 only
/// assert_eq!(v, [1.5, 1.0, 1.0, 1.0]);
/// assert_eq!(add.name(), "add");
///
/// gpuio_device::kernel! {
///     /// Counts down from `n`, ignoring its second parameter.
///     pub fn countdown(mut n: u32, _: f32) {
///         while n > 0 {
///             n -= 1;
///         }
///     }
/// }
/// countdown(3, 0.0);
///
/// gpuio_device::kernel! {
///     /// Parses `n` as a digit; a thread whose `n` is not one ends, reported.
///     pub fn digit(n: u32) -> Result<(), core::char::CharTryFromError> {
///         let c = char::try_from(n)?;
///         gpuio_device::println!("{}", c.is_ascii_digit());
///         Ok(())
///     }
/// }
/// digit(0x37); // prints `true`
///
/// gpuio_device::kernel! {
///     /// Launched with blocks of at most 256 threads.
///     #[launch_bounds(256)]
///     pub fn bounded(n: u32) {
///         let _ = n;
///     }
/// }
/// assert_eq!(bounded.max_block_threads(), Some(256));
/// assert_eq!(digit.max_block_threads(), None);
/// // Outside a launch the report goes to std's stderr and the thread unwinds with it.
/// let caught = std::panic::catch_unwind(|| digit(0xD800)).unwrap_err();
/// assert!(caught.is::<gpuio_device::entry::KernelFailed>());
/// ```
///
/// A bound a block cannot have, or a form CUDA has and this does not, does not compile:
///
/// ```compile_fail
/// gpuio_device::kernel! {
///     #[launch_bounds(2000)] // more threads than a block has
///     pub fn too_many() {}
/// }
/// ```
///
/// ```compile_fail
/// gpuio_device::kernel! {
///     #[launch_bounds(256, 2, 4)] // CUDA 12's third number (blocks a cluster)
///     pub fn clustered() {}
/// }
/// ```
#[macro_export]
#[cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    allow_internal_unstable(abi_gpu_kernel)
)]
macro_rules! kernel {
    ($($(#[$($attr:tt)*])* pub fn $name:ident($($params:tt)*) $(-> $ret:ty)? $body:block)*) => {
        $(
            $crate::kernel!(@attrs [] [] [$(#[$($attr)*])*] $name ($($params)*) {$(-> $ret)?} $body);
        )*
    };
    // The attributes: `#[launch_bounds(..)]` taken out, the others kept for the entry point
    // and the constant. Doc comments go eight at a step where they can (each step is a
    // level of the compiler's macro recursion, 128 deep by default), the rest one at a time.
    (@attrs $kept:tt [$($bounds:tt)+] [#[launch_bounds $($args:tt)*] $($rest:tt)*] $($kernel:tt)*) => {
        ::core::compile_error!("a kernel takes one #[launch_bounds(..)]");
    };
    (@attrs $kept:tt [] [#[launch_bounds($max:expr $(, $min:expr)?)] $($rest:tt)*] $($kernel:tt)*) => {
        $crate::kernel!(@attrs $kept [$max $(, $min)?] [$($rest)*] $($kernel)*);
    };
    (@attrs $kept:tt $bounds:tt [#[launch_bounds $($args:tt)*] $($rest:tt)*] $($kernel:tt)*) => {
        ::core::compile_error!(
            "#[launch_bounds(MAX)] or #[launch_bounds(MAX, MIN_BLOCKS)]: the most threads a block \
             of the kernel has (1 to 1024), and the fewest blocks an SM should hold"
        );
    };
    (@attrs [$($kept:tt)*] $bounds:tt [
        #[doc = $d0:literal] #[doc = $d1:literal] #[doc = $d2:literal] #[doc = $d3:literal]
        #[doc = $d4:literal] #[doc = $d5:literal] #[doc = $d6:literal] #[doc = $d7:literal]
        $($rest:tt)*
    ] $($kernel:tt)*) => {
        $crate::kernel!(@attrs [$($kept)*
            #[doc = $d0] #[doc = $d1] #[doc = $d2] #[doc = $d3]
            #[doc = $d4] #[doc = $d5] #[doc = $d6] #[doc = $d7]
        ] $bounds [$($rest)*] $($kernel)*);
    };
    (@attrs [$($kept:tt)*] $bounds:tt [#[$($attr:tt)*] $($rest:tt)*] $($kernel:tt)*) => {
        $crate::kernel!(@attrs [$($kept)* #[$($attr)*]] $bounds [$($rest)*] $($kernel)*);
    };
    (@attrs $kept:tt $bounds:tt [] $name:ident $params:tt $ret:tt $body:block) => {
        $crate::kernel!(@params $kept $bounds $name [] $params $ret $body);
    };
    // The parameters, one at a time: each gets a name of its own for the entry point
    // (`raw`, distinct in each step of this recursion, macro hygiene), and keeps its pattern
    // (`n`, `mut n`, `_`) for the body's function.
    (@params $attrs:tt $bounds:tt $name:ident [$($done:tt)*] (mut $arg:ident : $ty:ty $(, $($rest:tt)*)?) $ret:tt $body:block) => {
        $crate::kernel!(@params $attrs $bounds $name [$($done)* (raw, mut $arg, $ty)] ($($($rest)*)?) $ret $body);
    };
    (@params $attrs:tt $bounds:tt $name:ident [$($done:tt)*] ($arg:tt : $ty:ty $(, $($rest:tt)*)?) $ret:tt $body:block) => {
        $crate::kernel!(@params $attrs $bounds $name [$($done)* (raw, $arg, $ty)] ($($($rest)*)?) $ret $body);
    };
    (@params [$($attr:tt)*] [$($max:expr $(, $min:expr)?)?] $name:ident [$(($raw:ident, $arg:pat_param, $ty:ty))*] () {$($ret:tt)*} $body:block) => {
        $($attr)*
        #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
        #[no_mangle]
        pub extern "gpu-kernel" fn $name($($raw: <$ty as $crate::param::Param>::Raw),*) {
            // The body in a function of its own: the lifetimes of its `&str` and `&[T]`
            // parameters are then the call's, not any the body might ask for.
            fn $name($($arg: $ty),*) $($ret)* $body
            $($crate::protocol::arch::mark_launch_bounds::<{ $max }, { 0 $(+ $min)? }>();)?
            // Counted as running until the body returns, for hang reports.
            let _running = $crate::protocol::context::count_running();
            // SAFETY: the host's launch passed each parameter as `Param` says.
            let returned = $name($(unsafe { <$ty as $crate::param::Param>::from_raw($raw) }),*);
            $crate::entry::Return::end(returned, ::core::stringify!($name))
        }

        $($attr)*
        #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
        #[allow(non_upper_case_globals)]
        pub const $name: $crate::Kernel<fn($(<$ty as $crate::param::Param>::Raw),*)> = {
            // The function lives inside the constant's initializer so that both can bear
            // the kernel's name. It takes the parameters as they travel, as the GPU entry
            // point does, and runs the body as that does.
            fn $name($($raw: <$ty as $crate::param::Param>::Raw),*) {
                fn $name($($arg: $ty),*) $($ret)* $body
                // SAFETY: as on the GPU: the typed launch staged each parameter.
                let returned = $name($(unsafe { <$ty as $crate::param::Param>::from_raw($raw) }),*);
                $crate::entry::Return::end(returned, ::core::stringify!($name))
            }
            $crate::Kernel::<fn($(<$ty as $crate::param::Param>::Raw),*)>::new(::core::stringify!($name), $name)
                $(.with_launch_bounds($max, 0 $(+ $min)?))?
        };
    };
}

/// A kernel as a host build of its crate sees it: the name of its GPU entry point and the
/// function the CPU backend runs, `F` being its signature (`fn(u32, f32)`).
///
/// [`kernel!`](crate::kernel) defines one per kernel, named as the kernel. It derefs to the
/// function, whose parameters are the kernel's as they travel
/// ([`Param::Raw`](crate::param::Param::Raw)): for numbers the numbers themselves, so
/// `my_kernels::table(n)` calls it. A host's typed launch takes it whole and checks the
/// arguments against `F` at compile time.
#[derive(Clone, Copy)]
pub struct Kernel<F> {
    name: &'static str,
    function: F,
    /// The most threads a block may have (`#[launch_bounds]`), if the kernel declares it.
    max_block_threads: Option<u32>,
}

impl<F> Kernel<F> {
    /// The kernel `name` (its GPU entry point's symbol) whose host build is `function`.
    pub const fn new(name: &'static str, function: F) -> Kernel<F> {
        Kernel {
            name,
            function,
            max_block_threads: None,
        }
    }

    /// The most threads a block of this kernel may have, where it declares that
    /// (`#[launch_bounds(MAX)]`); the host refuses a launch of larger blocks.
    pub const fn max_block_threads(&self) -> Option<u32> {
        self.max_block_threads
    }

    /// The GPU entry point's symbol, which a by-name launch names.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The host build of the kernel, which the CPU backend runs on each of its threads.
    pub const fn function(&self) -> &F {
        &self.function
    }
}

impl<F: Copy> Kernel<F> {
    /// The kernel, declared for blocks of at most `max` threads and, where `min_blocks` > 0,
    /// at least that many blocks an SM ([`kernel!`](crate::kernel)'s `#[launch_bounds]`);
    /// only `max` is kept here, for the host's launch to check. Panics (at compile time, in
    /// `kernel!`'s constant) unless `max` is 1 to 1,024.
    pub const fn with_launch_bounds(self, max: u32, min_blocks: u32) -> Kernel<F> {
        assert!(max >= 1 && max <= 1024, "launch_bounds: a block has 1 to 1024 threads");
        let _ = min_blocks;
        Kernel {
            max_block_threads: Some(max),
            ..self
        }
    }
}

impl<F> core::ops::Deref for Kernel<F> {
    type Target = F;

    fn deref(&self) -> &F {
        &self.function
    }
}

impl<F> fmt::Debug for Kernel<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({})", self.name)
    }
}

/// Defines the crate's `#[panic_handler]` on GPU targets (on the host, std's stays): a
/// panicking thread prints `kernel thread T (block B, thread I) panicked at
/// FILE:LINE:COL: MESSAGE` on the runtime's stderr, sends it to the ring, and traps; the
/// host's `synchronize` then reports the failed launch, after the line is written.
///
/// Opt-in: a crate that defines its own handler does not call this. Call it once, at the
/// crate root of the kernel crate (a GPU build links exactly one panic handler).
#[macro_export]
macro_rules! panic_handler {
    () => {
        #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
        #[panic_handler]
        fn gpuio_panic(info: &::core::panic::PanicInfo<'_>) -> ! {
            $crate::entry::report_panic(info.location(), &info.message());
            $crate::protocol::arch::abort()
        }
    };
}

/// How long a panicking thread waits for its report, and the lines printed before it, to be
/// written before it traps. A bounded wait: a thread that is flushing a stream may be a
/// sibling lane that cannot run until this one leaves (the lockstep rule, `arch`), may
/// itself be panicking, or may be holding a print it never finishes.
const REPORT_WAIT_NS: u64 = 100_000_000;

/// What a kernel's body returned, as [`kernel!`](crate::kernel) lets it: nothing, or
/// `Result<(), E>` with `E: Display`, whose `Err` ends the thread reported. The entry point
/// calls [`Return::end`] on it. Sealed: these two are what a kernel may return, and the
/// macro's expansion is its only caller.
#[diagnostic::on_unimplemented(
    message = "a kernel returns nothing or `Result<(), E>` with `E: Display`, not `{Self}`",
    label = "this kernel's return type"
)]
pub trait Return: sealed::Sealed {
    /// Ends the kernel thread after its body returned `self`: nothing to do for `()` and
    /// `Ok`; an `Err` is reported and the thread ends as a panicking one does.
    fn end(self, kernel: &'static str);
}

mod sealed {
    /// Implemented by `()` and `Result<(), E: Display>` alone: a type outside this crate
    /// cannot become a kernel's return type.
    pub trait Sealed {}
    impl Sealed for () {}
    impl<E: core::fmt::Display> Sealed for Result<(), E> {}
}

impl Return for () {
    #[inline(always)]
    fn end(self, _: &'static str) {}
}

impl<E: fmt::Display> Return for Result<(), E> {
    #[inline(always)]
    fn end(self, kernel: &'static str) {
        if let Err(error) = self {
            failed(kernel, &error)
        }
    }
}

/// Reports `kernel thread T (block B, thread I) of KERNEL returned Err: ERROR` as a panic
/// is reported (on the runtime's stderr, waiting boundedly for it and every earlier line to
/// be written), then ends the thread as a panic does: a trap on a GPU, an unwind on the
/// host (the CPU backend counts the thread as failed with the report's text).
#[cold]
#[inline(never)]
fn failed(kernel: &'static str, error: &dyn fmt::Display) -> ! {
    // On the host the report is formatted once, printed and carried: the error's Display
    // runs once, as on a GPU for a report of up to 256 bytes (a longer line is formatted
    // twice there, measured and then written, as every print is).
    crate::protocol::arch::end_failed_thread(&Report::of_this_thread(How::Returned(kernel), error), report_and_wait)
}

/// How a kernel thread failed.
#[derive(Clone, Copy)]
enum How<'a> {
    /// It panicked, here if the panic says where.
    Panicked(Option<&'a Location<'a>>),
    /// Its body returned `Err` from this kernel.
    Returned(&'static str),
}

/// `kernel thread T (block B, thread I) panicked at FILE:LINE:COL: MESSAGE`, or `... of
/// KERNEL returned Err: MESSAGE`.
struct Report<'a> {
    t: u64,
    b: u64,
    i: u64,
    how: How<'a>,
    message: &'a dyn fmt::Display,
}

impl<'a> Report<'a> {
    /// The report of the calling thread.
    fn of_this_thread(how: How<'a>, message: &'a dyn fmt::Display) -> Report<'a> {
        Report {
            t: crate::protocol::arch::global_thread_idx(),
            b: crate::protocol::arch::block_rank(),
            i: crate::protocol::arch::thread_idx_3d().rank_in(crate::protocol::arch::block_dim_3d()),
            how,
            message,
        }
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Report { t, b, i, how, message } = self;
        write!(f, "kernel thread {t} (block {b}, thread {i}) ")?;
        match how {
            How::Panicked(None) => f.write_str("panicked")?,
            How::Panicked(Some(at)) => write!(
                f,
                "panicked at {}:{}:{}",
                crate_relative(at.file()),
                at.line(),
                at.column()
            )?,
            How::Returned(kernel) => write!(f, "of {kernel} returned Err")?,
        }
        write!(f, ": {message}")
    }
}

/// A source path as a person finds it in their tree: rustc names the files of a crate
/// outside the building workspace (a kernel crate beside its host crate, a dependency) by
/// absolute path; from those, the crate's folder and the path inside it
/// (`/home/me/proj/kernels/src/lib.rs` -> `kernels/src/lib.rs`). Relative paths stay.
///
/// ```
/// # use gpuio_device::entry::crate_relative;
/// assert_eq!(crate_relative("/home/me/proj/kernels/src/lib.rs"), "kernels/src/lib.rs");
/// assert_eq!(crate_relative("src/lib.rs"), "src/lib.rs");
/// assert_eq!(crate_relative("/tmp/x.rs"), "/tmp/x.rs");
/// ```
pub fn crate_relative(file: &str) -> &str {
    // Byte loops, not `str::rfind`: a substring search calls `memcmp`, which amdgcn code
    // objects cannot import (and this runs in every panic handler).
    let b = file.as_bytes();
    if b.first() != Some(&b'/') {
        return file;
    }
    let src = (0..b.len().saturating_sub(4))
        .rev()
        .find(|&i| b[i] == b'/' && b[i + 1] == b's' && b[i + 2] == b'r' && b[i + 3] == b'c' && b[i + 4] == b'/');
    // The folder before `src/`: from just after the `/` that starts it.
    match src.and_then(|src| (0..src).rev().find(|&i| b[i] == b'/')) {
        Some(dir) => &file[dir + 1..],
        None => file,
    }
}

/// Prints `kernel thread T (block B, thread I) panicked at FILE:LINE:COL: MESSAGE` on the
/// runtime's stderr and waits (boundedly, `REPORT_WAIT_NS`) until its write, and the
/// writes of everything any thread printed before it, have completed: on a GPU the trap
/// that follows ends every thread of the kernel, a flusher among them. The GPU panic
/// handler calls it, and the CPU backend calls it from its panic hook, so that both report
/// a panic the same way.
///
/// Its wait is bounded on every path: on the CPU backend the thread stops performing its
/// rings' requests while it reports (`arch::without_performing`), so that neither its
/// flushes nor its dozes take on a write that a pipe nobody reads would block; the host's
/// waker performs them.
#[cold]
#[inline(never)]
pub fn report_panic(location: Option<&Location<'_>>, message: &dyn fmt::Display) {
    let report = Report::of_this_thread(How::Panicked(location), message);
    crate::protocol::arch::without_performing(|| report_and_wait(&report))
}

/// [`report_panic`]'s and [`failed`]'s report and bounded wait; they call it with the
/// thread no performer (`arch::without_performing`).
fn report_and_wait(line: &dyn fmt::Display) {
    crate::protocol::print::print_to(true, true, format_args!("{line}"));
    let ctx = crate::protocol::context::current();
    if ctx.is_null() {
        return;
    }
    // SAFETY: the host installs a context that outlives every kernel that can see it.
    let ctx = unsafe { &*ctx };
    // Everything reserved so far on every stream, this report included, so that what any
    // thread printed before the trap (its print returned: its bytes are committed) is out
    // before the trap ends the kernel; prints still in progress get the same bounded wait.
    // We need a position at or past each line whose print returned before this panic, and
    // past our own report. A reservation is a Relaxed RMW on `reserved`, sequenced before
    // its print's return; where that return happens-before this load (the program
    // synchronized with it, say by an Acquire of a flag the printer set with Release after
    // its print), coherence makes this load see that reservation or a later one. A print
    // that returned with no such ordering may be missed: it raced with the panic. (Acquire
    // orders nothing more here; it costs nothing on these targets.)
    let ends: [u64; STREAMS] = core::array::from_fn(|s| ctx.streams[s].reserved.load(Ordering::Acquire));
    let start = crate::protocol::arch::clock_ns();
    // Until the writes that hold those bytes have completed: `flushed` is not enough. The
    // flusher releases `flushed` before it publishes the flight's SQE, and that flusher may
    // be a sibling lane that printed with this one; a thread that trapped on seeing
    // `flushed` would kill the kernel before the sibling publishes, and the line would be
    // lost. `released` moves only when the write's completion is reaped, so this thread
    // reaps as well as flushes.
    loop {
        ctx.reap();
        let mut done = true;
        for (stream, &end) in ctx.streams.iter().zip(&ends) {
            ctx.flush(stream);
            // Acquire: pairs with the Release of `released` by whoever reaped the completion.
            done &= stream.released.load(Ordering::Acquire) >= end;
        }
        if done {
            break;
        }
        if crate::protocol::arch::clock_ns().wrapping_sub(start) > REPORT_WAIT_NS {
            break;
        }
        // Lets sibling lanes that diverged from this one run (with independent thread
        // scheduling a branch that spins without a pause may hold the warp: the flusher
        // above may be one of them). On the CPU backend this thread is no performer here
        // (`without_performing`), so its doze performs nothing: the waker does.
        crate::protocol::arch::doze();
    }
}
