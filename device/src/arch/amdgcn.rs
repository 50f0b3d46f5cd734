//! AMD GPUs (`amdgcn-amd-amdhsa`).

use crate::context::Context;
use crate::group::SingleLane;

/// On amdgcn, LLVM's default synchronisation scope for Rust atomics and fences is the
/// whole system (`buffer_wbl2 sc0 sc1` / `global_atomic_* sc1` / `buffer_inv sc0 sc1` on
/// gfx942), which is what rings in host memory need.
pub mod atomic {
    pub use core::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64};
}

/// Until warp aggregation lands on amdgcn, each lane prints on its own.
pub type Warp = SingleLane;

/// Spinning: `s_sleep` lets the other waves on the SIMD run.
#[inline(always)]
pub fn relax() {
    core::arch::amdgpu::s_sleep::<2>();
}

/// A longer wait.
#[inline(always)]
pub fn doze() {
    core::arch::amdgpu::s_sleep::<127>();
}

#[allow(improper_ctypes)]
extern "C" {
    /// LLVM's constant-rate counter: `s_memrealtime` (gfx9) or its message form (gfx11),
    /// 100 MHz on every AMD GPU the HSA runtime supports.
    #[link_name = "llvm.readsteadycounter"]
    fn readsteadycounter() -> u64;
}

/// A nanosecond clock shared by the whole GPU (the 100 MHz real-time counter), for
/// measurements.
#[inline(always)]
pub fn clock_ns() -> u64 {
    // SAFETY: reads a counter; no memory effects.
    let ticks = unsafe { readsteadycounter() };
    ticks * 10
}

/// The runtime context. The host writes this global (through the HSA executable's symbol)
/// before dispatch.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut gpuio_context: *const Context = core::ptr::null();

/// The context the host installed, or null.
#[inline(always)]
pub fn context() -> *const Context {
    // SAFETY: the host writes the global only while no kernel of this code object runs.
    unsafe { core::ptr::read_volatile(&raw const gpuio_context) }
}

/// The HSA kernel dispatch packet (`hsa_kernel_dispatch_packet_t`) of the running kernel.
///
/// Needs the crate feature `gpu_intrinsics` (the intrinsic lives in `core::intrinsics::gpu`).
#[inline(always)]
fn dispatch() -> *const u8 {
    core::intrinsics::gpu::amdgpu_dispatch_ptr().cast::<u8>()
}

/// Index of the calling work-item in its work-group (x).
#[inline(always)]
pub fn thread_idx() -> u32 {
    core::arch::amdgpu::workitem_id_x()
}
/// Index of the calling work-group (x).
#[inline(always)]
pub fn block_idx() -> u32 {
    core::arch::amdgpu::workgroup_id_x()
}
/// Work-items per work-group (x): `hsa_kernel_dispatch_packet_t::workgroup_size_x`.
#[inline(always)]
pub fn block_dim() -> u32 {
    // SAFETY: the dispatch packet is valid for the whole dispatch; offset 4 holds the u16
    // workgroup_size_x.
    unsafe { (dispatch().add(4) as *const u16).read() as u32 }
}
/// Work-groups in the grid (x): `grid_size_x / workgroup_size_x`, rounded up.
#[inline(always)]
pub fn grid_dim() -> u32 {
    // SAFETY: offset 12 of the dispatch packet holds the u32 grid_size_x.
    let grid = unsafe { (dispatch().add(12) as *const u32).read() };
    grid.div_ceil(block_dim().max(1))
}
