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
#[cfg(any(test, fuzzing))]
pub mod fuzz_cases;
mod handles;
mod print;
pub mod status;
pub mod types;

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;

use gpuio_host::{Backend, Builder, Error, Runtime};

use crate::status::gpuio_status::{self, *};
use crate::status::{call, Failure};
use crate::types::*;

// ---------------------------------------------------------------------------- helpers

fn runtime_id(rt: *mut gpuio_runtime) -> usize {
    rt.addr()
}

fn module_id(m: *mut gpuio_module) -> usize {
    m.addr()
}

/// Refuses calls that would wait for kernels from inside one (a CPU kernel that
/// synchronized its own runtime would wait for itself).
fn outside_kernels(what: &str) -> Result<(), Failure> {
    if gpuio_device::context::current().is_null() {
        Ok(())
    } else {
        Err(Failure::new(
            GPUIO_ERROR_WRONG_CONTEXT,
            format!("{what} was called from inside a CPU kernel; call it from a host thread"),
        ))
    }
}

/// `out`, checked for NULL.
fn out_ptr<T>(out: *mut T, what: &str) -> Result<*mut T, Failure> {
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
unsafe fn utf8_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
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
unsafe fn bytes_arg<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Failure> {
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

/// Loads `image` into the runtime with handle id `runtime` (PTX on CUDA); `origin` names
/// where it came from in messages.
fn load_code_object(runtime: usize, image: &[u8], origin: &str) -> Result<usize, Failure> {
    let entry = handles::runtime(runtime)?;
    match entry.rt.backend() {
        Backend::Cuda => {
            // PTX is text; a trailing NUL (C strings, `xxd -i` arrays) is fine.
            let mut text = image;
            while let [rest @ .., 0] = text {
                text = rest;
            }
            if text.is_empty() {
                return Err(Failure::arg(format!("{origin}: the code object is empty")));
            }
            let ptx = std::str::from_utf8(text).map_err(|e| {
                Failure::arg(format!(
                    "{origin}: not PTX text (not UTF-8 at byte {}): the CUDA backend loads PTX",
                    e.valid_up_to()
                ))
            })?;
            handles::add_module(runtime, |rt| rt.load_module(ptx))
        }
        // An AMDGPU ELF code object, as is; the runtime checks it is for its GPU.
        Backend::Hsa => handles::add_module(runtime, |rt| rt.load_code_object(image)),
        Backend::Cpu => Err(Error::BackendUnavailable {
            backend: "GPU",
            reason: "this runtime runs on the CPU backend, which runs C kernels (gpuio_cpu_launch), \
                     not GPU code objects"
                .into(),
        }
        .into()),
    }
}

// ---------------------------------------------------------------------------- status

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

// ---------------------------------------------------------------------------- runtime

/// `gpuio_runtime_options_init`: the defaults.
///
/// # Safety
/// `options` is NULL or valid for writes of a `gpuio_runtime_options`.
#[no_mangle]
pub unsafe extern "C" fn gpuio_runtime_options_init(options: *mut gpuio_runtime_options) -> gpuio_status {
    call(|| {
        let options = out_ptr(options, "options")?;
        let defaults = gpuio_runtime_options {
            struct_size: size_of::<gpuio_runtime_options>() as u32,
            backend: GPUIO_BACKEND_AUTO,
            stdout_fd: 1,
            stderr_fd: 2,
            ..Default::default()
        };
        // SAFETY: non-NULL, and valid for writes by the caller's contract.
        unsafe { options.write(defaults) };
        Ok(())
    })
}

/// The builder for `o`, or why `o` is invalid.
fn builder(o: &gpuio_runtime_options) -> Result<Builder, Failure> {
    let mut b = Runtime::builder();
    b = match o.backend {
        GPUIO_BACKEND_AUTO => b,
        GPUIO_BACKEND_CPU => b.backend(Backend::Cpu),
        GPUIO_BACKEND_CUDA => b.backend(Backend::Cuda),
        GPUIO_BACKEND_HSA => b.backend(Backend::Hsa),
        other => return Err(Failure::arg(format!("options.backend is {other}, not a gpuio_backend"))),
    };
    for (fd, name) in [(o.stdout_fd, "stdout_fd"), (o.stderr_fd, "stderr_fd")] {
        if fd < 0 {
            return Err(Failure::arg(format!("options.{name} is {fd}, not a file descriptor")));
        }
    }
    b = b.stdout_fd(o.stdout_fd).stderr_fd(o.stderr_fd);
    if o.sq_entries != 0 {
        b = b.sq_entries(o.sq_entries);
    }
    if o.cq_entries != 0 {
        b = b.cq_entries(o.cq_entries);
    }
    if o.log_bytes != 0 {
        let n = usize::try_from(o.log_bytes)
            .map_err(|_| Failure::arg(format!("options.log_bytes {} is too large", o.log_bytes)))?;
        b = b.log_bytes(n);
    }
    if o.max_flights != 0 {
        b = b.max_flights(o.max_flights);
    }
    if o.sq_thread_idle_ms != 0 {
        b = b.sq_thread_idle_ms(o.sq_thread_idle_ms);
    }
    if o.gpu_stack_bytes != 0 {
        let n = usize::try_from(o.gpu_stack_bytes)
            .map_err(|_| Failure::arg(format!("options.gpu_stack_bytes {} is too large", o.gpu_stack_bytes)))?;
        b = b.gpu_stack_bytes(n);
    }
    for (v, name) in [
        (o.arena_bytes, "arena_bytes"),
        (o.arena_block_bytes, "arena_block_bytes"),
    ] {
        if v != 0 {
            let n = usize::try_from(v).map_err(|_| Failure::arg(format!("options.{name} {v} is too large")))?;
            b = if name == "arena_bytes" {
                b.arena_bytes(n)
            } else {
                b.arena_block_bytes(n)
            };
        }
    }
    b = b.sandbox(match o.sandbox {
        GPUIO_SANDBOX_PRINT_ONLY => gpuio_host::Sandbox::PrintOnly,
        GPUIO_SANDBOX_FILE_IO => gpuio_host::Sandbox::FileIo,
        GPUIO_SANDBOX_OFF => gpuio_host::Sandbox::Off,
        other => return Err(Failure::arg(format!("options.sandbox is {other}, not a gpuio_sandbox"))),
    });
    if o.hang_timeout_ms != 0 {
        b = b.hang_timeout(Some(std::time::Duration::from_millis(o.hang_timeout_ms)));
    }
    Ok(b)
}

/// `gpuio_runtime_create`: builds a [`Runtime`] and returns its handle.
///
/// # Safety
/// `options` is NULL or points to a `gpuio_runtime_options`; `out` is NULL or valid for
/// writes of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpuio_runtime_create(
    options: *const gpuio_runtime_options,
    out: *mut *mut gpuio_runtime,
) -> gpuio_status {
    call(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: non-NULL, valid for writes by the caller's contract.
        unsafe { out.write(std::ptr::null_mut()) };
        let b = if options.is_null() {
            Runtime::builder()
        } else {
            // SAFETY: non-NULL, points to options by the caller's contract; every version
            // of the struct starts with its size, a u32.
            let size = unsafe { options.cast::<u32>().read() } as usize;
            if !OPTIONS_SIZES.contains(&size) {
                return Err(Failure::arg(format!(
                    "options.struct_size is {size}, expected {} (or an earlier version's: {:?}): \
                     initialise the options with gpuio_runtime_options_init",
                    size_of::<gpuio_runtime_options>(),
                    &OPTIONS_SIZES[..OPTIONS_SIZES.len() - 1]
                )));
            }
            // A caller built against an older header: the fields it has, then defaults.
            let mut o = gpuio_runtime_options::default();
            // SAFETY: the caller's struct is `size` bytes (struct_size says so, and it is
            // one of the versions' sizes, none larger than ours); the fields are plain
            // integers, valid for any bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(options.cast::<u8>(), (&raw mut o).cast::<u8>(), size);
            }
            builder(&o)?
        };
        let id = handles::add_runtime(b.build()?);
        // SAFETY: as above.
        unsafe { out.write(std::ptr::without_provenance_mut(id)) };
        Ok(())
    })
}

