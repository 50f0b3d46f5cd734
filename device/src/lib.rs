//! gpuio's device runtime: GPU threads do I/O by filling io_uring submission queue entries
//! in host memory that the kernel's SQPOLL thread consumes.
//!
//! `no_std`, core only, no allocation. One source builds for `amdgcn-amd-amdhsa`,
//! `nvptx64-nvidia-cuda` and the host CPU (where the CPU backend runs kernels on threads).
//!
//! ```
//! // A kernel body: any Display/Debug argument, std's format syntax.
//! fn kernel() {
//!     let tid = gpuio_device::thread_idx();
//!     gpuio_device::println!("hello from thread {tid} ({:?})", (1.5, "x"));
//! }
//! # kernel(); // outside a kernel (no context) the host build falls back to std's stdout
//! ```
//!
//! Two faces. The crate root is what a kernel uses: [`kernel!`] and [`panic_handler!`]
//! (with [`Kernel`] and [`param`], how parameters travel); [`println!`], [`print!`],
//! [`eprintln!`], [`eprint!`], [`dbg!`] and [`io::stdout`]`().lock()` for whole lines from
//! pieces; [`fs::File`], [`fs::OpenOptions`], [`fs::BufWriter`] and the [`fs`] functions
//! (`remove_file`, `create_dir`, `rename`, ...); [`io`]'s `pwrite`, `pread` and friends,
//! with [`io::Errno`], and the io traits [`io::Read`], [`io::Write`], [`io::Seek`] (the no_std
//! ecosystem's, `embedded-io`'s) on files and stdout; and the ids [`thread_idx`], [`block_idx`], [`block_dim`],
//! [`grid_dim`] (x), their [`Dim3`] forms [`thread_idx_3d`], [`block_idx_3d`],
//! [`block_dim_3d`], [`grid_dim_3d`], and [`global_thread_idx`] (linear over all three);
//! [`sync_threads`] and [`dynamic_shared_memory`] for a block's threads working together.
//! [`protocol`] is the other face: the ring protocol those are built on, which the host
//! runtime sets up and drains, not for kernels, with [`protocol::arch`], what differs per
//! target (the lockstep rule among it). With the `c-abi` feature, `c_abi` is the kernel's
//! face again under C names, for kernels in CUDA C++, HIP or C (`include/gpuio/device.h`:
//! `gpuio_printf` and the file calls).
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(asm_experimental_arch, stdarch_nvptx))]
#![cfg_attr(
    target_arch = "amdgpu",
    feature(stdarch_amdgpu, core_intrinsics, gpu_intrinsics, link_llvm_intrinsics)
)]
#![cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    feature(abi_gpu_kernel, allow_internal_unstable)
)]
#![cfg_attr(any(target_arch = "amdgpu", target_arch = "nvptx64"), allow(internal_features))]

#[cfg(feature = "c-abi")]
pub mod c_abi;
mod dim;
pub mod entry;
mod errno;
pub mod fs;
pub mod io;
mod io_traits;
pub mod param;
pub mod protocol;
mod stdio;
mod user_data;

pub use dim::Dim3;
pub use entry::Kernel;
pub use protocol::arch::{block_dim, block_idx, clock_ns, grid_dim, thread_idx};
pub use protocol::arch::{block_dim_3d, block_idx_3d, grid_dim_3d, thread_idx_3d};
pub use protocol::arch::{block_rank, global_thread_idx};

/// Waits until every thread of the calling thread's block has called it, as CUDA's
/// `__syncthreads()`: writes to shared and global memory before it are then visible to the
/// block's threads after it. Every thread of the block must reach the same call, as on
/// CUDA (where a block whose threads do not all reach it may wait forever). On the CPU
/// backend a thread that has left the kernel (returned, or panicked) no longer counts, and
/// a launch that could not start all of a block's threads makes the waiting ones panic.
/// Outside a launch a thread is a block of its own.
///
/// ```
/// gpuio_device::sync_threads(); // outside a kernel: returns at once
/// ```
#[inline(always)]
pub fn sync_threads() {
    protocol::arch::sync_threads()
}

