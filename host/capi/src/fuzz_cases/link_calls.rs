//! Joining fuzzed PTX texts: `link_ptx` into buffers of every capacity, and
//! `module_load_linked`, which a CPU runtime refuses.

use std::ffi::c_char;

use super::{check, handle, Bytes};
use crate::status::gpuio_status::*;
use crate::types::*;
use crate::*;

/// Up to three fuzzed NUL-terminated texts, an entry of them NULL at times, and the array
/// itself NULL at times; with the count the call gets (0, or the array's length).
fn texts(b: &mut Bytes) -> (Vec<std::ffi::CString>, Vec<*const c_char>, bool, usize) {
    let n = (b.u8() % 4) as usize;
    let texts: Vec<std::ffi::CString> = (0..n)
        .map(|_| {
            let mut v = b.bytes(120);
            v.retain(|&c| c != 0);
            std::ffi::CString::new(v).unwrap()
        })
        .collect();
    let mut ptrs: Vec<*const c_char> = texts.iter().map(|t| t.as_ptr()).collect();
    if !ptrs.is_empty() && b.u8().is_multiple_of(8) {
        let i = b.u8() as usize % ptrs.len();
        ptrs[i] = std::ptr::null();
    }
    let null_array = b.u8().is_multiple_of(8);
    let count = if b.u8().is_multiple_of(4) { 0 } else { ptrs.len() };
    (texts, ptrs, null_array, count)
}

/// `link_ptx` of fuzzed texts, counts and capacities: `len` is what the text needs on a
/// success and on a small buffer, 0 on any other error; the buffer is written only on a
/// success, and then holds `len` bytes ending in its NUL.
pub(super) fn link_ptx(b: &mut Bytes) {
    let (_texts, ptrs, null_array, count) = texts(b);
    let modules = if null_array { std::ptr::null() } else { ptrs.as_ptr() };
    let capacity = match b.u8() % 3 {
        0 => 0,
        1 => b.u8() as usize,
        _ => 4096,
    };
    let mut buf = vec![0x55u8; capacity];
    let bufp = if capacity == 0 && b.u8() & 1 == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr() as *mut c_char
    };
    let mut len = usize::MAX;
    // SAFETY: `modules` is NULL or `count <= ptrs.len()` pointers, each NULL or a CString
    // alive in `_texts`; `bufp` is NULL or valid for `capacity` bytes; `len` is valid.
    let s = check("link_ptx", unsafe {
        gpuio_link_ptx(modules, count, bufp, capacity, &mut len)
    });
    let written = s == GPUIO_OK && !bufp.is_null();
    if written {
        assert!(
            len >= 1 && len <= capacity && buf[len - 1] == 0,
            "link_ptx wrote {len} of {capacity}"
        );
    } else {
        assert!(
            buf.iter().all(|&c| c == 0x55),
            "link_ptx wrote into the buffer without success"
        );
    }
    if s != GPUIO_OK && s != GPUIO_ERROR_INVALID_ARGUMENT {
        assert_eq!(len, 0, "link_ptx failed with {s:?} and set len");
    }
}

/// `module_load_linked` of fuzzed texts, which a CPU runtime refuses leaving no handle.
pub(super) fn module_load_linked(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    let rt = handle(b, live, dead, &[]);
    let (_texts, ptrs, null_array, count) = texts(b);
    let modules = if null_array { std::ptr::null() } else { ptrs.as_ptr() };
    let mut m: *mut gpuio_module = std::ptr::dangling_mut();
    // SAFETY: as in `link_ptx`; `m` is valid for writes; handles are plain values.
    let s = check("module_load_linked", unsafe {
        gpuio_module_load_linked(std::ptr::without_provenance_mut(rt), modules, count, &mut m)
    });
    assert_ne!(s, GPUIO_OK, "a CPU runtime loaded joined PTX");
    assert!(m.is_null(), "module_load_linked failed and left a handle");
}
