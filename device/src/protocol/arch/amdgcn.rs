//! AMD GPUs (`amdgcn-amd-amdhsa`).
//!
//! rustc ignores `#[inline(never)]` on this target (it gives LLVM no `noinline` there), so
//! what keeps one copy of the request path in a code object is the inliner's own threshold:
//! `gpuio-linker` turns off the AMDGPU inliner's bonus for calls that pass a pointer to the
//! caller's stack (`GpuTarget::rustflags`), under which every such call was inlined.

use core::arch::amdgpu;

use super::Warp;

/// System-scope atomics for AMD GPUs.
///
/// On amdgcn, LLVM's default synchronisation scope for Rust atomics and fences is the whole
/// system (`buffer_wbl2 sc0 sc1` / `global_atomic_* sc1` / `buffer_inv sc0 sc1` on gfx942),
/// which is what rings in host memory need. But Rust 1.95's LLVM (22.1) does not count the
/// L2 writeback of a release (`buffer_wbl2` on gfx90a and gfx942) as outstanding memory
/// work, so it drops the `s_waitcnt vmcnt(0)` that must follow it when nothing else is
/// pending: the releasing store can then become visible before the bytes it publishes
/// reach memory (llvm-project#178316; `tests/amdgcn_code_objects/` finds every such
/// store). So every release here is a release fence, then an explicit wait for all
/// outstanding memory work (`s_waitcnt 0`, which the compiler keeps), then the relaxed
/// operation; acquires and relaxed operations are core's as they are.
pub mod atomic {
    use core::sync::atomic::{self as core_atomic, Ordering};

    #[allow(improper_ctypes)]
    extern "C" {
        /// `s_waitcnt` with its immediate: 0 waits until every counter it encodes is zero
        /// (0 means that on every GFX generation, whose encodings differ). From gfx10 on,
        /// stores are counted apart (`vscnt`) and this does not wait for them; the writeback
        /// this waits for exists on gfx90a and gfx942 only (`buffer_wbl2`), and LLVM's own
        /// release on gfx10+ waits for `vscnt` itself.
        #[link_name = "llvm.amdgcn.s.waitcnt"]
        fn s_waitcnt(simm16: i32);
    }

    /// Whether `o` releases (needs the barrier before the operation).
    const fn releases(o: Ordering) -> bool {
        matches!(o, Ordering::Release | Ordering::AcqRel | Ordering::SeqCst)
    }

    /// The ordering left for the operation itself once the release part was done by
    /// [`release_barrier`].
    const fn without_release(o: Ordering) -> Ordering {
        match o {
            Ordering::AcqRel | Ordering::SeqCst | Ordering::Acquire => Ordering::Acquire,
            _ => Ordering::Relaxed,
        }
    }

    /// A release fence whose L2 writeback is waited for.
    #[inline(always)]
    fn release_barrier() {
        core_atomic::fence(Ordering::Release);
        // SAFETY: `s_waitcnt 0` only waits for this wave's outstanding memory operations.
        unsafe { s_waitcnt(0) };
    }

    /// A fence at system scope; its release part is waited for (see the module docs).
    /// `Relaxed` panics, as core's `fence` does.
    #[inline(always)]
    pub fn fence(o: Ordering) {
        match o {
            Ordering::Acquire => core_atomic::fence(Ordering::Acquire),
            Ordering::Release | Ordering::AcqRel | Ordering::SeqCst => {
                release_barrier();
                if o != Ordering::Release {
                    core_atomic::fence(Ordering::Acquire);
                }
            }
            _ => core_atomic::fence(o),
        }
    }

