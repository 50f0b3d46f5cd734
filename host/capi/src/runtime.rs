//! Runtimes: options, create, backend, synchronize, destroy.

use std::ffi::c_int;

use gpuio_host::{Backend, Builder, Error, Runtime};

use crate::args::*;
use crate::handles;
use crate::status::gpuio_status::{self, *};
use crate::status::{call, Failure};
use crate::types::*;

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
pub(crate) fn builder(o: &gpuio_runtime_options) -> Result<Builder, Failure> {
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
    if o.rings != 0 {
        b = b.rings(o.rings);
    }
    for (v, name) in [(o.reserved, "reserved"), (o.reserved2, "reserved2")] {
        if v != 0 {
            return Err(Failure::arg(format!("options.{name} is {v}, not 0")));
        }
    }
    b = match o.gpu {
        -1 => b,
        g if g >= 0 => b.gpu(g as u32),
        other => {
            return Err(Failure::arg(format!(
                "options.gpu is {other}, not a GPU index (0, 1, ...) or -1"
            )))
        }
    };
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
            // A caller built against an older header: the fields it has, then defaults (`gpu`
            // -1: a struct from before it names no GPU).
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
                        format_errors: o.format_errors,
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
