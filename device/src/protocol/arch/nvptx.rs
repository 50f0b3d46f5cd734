//! NVIDIA PTX (`nvptx64-nvidia-cuda`).
//!
//! Two PTX targets matter (see `arch/mod.rs`): `sm_90` (any sm_70 or newer), which runs
//! with independent thread scheduling, and `sm_60`, which the driver runs without it, in
//! lockstep as an AMD wavefront runs. The memory-model operations differ between the two
//! ([`atomic`]); the warp collectives and ids are the same.

use super::Warp;

#[cfg(target_feature = "sm_70")]
pub mod turns;

pub mod atomic;

/// With independent thread scheduling (sm_70+) each lane leaves a wait on its own; in
/// lockstep (before sm_70) the warp's waits end together (see `arch/mod.rs`).
#[cfg(target_feature = "sm_70")]
pub type WaitGroup = crate::protocol::group::SingleLane;
/// With independent thread scheduling (sm_70+) each lane leaves a wait on its own; in
/// lockstep (before sm_70) the warp's waits end together (see `arch/mod.rs`).
#[cfg(not(target_feature = "sm_70"))]
pub type WaitGroup = Warp;

/// The PTX instructions [`Warp`] is built from (see `gpu_warp.rs`): the lanes of a warp
/// that execute a call together are a *coalesced group*, as CUDA's
/// `cooperative_groups::coalesced_threads()` builds it.
///
/// # How the group is formed
/// [`Warp::default`] executes `activemask.b32` ([`active_mask`]), which returns the set of
/// lanes executing that very instruction together. Every lane of that set gets the same
/// mask, so the masks partition the warp: lanes that reach a print on different branches
/// (or at different times) form separate, disjoint groups, each printing one record.
///
/// # Why the collectives are sound
/// Each collective is built from `shfl.sync`/`vote.sync`/`bar.warp.sync` with the group's
/// mask. On sm_70+ such an instruction makes the lane wait until every lane of the mask has
/// executed a `.sync` instruction with the same qualifiers and the same mask; the lanes need
/// not be converged, nor at the same program counter. So all that is needed is that every
/// lane of the group executes the same sequence of collectives (the [`Group`] contract).
/// Here that holds because the mask is identical on every lane of the group, and which
/// collectives run depends only on the mask, never on the lane or its data.
///
/// Before sm_70 (the lockstep build) PTX asks more: the lanes of the mask execute each
/// collective *in convergence*, and no lane outside every mask is active then. Lanes of a
/// warp that run in lockstep are converged wherever their paths meet again: they leave
/// every divergent branch and loop together at its end, and the callers put no divergent
/// wait between forming a group and its collectives. Groups split from one another by
/// [`Group::split`] may execute a collective together, each with its own mask: every active
/// lane is then in some mask, which is what PTX requires.
///
/// The compiler keeps that sequence: the asm blocks are not `pure`, so LLVM sees unmodelled
/// side effects and can neither drop them, speculate them, reorder them among themselves nor
/// sink them into a conditional. Rust 1.95 does not mark them `convergent`, so LLVM may still
/// duplicate one onto two paths or merge two identical ones; that changes the program
/// counter, not the sequence each lane runs, and `.sync` matching on sm_70+ does not depend
/// on the program counter. Before sm_70 it would matter: lanes reaching two copies of one
/// collective on two paths would run them at different instructions, which PTX does not
/// allow there. Nothing in the asm forbids such a copy (Rust cannot mark asm `convergent`);
/// what keeps it from happening is that LLVM keeps PTX control flow structured, and what
/// checks it is the GPU suite's lockstep configuration (`tests/gpu/`).
///
/// None of the asm blocks below is `pure`: the compiler must execute each exactly where, and
/// as often as, the source does (above: that is what keeps the collectives sound).
/// `shfl.sync` is well defined when the calling lane and the source lane are in `mask`; each
/// caller passes the mask `activemask` returned on this lane and a member of it.
///
/// [`Warp::default`]: super::Warp::default
/// [`Group`]: crate::protocol::group::Group
/// [`Group::split`]: crate::protocol::group::Group::split
pub(super) mod lanes {
    use core::arch::asm;

    /// A set of lanes of a warp: bit `i` is lane `i` (`%laneid`, 0 to 31).
    pub type LaneMask = u32;

    /// `activemask.b32`: the lanes executing this instruction together with this one.
    #[inline(always)]
    pub fn active_mask() -> LaneMask {
        let m: u32;
        // SAFETY: reads which lanes are active; no memory, no other effect. Not `pure`: two
        // executions may return different masks.
        unsafe { asm!("activemask.b32 {m};", m = out(reg32) m, options(nomem, nostack)) };
        m
    }

