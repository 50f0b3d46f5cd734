//! gpuio's example kernels.
//!
//! One source, three targets: `gpuio-kernels-gpu`'s build script builds this crate for
//! `nvptx64-nvidia-cuda` and `amdgcn-amd-amdhsa` with `gpuio-linker` (each kernel becomes an
//! exported `extern "gpu-kernel"` entry point), and on the host it is an ordinary library
//! whose kernels are plain functions that the CPU backend runs on its threads.
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(stdarch_nvptx))]

use core::fmt;

use gpuio_device::{block_dim, global_thread_idx, grid_dim, kernel, println};

// A panic prints `kernel thread T (block B, thread I) panicked at FILE:LINE:COL: MESSAGE`
// on stderr, then traps: the launch fails with an error the host reports, instead of the
// kernel hanging or carrying on.
gpuio_device::panic_handler!();

kernel! {
    /// Prints `hello from thread <global thread index> of <threads in the grid>`, one line
    /// per thread.
    pub fn hello() {
        let total = grid_dim() as u64 * block_dim() as u64;
        println!("hello from thread {} of {}", global_thread_idx(), total);
    }
}

kernel! {
    /// Prints `lines` lines `t=<global thread index> i=<line number>` per thread, padded
    /// with `.` to `width` bytes including the newline (`width` 0: no padding; a longer
    /// line is never cut).
    pub fn stress(lines: u32, width: u32) {
        let t = global_thread_idx();
        for i in 0..lines {
            println!("{}", Padded { t, i, width });
        }
    }
}

kernel! {
/// Like [`stress`], through CUDA's own device `printf` (`vprintf`) instead of gpuio: the
/// same bytes, `lines` lines `t=<global thread index> i=<line number>` per thread, padded
/// with `.` to `width` bytes including the newline. For comparisons (`benches/bench_gpu/`).
///
/// nvptx only: amdgcn has no `vprintf`, and on the host there is nothing to compare with.
/// The padding is one `%s` of a suffix of a static string of 1024 dots (CUDA documents
/// `*` for the field width only, not for the precision), so padding beyond 1024 dots
/// (`width` over about 1040) is cut to 1024 dots.
#[cfg(target_arch = "nvptx64")]
pub fn printf_stress(lines: u32, width: u32) {
    /// The format: the arguments are laid out like [`PrintfArgs`].
    const FORMAT: &[u8] = b"t=%llu i=%u%s\n\0";
    /// `vprintf`'s argument buffer: the arguments at their natural alignment, as a C
    /// compiler lays out a variadic call's arguments for it.
    #[repr(C)]
    struct PrintfArgs {
        t: u64,
        i: u32,
        dots: *const u8,
    }
    let t = global_thread_idx();
    for i in 0..lines {
        let text = "t= i=".len() + decimal_digits(t) + decimal_digits(i as u64);
        let dots = (width as usize).saturating_sub(text + 1).min(PRINTF_DOTS.len() - 1);
        let args = PrintfArgs {
            t,
            i,
            dots: PRINTF_DOTS[PRINTF_DOTS.len() - 1 - dots..].as_ptr(),
        };
        // SAFETY: FORMAT is NUL-terminated; `args` matches its conversions (u64, u32, a
        // pointer to a NUL-terminated string in a static) and lives until vprintf returns,
        // which has copied everything into the printf FIFO by then.
        unsafe { core::arch::nvptx::vprintf(FORMAT.as_ptr(), &args as *const PrintfArgs as *const _) };
    }
}
}

/// 1024 dots and a NUL: [`printf_stress`] prints a suffix of it as its padding.
#[cfg(target_arch = "nvptx64")]
static PRINTF_DOTS: [u8; 1025] = {
    let mut d = [b'.'; 1025];
    d[1024] = 0;
    d
};

/// The number of decimal digits of `n`.
#[cfg(any(target_arch = "nvptx64", test))]
fn decimal_digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

