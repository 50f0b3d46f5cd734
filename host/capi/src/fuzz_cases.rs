//! Fuzz cases for the C API's argument handling, within its contract (`gpuio.h`).
//!
//! Handles are ids, so any value may be passed as one: NULL, live, destroyed, of the other
//! kind, off by one, made up. Names and paths are arbitrary bytes (non-UTF-8 included),
//! NUL-terminated. Sizes, counts, grid and block, enum values (backend, argument kinds) and
//! every field of the options struct (its size too) are arbitrary. Pointers are NULL or
//! valid, as the contract requires (a garbage pointer that the API dereferences is
//! undefined behaviour by contract, so it is not tried). CPU kernels print arbitrary bytes
//! with `gpuio_print`/`gpuio_eprint` and call the runtime from inside (refused).
//!
//! After every call: the status is a defined `gpuio_status` and never
//! `GPUIO_ERROR_INTERNAL` (a caught Rust panic: a bug), `gpuio_last_error()` is "" exactly
//! after a success, and a handle comes back only on success.
//!
//! Bounded so that a case stays cheap and safe for the machine: at most two live runtimes,
//! launches of at most 64 threads (larger valid ones are skipped; invalid ones are still
//! made), prints only into /dev/null or a closed fd, logs of at most 1 MiB unless the
//! value is invalid anyway, paths only under a directory that does not exist.
//!
//! Run coverage-guided by `fuzz/fuzz_targets/capi.rs` (`--cfg fuzzing`), and on random
//! inputs by this crate's unit tests.
//!
//! Here: reading the input (`Bytes`), the checks after every call, the CPU kernel the
//! launches run, the dispatch (`run`) and `status_name`. The calls, beside it in
//! `fuzz_cases/`: `runtime_calls.rs` (creating, synchronizing, launching on, destroying a
//! runtime; its options), `module_calls.rs` (loading, launching, destroying and attaching
//! modules), `link_calls.rs` (`link_ptx` and `module_load_linked` of fuzzed PTX texts).

mod link_calls;
mod module_calls;
mod runtime_calls;

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::status::gpuio_status::{self, *};
use crate::types::*;
use crate::*;

use link_calls::{link_ptx, module_load_linked};
use module_calls::{
    attach_cuda_module, attach_hsa_executable, module_destroy, module_launch, module_load_data, module_load_file,
    prepare_launch,
};
use runtime_calls::{
    cpu_launch, create_runtime, create_with_no_out, destroy_runtime, options_init_null, runtime_backend, synchronize,
};

/// Reads fuzz bytes as values; zeros once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        self.u32() as u64 | (self.u32() as u64) << 32
    }
    /// Up to `max` bytes, none of them NUL (for C strings).
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.u8() as usize % (max + 1);
        (0..n)
            .map(|_| self.u8())
            .map(|b| if b == 0 { 0xff } else { b })
            .collect()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Checks what a call did: a defined status, not INTERNAL; a message exactly on error.
fn check(what: &str, s: gpuio_status) -> gpuio_status {
    let v = s as i32;
    assert!(
        (0..crate::status::STATUS_NAMES.len() as i32).contains(&v),
        "{what}: status {v} is not a gpuio_status"
    );
    // SAFETY: gpuio_last_error returns a NUL-terminated string valid until our next call.
    let msg = unsafe { CStr::from_ptr(gpuio_last_error()) }
        .to_string_lossy()
        .into_owned();
    assert_ne!(s, GPUIO_ERROR_INTERNAL, "{what}: GPUIO_ERROR_INTERNAL (a panic): {msg}");
    assert_eq!(
        s == GPUIO_OK,
        msg.is_empty(),
        "{what}: status {s:?} with message {msg:?}"
    );
    // SAFETY: gpuio_status_name returns a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(gpuio_status_name(v)) };
    assert_ne!(name.to_bytes(), b"GPUIO_STATUS_UNKNOWN", "{what}: {v}");
    s
}

/// A handle value: NULL, a live one, a destroyed one, off by one, of the other kind, or
/// made up.
fn handle(b: &mut Bytes, live: &[usize], dead: &[usize], other: &[usize]) -> usize {
    let pick = |v: &[usize], i: u8| v.get(i as usize % v.len().max(1)).copied().unwrap_or(0);
    match b.u8() % 8 {
        0 => 0,
        1 | 2 => pick(live, b.u8()),
        3 => pick(dead, b.u8()),
        4 => pick(live, b.u8()).wrapping_add(1 + b.u8() as usize % 15),
        5 => pick(other, b.u8()),
        6 => b.u64() as usize,
        _ => (b.u8() as usize) << 4,
    }
}

/// What a CPU kernel does, shared by its threads (kept alive until every runtime of the
/// case is destroyed, which synchronizes).
struct KernelData {
    text: Vec<u8>,
    /// The runtime it runs on, for calls from inside (refused).
    rt: usize,
    /// Which calls it makes.
    mode: u8,
    /// Statuses that were not what the contract says.
    wrong: AtomicU64,
}

