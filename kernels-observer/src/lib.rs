//! bench_observer's kernels: what a print costs the kernel around it. The shapes that people
//! instrument, each in four variants that differ only in their print:
//!
//! - `_plain`: no print;
//! - `_never`: a print behind a test that never passes (`x < -1e30`), where a user puts a
//!   check: inside the hot loop where there is one;
//! - `_thread`: every thread prints one line after its work;
//! - `_block`: thread 0 of each block prints one line after its block's work.
//!
//! The shapes (`benches/bench_observer/observer.cu` has the same kernels in CUDA C, with
//! `printf`, so that both sides do equal work: every multiply-add is a fused one on both):
//!
//! - `fma`: a latency-bound chain of `n` fused multiply-adds per thread;
//! - `saxpy`: `y = a * x + y` over `n` floats, grid-stride (memory-bound);
//! - `reduce`: each block sums a grid-stride share of `n` floats through shared memory
//!   (`block_dim` floats of dynamic shared memory) into one float per block;
//! - `tile`: `C = A * B` for `n x n` matrices, each thread a 4 x 4 tile of C held in
//!   registers (register-heavy);
//! - `tile256`: the tile, each kernel declared for blocks of at most 256 threads
//!   (`#[launch_bounds(256)]`, CUDA C's `__launch_bounds__(256)`), as register-heavy
//!   kernels often are.
//!
//! Lines: `t=<global thread> x=<float>`, the float being the thread's (or block's) result.
//! Arrays are device memory the host allocates (raw pointers: no bounds checks, as in the
//! CUDA C kernels).
#![no_std]
#![cfg_attr(any(target_arch = "nvptx64", target_arch = "amdgpu"), feature(core_float_math))]

use gpuio_device::{block_dim, block_idx, global_thread_idx, kernel, println, sync_threads, thread_idx};

gpuio_device::panic_handler!();

/// `x * a + b`, fused (what nvcc makes of the same expression in CUDA C).
#[inline(always)]
fn fma(x: f32, a: f32, b: f32) -> f32 {
    #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
    {
        core::f32::math::mul_add(x, a, b)
    }
    #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
    {
        x * a + b
    }
}

/// A value no result reaches: the never-taken prints test against it.
const NEVER: f32 = -1e30;

/// The thread's count of threads in the grid, for grid-stride loops.
#[inline(always)]
fn grid_threads() -> usize {
    gpuio_device::grid_dim() as usize * block_dim() as usize
}

/// The FMA chain: `n` steps from a value of the thread's own.
#[inline(always)]
fn chain(n: u32) -> f32 {
    let mut x = global_thread_idx() as f32 * 1e-6;
    for _ in 0..n {
        x = fma(x, 1.0001, 0.5);
    }
    x
}

kernel! {
    /// The FMA chain, no print.
    pub fn fma_plain(n: u32, out: *mut f32) {
        let t = global_thread_idx() as usize;
        let x = chain(n);
        // SAFETY: the host passes `out` with an element per thread of the launch.
        unsafe { *out.add(t) = x };
    }
    /// The FMA chain, a print never taken.
    pub fn fma_never(n: u32, out: *mut f32) {
        let t = global_thread_idx() as usize;
        let x = chain(n);
        if x < NEVER {
            println!("t={} x={}", t, x);
        }
        // SAFETY: as in `fma_plain`.
        unsafe { *out.add(t) = x };
    }
    /// The FMA chain, one line per thread.
    pub fn fma_thread(n: u32, out: *mut f32) {
        let t = global_thread_idx() as usize;
        let x = chain(n);
        println!("t={} x={}", t, x);
        // SAFETY: as in `fma_plain`.
        unsafe { *out.add(t) = x };
    }
    /// The FMA chain, one line per block.
    pub fn fma_block(n: u32, out: *mut f32) {
        let t = global_thread_idx() as usize;
        let x = chain(n);
        if thread_idx() == 0 {
            println!("t={} x={}", t, x);
        }
        // SAFETY: as in `fma_plain`.
        unsafe { *out.add(t) = x };
    }
}

/// One SAXPY step on element `i`; returns the new `y[i]`.
///
/// # Safety
/// `x` and `y` hold at least `i + 1` elements, and no other thread touches `y[i]`.
#[inline(always)]
unsafe fn saxpy_at(a: f32, x: *const f32, y: *mut f32, i: usize) -> f32 {
    // SAFETY: the caller's contract.
    unsafe {
        let v = fma(a, *x.add(i), *y.add(i));
        *y.add(i) = v;
        v
    }
}