/// The launch's dynamic shared memory: the bytes asked for with the host's
/// `LaunchConfig::with_shared_mem` (cudarc's `shared_mem_bytes`; past 48 KiB a cudarc launch
/// raises the function's limit itself), one region per block
/// shared by its threads, as CUDA's `extern __shared__`. 16-byte aligned; uninitialized on
/// GPUs, zeroed on the CPU backend; empty when the launch asked for none. AMD GPUs have none
/// yet (Rust cannot declare the dynamic LDS): the host refuses such a launch there.
///
/// A raw slice: the block's threads share it, so they read and write it through raw
/// pointers, ordered by [`sync_threads`] or atomics.
///
/// ```
/// gpuio_device::kernel! {
///     /// Each thread writes its index to shared memory and prints its neighbour's.
///     pub fn neighbours() {
///         let shared = gpuio_device::dynamic_shared_memory();
///         let (t, n) = (gpuio_device::thread_idx() as usize, gpuio_device::block_dim() as usize);
///         if shared.len() < 4 * n {
///             return; // the launch gave too little
///         }
///         let words = shared as *mut u32;
///         // SAFETY: word `t` is this thread's alone until the barrier; 4 * n bytes are there.
///         unsafe { words.add(t).write(t as u32) };
///         gpuio_device::sync_threads();
///         // SAFETY: every word was written before the barrier; none is written after it.
///         let next = unsafe { words.add((t + 1) % n).read() };
///         gpuio_device::println!("thread {t}: my neighbour is {next}");
///     }
/// }
/// neighbours(); // a direct call on the host: no shared memory, so it returns
/// ```
#[inline(always)]
pub fn dynamic_shared_memory() -> *mut [u8] {
    protocol::arch::dynamic_shared_memory()
}

/// Writes out everything the kernels of this context printed. The host launches it on one
/// thread after they finished (GPU backends: the host never runs protocol code on a
/// context in device memory, and PCIe atomics are not atomic against the CPU's).
/// Every GPU code object that links this crate exports it.
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
#[no_mangle]
pub extern "gpu-kernel" fn gpuio_drain() {
    let ctx = protocol::context::current();
    if !ctx.is_null() {
        // SAFETY: the host installed a context that outlives every kernel of this module.
        unsafe { &*ctx }.drain(|| {});
    }
}

/// Prints to the runtime's stdout, like std's `print!`: the text at once, whole.
///
/// A print made by a `Display` of the arguments (a `println!` in its `fmt`) comes out once,
/// whole, before this text. A `Display` that returns `Err` ends the text there, followed by
/// [`FORMAT_ERROR`](protocol::print::FORMAT_ERROR); the host's `synchronize` reports it as a
/// print error (std's `print!` panics). See [`println!`].
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::__print!(false, false, $($arg)*) };
}

/// Prints a line to the runtime's stdout, like std's `println!`. The line appears exactly
/// once, whole; a thread's lines keep their order.
///
/// The arguments' `Display`s run once for a line of up to 256 bytes, and twice for a longer
/// one (measured, then written in place). A print inside a `Display` comes out once, whole,
/// before the line that formats it (from the first pass; the thread's prints during the
/// in-place pass are skipped). A `Display` that returns `Err` ends the line where it failed:
/// the text so far, [`FORMAT_ERROR`](protocol::print::FORMAT_ERROR), the newline; the line
/// is counted and the host's `synchronize` reports it (`Error::Print`, `format_errors`),
/// where std's `println!` panics.
///
/// What it costs the kernel around it, on NVIDIA: a kernel's register count is the most any
/// function it may call uses, even one it never calls, and the formatting reaches the
/// module's formatting functions through function pointers (core's float formatting uses
/// 253 registers). So the host compiles gpuio's and core's functions apart with a cap of 32
/// (`GPUIO_PRINT_REGISTERS`): a kernel with a print holds the larger of 32 and its own
/// code's count, which includes what stays live across the print's call (a kernel of 54
/// registers held 64 with a print), where printf's holds 24 (40 for that kernel). A number,
/// `bool`, `char`, reference or pointer argument is passed by value (a copy made where the
/// print runs), so a check in a hot loop leaves the loop's variables in registers; one the
/// format string names itself (`"{v}"`) is borrowed and lives on the stack. So a `println!`
/// that never runs leaves a kernel's time as it was, within a few percent, except where the
/// kernel's own registers are many (a register tile's loop was scheduled with fewer loads
/// in flight to stay at 64 registers, 1.26-1.27x its time: declared with
/// `#[launch_bounds(256)]` in [`kernel!`](crate::kernel), the block size it is launched with,
/// it ran 0.99-1.00x at 72); one that runs costs in proportion to what it writes (a line
/// from each of 262,144 threads took a 0.23 ms kernel to about 0.52 ms on an H200), and
/// writes its lines about 80-650 times as fast as `printf`. A kernel that does nothing but
/// print runs at 32 registers too: an SM holds 64 of its warps, and lets 8 at a time put
/// their records into the log. BENCHMARKS.md (`bench_observer`, five kernel
/// shapes beside CUDA C's `printf`) has the figures. A module that does file I/O from device
/// code is not capped unless asked. A module compiled whole (the lockstep build, or
/// `GPUIO_JIT=whole`) gets the same counts by a cap per program. docs/PROTOCOL.md, "What a
/// print costs the kernel around it", says why.
///
/// ```
/// struct Noisy;
/// impl core::fmt::Display for Noisy {
///     fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
///         gpuio_device::println!("inner"); // in a kernel: out first, once
///         f.write_str("value")
///     }
/// }
/// gpuio_device::println!("outer {}", Noisy); // "inner", then "outer value"
/// ```
#[macro_export]
macro_rules! println {
    () => { $crate::protocol::print::print_to(false, true, format_args!("")) };
    ($($arg:tt)*) => { $crate::__print!(false, true, $($arg)*) };
}

