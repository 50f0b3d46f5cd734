//! File-I/O kernels: the device file API end to end (`tests/file_io_gpu.rs`) and its
//! benchmarks (`benches/bench_file/`).
//!
//! Pointers are passed as `u64` device addresses (on the CPU backend, host addresses).
//!
//! Here: what the kernels share (the bytes of [`random_fill`], paths built on the stack,
//! device memory as a slice, the opcode of a transfer through an arena block), and std's
//! habits on a device `File` ([`std_habits`], [`file_ends_and_directories`]). Beside it, in
//! `files/`:
//!
//! - `end_to_end.rs`: every thread's own file and a shared one ([`file_check`]), and the
//!   error cases ([`file_errors`]);
//! - `latency.rs`: a 64-byte `pwrite`'s round trip through the solo ring or the shared
//!   rings ([`pwrite_latency`], [`pwrite_latency_shared`]), and its diagnostics: in phases
//!   ([`latency_phases`]) and at the floor the hardware allows ([`latency_floor`]);
//! - `bulk.rs`: the grid reading or writing a file in chunks ([`pread_bulk`],
//!   [`pwrite_bulk`]);
//! - `random_reads.rs`: random 4 KiB reads ([`pread_random`]) and their diagnostics, made
//!   with the runtime's parts ([`pread_random_phases`], [`pread_random_parts`]).

mod bulk;
mod end_to_end;
mod latency;
mod random_reads;

pub use bulk::*;
pub use end_to_end::*;
pub use latency::*;
pub use random_reads::*;

use core::fmt::Write;

use gpuio_device::fs::{Error as FsError, OpenOptions};
use gpuio_device::global_thread_idx;
use gpuio_device::io;
use gpuio_device::kernel;

/// Fills `buf` with pseudo-random bytes (xorshift64*) from `seed`; the host uses the same
/// function to check what device code wrote.
pub fn random_fill(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in buf {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *b = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
    }
}

/// Whether two byte slices are equal, without `memcmp` (which amdgcn code objects cannot
/// import).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A path built on the stack (no allocation on a GPU).
struct PathBuf {
    bytes: [u8; 512],
    len: usize,
}

impl PathBuf {
    /// `<dir>/<name>`; `dir` is `dir_len` bytes at device address `dir`.
    fn new(dir: u64, dir_len: u32, name: core::fmt::Arguments) -> PathBuf {
        let mut p = PathBuf {
            bytes: [0; 512],
            len: 0,
        };
        // SAFETY: the host passes `dir_len` bytes of UTF-8 at `dir`, alive for the kernel.
        let d = unsafe { core::slice::from_raw_parts(dir as *const u8, dir_len as usize) };
        let _ = p.write_str(core::str::from_utf8(d).unwrap_or("?"));
        let _ = write!(p, "/{name}");
        p
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("?")
    }
}

impl Write for PathBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len();
        if self.len + n > self.bytes.len() {
            return Err(core::fmt::Error);
        }
        self.bytes[self.len..self.len + n].copy_from_slice(s.as_bytes());
        self.len += n;
        Ok(())
    }
}

/// # Safety
/// `at` is `len` bytes of memory the kernel may use for the launch.
unsafe fn slice<'a>(at: u64, len: usize) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts_mut(at as *mut u8, len) }
}

/// The opcode and buffer index of a transfer into (`write` false) or from an arena block,
/// as the runtime's sandbox wants them: `*_FIXED` naming the arena where every ring holds
/// gpuio's memory as its buffers (`Arena::fixed`, the `FileIo` sandbox), plain otherwise.
fn arena_transfer(ctx: &gpuio_device::protocol::context::Context, write: bool) -> (u8, u16) {
    use gpuio_device::protocol::arena::buffer;
    use gpuio_device::protocol::uapi::{IORING_OP_READ, IORING_OP_READ_FIXED, IORING_OP_WRITE, IORING_OP_WRITE_FIXED};
    match (ctx.arena.fixed, write) {
        (true, true) => (IORING_OP_WRITE_FIXED, buffer::ARENA),
        (true, false) => (IORING_OP_READ_FIXED, buffer::ARENA),
        (false, true) => (IORING_OP_WRITE, 0),
        (false, false) => (IORING_OP_READ, 0),
    }
}

