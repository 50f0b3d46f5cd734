//! My kernels: one source for NVIDIA and AMD GPUs and for the host CPU.
#![no_std]

use gpuio_device::{global_thread_idx, kernel, println};

// A panicking GPU thread prints where and why on stderr, then the kernel traps.
gpuio_device::panic_handler!();

kernel! {
    /// Thread `i` (for `i < n`) prints `i`, `i / 8` to three places and `1 / (i + 1)`.
    pub fn table(n: u32) {
        let i = global_thread_idx();
        if i < u64::from(n) {
            let x = i as f64;
            println!("{i:>4} {:8.3} {}", x / 8.0, 1.0 / (x + 1.0));
        }
    }

    /// Thread `bad` reads past the end of an array and panics; the others print.
    pub fn lookup(bad: u32) {
        let primes = [2u32, 3, 5, 7];
        let i = global_thread_idx() as usize;
        let at = if i == bad as usize { primes.len() + i } else { i % primes.len() };
        println!("thread {i}: {}", primes[at]);
    }
}
