//! The device runtime's C ABI, for kernels written in CUDA C++, HIP or C: the functions
//! `device/include/gpuio/device.h` declares, each `extern "C"` under its C name. Only in
//! builds with the `c-abi` feature: a Rust kernel crate does not carry them (the `printf`
//! engine is a few kilobytes of code the driver would compile at every first load).
//!
//! Each call is the Rust device runtime's: a print is one record on the runtime's stdout,
//! whole, in its thread's order (docs/PROTOCOL.md's invariants); file calls are io_uring
//! requests under the runtime's sandbox. Where POSIX returns -1 and sets `errno`, these
//! return `-errno` (a GPU thread has no `errno`).
//!
//! `gpuio_printf` (the header's, a C++ variadic template) packs its arguments as
//! [`gpuio_printf_arg`]s and calls [`gpuio_printf_args`], which formats them on the device as C's
//! `printf` does ([`format`]).

use core::cell::Cell;
use core::ffi::{c_char, c_void};
use core::fmt;

pub mod format;

pub use format::{
    gpuio_printf_arg, BadFormat, GPUIO_PRINTF_DOUBLE, GPUIO_PRINTF_INT, GPUIO_PRINTF_PTR, GPUIO_PRINTF_UINT,
};

use crate::io::{self, Errno};
use crate::io_traits::Lossy;
use crate::protocol::print::print_to;

/// `EINVAL` as these calls return it.
const EINVAL: i32 = -(Errno::EINVAL.0);

/// The bytes of the C string `s` (without its NUL).
///
/// # Safety
/// `s` is a NUL-terminated string.
unsafe fn c_bytes<'a>(s: *const c_char) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: the caller's contract: every byte up to the NUL is readable.
    while unsafe { *s.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: the `len` bytes just read.
    unsafe { core::slice::from_raw_parts(s as *const u8, len) }
}

/// A format and its arguments, written as C's `printf` writes them (checked before), and
/// the bytes that writing them gave.
struct CFormatted<'a> {
    format: &'a [u8],
    args: &'a [gpuio_printf_arg],
    /// The bytes the last formatting wrote (a line longer than the print's buffer is
    /// formatted twice, the same bytes each time); `None` until it is formatted.
    printed: Cell<Option<usize>>,
}

impl fmt::Display for CFormatted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = Counted { out: f, n: 0 };
        // SAFETY: `gpuio_printf_args`'s contract: its `%s` pointers are C strings.
        let result = unsafe { format::format(self.format, self.args, &mut out) };
        self.printed.set(Some(out.n));
        match result {
            Ok(written) => written,
            // Checked before it was printed: not reached.
            Err(_) => Err(fmt::Error),
        }
    }
}

/// Passes text on to `out`, counting its bytes.
struct Counted<'a, 'f> {
    out: &'a mut fmt::Formatter<'f>,
    n: usize,
}

impl fmt::Write for Counted<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.n += s.len();
        self.out.write_str(s)
    }
}

/// Prints `format` with its `nargs` arguments to the runtime's stdout as C's `printf`
/// does, as one record (a `\n` in the format ends a line; a print without one is continued
/// by no other). Returns the bytes printed; -1 where the format is not taken (`%n`, `L`,
/// an argument missing or of the wrong kind, see [`format`]), having printed nothing of it
/// and a line on the runtime's stderr that says why.
///
/// The format is read twice: once to check it ([`format::check`]: the conversions and the
/// arguments' kinds, nothing formatted) and once to print it, counting the bytes. (Where the
/// print skips it, in a kernel without gpuio's runtime or made by a `Display` while a long
/// line is formatted again, it is formatted into a count instead: the result is the same.)
///
/// # Safety
/// `format` is a NUL-terminated string; `args` points to `nargs` arguments (or is NULL
/// with `nargs` 0); every `%s` argument is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn gpuio_printf_args(format: *const c_char, args: *const gpuio_printf_arg, nargs: u32) -> i32 {
    if format.is_null() || (args.is_null() && nargs != 0) {
        return -1;
    }
    // SAFETY: the caller's contract.
    let (format, args) = unsafe {
        (
            c_bytes(format),
            if nargs == 0 {
                &[][..]
            } else {
                core::slice::from_raw_parts(args, nargs as usize)
            },
        )
    };
    match format::check(format, args) {
        Ok(()) => {
            let line = CFormatted {
                format,
                args,
                printed: Cell::new(None),
            };
            print_to(false, false, format_args!("{line}"));
            let printed = line.printed.get().unwrap_or_else(|| {
                let mut count = format::Count(0);
                // SAFETY: the caller's contract: `%s` arguments are C strings.
                let _ = unsafe { format::format(format, args, &mut count) };
                count.0
            });
            printed.min(i32::MAX as usize) as i32
        }
        Err(bad) => {
            print_to(true, true, format_args!("gpuio_printf: {bad}"));
            -1
        }
    }
}