/// `gpuio_runtime_backend`: where the runtime's kernels run.
///
/// # Safety
/// `out` is NULL or valid for writes of a `gpuio_backend` (an `int`).
#[no_mangle]
pub unsafe extern "C" fn gpuio_runtime_backend(rt: *mut gpuio_runtime, out: *mut c_int) -> gpuio_status {
    call(|| {
        let entry = handles::runtime(runtime_id(rt))?;
        let out = out_ptr(out, "out")?;
        let b = match entry.rt.backend() {
            Backend::Cpu => GPUIO_BACKEND_CPU,
            Backend::Cuda => GPUIO_BACKEND_CUDA,
            Backend::Hsa => GPUIO_BACKEND_HSA,
        };
        // SAFETY: non-NULL, valid for writes by the caller's contract.
        unsafe { out.write(b) };
        Ok(())
    })
}

/// `gpuio_synchronize`: [`Runtime::synchronize`], with failed prints listed in `report`.
///
/// # Safety
/// `report` is NULL or valid for writes of a `gpuio_sync_report`.
#[no_mangle]
pub unsafe extern "C" fn gpuio_synchronize(rt: *mut gpuio_runtime, report: *mut gpuio_sync_report) -> gpuio_status {
    call(|| {
        outside_kernels("gpuio_synchronize")?;
        let entry = handles::runtime(runtime_id(rt))?;
        let result = entry.synchronize();
        if !report.is_null() {
            let mut r = gpuio_sync_report::default();
            if let Err(Error::Print(p)) = &result {
                for (slot, o) in r.outputs.iter_mut().zip(&p.outputs) {
                    *slot = gpuio_output_errors {
                        fd: o.fd,
                        failed_writes: o.failed_writes,
                        last_errno: o.errno,
                        lost_bytes: o.lost_bytes,
                        lost_lines: o.lost_lines,
                    };
                }
                r.num_outputs = p.outputs.len().min(GPUIO_MAX_OUTPUTS) as u32;
            }
            // SAFETY: non-NULL, valid for writes by the caller's contract.
            unsafe { report.write(r) };
        }
        Ok(result?)
    })
}