    macro_rules! atomic_int {
        ($name:ident, $t:ty) => {
            /// A system-scope atomic integer (see the module docs).
            #[repr(transparent)]
            pub struct $name(core_atomic::$name);

            impl $name {
                /// A new atomic holding `v`.
                pub const fn new(v: $t) -> Self {
                    Self(core_atomic::$name::new(v))
                }
                /// core's load (an acquire load is `buffer_inv` after it).
                #[inline(always)]
                pub fn load(&self, o: Ordering) -> $t {
                    self.0.load(o)
                }
                /// A release store is [`release_barrier`], then a relaxed store.
                #[inline(always)]
                pub fn store(&self, v: $t, o: Ordering) {
                    if releases(o) {
                        release_barrier();
                    }
                    self.0.store(v, Ordering::Relaxed);
                    if o == Ordering::SeqCst {
                        fence(Ordering::SeqCst);
                    }
                }
                /// Compare-and-swap; a releasing success ordering is [`release_barrier`]
                /// first.
                #[inline(always)]
                pub fn compare_exchange(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                    if releases(s) {
                        release_barrier();
                    }
                    self.0.compare_exchange(c, n, without_release(s), f)
                }
                /// Atomic add; a releasing ordering is [`release_barrier`] first.
                #[inline(always)]
                pub fn fetch_add(&self, v: $t, o: Ordering) -> $t {
                    if releases(o) {
                        release_barrier();
                    }
                    self.0.fetch_add(v, without_release(o))
                }
                /// Atomic or; as `fetch_add`.
                #[inline(always)]
                pub fn fetch_or(&self, v: $t, o: Ordering) -> $t {
                    if releases(o) {
                        release_barrier();
                    }
                    self.0.fetch_or(v, without_release(o))
                }
                /// Atomic and; as `fetch_add`.
                #[inline(always)]
                pub fn fetch_and(&self, v: $t, o: Ordering) -> $t {
                    if releases(o) {
                        release_barrier();
                    }
                    self.0.fetch_and(v, without_release(o))
                }
                /// Atomic swap; as `fetch_add`.
                #[inline(always)]
                pub fn swap(&self, v: $t, o: Ordering) -> $t {
                    if releases(o) {
                        release_barrier();
                    }
                    self.0.swap(v, without_release(o))
                }
            }
        };
    }

    atomic_int!(AtomicU32, u32);
    atomic_int!(AtomicI32, i32);
    atomic_int!(AtomicU64, u64);

    /// The fence that goes with [`DeviceAtomicU64`]: system scope here, as it is.
    pub use fence as device_fence;
    /// An atomic that only the threads of one GPU use while a kernel runs. System scope
    /// here, as every other atomic: agent scope would be cheaper, but Rust's atomics cannot
    /// name an LLVM sync scope (NVIDIA's sm_70+ variant is GPU scope).
    pub use AtomicU64 as DeviceAtomicU64;
}

/// The wavefront primitives [`Warp`] is built from (see `gpu_warp.rs`): the work-items of
/// a wavefront that execute a call together are the `exec` mask, as
/// `llvm.amdgcn.ballot(true)` reads it (wave32 or wave64).
///
/// A wavefront runs its lanes in lockstep: the lanes active at an instruction are the lanes
/// of `exec`, and they stay converged until a divergent branch, after which they meet again
/// at its end. Every collective is built from `ballot` and `readlane`. `readlane` needs a
/// lane index that is the same on every active lane, and after [`Group::split`] two groups
/// with different masks may run one collective together (`print::print_to` does, by
/// stream): so the collectives walk the lanes active at that instruction (`ballot(true)`,
/// the same on every lane) and each lane keeps what its own group's members hold.
///
/// [`Group::split`]: crate::protocol::group::Group::split
pub(super) mod lanes {
    use core::arch::amdgpu;

    /// A set of lanes of a wavefront: bit `i` is lane `i` (wave32 or wave64).
    pub type LaneMask = u64;

    /// The lanes executing this call together with the calling lane: `exec`.
    #[inline(always)]
    pub fn active_mask() -> LaneMask {
        amdgpu::ballot(true)
    }

    /// This lane's index in the wavefront: the number of lanes below it.
    #[inline(always)]
    pub fn lane_id() -> u32 {
        amdgpu::mbcnt_hi(u32::MAX, amdgpu::mbcnt_lo(u32::MAX, 0))
    }

    /// The lanes of `*mask` whose `p` is true. The mask is read after the ballot (so by
    /// reference): read before it, LLVM commutes the operands of some `s_and_b64`s.
    #[inline(always)]
    pub fn ballot(mask: &LaneMask, p: bool) -> LaneMask {
        amdgpu::ballot(p) & *mask
    }

