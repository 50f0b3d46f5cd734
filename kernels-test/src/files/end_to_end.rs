//! The device file API end to end: every thread's own file and a shared one
//! ([`file_check`]), and the error cases ([`file_errors`]).

use gpuio_device::fs::{Error as FsError, File, OpenOptions};
use gpuio_device::global_thread_idx;
use gpuio_device::io::{self, Errno};
use gpuio_device::kernel;

use super::{random_fill, same, slice, PathBuf};

/// A result code: 0, or `step * 1000 + errno` (errno 999: wrong bytes or end of file).
fn code(step: i64, e: Result<(), FsError>) -> Result<(), i64> {
    e.map_err(|e| step * 1000 + e.errno().map_or(999, |n| n.0 as i64))
}

kernel! {
    /// Each thread writes `bytes` pseudo-random bytes ([`random_fill`], seeded by its global
    /// index `t`) to its own new file `<dir>/t<t>`, fsyncs, reads them back and compares;
    /// then the same at offset `t * bytes` of the shared file `shared_fd`. `scratch` holds
    /// `2 * bytes` of device memory per thread; `results[t]` (i64) gets 0, or
    /// `step * 1000 + errno` for the first step that failed.
    pub fn file_check(dir: u64, dir_len: u32, shared_fd: i32, bytes: u32, scratch: u64, results: u64) {
        let t = global_thread_idx();
        let n = bytes as usize;
        // SAFETY: the host allocated `2 * bytes` per thread and one i64 per thread.
        let (data, back, out) = unsafe {
            let mine = slice(scratch + t * 2 * n as u64, 2 * n);
            let (a, b) = mine.split_at_mut(n);
            (a, b, &mut *((results as *mut i64).add(t as usize)))
        };
        random_fill(t, data);
        let path = PathBuf::new(dir, dir_len, format_args!("t{t}"));
        let mut run = || -> Result<(), i64> {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path.as_str())
                .map_err(|e| 1000 + e.errno.0 as i64)?;
            code(2, f.write_all_at(data, 0))?;
            code(3, f.sync_all().map_err(FsError::from))?;
            code(4, f.read_exact_at(back, 0))?;
            if !same(back, data) {
                return Err(4999);
            }
            code(5, f.close().map_err(FsError::from))?;
            // The shared file, at our own offset.
            back.fill(0);
            // SAFETY: `shared_fd` is open for the kernel's duration (the host holds it).
            let shared = core::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(shared_fd) });
            code(6, shared.write_all_at(data, t * n as u64))?;
            code(7, shared.sync_data().map_err(FsError::from))?;
            code(8, shared.read_exact_at(back, t * n as u64))?;
            if !same(back, data) {
                return Err(8999);
            }
            Ok(())
        };
        *out = run().err().unwrap_or(0);
    }
}

/// `out` codes of [`file_errors`]: a count or fd (>= 0), `-errno`, or this for end of file
/// with the count in the next entry.
pub const EOF_CODE: i64 = -1000;

fn errno_code<E: Into<Errno>>(e: E) -> i64 {
    -(e.into().0 as i64)
}

kernel! {
    /// One thread runs the error cases and writes one i64 per case into `out` (see
    /// [`EOF_CODE`]); `tests/file_io_gpu.rs` lists them. `big` is `big_len` bytes of device
    /// memory for a transfer larger than the arena.
    pub fn file_errors(dir: u64, dir_len: u32, big: u64, big_len: u64, out: u64) {
        if global_thread_idx() != 0 {
            return;
        }
        // SAFETY: the host allocated 16 i64 results and `big_len` bytes at `big`.
        let (out, big) = unsafe { (core::slice::from_raw_parts_mut(out as *mut i64, 16), slice(big, big_len as usize)) };
        let mut buf = [0u8; 8];
        // 0: invalid fd.
        out[0] = io::pread(987_654, &mut buf, 0).map_or_else(errno_code, |n| n as i64);
        // 1: missing path.
        out[1] = File::open(PathBuf::new(dir, dir_len, format_args!("missing")).as_str()).map_or_else(errno_code, |f| f.into_raw_fd() as i64);
        // 2, 3: a short read at the end of "ten" (10 bytes: "0123456789"), and its bytes.
        let ten_path = PathBuf::new(dir, dir_len, format_args!("ten"));
        let ten = File::open(ten_path.as_str());
        match &ten {
            Ok(f) => {
                out[2] = f.read_at(&mut buf, 6).map_or_else(errno_code, |n| n as i64);
                out[3] = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as i64;
                // 4, 5: read_exact_at past the end: EOF after 6 bytes.
                match f.read_exact_at(&mut buf, 4) {
                    Err(FsError::UnexpectedEof { done }) => {
                        out[4] = EOF_CODE;
                        out[5] = done as i64;
                    }
                    Err(e) => out[4] = e.errno().map_or(-999, errno_code),
                    Ok(()) => out[4] = 0,
                }
                // 6: at the end: 0.
                out[6] = f.read_at(&mut buf, 10).map_or_else(errno_code, |n| n as i64);
            }
            Err(e) => out[2] = errno_code(*e),
        }
        drop(ten);
        // 7: permission denied (the host made "secret" mode 000).
        out[7] = File::open(PathBuf::new(dir, dir_len, format_args!("secret")).as_str()).map_or_else(errno_code, |f| f.into_raw_fd() as i64);
        // 8, 9: a file larger than the arena: write `big`, read it back over itself, and
        // compare with the generator.
        random_fill(42, big);
        let path = PathBuf::new(dir, dir_len, format_args!("big"));
        out[8] = match OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path.as_str()) {
            Ok(f) => {
                let w = f.write_all_at(big, 0);
                big.fill(0);
                let r = f.read_exact_at(big, 0);
                match (w, r) {
                    (Ok(()), Ok(())) => big_len as i64,
                    (Err(e), _) | (_, Err(e)) => e.errno().map_or(-999, errno_code),
                }
            }
            Err(e) => errno_code(e),
        };
        let mut check = [0u8; 256];
        let mut same = true;
        let mut at = 0;
        // Regenerate in 256-byte windows of one stream: random_fill over the whole length
        // would need a second buffer as large as `big`.
        let mut gen = Gen::new(42);
        while at < big.len() {
            let k = (big.len() - at).min(check.len());
            gen.fill(&mut check[..k]);
            same &= self::same(&check[..k], &big[at..at + k]);
            at += k;
        }
        out[9] = same as i64;
        // 10: a write to a read-only descriptor.
        out[10] = match File::open(PathBuf::new(dir, dir_len, format_args!("ten")).as_str()) {
            Ok(f) => f.write_at(b"x", 0).map_or_else(errno_code, |n| n as i64),
            Err(e) => errno_code(e) - 100,
        };
    }
}

/// [`random_fill`]'s generator, resumable.
struct Gen(u64);

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            let x = &mut self.0;
            *x ^= *x >> 12;
            *x ^= *x << 25;
            *x ^= *x >> 27;
            *b = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
        }
    }
}