/// `gpuio_runtime_destroy`: unregisters the runtime and its modules, synchronizes, drops.
///
/// # Safety
/// None beyond C's: `rt` may be any value.
#[no_mangle]
pub unsafe extern "C" fn gpuio_runtime_destroy(rt: *mut gpuio_runtime) -> gpuio_status {
    call(|| {
        outside_kernels("gpuio_runtime_destroy")?;
        let (entry, modules) = handles::remove_runtime(runtime_id(rt))?;
        // Kernels first, then the modules they ran from.
        let result = entry.synchronize();
        if let Err(e @ Error::Hang(_)) = result {
            // The kernels may still run, from these modules, in the runtime's memory:
            // leak all of it (without a second wait in the runtime's drop).
            std::mem::forget(modules);
            std::mem::forget(entry);
            return Err(Failure::new(
                GPUIO_ERROR_HANG,
                format!(
                    "{e}; the runtime handle is destroyed, but its memory, ring and modules are \
                     leaked, not freed, because the kernels or their I/O may still use them"
                ),
            ));
        }
        drop(modules);
        // The last reference, unless a call on another thread still uses the runtime:
        // then it is dropped (and synchronized again) when that call returns.
        drop(entry);
        Ok(result?)
    })
}

// ---------------------------------------------------------------------------- CPU kernels

/// The user pointer of a CPU launch, shared by its threads.
struct User(*mut c_void);

// SAFETY: gpuio_cpu_launch's contract (gpuio.h): `user` is shared by all threads of the
// launch and must be usable from each of them; gpuio itself never dereferences it.
unsafe impl Send for User {}
// SAFETY: as for `Send`: gpuio_cpu_launch's contract (gpuio.h): `user` is shared by all threads of the launch and must be usable from each of them; gpuio itself never dereferences it.
unsafe impl Sync for User {}

impl User {
    fn get(&self) -> *mut c_void {
        self.0
    }
}