kernel! {
    /// Prints `lines` copies of a 32-byte literal line (31 characters and the newline):
    /// the print path without `core::fmt`, to tell formatting cost from the rest.
    pub fn literal(lines: u32) {
        for _ in 0..lines {
            println!("gpuio literal line, 32 bytes...");
        }
    }
}

kernel! {
    /// Prints `lines` lines `t=<global thread index> i=<line number>` per thread, then
    /// panics. On a GPU the panic handler traps: the launch fails, and the context is lost.
    /// On the CPU backend the thread panics and synchronize reports it. (tests/faults_kernel.rs)
    pub fn trap_after_print(lines: u32) {
        let t = global_thread_idx();
        for i in 0..lines {
            println!("t={t} i={i}");
        }
        panic!("trap_after_print: thread {t} traps after {lines} lines");
    }
}

kernel! {
    /// Prints `waiting t=<global thread index>`, waits until the `u32` at address `flag`
    /// (device memory, or host memory the GPU can read) is not 0, then prints
    /// `released t=<global thread index>`: a kernel that runs for as long as its host says
    /// (the GPU suite's cudarc case hangs one on purpose, then releases it).
    pub fn wait_for_flag(flag: u64) {
        let t = global_thread_idx();
        println!("waiting t={t}");
        // SAFETY: the launch passes the address of a live, aligned u32 that only the host
        // writes; an atomic load sees its write once it lands.
        let flag = unsafe { &*(flag as *const core::sync::atomic::AtomicU32) };
        while flag.load(core::sync::atomic::Ordering::Relaxed) == 0 {
            core::hint::spin_loop();
        }
        println!("released t={t}");
    }
}

/// The text of one [`stress`] line, without its newline.
struct Padded {
    t: u64,
    i: u32,
    width: u32,
}

impl fmt::Display for Padded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w = Counting { inner: f, written: 0 };
        fmt::Write::write_fmt(&mut w, format_args!("t={} i={}", self.t, self.i))?;
        // The newline that println! appends counts towards the width.
        let mut dots = (self.width as usize).saturating_sub(w.written + 1);
        const DOTS: &str = "................................................................";
        while dots > 0 {
            let n = dots.min(DOTS.len());
            f.write_str(&DOTS[..n])?;
            dots -= n;
        }
        Ok(())
    }
}

/// Passes text through, counting its bytes.
pub struct Counting<'a, W: fmt::Write + ?Sized> {
    /// Where the text goes.
    pub inner: &'a mut W,
    /// Bytes passed through so far.
    pub written: usize,
}

impl<W: fmt::Write + ?Sized> fmt::Write for Counting<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.written += s.len();
        self.inner.write_str(s)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::{String, ToString};

    use super::{decimal_digits, Padded};

    fn line(t: u64, i: u32, width: u32) -> String {
        Padded { t, i, width }.to_string() + "\n"
    }

    #[test]
    fn padding() {
        assert_eq!(line(3, 7, 0), "t=3 i=7\n");
        assert_eq!(line(3, 7, 8), "t=3 i=7\n");
        assert_eq!(line(3, 7, 4), "t=3 i=7\n");
        assert_eq!(line(3, 7, 12), "t=3 i=7....\n");
        let long = line(12345, 678, 200);
        assert_eq!(long.len(), 200);
        assert!(long.starts_with("t=12345 i=678...."));
        assert!(long.ends_with(".\n"));
    }

    /// `printf_stress` pads by `decimal_digits`; `stress` by what `Padded` wrote.
    #[test]
    fn printf_padding_matches() {
        for (t, i) in [
            (0u64, 0u32),
            (9, 10),
            (12345, 678),
            (16_777_215, 15),
            (u64::MAX, u32::MAX),
        ] {
            for width in [0u32, 8, 32, 128] {
                let text = "t= i=".len() + decimal_digits(t) + decimal_digits(i as u64);
                let dots = (width as usize).saturating_sub(text + 1);
                assert_eq!(line(t, i, width).len(), text + dots + 1, "t={t} i={i} width={width}");
            }
        }
    }
}
