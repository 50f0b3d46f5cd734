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

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::status::gpuio_status::{self, *};
use crate::types::*;
use crate::*;

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

/// A runtime from fuzzed options (at most two live at once).
fn create_runtime(b: &mut Bytes, live: &mut Vec<usize>, null_fd: i32) {
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
fn create_with_no_out() {
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
fn synchronize(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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
fn cpu_launch(b: &mut Bytes, live: &[usize], dead: &[usize], kernels: &mut Vec<Box<KernelData>>) {
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
fn destroy_runtime(b: &mut Bytes, live: &mut Vec<usize>, dead: &mut Vec<usize>) {
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
fn runtime_backend(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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

/// `module_load_data` of fuzzed bytes, which a CPU runtime refuses leaving no handle.
fn module_load_data(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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
fn link_ptx(b: &mut Bytes) {
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
fn module_load_linked(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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

/// `module_load_file` of a path that does not exist, or NULL.
fn module_load_file(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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
fn module_launch(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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
fn module_destroy(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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
fn attach_cuda_module(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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
fn attach_hsa_executable(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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
fn prepare_launch(b: &mut Bytes, live: &[usize], dead: &[usize]) {
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

/// `runtime_options_init(NULL)`.
fn options_init_null() {
    // SAFETY: every pointer passed below is NULL or valid for what the call does with it
    // (gpuio.h); handles are plain values.
    unsafe {
        check("options_init(NULL)", gpuio_runtime_options_init(std::ptr::null_mut()));
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
