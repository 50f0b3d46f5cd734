//! What a launch hands its threads and gets back: every parameter type, strings and slices,
//! results through `Out` parameters, a block's dynamic shared memory, 3-D launches, launch
//! bounds.

use gpuio_device::kernel;
use gpuio_device::{global_thread_idx, println};

kernel! {
    /// A typed launch's arguments, one parameter of each type: every thread prints
    /// `t=<t> i=0 u32=<a> i32=<b> u64=<c> i64=<d> f32=<e> f64=<f>`.
    pub fn every_param_type(a: u32, b: i32, c: u64, d: i64, e: f32, f: f64) {
        println!("t={} i=0 u32={a} i32={b} u64={c} i64={d} f32={e} f64={f}", global_thread_idx());
    }
}

kernel! {
    /// String and slice parameters, which a typed launch copies where the kernel reads
    /// them: every thread prints `t=<t> i=0 name=<name> n=<values.len()> sum=<sum of
    /// values> last=<last value> scale=<scale> empty=<empty.len()>`.
    pub fn strings_and_slices(name: &str, values: &[u64], scale: f32, empty: &[u8]) {
        let sum: u64 = values.iter().sum();
        let last = values.last().copied().unwrap_or(0);
        println!(
            "t={} i=0 name={name} n={} sum={sum} last={last} scale={scale} empty={}",
            global_thread_idx(),
            values.len(),
            empty.len()
        );
    }
}

kernel! {
    /// Results through `Out` parameters: thread `i` (of the first `x.len()`) writes
    /// `x[i] * x[i] + i` to `squares[i]` and `x[i] as f32 / 2` to `halves[i]`; the rest
    /// write nothing.
    pub fn squares_into(x: &[u64], squares: gpuio_device::param::Out<u64>, halves: gpuio_device::param::Out<f32>) {
        let i = global_thread_idx() as usize;
        if i < x.len() && i < squares.len() && i < halves.len() {
            // SAFETY: thread i alone writes element i of each.
            unsafe {
                squares.write(i, x[i] * x[i] + i as u64);
                halves.write(i, x[i] as f32 / 2.0);
            }
        }
    }
}

kernel! {
    /// Each thread writes `3 * t + 1` to its own element of `out` (`Out::write_own`, no
    /// `unsafe`); threads past its end write nothing.
    pub fn own_elements(out: gpuio_device::param::Out<u64>) {
        let t = global_thread_idx();
        out.write_own(3 * t + 1);
    }
}

kernel! {
    /// A block's threads working together through dynamic shared memory: in each of
    /// `rounds` rounds thread `t` of block `b` writes `b * 1,000,000 + round * 1,000 + t` to
    /// word `t`, waits for the block (`sync_threads`), reads its neighbour's word `(t + 1) %
    /// n`, and waits again. Each thread prints `t=<global> i=0 len=<bytes> next=<the last
    /// round's neighbour word> sum=<sum of them>`, or `... len=<bytes> short` when the
    /// launch gave fewer than 4 bytes per thread.
    pub fn shared_memory_rounds(rounds: u32) {
        let shared = gpuio_device::dynamic_shared_memory();
        let (t, n) = (gpuio_device::thread_idx() as usize, gpuio_device::block_dim() as usize);
        if shared.len() < 4 * n {
            println!("t={} i=0 len={} short", global_thread_idx(), shared.len());
            return;
        }
        let words = shared as *mut u32;
        let (mut next, mut sum) = (0u32, 0u64);
        for r in 0..rounds {
            // SAFETY: word `t` is this thread's alone between the barriers; the launch gave
            // 4 * n bytes or more.
            unsafe { words.add(t).write(gpuio_device::block_idx() * 1_000_000 + r * 1_000 + t as u32) };
            gpuio_device::sync_threads();
            // SAFETY: every word was written before the barrier, none until the next.
            next = unsafe { words.add((t + 1) % n).read() };
            sum += next as u64;
            gpuio_device::sync_threads();
        }
        println!("t={} i=0 len={} next={next} sum={sum}", global_thread_idx(), shared.len());
    }
}

kernel! {
    /// A 3-D launch: each thread prints one line `t=<global_thread_idx> i=0 b=<x>,<y>,<z>
    /// th=<x>,<y>,<z> g=<x>,<y>,<z> bd=<x>,<y>,<z>` with its block and thread indices and the
    /// launch's grid and block sizes.
    pub fn dims_3d() {
        let (b, t) = (gpuio_device::block_idx_3d(), gpuio_device::thread_idx_3d());
        let (g, d) = (gpuio_device::grid_dim_3d(), gpuio_device::block_dim_3d());
        println!(
            "t={} i=0 b={},{},{} th={},{},{} g={},{},{} bd={},{},{}",
            global_thread_idx(),
            b.x,
            b.y,
            b.z,
            t.x,
            t.y,
            t.z,
            g.x,
            g.y,
            g.z,
            d.x,
            d.y,
            d.z
        );
    }
}

kernel! {
    /// Declared for blocks of at most 64 threads and 2 blocks an SM
    /// (`#[launch_bounds(64, 2)]`): each thread prints `t=<t> i=0 bd=<threads a block>`.
    #[launch_bounds(64, 2)]
    pub fn bounded_64() {
        println!("t={} i=0 bd={}", global_thread_idx(), gpuio_device::block_dim_3d().count());
    }
}
