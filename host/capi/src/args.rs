//! Checking the arguments C passes: handles, out-pointers, strings, buffers; and the
//! guard against waiting from inside a kernel.

use std::ffi::{c_char, c_void, CStr};

use crate::status::gpuio_status::*;
use crate::status::Failure;
use crate::types::*;

pub(crate) fn runtime_id(rt: *mut gpuio_runtime) -> usize {
    rt.addr()
}

pub(crate) fn module_id(m: *mut gpuio_module) -> usize {
    m.addr()
}

/// Refuses calls that would wait for kernels from inside one (a CPU kernel that
/// synchronized its own runtime would wait for itself).
pub(crate) fn outside_kernels(what: &str) -> Result<(), Failure> {
    if gpuio_device::protocol::context::current().is_null() {
        Ok(())
    } else {
        Err(Failure::new(
            GPUIO_ERROR_WRONG_CONTEXT,
            format!("{what} was called from inside a CPU kernel; call it from a host thread"),
        ))
    }
}

/// `out`, checked for NULL.
pub(crate) fn out_ptr<T>(out: *mut T, what: &str) -> Result<*mut T, Failure> {
    if out.is_null() {
        Err(Failure::arg(format!("{what} is NULL")))
    } else {
        Ok(out)
    }
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn utf8_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::arg(format!("{what} is NULL")));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|e| {
        Failure::arg(format!(
            "{what} {:?} is not UTF-8 (invalid byte at {})",
            s.to_string_lossy(),
            e.valid_up_to()
        ))
    })
}

/// A `len`-byte buffer argument (`p` may be NULL when `len` is 0).
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes during `'a`.
pub(crate) unsafe fn bytes_arg<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::arg(format!("{what} is NULL but its length is {len}")));
    }
    if len > isize::MAX as usize {
        return Err(Failure::arg(format!("{what}: length {len} is not a valid size")));
    }
    // SAFETY: the caller's contract; non-NULL, and the length fits a slice.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}
