//! File I/O from buffers on the threads' stacks ([`stack_io`]), and lanes of one warp
//! printing while their neighbours wait for it ([`print_while_waiting`]).

use gpuio_device::io;
use gpuio_device::kernel;
use gpuio_device::{global_thread_idx, println};

/// The 64 bytes thread `t` writes in [`stack_io`]: distinct for every thread and offset.
pub fn stack_bytes(t: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    for (j, x) in b.iter_mut().enumerate() {
        *x = (t.wrapping_mul(131).wrapping_add(j as u64 * 7) % 251) as u8;
    }
    b
}

kernel! {
    /// Every thread `pwrite`s the 64 bytes of [`stack_bytes`]`(t)`, from an array on its
    /// stack, at offset `64 * t` of `fd`, then `pread`s them back into another stack array
    /// and compares. `results[t]` (i64): 0, or `1000 * step + errno` (step 1 write, 2 read;
    /// errno 999: a short count, 998: wrong bytes).
    pub fn stack_io(fd: i32, results: u64) {
        let t = global_thread_idx();
        let data = stack_bytes(t);
        let code = (|| {
            match io::pwrite(fd, &data, 64 * t) {
                Ok(64) => {}
                Ok(_) => return 1999,
                Err(e) => return 1000 + e.0 as i64,
            }
            let mut back = [0u8; 64];
            match io::pread(fd, &mut back, 64 * t) {
                Ok(64) => {}
                Ok(_) => return 2999,
                Err(e) => return 2000 + e.0 as i64,
            }
            if back.iter().zip(&data).any(|(a, b)| a != b) {
                return 2998;
            }
            0
        })();
        // SAFETY: the host allocated one i64 per thread.
        unsafe { *(results as *mut i64).add(t as usize) = code };
    }
}

kernel! {
    /// Lanes of one warp printing while their neighbours wait for file I/O: in step `i` of
    /// `steps`, thread `t` prints `t=<t> i=<n>` (its `n`-th line) when `t + i` is even, and
    /// otherwise `pwrite`s the 64 bytes of [`stack_bytes`]`(t * steps + i)` from its stack at
    /// offset `64 * (t * steps + i)` of `fd` and `pread`s them back. With a tiny ring and log
    /// the waiting lanes' rounds (one lane goes round for those waiting together) flush the
    /// printing lanes' streams and wait for ring room while their siblings are parked.
    /// `results[t]` (i64): 0, or `1000 * step + errno` as [`stack_io`]'s, with the step
    /// number `i` added times 10,000.
    pub fn print_while_waiting(fd: i32, steps: u32, results: u64) {
        let t = global_thread_idx();
        let mut printed = 0u32;
        let mut code = 0i64;
        for i in 0..steps {
            if (t + i as u64).is_multiple_of(2) {
                println!("t={t} i={printed}");
                printed += 1;
                continue;
            }
            let at = t * steps as u64 + i as u64;
            let data = stack_bytes(at);
            let mut back = [0u8; 64];
            let step = match io::pwrite(fd, &data, 64 * at) {
                // Compared byte by byte: `==` on arrays becomes a `memcmp` call, which a GPU
                // code object has nothing to link to.
                Ok(64) => match io::pread(fd, &mut back, 64 * at) {
                    Ok(64) if back.iter().zip(&data).all(|(a, b)| a == b) => 0,
                    Ok(64) => 2998,
                    Ok(_) => 2999,
                    Err(e) => 2000 + e.0 as i64,
                },
                Ok(_) => 1999,
                Err(e) => 1000 + e.0 as i64,
            };
            if step != 0 && code == 0 {
                code = step + 10_000 * i as i64;
            }
        }
        // SAFETY: the host allocated one i64 per thread.
        unsafe { *(results as *mut i64).add(t as usize) = code };
    }
}