    /// `%laneid`: this lane's index in its warp.
    #[inline(always)]
    pub fn lane_id() -> u32 {
        let l: u32;
        // SAFETY: reads a special register that is constant for the thread.
        unsafe { asm!("mov.u32 {l}, %laneid;", l = out(reg32) l, options(pure, nomem, nostack)) };
        l
    }

    /// `vote.sync.ballot.b32`: the lanes of `*mask` whose `p` is true (a collective of
    /// `*mask`).
    #[inline(always)]
    pub fn ballot(mask: &LaneMask, p: bool) -> LaneMask {
        let mask = *mask;
        let r: u32;
        // SAFETY: register-only; this lane is in `mask` and every lane of `mask` executes
        // this ballot (the callers' contract, see the module docs).
        unsafe {
            asm!("{{\n\t.reg .pred %p;\n\tsetp.ne.u32 %p, {v}, 0;\n\tvote.sync.ballot.b32 {r}, %p, {m};\n\t}}",
                r = out(reg32) r, v = in(reg32) p as u32, m = in(reg32) mask, options(nomem, nostack))
        };
        r
    }

    /// `shfl.sync.idx.b32`: lane `src`'s `v`. The clamp operand 0x1f (no segments, upper
    /// bound lane 31) makes every `src` in 0..32 valid, as CUDA's `__shfl_sync` does.
    #[inline(always)]
    fn shfl_idx(mask: u32, v: u32, src: u32) -> u32 {
        let r: u32;
        // SAFETY: register-only; the caller guarantees that this lane and `src` are in
        // `mask` and that every lane of `mask` executes this shuffle (see the module docs).
        unsafe {
            asm!("shfl.sync.idx.b32 {r}, {v}, {src}, 0x1f, {m};",
                r = out(reg32) r, v = in(reg32) v, src = in(reg32) src, m = in(reg32) mask,
                options(nomem, nostack))
        };
        r
    }

    /// `shfl.sync.up.b32`: lane `lane - d`'s `v`, or this lane's own `v` when `lane < d`
    /// (clamp operand 0: no segments, lower bound lane 0).
    #[inline(always)]
    fn shfl_up(mask: u32, v: u32, d: u32) -> u32 {
        let r: u32;
        // SAFETY: as for `shfl_idx`; used only with the full mask, so every source lane is
        // a member.
        unsafe {
            asm!("shfl.sync.up.b32 {r}, {v}, {d}, 0, {m};",
                r = out(reg32) r, v = in(reg32) v, d = in(reg32) d, m = in(reg32) mask,
                options(nomem, nostack))
        };
        r
    }

    /// [`shfl_idx`] of a 64-bit value, as two 32-bit halves.
    #[inline(always)]
    fn shfl_idx_u64(mask: u32, v: u64, src: u32) -> u64 {
        let lo = shfl_idx(mask, v as u32, src);
        let hi = shfl_idx(mask, (v >> 32) as u32, src);
        (hi as u64) << 32 | lo as u64
    }

    /// [`shfl_up`] of a 64-bit value, as two 32-bit halves.
    #[inline(always)]
    fn shfl_up_u64(mask: u32, v: u64, d: u32) -> u64 {
        let lo = shfl_up(mask, v as u32, d);
        let hi = shfl_up(mask, (v >> 32) as u32, d);
        (hi as u64) << 32 | lo as u64
    }

