//! The C API's argument handling, within its contract (see `host/capi/src/fuzz_cases.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpuio_capi::fuzz_cases::run(data));