kernel! {
    /// SAXPY over `n` elements, grid-stride, no print.
    pub fn saxpy_plain(n: u32, a: f32, x: *const f32, y: *mut f32) {
        let mut i = global_thread_idx() as usize;
        while i < n as usize {
            // SAFETY: the host passes `n` elements in each array; `i` is this thread's.
            unsafe { saxpy_at(a, x, y, i) };
            i += grid_threads();
        }
    }
    /// SAXPY, a print never taken, checking each element.
    pub fn saxpy_never(n: u32, a: f32, x: *const f32, y: *mut f32) {
        let mut i = global_thread_idx() as usize;
        while i < n as usize {
            // SAFETY: as in `saxpy_plain`.
            let v = unsafe { saxpy_at(a, x, y, i) };
            if v < NEVER {
                println!("t={} x={}", i, v);
            }
            i += grid_threads();
        }
    }
    /// SAXPY, one line per thread (its last element).
    pub fn saxpy_thread(n: u32, a: f32, x: *const f32, y: *mut f32) {
        let t = global_thread_idx() as usize;
        let (mut i, mut last) = (t, 0.0);
        while i < n as usize {
            // SAFETY: as in `saxpy_plain`.
            last = unsafe { saxpy_at(a, x, y, i) };
            i += grid_threads();
        }
        println!("t={} x={}", t, last);
    }
    /// SAXPY, one line per block (its thread 0's last element).
    pub fn saxpy_block(n: u32, a: f32, x: *const f32, y: *mut f32) {
        let t = global_thread_idx() as usize;
        let (mut i, mut last) = (t, 0.0);
        while i < n as usize {
            // SAFETY: as in `saxpy_plain`.
            last = unsafe { saxpy_at(a, x, y, i) };
            i += grid_threads();
        }
        if thread_idx() == 0 {
            println!("t={} x={}", t, last);
        }
    }
}

/// The thread's grid-stride share of `x`'s `n` elements, summed.
///
/// # Safety
/// `x` holds at least `n` elements.
#[inline(always)]
unsafe fn partial_sum(n: u32, x: *const f32) -> f32 {
    let (mut i, mut s) = (global_thread_idx() as usize, 0.0f32);
    while i < n as usize {
        // SAFETY: `i < n`.
        s += unsafe { *x.add(i) };
        i += grid_threads();
    }
    s
}

/// Sums the block's `s` through shared memory (a tree, `block_dim` a power of two at most
/// the shared floats); thread 0 gets the block's sum, the others a partial one.
#[inline(always)]
fn block_sum(s: f32) -> f32 {
    let shared = gpuio_device::dynamic_shared_memory() as *mut f32;
    let (t, n) = (thread_idx() as usize, block_dim() as usize);
    // SAFETY: the launch gives `block_dim` floats of shared memory; word `t` is this
    // thread's until the barrier.
    unsafe { *shared.add(t) = s };
    sync_threads();
    let mut half = n / 2;
    while half > 0 {
        if t < half {
            // SAFETY: words `t` and `t + half` were written before the last barrier, and
            // only thread `t` writes word `t` in this round.
            unsafe { *shared.add(t) += *shared.add(t + half) };
        }
        sync_threads();
        half /= 2;
    }
    // SAFETY: word 0 was written before the last barrier.
    unsafe { *shared }
}

kernel! {
    /// The block reduction, no print.
    pub fn reduce_plain(n: u32, x: *const f32, out: *mut f32) {
        // SAFETY: the host passes `n` elements.
        let s = block_sum(unsafe { partial_sum(n, x) });
        if thread_idx() == 0 {
            // SAFETY: the host passes an element per block.
            unsafe { *out.add(block_idx() as usize) = s };
        }
    }
    /// The block reduction, a print never taken (each thread's share).
    pub fn reduce_never(n: u32, x: *const f32, out: *mut f32) {
        // SAFETY: the host passes `n` elements.
        let p = unsafe { partial_sum(n, x) };
        if p < NEVER {
            println!("t={} x={}", global_thread_idx(), p);
        }
        let s = block_sum(p);
        if thread_idx() == 0 {
            // SAFETY: as in `reduce_plain`.
            unsafe { *out.add(block_idx() as usize) = s };
        }
    }
    /// The block reduction, one line per thread (its share).
    pub fn reduce_thread(n: u32, x: *const f32, out: *mut f32) {
        // SAFETY: the host passes `n` elements.
        let p = unsafe { partial_sum(n, x) };
        let s = block_sum(p);
        println!("t={} x={}", global_thread_idx(), p);
        if thread_idx() == 0 {
            // SAFETY: as in `reduce_plain`.
            unsafe { *out.add(block_idx() as usize) = s };
        }
    }
    /// The block reduction, one line per block (its sum).
    pub fn reduce_block(n: u32, x: *const f32, out: *mut f32) {
        // SAFETY: the host passes `n` elements.
        let s = block_sum(unsafe { partial_sum(n, x) });
        if thread_idx() == 0 {
            println!("t={} x={}", global_thread_idx(), s);
            // SAFETY: as in `reduce_plain`.
            unsafe { *out.add(block_idx() as usize) = s };
        }
    }
}

