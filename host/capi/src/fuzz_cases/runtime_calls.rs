//! The runtime's calls: `runtime_create` from fuzzed options, `synchronize`, CPU launches,
//! `runtime_destroy`, `runtime_backend`, `runtime_options_init(NULL)`.

use std::ffi::c_void;
use std::sync::atomic::AtomicU64;

use super::{check, handle, kernel, Bytes, KernelData};
use crate::status::gpuio_status::*;
use crate::types::*;
use crate::*;

/// A runtime from fuzzed options (at most two live at once).
pub(super) fn create_runtime(b: &mut Bytes, live: &mut Vec<usize>, null_fd: i32) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let mut o = gpuio_runtime_options::default();
        if !b.u8().is_multiple_of(4) {
            check("options_init", gpuio_runtime_options_init(&mut o));
        }
        match b.u8() % 4 {
            0 => o.struct_size = b.u32(),
            1 => o.struct_size = o.struct_size.wrapping_add(b.u8() as u32 % 3),
            _ => {}
        }
        o.backend = match b.u8() % 8 {
            0 => b.u32() as i32,
            1 => GPUIO_BACKEND_AUTO,
            2 => GPUIO_BACKEND_CUDA,
            _ => GPUIO_BACKEND_CPU,
        };
        let pow2_or_any = |b: &mut Bytes, max_shift: u32| match b.u8() % 4 {
            0 => 0,
            1 => b.u32(),
            _ => 1u32 << (b.u8() as u32 % max_shift),
        };
        o.sq_entries = pow2_or_any(b, 32);
        o.cq_entries = pow2_or_any(b, 32);
        o.max_flights = pow2_or_any(b, 32);
        o.sq_thread_idle_ms = b.u8() as u32 % 3;
        o.gpu_stack_bytes = b.u64();
        // Logs up to 1 MiB, or sizes that are invalid anyway (huge powers of
        // two whose total overflows, or not powers of two).
        o.log_bytes = match b.u8() % 6 {
            0 => 0,
            1 => 1u64 << (b.u8() % 21),
            2 => 1u64 << (62 + b.u8() % 2),
            3 => u64::MAX,
            4 => b.u64() | 3,
            _ => 64 << (b.u8() % 8),
        };
        let fd = |b: &mut Bytes| match b.u8() % 4 {
            0 => -(1 + b.u8() as i32),
            1 => 1_000_000 + b.u8() as i32,
            _ => null_fd,
        };
        o.stdout_fd = fd(b);
        o.stderr_fd = fd(b);
        let mut rt: *mut gpuio_runtime = std::ptr::null_mut();
        let opts: *const gpuio_runtime_options = if b.u8().is_multiple_of(8) { std::ptr::null() } else { &o };
        if opts.is_null() {
            return; // default options print to the fuzzer's own stdout
        }
        let s = check("runtime_create", gpuio_runtime_create(opts, &mut rt));
        assert_eq!(s == GPUIO_OK, !rt.is_null(), "runtime_create: {s:?} and handle {rt:?}");
        if s == GPUIO_OK {
            live.push(rt.addr());
        }
    }
}

/// `runtime_create` with no options and no out-pointer.
pub(super) fn create_with_no_out() {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        check(
            "runtime_create(out NULL)",
            gpuio_runtime_create(std::ptr::null(), std::ptr::null_mut()),
        );
    }
}

/// `synchronize` of a live, dead or made-up handle, with a report or NULL.
pub(super) fn synchronize(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let mut report = gpuio_sync_report::default();
        let r: *mut gpuio_sync_report = if b.u8() & 1 == 0 {
            &mut report
        } else {
            std::ptr::null_mut()
        };
        let s = check(
            "synchronize",
            gpuio_synchronize(std::ptr::without_provenance_mut(rt), r),
        );
        assert!(report.num_outputs as usize <= GPUIO_MAX_OUTPUTS);
        if s != GPUIO_ERROR_PRINT {
            assert_eq!(report.num_outputs, 0, "synchronize: {s:?} with a report");
        }
    }
}

/// A CPU launch of fuzzed shape and text, of the checking kernel or none.
#[allow(clippy::vec_box)] // each kernel holds a pointer into its box, which a Vec of values would move
pub(super) fn cpu_launch(b: &mut Bytes, live: &[usize], dead: &[usize], kernels: &mut Vec<Box<KernelData>>) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let (mut grid, mut block) = match b.u8() % 4 {
            0 => (b.u32(), b.u32()),
            _ => (1 + b.u8() as u32 % 4, 1 + b.u8() as u32 % 16),
        };
        let n = grid as u64 * block as u64;
        if (65..=65536).contains(&n) {
            (grid, block) = (1, 1 + (n % 64) as u32); // valid but too many threads
        }
        let data = Box::new(KernelData {
            text: b.bytes(300),
            rt,
            mode: b.u8(),
            wrong: AtomicU64::new(0),
        });
        let k: gpuio_cpu_kernel = if b.u8().is_multiple_of(8) { None } else { Some(kernel) };
        let user = &*data as *const KernelData as *mut c_void;
        kernels.push(data);
        check(
            "cpu_launch",
            gpuio_cpu_launch(std::ptr::without_provenance_mut(rt), grid, block, k, user),
        );
    }
}

/// `runtime_destroy`: a live handle dies, any other is refused.
pub(super) fn destroy_runtime(b: &mut Bytes, live: &mut Vec<usize>, dead: &mut Vec<usize>) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let s = check(
            "runtime_destroy",
            gpuio_runtime_destroy(std::ptr::without_provenance_mut(rt)),
        );
        if let Some(i) = live.iter().position(|&h| h == rt) {
            assert_ne!(s, GPUIO_ERROR_INVALID_HANDLE, "destroying a live runtime");
            live.remove(i);
            dead.push(rt);
        } else {
            assert_eq!(s, GPUIO_ERROR_INVALID_HANDLE, "destroying {rt:#x}, not a live runtime");
        }
    }
}

/// `runtime_backend`, which a live CPU runtime answers with the CPU backend.
pub(super) fn runtime_backend(b: &mut Bytes, live: &[usize], dead: &[usize]) {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        let rt = handle(b, live, dead, &[]);
        let mut backend = -1;
        let out: *mut i32 = if b.u8() & 1 == 0 {
            &mut backend
        } else {
            std::ptr::null_mut()
        };
        let s = check(
            "runtime_backend",
            gpuio_runtime_backend(std::ptr::without_provenance_mut(rt), out),
        );
        if s == GPUIO_OK {
            assert_eq!(backend, GPUIO_BACKEND_CPU);
        }
    }
}

/// `runtime_options_init(NULL)`.
pub(super) fn options_init_null() {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        check("options_init(NULL)", gpuio_runtime_options_init(std::ptr::null_mut()));
    }
}