/// `gpuio_cpu_launch`: [`Runtime::launch`] of a closure that calls the C kernel with the
/// thread's ids.
///
/// # Safety
/// `kernel` is NULL or a function of the `gpuio_cpu_kernel` type; `user` is what it
/// expects, usable from many threads at once until the runtime synchronizes.
#[no_mangle]
pub unsafe extern "C" fn gpuio_cpu_launch(
    rt: *mut gpuio_runtime,
    grid: u32,
    block: u32,
    kernel: gpuio_cpu_kernel,
    user: *mut c_void,
) -> gpuio_status {
    call(|| {
        outside_kernels("gpuio_cpu_launch")?;
        let entry = handles::runtime(runtime_id(rt))?;
        let kernel = kernel.ok_or_else(|| Failure::arg("kernel is NULL"))?;
        if grid == 0 || block == 0 {
            return Err(Failure::arg(format!(
                "a launch needs grid and block >= 1, not {grid} x {block}"
            )));
        }
        let user = User(user);
        entry.rt.launch(grid, block, move || {
            use gpuio_device::{block_dim, block_idx, global_thread_idx, grid_dim, thread_idx};
            let t = gpuio_thread {
                thread_idx: thread_idx(),
                block_idx: block_idx(),
                block_dim: block_dim(),
                grid_dim: grid_dim(),
                global_idx: global_thread_idx(),
            };
            // SAFETY: `kernel` has the gpuio_cpu_kernel type and `user` is what it
            // expects (the caller's contract); `t` outlives the call.
            unsafe { kernel(&t, user.get()) }
        })?;
        Ok(())
    })
}

/// `gpuio_print`: prints bytes from a CPU kernel, through the device print path.
///
/// # Safety
/// `bytes` is NULL or valid for reads of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpuio_print(bytes: *const c_char, len: usize) -> gpuio_status {
    // SAFETY: the caller's contract.
    call(|| print::print(false, unsafe { bytes_arg(bytes as *const c_void, len, "bytes") }?))
}

/// `gpuio_eprint`: like [`gpuio_print`], to stderr.
///
/// # Safety
/// `bytes` is NULL or valid for reads of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpuio_eprint(bytes: *const c_char, len: usize) -> gpuio_status {
    // SAFETY: the caller's contract.
    call(|| print::print(true, unsafe { bytes_arg(bytes as *const c_void, len, "bytes") }?))
}

// ---------------------------------------------------------------------------- modules

/// Stores a new module handle in `out`.
///
/// # Safety
/// `out` is non-NULL and valid for writes of a pointer.
unsafe fn write_module(out: *mut *mut gpuio_module, id: usize) {
    // SAFETY: the caller's contract.
    unsafe { out.write(std::ptr::without_provenance_mut(id)) }
}

/// Hands an attached module's handle to the caller through `out`, or, where `out` is NULL,
/// drops it: attaching has set the code object's context pointer, and the handle is not
/// wanted.
///
/// # Safety
/// `out` is NULL or valid for writes of a pointer.
unsafe fn hand_out_attached(out: *mut *mut gpuio_module, id: usize) -> Result<(), Failure> {
    if out.is_null() {
        drop(handles::remove_module(id)?);
    } else {
        // SAFETY: non-NULL, valid for writes by the caller's contract.
        unsafe { write_module(out, id) };
    }
    Ok(())
}

/// `gpuio_module_load_data`: loads a code object from memory ([`Runtime::load_module`]).
///
/// # Safety
/// `image` is NULL or valid for reads of `size` bytes; `out` is NULL or valid for writes
/// of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpuio_module_load_data(
    rt: *mut gpuio_runtime,
    image: *const c_void,
    size: usize,
    out: *mut *mut gpuio_module,
) -> gpuio_status {
    call(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: the caller's contract.
        let image = unsafe { bytes_arg(image, size, "image") }?;
        let id = load_code_object(runtime_id(rt), image, "gpuio_module_load_data")?;
        // SAFETY: as above.
        unsafe { write_module(out, id) };
        Ok(())
    })
}

