//! Modules: loading code objects, attaching the host's own, launching their kernels.

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;

use gpuio_host::{Backend, Error, GpuModule, Runtime};

use crate::args::*;
use crate::handles;
use crate::status::gpuio_status;
use crate::status::{call, Failure};
use crate::types::*;

/// Loads `image` into the runtime with handle id `runtime` (PTX on CUDA); `origin` names
/// where it came from in messages.
pub(crate) fn load_code_object(runtime: usize, image: &[u8], origin: &str) -> Result<usize, Failure> {
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

/// Stores a new module handle in `out`.
///
/// # Safety
/// `out` is non-NULL and valid for writes of a pointer.
pub(crate) unsafe fn write_module(out: *mut *mut gpuio_module, id: usize) {
    // SAFETY: the caller's contract.
    unsafe { out.write(std::ptr::without_provenance_mut(id)) }
}

/// Hands an attached module's handle to the caller through `out`, or, where `out` is NULL,
/// drops it: attaching has set the code object's context pointer, and the handle is not
/// wanted.
///
/// # Safety
/// `out` is NULL or valid for writes of a pointer.
pub(crate) unsafe fn hand_out_attached(out: *mut *mut gpuio_module, id: usize) -> Result<(), Failure> {
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
pub(crate) const MAX_ARGS: usize = 4096;

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

/// What every `gpuio_attach_*` does around its own checks: clears `*out`, resolves the
/// runtime handle, runs `check` on it (the function's argument checks, each naming its
/// argument), registers the module `attach` makes, and hands it out.
///
/// # Safety
/// `out` is NULL or valid for writes of a pointer.
unsafe fn attach_module(
    rt: *mut gpuio_runtime,
    out: *mut *mut gpuio_module,
    check: impl FnOnce(&handles::RuntimeEntry) -> Result<(), Failure>,
    attach: impl FnOnce(&'static Runtime) -> gpuio_host::Result<GpuModule<'static>>,
) -> Result<(), Failure> {
    if !out.is_null() {
        // SAFETY: non-NULL, valid for writes by the caller's contract.
        unsafe { out.write(std::ptr::null_mut()) };
    }
    let runtime = runtime_id(rt);
    let entry = handles::runtime(runtime)?;
    check(&entry)?;
    let id = handles::add_module(runtime, attach)?;
    // SAFETY: `out` as the caller's contract says.
    unsafe { hand_out_attached(out, id) }
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
        let check = |_: &handles::RuntimeEntry| {
            if cu_module.is_null() {
                return Err(Failure::arg("cu_module is NULL"));
            }
            Ok(())
        };
        // SAFETY: `out` as the caller's contract says. `cu_module`: a CUmodule loaded in the
        // primary context, loaded until the runtime is destroyed (the caller's contract);
        // the runtime checks its backend is CUDA.
        unsafe { attach_module(rt, out, check, |rt| rt.attach_cuda_module(cu_module)) }
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
        let check = |_: &handles::RuntimeEntry| {
            if hip_module.is_null() {
                return Err(Failure::arg("hip_module is NULL"));
            }
            if cfg!(not(feature = "hip")) {
                return Err(Error::BackendUnavailable {
                    backend: "hip",
                    reason: "libgpuio was built without its `hip` feature (cargo build -p gpuio-capi \
                             --features hip, with HIP's headers and libamdhip64 installed)"
                        .into(),
                }
                .into());
            }
            Ok(())
        };
        #[cfg(not(feature = "hip"))]
        let attach = |_: &'static Runtime| -> gpuio_host::Result<GpuModule<'static>> {
            let _ = hip_device;
            unreachable!("`check` refuses every call without the hip feature")
        };
        // SAFETY: a hipModule_t loaded on `hip_device`, loaded until the runtime is
        // destroyed (the caller's contract); the runtime checks its backend is HSA and that
        // the device is its GPU agent.
        #[cfg(feature = "hip")]
        let attach = |rt: &'static Runtime| unsafe { rt.attach_hip_module(hip_module, hip_device) };
        // SAFETY: `out` as the caller's contract says.
        unsafe { attach_module(rt, out, check, attach) }
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
        let check = |entry: &handles::RuntimeEntry| {
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
            Ok(())
        };
        let attach = |rt: &'static Runtime| {
            // SAFETY: the caller's contract (a frozen executable for this runtime's agent); the
            // agent is checked right after, before the module can be used.
            let m = unsafe { rt.attach_hsa_executable(gpuio_host::hsa::Handle(executable)) }?;
            match m.hsa().map(|h| h.agent().0) {
                Some(a) if a == agent => Ok(m),
                _ => Err(Error::Config(
                    "agent is not this runtime's GPU agent: the executable must be loaded for it".into(),
                )),
            }
        };
        // SAFETY: `out` as the caller's contract says.
        unsafe { attach_module(rt, out, check, attach) }
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