    /// The sum of `v` over the lanes of `mask` below `lane` (this lane, a member of `mask`),
    /// and over all of `mask`, modulo 2^64.
    #[inline(always)]
    pub fn exclusive_sum(mask: LaneMask, lane: u32, v: u64) -> (u64, u64) {
        if mask == u32::MAX {
            // A full warp: a Hillis-Steele inclusive scan in 5 steps. After the step with
            // offset `d`, `x` on lane `i` is the sum of `v` over lanes `i-2d+1 ..= i`
            // (clamped at lane 0): lane `i` adds what lane `i-d` held before the step,
            // which covers lanes `i-2d+1 ..= i-d`. `shfl.sync.up` hands lanes `i < d` their
            // own value back; they must not add it, hence the `lane >= d` test. Every lane
            // runs all 5 shuffles, so the collectives stay uniform.
            let mut x = v;
            for d in [1, 2, 4, 8, 16] {
                let y = shfl_up_u64(mask, x, d);
                if lane >= d {
                    x = x.wrapping_add(y);
                }
            }
            // Lane 31's inclusive sum is the total; this lane's inclusive sum less its own
            // value is the sum over the lanes below it.
            (x.wrapping_sub(v), shfl_idx_u64(mask, x, 31))
        } else {
            // Any other group, holes included (e.g. lanes 0, 3 and 17): read every member's
            // value in turn. The loop visits the set bits of `mask`, lowest first; `mask` is
            // the same on every lane, so every lane runs the same shuffles with the same
            // source lanes, each of them a member (a shuffle from a non-member would be
            // undefined). Lanes outside the mask are neither read nor counted, and "before"
            // means a lower lane id, which is the lane order the record is laid out in.
            let (mut before, mut total) = (0u64, 0u64);
            let mut rest = mask;
            while rest != 0 {
                let src = rest.trailing_zeros();
                let x = shfl_idx_u64(mask, v, src);
                if src < lane {
                    before = before.wrapping_add(x);
                }
                total = total.wrapping_add(x);
                rest &= rest - 1; // clear the lowest set bit
            }
            (before, total)
        }
    }

    /// Lane `leader`'s `v` (a member of `mask`), on every lane of `mask`.
    #[inline(always)]
    pub fn broadcast(mask: LaneMask, leader: u32, v: u64) -> u64 {
        shfl_idx_u64(mask, v, leader)
    }

    /// `bar.warp.sync mask`: waits for the lanes of `mask`; PTX guarantees memory ordering
    /// among the lanes taking part, so their writes before it are visible after it. Before
    /// sm_70 that guarantee does not reach other agents through a later release by another
    /// lane (`membar.sys` orders only the issuing thread's accesses), so each lane first
    /// makes its own writes visible system-wide with `membar.sys`.
    #[inline(always)]
    pub fn sync(mask: LaneMask) {
        #[cfg(not(target_feature = "sm_70"))]
        super::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        // SAFETY: `bar.warp.sync` touches no memory of ours; it is well defined because the
        // calling lane is in `mask` (`Warp::current` took the mask on this lane) and every
        // lane of `mask` executes it (the `Group` contract; see above). The asm is not
        // `nomem`, so it is also a compiler barrier: no memory access moves across it.
        unsafe { asm!("bar.warp.sync {m};", m = in(reg32) mask, options(nostack)) };
    }
}

/// Spinning: sleep the warp briefly (`nanosleep`, sm_70+) so the SM runs other warps;
/// before sm_70, which has no sleep, wait about as long without touching memory.
#[inline(always)]
pub fn relax() {
    #[cfg(target_feature = "sm_70")]
    // SAFETY: `nanosleep` has no memory effects.
    unsafe {
        core::arch::asm!("nanosleep.u32 64;", options(nostack, nomem))
    };
    #[cfg(not(target_feature = "sm_70"))]
    spin_cycles(128);
}

/// Reads `*p`, memory another agent published to us (its last write happens-before this
/// read through an acquire the caller made): from sm_70 a plain load, which the PTX memory
/// model orders after the acquire and which may be in flight beside others; before sm_70 a
/// volatile one, since the acquire there (`ld.volatile` then `membar.sys`) does not
/// invalidate the L1 cache that a plain load may hit.
///
/// # Safety
/// `p` is valid and aligned for `T`, and no agent writes `*p` concurrently.
#[inline(always)]
pub unsafe fn read_published<T: Copy>(p: *const T) -> T {
    #[cfg(target_feature = "sm_70")]
    // SAFETY: forwarded from our caller.
    return unsafe { core::ptr::read(p) };
    #[cfg(not(target_feature = "sm_70"))]
    // SAFETY: forwarded from our caller.
    return unsafe { core::ptr::read_volatile(p) };
}

/// A longer wait.
#[inline(always)]
pub fn doze() {
    #[cfg(target_feature = "sm_70")]
    // SAFETY: `nanosleep` only suspends the thread for a while; it has no memory effects.
    unsafe {
        core::arch::asm!("nanosleep.u32 2000;", options(nostack, nomem))
    };
    #[cfg(not(target_feature = "sm_70"))]
    spin_cycles(4000);
}