/// Prints to the runtime's stderr, like std's `eprint!` (nested prints and `Display` errors
/// as for [`print!`]).
#[macro_export]
macro_rules! eprint {
    ($($arg:tt)*) => { $crate::__print!(true, false, $($arg)*) };
}

/// Prints a line to the runtime's stderr, like std's `eprintln!` (nested prints and
/// `Display` errors as for [`println!`]).
#[macro_export]
macro_rules! eprintln {
    () => { $crate::protocol::print::print_to(true, true, format_args!("")) };
    ($($arg:tt)*) => { $crate::__print!(true, true, $($arg)*) };
}

/// The print macros' expansion: `print_to(stderr, newline, format_args!(..))`, with each
/// argument after the format string passed by value where it is a number, `bool`, `char`,
/// reference or pointer (a copy made where the print runs), by reference otherwise
/// ([`protocol::print::Arg`] says why those).
///
/// Why: `format_args!` takes each argument's address, and a variable whose address a call
/// may keep lives in memory: a loop that checks each value with a print that never runs
/// (`if v < 0.0 { println!("{} {}", i, v) }`) then stored its index and value to the thread's stack
/// on every round, where the same loop without the print kept them in registers (a memory
/// bound loop then took half as long again). A copy taken inside the print's branch leaves the variable
/// itself in registers. Arguments the format string names itself (`"{v}"`) are taken by
/// reference, as `format_args!` takes them; so are all of them where the format string is
/// not a literal (`concat!(..)`).
#[doc(hidden)]
#[macro_export]
macro_rules! __print {
    // Every argument rewritten.
    (@args $e:expr, $n:expr, $fmt:literal, [$($done:tt)*] $(,)?) => {{
        #[allow(unused_imports)]
        use $crate::protocol::print::{ByCopy as _, ByRef as _};
        $crate::protocol::print::print_to($e, $n, ::core::format_args!($fmt $($done)*))
    }};
    // A named argument (`name = value`).
    (@args $e:expr, $n:expr, $fmt:literal, [$($done:tt)*] , $name:ident = $v:expr $(, $($rest:tt)*)?) => {
        $crate::__print!(@args $e, $n, $fmt, [$($done)* , $name = (&$crate::protocol::print::Arg(&$v)).by_value()] $(, $($rest)*)?)
    };
    // A positional argument.
    (@args $e:expr, $n:expr, $fmt:literal, [$($done:tt)*] , $v:expr $(, $($rest:tt)*)?) => {
        $crate::__print!(@args $e, $n, $fmt, [$($done)* , (&$crate::protocol::print::Arg(&$v)).by_value()] $(, $($rest)*)?)
    };
    ($e:expr, $n:expr, $fmt:literal $($rest:tt)*) => {
        $crate::__print!(@args $e, $n, $fmt, [] $($rest)*)
    };
    // A format string that is not a literal: `format_args!` as it is.
    ($e:expr, $n:expr, $($arg:tt)*) => {
        $crate::protocol::print::print_to($e, $n, ::core::format_args!($($arg)*))
    };
}

/// Prints an expression and its value to the runtime's stderr and returns the value, like
/// std's `dbg!`: `[src/lib.rs:12:9] x * 2 = 14` (the value with `{:#?}`), one line per
/// expression. `dbg!()` prints the place alone. No allocation: the line is formatted as any
/// print's.
///
/// ```
/// # use gpuio_device::dbg;
/// let x = 7;
/// let y = dbg!(x * 2) + 1;   // outside a kernel, on the host's stderr
/// assert_eq!(y, 15);
/// let (a, b) = dbg!(1, "two");
/// assert_eq!((a, b), (1, "two"));
/// ```
#[macro_export]
macro_rules! dbg {
    () => {
        $crate::eprintln!("[{}:{}:{}]", ::core::file!(), ::core::line!(), ::core::column!())
    };
    ($val:expr $(,)?) => {
        match $val {
            tmp => {
                $crate::eprintln!(
                    "[{}:{}:{}] {} = {:#?}",
                    ::core::file!(),
                    ::core::line!(),
                    ::core::column!(),
                    ::core::stringify!($val),
                    &tmp
                );
                tmp
            }
        }
    };
    ($($val:expr),+ $(,)?) => {
        ($($crate::dbg!($val)),+,)
    };
}
