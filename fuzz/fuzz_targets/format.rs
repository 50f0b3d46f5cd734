//! The device formatter on the CPU backend against std's `format!` (see
//! `fuzz/src/format_case.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gpuio_fuzz::format_case::run(data);
});