/// What a lane does while another lane reaps for it (`Context::waiting`): with independent
/// thread scheduling (sm_70+) the divergent paths of a warp take turns, so waiting lanes that
/// poll slow down a sibling that is reaping; asleep, they leave it the warp. 8 us (`nanosleep`
/// sleeps up to twice that): about a reap of a batch of CQEs; shorter sleeps take issue
/// slots back from the reaper, longer ones leave completed requests waiting. Lockstep lanes (before
/// sm_70) take no turns (a reaping lane's siblings wait, masked off, until it is done), so
/// there it returns at once.
#[inline(always)]
pub fn yield_to_siblings() {
    #[cfg(target_feature = "sm_70")]
    // SAFETY: `nanosleep` only suspends the thread for a while; it has no memory effects.
    unsafe {
        core::arch::asm!("nanosleep.u32 8000;", options(nostack, nomem))
    };
}

/// Runs `round` on one of the lanes that call this together, the lowest; the others wait
/// for it at a warp barrier and get `None`. A waiter's round goes through here
/// (`Context::waiting`). With independent thread scheduling (sm_70+) the lanes of a warp
/// that wait apart from the one that reaps are divergent paths, which the warp runs by
/// turns with the reaper's. Parked at the barrier they issue nothing, and the reaper has
/// the warp's issue slots to itself (random small reads complete markedly faster so).
///
/// `round` must not wait for the parked lanes: a waiter's round reaps, sleeps or flushes,
/// and waits only for the kernel and for reaping, as the lockstep rule (`arch/mod.rs`) has
/// every wait do. That rule is what makes the barrier safe: lanes in lockstep wait for
/// their sibling's round the same way, masked off.
///
/// Before sm_70 the lanes run in lockstep and take no turns: every lane runs `round`.
#[inline(always)]
pub fn by_one_lane<T>(round: impl FnOnce() -> Option<T>) -> Option<T> {
    #[cfg(target_feature = "sm_70")]
    {
        use crate::protocol::group::Group;
        let warp = Warp::current();
        let got = if warp.is_leader() { round() } else { None };
        warp.sync();
        got
    }
    #[cfg(not(target_feature = "sm_70"))]
    round()
}

/// Waits `n` SM clock cycles, reading only the cycle counter.
#[cfg(not(target_feature = "sm_70"))]
#[inline(always)]
fn spin_cycles(n: u64) {
    let clock = || {
        let t: u64;
        // SAFETY: reads a special register. Not `pure`: each read is a new value.
        unsafe { core::arch::asm!("mov.u64 {t}, %clock64;", t = out(reg64) t, options(nostack, nomem)) };
        t
    };
    let t0 = clock();
    while clock().wrapping_sub(t0) < n {}
}

/// Whether `p` points into the calling thread's own local memory (its stack): such an
/// address means another thread's stack to any other lane (`isspacep.local`).
#[inline(always)]
pub fn is_thread_private(p: *const u8) -> bool {
    let r: u32;
    // The address as a number: isspacep classifies it and dereferences nothing.
    let a = p as usize as u64;
    // SAFETY: register-only: classifies the generic address, touches no memory.
    unsafe {
        core::arch::asm!("{{\n\t.reg .pred %p;\n\tisspacep.local %p, {a};\n\tselp.u32 {r}, 1, 0, %p;\n\t}}",
            r = out(reg32) r, a = in(reg64) a, options(pure, nomem, nostack))
    };
    r != 0
}

/// Two words that no other thread running now has (the second never 0): the grid's launch
/// number in this CUDA context (`%gridid`, which tells concurrent grids apart) and the
/// thread's global index plus one. A print uses it to find its own mark among the threads
/// formatting a long line in place (`in_place::InPlaceLines`).
#[inline(always)]
pub fn thread_key() -> (u64, u64) {
    let grid: u64;
    // SAFETY: reads a special register that stays the same for the whole launch.
    unsafe { core::arch::asm!("mov.u64 {g}, %gridid;", g = out(reg64) grid, options(nostack, nomem, pure)) };
    (grid, super::global_thread_idx() + 1)
}

/// A nanosecond clock shared by the whole GPU (`%globaltimer`), for measurements.
#[inline(always)]
pub fn clock_ns() -> u64 {
    let t: u64;
    // SAFETY: reads a special register.
    unsafe { core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack, nomem)) };
    t
}

/// Index of the calling thread in its block (x).
#[inline(always)]
pub fn thread_idx() -> u32 {
    // SAFETY: reads a special register.
    unsafe { core::arch::nvptx::_thread_idx_x() }
}
/// Index of the calling thread's block (x).
#[inline(always)]
pub fn block_idx() -> u32 {
    // SAFETY: reads a special register.
    unsafe { core::arch::nvptx::_block_idx_x() }
}
/// Threads per block (x).
#[inline(always)]
pub fn block_dim() -> u32 {
    // SAFETY: reads a special register.
    unsafe { core::arch::nvptx::_block_dim_x() }
}
/// Blocks in the grid (x).
#[inline(always)]
pub fn grid_dim() -> u32 {
    // SAFETY: reads a special register.
    unsafe { core::arch::nvptx::_grid_dim_x() }
}

