//! The grid reading or writing a file in chunks, device memory (staged) or a host buffer
//! (direct): [`pread_bulk`], [`pwrite_bulk`].

use gpuio_device::fs::File;
use gpuio_device::kernel;
use gpuio_device::protocol::sync::{AtomicU32, Ordering};
use gpuio_device::{block_dim, global_thread_idx, grid_dim};

use super::slice;

kernel! {
    /// Every thread of the grid reads chunks `c = t, t + threads, ...` of `chunk` bytes of
    /// `fd` (`total` bytes from offset 0) into `dst + c * chunk`: device memory (staged)
    /// or a host buffer (direct). Failures are counted in `errors` (a u32).
    pub fn pread_bulk(fd: i32, dst: u64, total: u64, chunk: u64, errors: u64) {
        bulk(fd, dst, total, chunk, errors, false);
    }
}

kernel! {
    /// Like [`pread_bulk`], writing `src` to `fd` instead.
    pub fn pwrite_bulk(fd: i32, src: u64, total: u64, chunk: u64, errors: u64) {
        bulk(fd, src, total, chunk, errors, true);
    }
}

fn bulk(fd: i32, at: u64, total: u64, chunk: u64, errors: u64, write: bool) {
    let threads = grid_dim() as u64 * block_dim() as u64;
    let mut c = global_thread_idx();
    // SAFETY: `fd` stays open for the kernel (the host holds it).
    let f = core::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
    while c * chunk < total {
        let off = c * chunk;
        let n = chunk.min(total - off) as usize;
        // SAFETY: the host allocated `total` bytes at `at`; chunks are disjoint.
        let buf = unsafe { slice(at + off, n) };
        let r = if write {
            f.write_all_at(buf, off)
        } else {
            f.read_exact_at(buf, off)
        };
        if r.is_err() {
            // SAFETY: the host allocated a zeroed u32 counter.
            unsafe { &*(errors as *const AtomicU32) }.fetch_add(1, Ordering::Relaxed);
        }
        c += threads;
    }
}
