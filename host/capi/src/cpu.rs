//! CPU kernels: `gpuio_cpu_launch` and the prints a C kernel makes.

use std::ffi::{c_char, c_void};

use crate::args::*;
use crate::handles;
use crate::print;
use crate::status::gpuio_status;
use crate::status::{call, Failure};
use crate::types::*;

/// The user pointer of a CPU launch, shared by its threads.
pub(crate) struct User(*mut c_void);

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
