//! My kernels: one source for NVIDIA and AMD GPUs and for the host CPU.
#![no_std]

use gpuio_device::fs::{BufWriter, File};
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

kernel! {
    /// Thread 0 writes the table's first `n` rows to the file at `path`, a string the host
    /// passes; a file it cannot create makes it panic with the path and the OS's reason.
    pub fn save(path: &str, n: u32) {
        if global_thread_idx() != 0 {
            return;
        }
        let mut file = File::create(path).unwrap_or_else(|e| panic!("{e}"));
        let mut out = BufWriter::<4096>::new(&mut file);
        for i in 0..n {
            let x = i as f64;
            writeln!(out, "{i:>4} {:8.3} {}", x / 8.0, 1.0 / (x + 1.0)).unwrap_or_else(|_| panic!("writing {path}"));
        }
        out.flush().unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }
}