/// Prints the C string `s` and a newline to the runtime's stdout, one line, as C's `puts`.
/// Returns the bytes printed (with the newline).
///
/// # Safety
/// `s` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn gpuio_puts(s: *const c_char) -> i32 {
    if s.is_null() {
        return EINVAL;
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { c_bytes(s) };
    print_to(false, true, format_args!("{}", Lossy(bytes)));
    (bytes.len() + 1).min(i32::MAX as usize) as i32
}

/// Writes `len` bytes at `buf` to the runtime's stdout (`fd` 1) or stderr (2), as one
/// print (text: bytes that are not UTF-8 print as U+FFFD). Returns `len`; `-EBADF` for any
/// other `fd` (files take [`gpuio_pwrite`], at an offset).
///
/// # Safety
/// `buf` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn gpuio_write(fd: i32, buf: *const c_void, len: usize) -> isize {
    if fd != 1 && fd != 2 {
        return -(Errno::EBADF.0 as isize);
    }
    if buf.is_null() && len != 0 {
        return EINVAL as isize;
    }
    let bytes = if len == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract: `buf` points to `len` readable bytes.
        unsafe { core::slice::from_raw_parts(buf as *const u8, len) }
    };
    print_to(fd == 2, false, format_args!("{}", Lossy(bytes)));
    len.min(isize::MAX as usize) as isize
}

/// Opens `path` as `open(2)`: `flags` and `mode` as Linux's. Returns the descriptor, or
/// `-errno` (`-EINVAL` for a path that is not UTF-8).
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn gpuio_open(path: *const c_char, flags: i32, mode: u32) -> i32 {
    if path.is_null() {
        return EINVAL;
    }
    // SAFETY: the caller's contract.
    let Ok(path) = core::str::from_utf8(unsafe { c_bytes(path) }) else {
        return EINVAL;
    };
    io::open(path, flags, mode).unwrap_or_else(|e| -e.0)
}

/// Writes `len` bytes at `buf` to `fd` at `offset`, as `pwrite(2)`: the bytes written, or
/// `-errno`.
///
/// # Safety
/// `buf` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn gpuio_pwrite(fd: i32, buf: *const c_void, len: usize, offset: i64) -> isize {
    if (buf.is_null() && len != 0) || offset < 0 {
        return EINVAL as isize;
    }
    let bytes = if len == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract: `buf` points to `len` readable bytes.
        unsafe { core::slice::from_raw_parts(buf as *const u8, len) }
    };
    io::pwrite(fd, bytes, offset as u64).map_or_else(|e| -(e.0 as isize), |n| n as isize)
}

/// Reads up to `len` bytes into `buf` from `fd` at `offset`, as `pread(2)`: the bytes read
/// (0 at the end of the file), or `-errno`.
///
/// # Safety
/// `buf` points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gpuio_pread(fd: i32, buf: *mut c_void, len: usize, offset: i64) -> isize {
    if (buf.is_null() && len != 0) || offset < 0 {
        return EINVAL as isize;
    }
    let bytes = if len == 0 {
        &mut [][..]
    } else {
        // SAFETY: the caller's contract: `buf` points to `len` writable bytes.
        unsafe { core::slice::from_raw_parts_mut(buf as *mut u8, len) }
    };
    io::pread(fd, bytes, offset as u64).map_or_else(|e| -(e.0 as isize), |n| n as isize)
}

/// Flushes `fd`'s data and metadata to storage, as `fsync(2)`: 0, or `-errno`.
#[no_mangle]
pub extern "C" fn gpuio_fsync(fd: i32) -> i32 {
    io::fsync(fd).map_or_else(|e| -e.0, |()| 0)
}

/// Closes `fd`, as `close(2)`: 0, or `-errno`.
#[no_mangle]
pub extern "C" fn gpuio_close(fd: i32) -> i32 {
    io::close(fd).map_or_else(|e| -e.0, |()| 0)
}