/// `gpuio_module_load_file`: loads a code object from a file.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or valid for writes of a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn gpuio_module_load_file(
    rt: *mut gpuio_runtime,
    path: *const c_char,
    out: *mut *mut gpuio_module,
) -> gpuio_status {
    call(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: valid for writes by the caller's contract.
        unsafe { out.write(std::ptr::null_mut()) };
        if path.is_null() {
            return Err(Failure::arg("path is NULL"));
        }
        // SAFETY: non-NULL and NUL-terminated by the caller's contract. (Paths are bytes:
        // they need not be UTF-8.)
        let path = std::path::Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()));
        handles::runtime(runtime_id(rt))?;
        let image = std::fs::read(path).map_err(|e| {
            Failure::from(Error::Os {
                what: "reading the code object",
                source: std::io::Error::new(e.kind(), format!("{}: {e}", path.display())),
            })
        })?;
        let id = load_code_object(runtime_id(rt), &image, &path.display().to_string())?;
        // SAFETY: as above.
        unsafe { write_module(out, id) };
        Ok(())
    })
}

/// The most arguments a launch takes (CUDA allows 32 KiB of them: 4096 of 8 bytes).
const MAX_ARGS: usize = 4096;

/// `gpuio_module_launch`: [`gpuio_host::GpuModule::launch`].
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `args` is NULL or valid for reads of
/// `num_args` `gpuio_arg`s.
#[no_mangle]
pub unsafe extern "C" fn gpuio_module_launch(
    module: *mut gpuio_module,
    name: *const c_char,
    grid: u32,
    block: u32,
    args: *const gpuio_arg,
    num_args: usize,
) -> gpuio_status {
    call(|| {
        let entry = handles::module(module_id(module))?;
        // SAFETY: the caller's contract.
        let name = unsafe { utf8_arg(name, "the kernel name") }?;
        if grid == 0 || block == 0 {
            return Err(Failure::arg(format!(
                "kernel {name}: a launch needs grid and block >= 1, not {grid} x {block}"
            )));
        }
        if num_args > MAX_ARGS {
            return Err(Failure::arg(format!(
                "kernel {name}: {num_args} arguments (at most {MAX_ARGS})"
            )));
        }
        if num_args > 0 && args.is_null() {
            return Err(Failure::arg(format!(
                "kernel {name}: args is NULL, num_args is {num_args}"
            )));
        }
        let args: &[gpuio_arg] = if num_args == 0 {
            &[]
        } else {
            // SAFETY: non-NULL, valid for `num_args` reads by the caller's contract.
            unsafe { std::slice::from_raw_parts(args, num_args) }
        };
        let args = args
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.to_arg().ok_or_else(|| {
                    Failure::arg(format!(
                        "kernel {name}: args[{i}].kind is {}, not a gpuio_arg_kind",
                        a.kind
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        entry.module.launch(name, grid, block, &args)?;
        Ok(())
    })
}

/// `gpuio_module_destroy`: unregisters the module handle; the module is unloaded at the
/// runtime's next synchronize, after the kernels that may run from it.
///
/// # Safety
/// None beyond C's: `module` may be any value.
#[no_mangle]
pub unsafe extern "C" fn gpuio_module_destroy(module: *mut gpuio_module) -> gpuio_status {
    call(|| handles::retire_module(module_id(module)))
}

/// `gpuio_attach_cuda_module`: [`Runtime::attach_cuda_module`].
///
/// # Safety
/// `cu_module` is NULL or a `CUmodule` loaded in device 0's primary context that stays
/// loaded until the runtime is destroyed; `out` is NULL or valid for writes of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpuio_attach_cuda_module(
    rt: *mut gpuio_runtime,
    cu_module: *mut c_void,
    out: *mut *mut gpuio_module,
) -> gpuio_status {
    call(|| {
        if !out.is_null() {
            // SAFETY: non-NULL, valid for writes by the caller's contract.
            unsafe { out.write(std::ptr::null_mut()) };
        }
        handles::runtime(runtime_id(rt))?;
        if cu_module.is_null() {
            return Err(Failure::arg("cu_module is NULL"));
        }
        // SAFETY: a CUmodule loaded in the primary context, loaded until the runtime is
        // destroyed (the caller's contract); the runtime checks its backend is CUDA.
        let id = handles::add_module(runtime_id(rt), |rt| unsafe { rt.attach_cuda_module(cu_module) })?;
        // SAFETY: `out` as the caller's contract says.
        unsafe { hand_out_attached(out, id) }
    })
}

/// `gpuio_attach_hip_module`: [`Runtime::attach_hip_module`] (with the `hip` feature; without
/// it, GPUIO_ERROR_BACKEND_UNAVAILABLE saying so).
///
/// # Safety
/// `hip_module` is NULL or a `hipModule_t` loaded on HIP device `hip_device` that stays
/// loaded until the runtime is destroyed; `out` is NULL or valid for writes of a pointer.
#[no_mangle]
pub unsafe extern "C" fn gpuio_attach_hip_module(
    rt: *mut gpuio_runtime,
    hip_module: *mut c_void,
    hip_device: c_int,
    out: *mut *mut gpuio_module,
) -> gpuio_status {
    call(|| {
        if !out.is_null() {
            // SAFETY: non-NULL, valid for writes by the caller's contract.
            unsafe { out.write(std::ptr::null_mut()) };
        }
        handles::runtime(runtime_id(rt))?;
        if hip_module.is_null() {
            return Err(Failure::arg("hip_module is NULL"));
        }
        #[cfg(not(feature = "hip"))]
        {
            let _ = hip_device;
            Err(Error::BackendUnavailable {
                backend: "hip",
                reason: "libgpuio was built without its `hip` feature (cargo build -p gpuio-capi \
                         --features hip, with HIP's headers and libamdhip64 installed)"
                    .into(),
            }
            .into())
        }
        #[cfg(feature = "hip")]
        {
            // SAFETY: a hipModule_t loaded on `hip_device`, loaded until the runtime is
            // destroyed (the caller's contract); the runtime checks its backend is HSA and
            // that the device is its GPU agent.
            let id = handles::add_module(runtime_id(rt), |rt| unsafe {
                rt.attach_hip_module(hip_module, hip_device)
            })?;
            // SAFETY: `out` as the caller's contract says.
            unsafe { hand_out_attached(out, id) }
        }
    })
}

/// `gpuio_attach_hsa_executable`: [`Runtime::attach_hsa_executable`] for an executable the
/// host loaded and froze itself for the runtime's agent.
///
/// # Safety
/// `out` is NULL or valid for writes of a pointer; `executable` is a frozen executable of
/// this process's HSA runtime, loaded for `agent`, alive until the runtime is destroyed.
#[no_mangle]
pub unsafe extern "C" fn gpuio_attach_hsa_executable(
    rt: *mut gpuio_runtime,
    executable: u64,
    agent: u64,
    out: *mut *mut gpuio_module,
) -> gpuio_status {
    call(|| {
        if !out.is_null() {
            // SAFETY: non-NULL, valid for writes by the caller's contract.
            unsafe { out.write(std::ptr::null_mut()) };
        }
        let runtime = runtime_id(rt);
        let entry = handles::runtime(runtime)?;
        if executable == 0 {
            return Err(Failure::arg("executable is a null hsa_executable_t handle"));
        }
        if agent == 0 {
            return Err(Failure::arg("agent is a null hsa_agent_t handle"));
        }
        if entry.rt.backend() != Backend::Hsa {
            return Err(Error::BackendUnavailable {
                backend: "hsa",
                reason: format!("this runtime runs on the {} backend", entry.rt.backend().name()),
            }
            .into());
        }
        let id = handles::add_module(runtime, |rt| {
            // SAFETY: the caller's contract (a frozen executable for this runtime's agent); the
            // agent is checked right after, before the module can be used.
            let m = unsafe { rt.attach_hsa_executable(gpuio_host::hsa::Handle(executable)) }?;
            match m.hsa().map(|h| h.agent().0) {
                Some(a) if a == agent => Ok(m),
                _ => Err(Error::Config(
                    "agent is not this runtime's GPU agent: the executable must be loaded for it".into(),
                )),
            }
        })?;
        // SAFETY: `out` as the caller's contract says.
        unsafe { hand_out_attached(out, id) }
    })
}

/// `gpuio_prepare_launch`: [`Runtime::prepare_external_launch`].
///
/// # Safety
/// None beyond C's: `rt` may be any value.
#[no_mangle]
pub unsafe extern "C" fn gpuio_prepare_launch(rt: *mut gpuio_runtime) -> gpuio_status {
    call(|| {
        let entry = handles::runtime(runtime_id(rt))?;
        entry.rt.prepare_external_launch()?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