    /// Lane `src`'s `v` (`src` an active lane, the same on every lane).
    #[inline(always)]
    fn read(v: u64, src: u32) -> u64 {
        // SAFETY: `src` is active (below the wavefront size) and uniform: every caller takes
        // it from `ballot(true)`, which every active lane reads alike.
        unsafe { amdgpu::readlane_u64(v, src) }
    }

    /// Reads every active lane's `v` in turn (lowest lane first) and sums those of the
    /// group `mask` (this `lane`'s); "before" means a lower lane.
    #[inline(always)]
    pub fn exclusive_sum(mask: LaneMask, lane: u32, v: u64) -> (u64, u64) {
        let (mut before, mut total) = (0u64, 0u64);
        let mut rest = amdgpu::ballot(true);
        while rest != 0 {
            let src = rest.trailing_zeros();
            let x = read(v, src);
            if mask >> src & 1 != 0 {
                if src < lane {
                    before = before.wrapping_add(x);
                }
                total = total.wrapping_add(x);
            }
            rest &= rest - 1;
        }
        (before, total)
    }

    /// Reads every active lane's `v` in turn and keeps lane `leader`'s (a member of the
    /// group; `readlane` needs no mask).
    #[inline(always)]
    pub fn broadcast(_mask: LaneMask, leader: u32, v: u64) -> u64 {
        let mut out = 0;
        let mut rest = amdgpu::ballot(true);
        while rest != 0 {
            let src = rest.trailing_zeros();
            let x = read(v, src);
            if src == leader {
                out = x;
            }
            rest &= rest - 1;
        }
        out
    }

    /// The lanes of a converged group are at the same instruction already; each makes its
    /// writes visible system-wide (a system-scope fence), so that another lane's later
    /// release covers them too.
    #[inline(always)]
    pub fn sync(_mask: LaneMask) {
        super::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        amdgpu::wave_barrier();
    }
}

/// A wavefront runs in lockstep: its waits end together (see `arch/mod.rs`).
pub type WaitGroup = Warp;

/// Spinning: `s_sleep` lets the other waves on the SIMD run.
#[inline(always)]
pub fn relax() {
    core::arch::amdgpu::s_sleep::<2>();
}

/// Reads `*p`, memory another agent published to us (its last write happens-before this
/// read through an acquire the caller made). A volatile load, which bypasses the vector L1
/// cache: this code is not yet measured on AMD hardware, so it keeps the conservative form.
///
/// # Safety
/// `p` is valid and aligned for `T`, and no agent writes `*p` concurrently.
#[inline(always)]
pub unsafe fn read_published<T: Copy>(p: *const T) -> T {
    // SAFETY: forwarded from our caller.
    unsafe { core::ptr::read_volatile(p) }
}

/// A longer wait.
#[inline(always)]
pub fn doze() {
    core::arch::amdgpu::s_sleep::<127>();
}

/// What a lane does while another lane reaps for it (`Context::waiting`): nothing. The
/// lanes of a wavefront run in lockstep, so a waiting lane takes no issue slots from a
/// reaping sibling (see the NVIDIA version, where they do).
#[inline(always)]
pub fn yield_to_siblings() {}

/// Runs `round` for the lanes that call this together (`Context::waiting`): on every lane.
/// The lanes of a wavefront run in lockstep, so they take no turns that would slow the one
/// that reaps (see the NVIDIA version, where one lane goes round for the others).
#[inline(always)]
pub fn by_one_lane<T>(round: impl FnOnce() -> Option<T>) -> Option<T> {
    round()
}

#[allow(improper_ctypes)]
extern "C" {
    /// Whether a flat address lies in the private (scratch) aperture.
    #[link_name = "llvm.amdgcn.is.private"]
    fn is_private(p: *const u8) -> bool;

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

/// Whether `p` points into the calling work-item's private memory (its stack, in the
/// scratch aperture): such an address means another work-item's stack to any other lane.
#[inline(always)]
// The intrinsic takes the pointer to classify its address, and reads nothing through it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn is_thread_private(p: *const u8) -> bool {
    // SAFETY: classifies a flat address; touches no memory.
    unsafe { is_private(p) }
}