kernel! {
    /// std's habits on a device `File`, by every thread: it creates `<dir>/h<t>`, writes
    /// `t=<t> sq=<t*t>` with `writeln!`, then 20 lines `<t> <i>` and `end` (by its io trait)
    /// through a 256-byte `BufWriter`, seeks back to the start and `read_exact`s its first line, then rewrites
    /// and reads it back through code generic over the io traits. Thread 0 also `dbg!`s its
    /// id (on the runtime's stderr). `results[t]` (i64): 0, or `1000 * step + errno` (step 1
    /// create, 2 write!, 3 BufWriter, 4 seek, 5 read back, 6 the io traits; errno 999: wrong
    /// bytes).
    pub fn std_habits(dir: u64, dir_len: u32, results: u64) {
        use gpuio_device::fs::{BufWriter, SeekFrom};
        let t = global_thread_idx();
        if t == 0 {
            gpuio_device::dbg!(t);
        }
        let code = (|| {
            let code = |step: i64, e: FsError| 1000 * step + e.errno().map_or(999, |e| e.0 as i64);
            let path = PathBuf::new(dir, dir_len, format_args!("h{t}"));
            let mut f = match OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path.as_str()) {
                Ok(f) => f,
                Err(e) => return 1000 + e.errno.0 as i64,
            };
            if let Err(e) = writeln!(f, "t={t} sq={}", t * t) {
                return code(2, e);
            }
            {
                let mut w = BufWriter::<256>::new(&mut f);
                for i in 0..20 {
                    if writeln!(w, "{t} {i}").is_err() {
                        return 3999;
                    }
                }
                // The buffered writer through the io traits: one more line.
                if let Err(e) = io::Write::write_all(&mut w, b"end\n") {
                    return code(3, e);
                }
                if let Err(e) = w.flush() {
                    return code(3, e);
                }
            }
            if let Err(e) = f.seek(SeekFrom::Start(0)) {
                return 4000 + e.0 as i64;
            }
            let mut want = PathBuf {
                bytes: [0; 512],
                len: 0,
            };
            let _ = writeln!(want, "t={t} sq={}", t * t);
            let mut back = [0u8; 64];
            let n = want.len;
            if let Err(e) = f.read_exact(&mut back[..n]) {
                return code(5, e);
            }
            if !same(&back[..n], &want.bytes[..n]) {
                return 5999;
            }
            // Code generic over the io traits takes the file: the first line again, from
            // the start, read back.
            match through_the_traits(&mut f, &want.bytes[..n], &mut back[..n]) {
                Ok(true) => {}
                Ok(false) => return 6999,
                Err(e) => return code(6, e),
            }
            0
        })();
        // SAFETY: the host allocated one i64 per thread at `results`.
        unsafe { *(results as *mut i64).add(t as usize) = code };
    }
}

kernel! {
    /// A file's length and end, and nested directories, by every thread: it creates
    /// `<dir>/e<t>` (read and write), writes `t % 200 + 1` lines `<t> <i>`, asks its length
    /// (`len`, found by reads), seeks 4 bytes before its end and reads them back (the last
    /// line's tail), then makes `<dir>/deep/<t % 4>/a/b` with `create_dir_all` (a quarter of
    /// the threads each, at once). `results[t]` (i64): 0, or `1000 * step + errno` (step 1
    /// create, 2 write, 3 len, 4 seek from the end, 5 read back, 6 create_dir_all; errno
    /// 999: a wrong length, position or bytes).
    pub fn file_ends_and_directories(dir: u64, dir_len: u32, results: u64) {
        use gpuio_device::fs::{BufWriter, SeekFrom};
        let t = global_thread_idx();
        let code = (|| {
            let path = PathBuf::new(dir, dir_len, format_args!("e{t}"));
            let mut f = match OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path.as_str()) {
                Ok(f) => f,
                Err(e) => return 1000 + e.errno.0 as i64,
            };
            {
                let mut w = BufWriter::<256>::new(&mut f);
                for i in 0..t % 200 + 1 {
                    if writeln!(w, "{t} {i}").is_err() {
                        return 2999;
                    }
                }
                if let Err(e) = w.flush() {
                    return 2000 + e.errno().map_or(999, |e| e.0 as i64);
                }
            }
            let written = f.stream_position();
            match f.len() {
                Ok(len) if len == written => {}
                Ok(_) => return 3999,
                Err(e) => return 3000 + e.0 as i64,
            }
            match f.seek(SeekFrom::End(-4)) {
                Ok(at) if at == written - 4 => {}
                Ok(_) => return 4999,
                Err(e) => return 4000 + e.0 as i64,
            }
            let mut tail = [0u8; 4];
            if let Err(e) = f.read_exact(&mut tail) {
                return 5000 + e.errno().map_or(999, |e| e.0 as i64);
            }
            let mut last = PathBuf {
                bytes: [0; 512],
                len: 0,
            };
            let _ = writeln!(last, "{t} {}", t % 200);
            if last.len < 4 || !same(&tail, &last.bytes[last.len - 4..last.len]) {
                return 5999;
            }
            let deep = PathBuf::new(dir, dir_len, format_args!("deep/{}/a/b", t % 4));
            if let Err(e) = gpuio_device::fs::create_dir_all(deep.as_str()) {
                return 6000 + e.errno.0 as i64;
            }
            0
        })();
        // SAFETY: the host allocated one i64 per thread at `results`.
        unsafe { *(results as *mut i64).add(t as usize) = code };
    }
}

/// Rewrites `line` at the start of `f` through the io traits alone and reads it back into
/// `back`: whether it read what it wrote.
fn through_the_traits<F: io::Read + io::Write + io::Seek>(
    f: &mut F,
    line: &[u8],
    back: &mut [u8],
) -> Result<bool, F::Error> {
    f.rewind()?;
    f.write_all(line)?;
    f.flush()?;
    f.seek(io::SeekFrom::Current(-(line.len() as i64)))?;
    let n = f.read(back)?;
    Ok(n == line.len() && same(back, line))
}