/// The thread's 4 x 4 tile of `C = A * B` (`n x n`, row-major, `n` a multiple of 4 and the
/// grid `n / 4 * n / 4` threads): returns the tile, and its first element's index.
///
/// # Safety
/// `a` and `b` hold `n * n` elements each.
#[inline(always)]
unsafe fn tile(n: u32, a: *const f32, b: *const f32) -> ([[f32; 4]; 4], usize) {
    let n = n as usize;
    let t = global_thread_idx() as usize;
    let (row, col) = (t / (n / 4) * 4, t % (n / 4) * 4);
    let mut acc = [[0.0f32; 4]; 4];
    for k in 0..n {
        let mut av = [0.0f32; 4];
        let mut bv = [0.0f32; 4];
        for i in 0..4 {
            // SAFETY: `row + i < n` and `col + i < n` (the grid's contract), `k < n`.
            unsafe {
                av[i] = *a.add((row + i) * n + k);
                bv[i] = *b.add(k * n + col + i);
            }
        }
        for i in 0..4 {
            for j in 0..4 {
                acc[i][j] = fma(av[i], bv[j], acc[i][j]);
            }
        }
    }
    (acc, row * n + col)
}

/// Stores a tile at `c[at..]`, rows `n` apart.
///
/// # Safety
/// `c` holds `n * n` elements and the tile at `at` is this thread's.
#[inline(always)]
unsafe fn store_tile(n: u32, c: *mut f32, acc: &[[f32; 4]; 4], at: usize) {
    for (i, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            // SAFETY: the caller's contract.
            unsafe { *c.add(at + i * n as usize + j) = *v };
        }
    }
}

/// The tile's four kernels, named `$plain` .. `$block`, each with the attributes given
/// (`tile256`: `#[launch_bounds(256)]`).
macro_rules! tile_kernels {
    ($plain:ident, $never:ident, $thread:ident, $block:ident $(, #[$($bound:tt)*])?) => {
        kernel! {
            /// The 4 x 4 register tile, no print.
            $(#[$($bound)*])?
            pub fn $plain(n: u32, a: *const f32, b: *const f32, c: *mut f32) {
                // SAFETY: the host passes `n x n` matrices and a grid of `n / 4 * n / 4` threads.
                unsafe {
                    let (acc, at) = tile(n, a, b);
                    store_tile(n, c, &acc, at);
                }
            }
            /// The tile, a print never taken.
            $(#[$($bound)*])?
            pub fn $never(n: u32, a: *const f32, b: *const f32, c: *mut f32) {
                // SAFETY: as in the plain kernel.
                let (acc, at) = unsafe { tile(n, a, b) };
                if acc[0][0] < NEVER {
                    println!("t={} x={}", global_thread_idx(), acc[0][0]);
                }
                // SAFETY: as in the plain kernel.
                unsafe { store_tile(n, c, &acc, at) };
            }
            /// The tile, one line per thread.
            $(#[$($bound)*])?
            pub fn $thread(n: u32, a: *const f32, b: *const f32, c: *mut f32) {
                // SAFETY: as in the plain kernel.
                let (acc, at) = unsafe { tile(n, a, b) };
                println!("t={} x={}", global_thread_idx(), acc[0][0]);
                // SAFETY: as in the plain kernel.
                unsafe { store_tile(n, c, &acc, at) };
            }
            /// The tile, one line per block.
            $(#[$($bound)*])?
            pub fn $block(n: u32, a: *const f32, b: *const f32, c: *mut f32) {
                // SAFETY: as in the plain kernel.
                let (acc, at) = unsafe { tile(n, a, b) };
                if thread_idx() == 0 {
                    println!("t={} x={}", global_thread_idx(), acc[0][0]);
                }
                // SAFETY: as in the plain kernel.
                unsafe { store_tile(n, c, &acc, at) };
            }
        }
    };
}

tile_kernels!(tile_plain, tile_never, tile_thread, tile_block);
tile_kernels!(
    tile256_plain,
    tile256_never,
    tile256_thread,
    tile256_block,
    #[launch_bounds(256)]
);

kernel! {
    /// Does nothing: what launch .. synchronize costs alone (bench_observer subtracts it).
    pub fn observer_empty() {}

    /// Fills `x` and `y` (`n` elements each) with small values of their index: the inputs of
    /// every shape.
    pub fn observer_fill(n: u32, x: *mut f32, y: *mut f32) {
        let mut i = global_thread_idx() as usize;
        while i < n as usize {
            // SAFETY: the host passes `n` elements in each array; `i` is this thread's.
            unsafe {
                *x.add(i) = (i % 1000) as f32 * 1e-3;
                *y.add(i) = (i % 777) as f32 * 1e-3;
            }
            i += grid_threads();
        }
    }
}