/// The HSA kernel dispatch packet (`hsa_kernel_dispatch_packet_t`) of the running kernel.
///
/// Needs the crate feature `gpu_intrinsics` (the intrinsic lives in `core::intrinsics::gpu`).
#[inline(always)]
fn dispatch() -> *const u8 {
    core::intrinsics::gpu::amdgpu_dispatch_ptr().cast::<u8>()
}

/// Two words that no other work-item running now has (the second never 0): the address
/// of its dispatch packet (each dispatch in flight has its own slot in its own queue) and
/// the work-item's global index plus one. A print uses it to find its own mark among the
/// work-items formatting a long line in place (`in_place::InPlaceLines`).
#[inline(always)]
pub fn thread_key() -> (u64, u64) {
    (dispatch() as u64, super::global_thread_idx() + 1)
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

/// Index of the calling work-item in its work-group, in x, y and z.
#[inline(always)]
pub fn thread_idx_3d() -> crate::dim::Dim3 {
    use core::arch::amdgpu::*;
    crate::dim::Dim3::new(workitem_id_x(), workitem_id_y(), workitem_id_z())
}
/// Index of the calling work-group, in x, y and z.
#[inline(always)]
pub fn block_idx_3d() -> crate::dim::Dim3 {
    use core::arch::amdgpu::*;
    crate::dim::Dim3::new(workgroup_id_x(), workgroup_id_y(), workgroup_id_z())
}
/// Work-items per work-group, in x, y and z: the dispatch packet's `workgroup_size_*`
/// (u16s at offsets 4, 6 and 8).
#[inline(always)]
pub fn block_dim_3d() -> crate::dim::Dim3 {
    // SAFETY: the dispatch packet is valid for the whole dispatch; offsets 4, 6 and 8 hold
    // the u16 workgroup sizes.
    let size = |at: usize| unsafe { (dispatch().add(at) as *const u16).read() as u32 };
    crate::dim::Dim3::new(size(4), size(6), size(8))
}
/// Work-groups in the grid, in x, y and z: the packet's `grid_size_*` (u32s at offsets 12,
/// 16 and 20, in work-items) over the work-group sizes, rounded up.
#[inline(always)]
pub fn grid_dim_3d() -> crate::dim::Dim3 {
    let block = block_dim_3d();
    // SAFETY: offsets 12, 16 and 20 of the dispatch packet hold the u32 grid sizes.
    let size = |at: usize| unsafe { (dispatch().add(at) as *const u32).read() };
    crate::dim::Dim3::new(
        size(12).div_ceil(block.x.max(1)),
        size(16).div_ceil(block.y.max(1)),
        size(20).div_ceil(block.z.max(1)),
    )
}

/// The launch's dynamic shared memory: none on AMD GPUs yet (reaching the dynamic LDS needs
/// a zero-sized external group-segment static, which Rust cannot declare), so an empty
/// slice; the host refuses a launch that asks for some.
#[inline(always)]
pub fn dynamic_shared_memory() -> *mut [u8] {
    core::ptr::slice_from_raw_parts_mut(core::ptr::null_mut(), 0)
}

/// Waits until every work-item of the work-group reached it (`s_barrier`, HIP's
/// `__syncthreads()`), between fences that make writes before it visible after it.
#[inline(always)]
pub fn sync_threads() {
    atomic::fence(core::sync::atomic::Ordering::Release);
    amdgpu::s_barrier();
    atomic::fence(core::sync::atomic::Ordering::Acquire);
}

/// `kernel!`'s `#[launch_bounds(MAX, MIN)]`: checked here as on NVIDIA, and not given to the
/// compiler (AMD's code objects are built ahead of time by `gpuio-linker`, which does not
/// yet pass `amdgpu-flat-work-group-size`); the host's typed launch still refuses larger
/// blocks.
#[inline(always)]
pub fn mark_launch_bounds<const MAX: u32, const MIN: u32>() {
    const { assert!(MAX >= 1 && MAX <= 1024, "launch_bounds: a block has 1 to 1024 threads") };
}

/// Ends the kernel with an error: the dispatch fails (the panic handler's last step).
#[inline]
pub fn abort() -> ! {
    core::intrinsics::abort()
}
