//! PTX modules joined into one text from C ([`gpuio_host::link_ptx`]): a C++ kernel's PTX
//! (`nvcc -rdc=true -ptx`) with gpuio's device library, for `gpuio_module_load_data` or the
//! host's own `cuModuleLoadData` (then `gpuio_attach_cuda_module`).

use std::ffi::{c_char, CStr};

use gpuio_host::{Backend, Error};

use crate::args::*;
use crate::module::{load_code_object, write_module};
use crate::status::gpuio_status;
use crate::status::{call, Failure};
use crate::types::*;

/// The `count` NUL-terminated texts at `modules`, joined ([`gpuio_host::link_ptx`]).
///
/// # Safety
/// `modules` is NULL or valid for reads of `count` pointers, each NULL or a NUL-terminated
/// string.
unsafe fn joined(modules: *const *const c_char, count: usize) -> Result<String, Failure> {
    if count == 0 {
        return Err(Failure::arg("no modules to join (count is 0)"));
    }
    if modules.is_null() {
        return Err(Failure::arg(format!("modules is NULL but count is {count}")));
    }
    // Not sized by `count`: a wrong count is the caller's to get an error for, not an
    // allocation of it.
    let mut texts = Vec::new();
    for i in 0..count {
        // SAFETY: `i < count`, within the array by the caller's contract.
        let text = unsafe { *modules.add(i) };
        if text.is_null() {
            return Err(Failure::arg(format!("modules[{i}] is NULL")));
        }
        // SAFETY: non-NULL, and NUL-terminated by the caller's contract.
        let bytes = unsafe { CStr::from_ptr(text) }.to_bytes();
        // The text itself stays out of the message: a module can be megabytes.
        texts.push(std::str::from_utf8(bytes).map_err(|e| {
            Failure::arg(format!(
                "modules[{i}] is not PTX text: not UTF-8 at byte {}",
                e.valid_up_to()
            ))
        })?);
    }
    Ok(gpuio_host::link_ptx(&texts)?)
}

/// `gpuio_link_ptx`: joins PTX modules into `buf` as one NUL-terminated text, or, with
/// `buf` NULL and `capacity` 0, says in `len` how many bytes that needs.
///
/// # Safety
/// `modules` as for [`joined`]; `buf` is NULL or valid for writes of `capacity` bytes;
/// `len` is NULL or valid for writes of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn gpuio_link_ptx(
    modules: *const *const c_char,
    count: usize,
    buf: *mut c_char,
    capacity: usize,
    len: *mut usize,
) -> gpuio_status {
    call(|| {
        let len = out_ptr(len, "len")?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { len.write(0) };
        // SAFETY: the caller's contract.
        let text = unsafe { joined(modules, count) }?;
        let needed = text.len() + 1;
        // SAFETY: as above.
        unsafe { len.write(needed) };
        if buf.is_null() && capacity == 0 {
            return Ok(());
        }
        if buf.is_null() {
            return Err(Failure::arg(format!("buf is NULL but capacity is {capacity}")));
        }
        if capacity < needed {
            return Err(Failure::arg(format!(
                "buf holds {capacity} bytes and the joined text needs {needed} (its NUL included): \
                 call again with a buffer of at least len bytes, or with buf NULL and capacity 0 to \
                 learn it first"
            )));
        }
        // SAFETY: `buf` is valid for `capacity >= needed` bytes (the caller's contract), and
        // the text is a Rust string, not within the caller's buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, text.len());
            buf.add(text.len()).write(0);
        }
        Ok(())
    })
}

/// `gpuio_module_load_linked`: joins PTX modules as `gpuio_link_ptx` does and loads the
/// text as `gpuio_module_load_data` does.
///
/// # Safety
/// `modules` as for [`joined`]; `out` is NULL or valid for writes of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpuio_module_load_linked(
    rt: *mut gpuio_runtime,
    modules: *const *const c_char,
    count: usize,
    out: *mut *mut gpuio_module,
) -> gpuio_status {
    call(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write(std::ptr::null_mut()) };
        // PTX joins are CUDA's: refused on any other backend before anything is read.
        let backend = crate::handles::runtime(runtime_id(rt))?.rt.backend();
        if backend != Backend::Cuda {
            return Err(Error::BackendUnavailable {
                backend: "cuda",
                reason: format!(
                    "gpuio_module_load_linked joins PTX, which the CUDA backend loads; this runtime runs \
                     on the {} backend",
                    backend.name()
                ),
            }
            .into());
        }
        // SAFETY: the caller's contract.
        let text = unsafe { joined(modules, count) }?;
        let id = load_code_object(runtime_id(rt), text.as_bytes(), "gpuio_module_load_linked")?;
        // SAFETY: as above.
        unsafe { write_module(out, id) };
        Ok(())
    })
}
