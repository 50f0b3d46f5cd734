//! The module calls, which a CPU runtime refuses or finds no module for:
//! `module_load_data`, `module_load_file`, `module_launch`, `module_destroy`,
//! `attach_cuda_module`, `attach_hsa_executable`, `prepare_launch`.

use std::ffi::{c_char, c_void};

use super::{check, handle, Bytes};
use crate::status::gpuio_status::*;
use crate::types::*;
use crate::*;

/// `module_load_data` of fuzzed bytes, which a CPU runtime refuses leaving no handle.
pub(super) fn module_load_data(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let image = b.bytes(200);
        let size = match b.u8() % 3 {
            0 => 0,
            _ => image.len(),
        };
        let ptr = if b.u8().is_multiple_of(4) {
            std::ptr::null()
        } else {
            image.as_ptr() as *const c_void
        };
        let ptr = if ptr.is_null() && size > 0 && b.u8() & 1 == 0 {
            image.as_ptr() as *const c_void
        } else {
            ptr
        };
        let mut m: *mut gpuio_module = std::ptr::dangling_mut();
        let s = check(
            "module_load_data",
            gpuio_module_load_data(std::ptr::without_provenance_mut(rt), ptr, size, &mut m),
        );
        assert_ne!(s, GPUIO_OK, "a CPU runtime loaded a code object");
        assert!(m.is_null(), "module_load_data failed and left a handle");
    }
}

/// `module_load_file` of a path that does not exist, or NULL.
pub(super) fn module_load_file(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let mut path = b"/nonexistent-gpuio-fuzz/".to_vec();
        path.extend(b.bytes(60));
        path.push(0);
        let p: *const c_char = if b.u8().is_multiple_of(8) {
            std::ptr::null()
        } else {
            path.as_ptr() as *const c_char
        };
        let mut m: *mut gpuio_module = std::ptr::null_mut();
        let s = check(
            "module_load_file",
            gpuio_module_load_file(std::ptr::without_provenance_mut(rt), p, &mut m),
        );
        assert_ne!(s, GPUIO_OK);
    }
}

/// `module_launch` on something that is no module.
pub(super) fn module_launch(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let m = handle(b, &[], dead, live);
        let mut name = b.bytes(40);
        name.push(0);
        let args: Vec<gpuio_arg> = (0..b.u8() % 8)
            .map(|_| gpuio_arg {
                kind: b.u8() as i32 % 6 - 1,
                value: gpuio_arg_value { u64: b.u64() },
            })
            .collect();
        let (ptr, n) = match b.u8() % 4 {
            0 => (std::ptr::null(), b.u64() as usize),
            1 => (std::ptr::null(), 0),
            _ => (args.as_ptr(), args.len()),
        };
        let s = check(
            "module_launch",
            gpuio_module_launch(
                std::ptr::without_provenance_mut(m),
                name.as_ptr() as *const c_char,
                b.u32(),
                b.u32(),
                ptr,
                n,
            ),
        );
        assert_eq!(s, GPUIO_ERROR_INVALID_HANDLE, "launching on {m:#x}, not a module");
    }
}

/// `module_destroy` of something that is no module.
pub(super) fn module_destroy(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let m = handle(b, &[], dead, live);
        let s = check(
            "module_destroy",
            gpuio_module_destroy(std::ptr::without_provenance_mut(m)),
        );
        assert_eq!(s, GPUIO_ERROR_INVALID_HANDLE);
    }
}

/// `attach_cuda_module`, which a CPU runtime refuses leaving no handle.
pub(super) fn attach_cuda_module(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let mut m: *mut gpuio_module = std::ptr::dangling_mut();
        let out: *mut *mut gpuio_module = if b.u8() & 1 == 0 { &mut m } else { std::ptr::null_mut() };
        // NULL, or a pointer that a CPU runtime refuses before using it.
        let cu = if b.u8() & 1 == 0 {
            std::ptr::null_mut()
        } else {
            &mut m as *mut _ as *mut c_void
        };
        let s = check(
            "attach_cuda_module",
            gpuio_attach_cuda_module(std::ptr::without_provenance_mut(rt), cu, out),
        );
        assert_ne!(s, GPUIO_OK);
        assert!(out.is_null() || m.is_null(), "attach failed and left a handle");
    }
}

/// `attach_hsa_executable`, which a CPU runtime refuses leaving no handle.
pub(super) fn attach_hsa_executable(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let mut m: *mut gpuio_module = std::ptr::dangling_mut();
        let s = check(
            "attach_hsa_executable",
            gpuio_attach_hsa_executable(std::ptr::without_provenance_mut(rt), b.u64(), b.u64(), &mut m),
        );
        assert_ne!(s, GPUIO_OK);
        assert!(m.is_null());
    }
}

/// `prepare_launch`, which a CPU runtime refuses.
pub(super) fn prepare_launch(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let s = check(
            "prepare_launch",
            gpuio_prepare_launch(std::ptr::without_provenance_mut(rt)),
        );
        assert_ne!(s, GPUIO_OK, "prepare_launch on a CPU runtime");
    }
}