extern "C-unwind" fn kernel(t: *const gpuio_thread, user: *mut c_void) {
    // SAFETY: `user` is the KernelData of the launch, alive until the runtime synchronized;
    // `t` is valid during the call (gpuio_cpu_launch's contract, kept by the runtime).
    let (d, t) = unsafe { (&*(user as *const KernelData), &*t) };
    let expect = |s: gpuio_status, want: gpuio_status| {
        if s != want {
            d.wrong.fetch_add(1, Ordering::Relaxed);
        }
    };
    let text = d.text.as_ptr() as *const c_char;
    // SAFETY: `text` is valid for `d.text.len()` bytes; NULL with length 0 or more is
    // allowed (an error when the length is not 0).
    unsafe {
        if d.mode & 1 != 0 {
            expect(gpuio_print(text, d.text.len()), GPUIO_OK);
        }
        if d.mode & 2 != 0 {
            expect(gpuio_eprint(text, d.text.len()), GPUIO_OK);
        }
        if d.mode & 4 != 0 {
            expect(gpuio_print(std::ptr::null(), 0), GPUIO_OK);
            expect(
                gpuio_print(std::ptr::null(), 1 + t.thread_idx as usize),
                GPUIO_ERROR_INVALID_ARGUMENT,
            );
        }
        if d.mode & 8 != 0 {
            let rt = std::ptr::without_provenance_mut(d.rt);
            expect(gpuio_synchronize(rt, std::ptr::null_mut()), GPUIO_ERROR_WRONG_CONTEXT);
            expect(gpuio_runtime_destroy(rt), GPUIO_ERROR_WRONG_CONTEXT);
            expect(
                gpuio_cpu_launch(rt, 1, 1, Some(kernel), user),
                GPUIO_ERROR_WRONG_CONTEXT,
            );
        }
    }
}

/// Runs one case (see the module docs). Panics on a violated promise.
pub fn run(data: &[u8]) {
    let mut b = Bytes(data);
    let mut live: Vec<usize> = Vec::new();
    let mut dead: Vec<usize> = Vec::new();
    let mut kernels: Vec<Box<KernelData>> = Vec::new();
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    let null_fd = std::os::fd::AsRawFd::as_raw_fd(&null);
    let mut steps = 0;
    while !b.is_empty() && steps < 32 {
        steps += 1;
        match b.u8() % 16 {
            0 if live.len() < 2 => create_runtime(&mut b, &mut live, null_fd),
            0 => create_with_no_out(),
            1 => synchronize(&mut b, &live, &dead),
            2 => cpu_launch(&mut b, &live, &dead, &mut kernels),
            3 => destroy_runtime(&mut b, &mut live, &mut dead),
            4 => runtime_backend(&mut b, &live, &dead),
            5 => module_load_data(&mut b, &live, &dead),
            6 => module_load_file(&mut b, &live, &dead),
            7 => module_launch(&mut b, &live, &dead),
            8 => module_destroy(&mut b, &live, &dead),
            9 => attach_cuda_module(&mut b, &live, &dead),
            10 => attach_hsa_executable(&mut b, &live, &dead),
            11 => prepare_launch(&mut b, &live, &dead),
            12 => status_name(&mut b),
            13 => link_ptx(&mut b),
            14 => module_load_linked(&mut b, &live, &dead),
            _ => options_init_null(),
        }
    }
    for rt in live {
        // SAFETY: a live handle.
        let s = check("runtime_destroy (end)", unsafe {
            gpuio_runtime_destroy(std::ptr::without_provenance_mut(rt))
        });
        assert!(
            matches!(s, GPUIO_OK | GPUIO_ERROR_PRINT),
            "destroying a runtime at the end: {s:?}"
        );
    }
    for k in &kernels {
        assert_eq!(
            k.wrong.load(Ordering::Relaxed),
            0,
            "a call from a CPU kernel returned another status than the contract says"
        );
    }
}

/// `status_name` of any value: known exactly for the statuses.
fn status_name(b: &mut Bytes) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let v = b.u32() as i32;
        let name = CStr::from_ptr(gpuio_status_name(v));
        // The statuses are the values 0 up to the number of them, in order (the
        // ABI test checks each value against gpuio.h); every other value is unknown.
        let known = (0..crate::status::STATUS_NAMES.len() as i32).contains(&v);
        assert_eq!(name.to_bytes() != b"GPUIO_STATUS_UNKNOWN", known, "{v}: {name:?}");
    }
}

#[cfg(test)]
mod tests {
    /// Random cases (fixed seeds), without coverage guidance: the fuzz target's checks in
    /// every `cargo test`. `GPUIO_FUZZ_CASES` sets how many (default 300).
    #[test]
    fn random_c_api_calls_keep_the_contract() {
        let cases: u64 = std::env::var("GPUIO_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300);
        let mut state = 0x6770_7569_6f5f_6361u64;
        let mut next = || {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for _ in 0..cases {
            let len = next() % 300;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            super::run(&data);
        }
    }
}