/// Index of the calling thread in its block, in x, y and z (`threadIdx`).
#[inline(always)]
pub fn thread_idx_3d() -> crate::dim::Dim3 {
    // SAFETY: reads special registers.
    unsafe {
        use core::arch::nvptx::*;
        crate::dim::Dim3::new(_thread_idx_x(), _thread_idx_y(), _thread_idx_z())
    }
}
/// Index of the calling thread's block, in x, y and z (`blockIdx`).
#[inline(always)]
pub fn block_idx_3d() -> crate::dim::Dim3 {
    // SAFETY: reads special registers.
    unsafe {
        use core::arch::nvptx::*;
        crate::dim::Dim3::new(_block_idx_x(), _block_idx_y(), _block_idx_z())
    }
}
/// Threads per block, in x, y and z (`blockDim`).
#[inline(always)]
pub fn block_dim_3d() -> crate::dim::Dim3 {
    // SAFETY: reads special registers.
    unsafe {
        use core::arch::nvptx::*;
        crate::dim::Dim3::new(_block_dim_x(), _block_dim_y(), _block_dim_z())
    }
}
/// Blocks in the grid, in x, y and z (`gridDim`).
#[inline(always)]
pub fn grid_dim_3d() -> crate::dim::Dim3 {
    // SAFETY: reads special registers.
    unsafe {
        use core::arch::nvptx::*;
        crate::dim::Dim3::new(_grid_dim_x(), _grid_dim_y(), _grid_dim_z())
    }
}

// The dynamic shared memory of a launch: a declaration at the PTX module's scope, as nvcc
// writes for `extern __shared__` (Rust has no way to declare a static in the shared state
// space). Every kernel of the module sees it at the same address, sized by the launch.
core::arch::global_asm!(".extern .shared .align 16 .b8 gpuio_dynamic_shared[];");

/// The launch's dynamic shared memory (`sharedMemBytes`), as a generic address and its
/// size (`%dynamic_smem_size`).
#[inline(always)]
pub fn dynamic_shared_memory() -> *mut [u8] {
    let (p, n): (u64, u32);
    // SAFETY: register-only: the generic address of a shared-space symbol, and a special
    // register; neither touches memory.
    unsafe {
        core::arch::asm!("cvta.shared.u64 {p}, gpuio_dynamic_shared;", p = out(reg64) p,
            options(pure, nomem, nostack));
        core::arch::asm!("mov.u32 {n}, %dynamic_smem_size;", n = out(reg32) n, options(pure, nomem, nostack));
    }
    core::ptr::slice_from_raw_parts_mut(p as *mut u8, n as usize)
}

/// Waits until every thread of the block reached it (`bar.sync 0`, CUDA's
/// `__syncthreads()`); writes to shared and global memory before it are visible to the
/// block's threads after it.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: `bar.sync` has no memory-safety preconditions; a block whose threads do not
    // all reach it waits (as CUDA's `__syncthreads` does), which the caller's docs state.
    unsafe { core::arch::nvptx::_syncthreads() }
}

/// Marks the calling kernel entry with its launch bounds (`kernel!`'s
/// `#[launch_bounds(MAX, MIN)]`): a PTX comment, `// gpuio.launch_bounds MAX MIN`, in the
/// entry's body, which `gpuio-linker` turns into the entry's `.maxntid MAX, 1, 1` (and
/// `.minnctapersm MIN` where `MIN` > 0) when it writes the PTX (rustc has no attribute
/// for those directives). It emits no instruction.
#[inline(always)]
pub fn mark_launch_bounds<const MAX: u32, const MIN: u32>() {
    const { assert!(MAX >= 1 && MAX <= 1024, "launch_bounds: a block has 1 to 1024 threads") };
    // SAFETY: the template is a comment: no instruction, no operand read or written.
    unsafe {
        core::arch::asm!(
            "// gpuio.launch_bounds {max} {min}",
            max = const MAX,
            min = const MIN,
            options(nomem, nostack, preserves_flags)
        )
    };
}

/// Ends the kernel with an error: the launch fails and the context is lost (the panic
/// handler's last step).
#[inline]
pub fn abort() -> ! {
    // SAFETY: `trap` has no preconditions; it never returns.
    unsafe { core::arch::nvptx::trap() }
}
