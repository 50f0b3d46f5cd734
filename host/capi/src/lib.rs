//! gpuio's C API: the functions `include/gpuio.h` declares, built as `libgpuio.so` and
//! `libgpuio.a` (`cargo build --release -p gpuio-capi`; `target/release/gpuio.pc` too).
//!
//! The header is the reference for C users; each function here says what it does in
//! Rust terms. Every exported function:
//! - returns a `gpuio_status` and sets the thread's last error message ([`status::call`]);
//! - catches Rust panics (`GPUIO_ERROR_INTERNAL`);
//! - checks its pointers for NULL and its handles against the registry ([`handles`]), so
//!   NULL, stale or made-up handles are errors, never dereferences;
//! - is `unsafe` for Rust callers: C must pass pointers that are NULL or valid, as the
//!   `# Safety` sections say.
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(test)]
mod abi;
mod args;
mod cpu;
#[cfg(any(test, fuzzing))]
pub mod fuzz_cases;
mod handles;
mod link;
mod module;
mod print;
mod runtime;
pub mod status;
pub mod types;

pub use cpu::*;
pub use link::*;
pub use module::*;
pub use runtime::*;

use std::ffi::{c_char, c_int};

/// `gpuio_status_name`: the name of a status value, or `GPUIO_STATUS_UNKNOWN`.
#[no_mangle]
pub extern "C" fn gpuio_status_name(status: c_int) -> *const c_char {
    status::status_name(status).as_ptr()
}

/// `gpuio_last_error`: the message of the calling thread's latest call ("" after a
/// success), valid until its next call.
#[no_mangle]
pub extern "C" fn gpuio_last_error() -> *const c_char {
    status::last_error()
}

#[cfg(test)]
mod tests {
    use crate::args::utf8_arg;
    use crate::status::gpuio_status::*;
    use crate::types::*;
    use crate::*;

    #[test]
    fn names_must_be_utf8_and_non_null() {
        // SAFETY: NULL, or NUL-terminated literals.
        unsafe {
            assert_eq!(utf8_arg(c"hello".as_ptr(), "name").unwrap(), "hello");
            let bad = utf8_arg(c"hel\xfflo".as_ptr(), "the kernel name").unwrap_err();
            assert_eq!(bad.status, GPUIO_ERROR_INVALID_ARGUMENT);
            assert!(bad.message.contains("not UTF-8 (invalid byte at 3)"), "{}", bad.message);
            let null = utf8_arg(std::ptr::null(), "the kernel name").unwrap_err();
            assert_eq!(
                (null.status, null.message.as_str()),
                (GPUIO_ERROR_INVALID_ARGUMENT, "the kernel name is NULL")
            );
        }
    }

    #[test]
    fn made_up_stale_and_wrong_kind_handles_are_errors() {
        // SAFETY: only handles (ids) and NULL/valid out-pointers are passed.
        unsafe {
            let mut rt = std::ptr::null_mut();
            let mut o = gpuio_runtime_options::default();
            assert_eq!(gpuio_runtime_options_init(&mut o), GPUIO_OK);
            o.backend = GPUIO_BACKEND_CPU;
            assert_eq!(gpuio_runtime_create(&o, &mut rt), GPUIO_OK);
            let as_module = rt.cast::<gpuio_module>();
            assert_eq!(gpuio_module_destroy(as_module), GPUIO_ERROR_INVALID_HANDLE);
            assert_eq!(gpuio_runtime_destroy(rt), GPUIO_OK);
            assert_eq!(gpuio_runtime_destroy(rt), GPUIO_ERROR_INVALID_HANDLE);
            let odd = std::ptr::without_provenance_mut(rt.addr() + 1);
            assert_eq!(gpuio_synchronize(odd, std::ptr::null_mut()), GPUIO_ERROR_INVALID_HANDLE);
        }
    }
}
