//! NVIDIA PTX (`nvptx64-nvidia-cuda`, sm_70 or newer).

use crate::context::Context;
use crate::group::Group;

/// System-scope atomics for PTX.
///
/// Rust 1.95's LLVM lowers loads, stores, compare-exchange and fences correctly
/// (`ld.acquire.sys`, `st.release.sys`, `atom.acq_rel.sys.cas`, `fence.sc.sys`), but it
/// lowers `fetch_add`/`fetch_or`/`swap` with any ordering to a plain `atom.*`, which PTX
/// defines as *relaxed, GPU scope*: the ordering and the system scope are silently lost.
/// So those read-modify-writes are written here in `asm!` with explicit `.sem.sys`.
pub mod atomic {
    use core::arch::asm;
    pub use core::sync::atomic::fence;
    use core::sync::atomic::Ordering;

    macro_rules! rmw {
        ($ptr:expr, $v:expr, $o:expr, $op:expr, $reg:ident, $t:ty) => {{
            let p = $ptr;
            let v: $t = $v;
            let r: $t;
            // SAFETY: `p` points to a live atomic of this width (it comes from `&self`);
            // the instruction is a single atomic read-modify-write at system scope.
            unsafe {
                match $o {
                    Ordering::Relaxed => asm!(concat!("atom.relaxed.sys.", $op, " {r}, [{p}], {v};"),
                        r = out($reg) r, p = in(reg64) p, v = in($reg) v, options(nostack)),
                    Ordering::Acquire => asm!(concat!("atom.acquire.sys.", $op, " {r}, [{p}], {v};"),
                        r = out($reg) r, p = in(reg64) p, v = in($reg) v, options(nostack)),
                    Ordering::Release => asm!(concat!("atom.release.sys.", $op, " {r}, [{p}], {v};"),
                        r = out($reg) r, p = in(reg64) p, v = in($reg) v, options(nostack)),
                    Ordering::AcqRel => asm!(concat!("atom.acq_rel.sys.", $op, " {r}, [{p}], {v};"),
                        r = out($reg) r, p = in(reg64) p, v = in($reg) v, options(nostack)),
                    // PTX's mapping of a C++ seq_cst RMW: fence.sc, then an acq_rel RMW.
                    _ => asm!(concat!("fence.sc.sys;\n\tatom.acq_rel.sys.", $op, " {r}, [{p}], {v};"),
                        r = out($reg) r, p = in(reg64) p, v = in($reg) v, options(nostack)),
                }
            }
            r
        }};
    }

    macro_rules! atomic_int {
        ($name:ident, $core:ident, $t:ty, $reg:ident, $add:literal, $bits:literal) => {
            /// A system-scope atomic integer (see the module docs).
            #[repr(transparent)]
            pub struct $name(core::sync::atomic::$core);

            impl $name {
                /// A new atomic holding `v`.
                pub const fn new(v: $t) -> Self {
                    Self(core::sync::atomic::$core::new(v))
                }
                /// `ld.{relaxed,acquire}.sys` (lowered correctly by LLVM).
                #[inline(always)]
                pub fn load(&self, o: Ordering) -> $t {
                    self.0.load(o)
                }
                /// `st.{relaxed,release}.sys` (lowered correctly by LLVM).
                #[inline(always)]
                pub fn store(&self, v: $t, o: Ordering) {
                    self.0.store(v, o)
                }
                /// `atom.{sem}.sys.cas` (lowered correctly by LLVM).
                #[inline(always)]
                pub fn compare_exchange(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                    self.0.compare_exchange(c, n, s, f)
                }
                /// `atom.{sem}.sys.add`.
                #[inline(always)]
                pub fn fetch_add(&self, v: $t, o: Ordering) -> $t {
                    rmw!(self.0.as_ptr(), v, o, $add, $reg, $t)
                }
                /// `atom.{sem}.sys.or`.
                #[inline(always)]
                pub fn fetch_or(&self, v: $t, o: Ordering) -> $t {
                    rmw!(self.0.as_ptr(), v, o, concat!("or.", $bits), $reg, $t)
                }
                /// `atom.{sem}.sys.and`.
                #[inline(always)]
                pub fn fetch_and(&self, v: $t, o: Ordering) -> $t {
                    rmw!(self.0.as_ptr(), v, o, concat!("and.", $bits), $reg, $t)
                }
                /// `atom.{sem}.sys.exch`.
                #[inline(always)]
                pub fn swap(&self, v: $t, o: Ordering) -> $t {
                    rmw!(self.0.as_ptr(), v, o, concat!("exch.", $bits), $reg, $t)
                }
            }
        };
    }

    atomic_int!(AtomicU32, AtomicU32, u32, reg32, "add.u32", "b32");
    atomic_int!(AtomicI32, AtomicI32, i32, reg32, "add.s32", "b32");
    atomic_int!(AtomicU64, AtomicU64, u64, reg64, "add.u64", "b64");
}

/// The lanes of a warp that execute a call together: a *coalesced group*, as CUDA's
/// `cooperative_groups::coalesced_threads()` builds it.
///
/// # How the group is formed
/// [`Warp::default`] executes `activemask.b32`, which returns the set of lanes executing
/// that very instruction together. Every lane of that set gets the same mask, so the masks
/// partition the warp: lanes that reach a print on different branches (or at different
/// times) form separate, disjoint groups, each printing one record.
///
/// # Why the collectives are sound
/// Each method is built from `shfl.sync`/`bar.warp.sync` with the group's mask. On sm_70+
/// such an instruction makes the lane wait until every lane of the mask has executed a
/// `.sync` instruction with the same qualifiers and the same mask; the lanes need not be
/// converged, nor at the same program counter. So all that is needed is that every lane of
/// the group executes the same sequence of collectives (the [`Group`] contract). Here that
/// holds because the mask is identical on every lane of the group, and which collectives run
/// depends only on the mask, never on the lane or its data.
///
/// The compiler keeps that sequence: the asm blocks are not `pure`, so LLVM sees unmodelled
/// side effects and can neither drop them, speculate them, reorder them among themselves nor
/// sink them into a conditional. Rust 1.95 does not mark them `convergent`, so LLVM may still
/// duplicate one onto two paths or merge two identical ones; that changes the program
/// counter, not the sequence each lane runs, and `.sync` matching on sm_70+ does not depend
/// on the program counter. (Pre-Volta targets, which need converged execution, are not
/// supported.)
#[derive(Clone, Copy, Debug)]
pub struct Warp {
    /// The lanes of the group (this lane included): bit `i` is lane `i`.
    mask: u32,
    /// This lane's index in the warp (`%laneid`, 0 to 31).
    lane: u32,
}

impl Warp {
    /// The lanes executing this call together with the calling lane.
    #[inline(always)]
    pub fn current() -> Warp {
        Warp {
            mask: lanes::active_mask(),
            lane: lanes::lane_id(),
        }
    }

    /// The group's leader: its lowest lane.
    #[inline(always)]
    fn leader(&self) -> u32 {
        self.mask.trailing_zeros()
    }
}

impl Default for Warp {
    /// [`Warp::current`].
    #[inline(always)]
    fn default() -> Self {
        Warp::current()
    }
}

impl Group for Warp {
    #[inline(always)]
    fn is_leader(&self) -> bool {
        self.lane == self.leader()
    }

    /// `(sum of v over the group's lanes below this one, sum over the whole group)`.
    ///
    /// The sums are computed modulo 2^64 (callers add line lengths, far from overflowing).
    #[inline(always)]
    fn exclusive_sum(&self, v: u64) -> (u64, u64) {
        let (mask, lane) = (self.mask, self.lane);
        if mask == u32::MAX {
            // A full warp: a Hillis-Steele inclusive scan in 5 steps. After the step with
            // offset `d`, `x` on lane `i` is the sum of `v` over lanes `i-2d+1 ..= i`
            // (clamped at lane 0): lane `i` adds what lane `i-d` held before the step,
            // which covers lanes `i-2d+1 ..= i-d`. `shfl.sync.up` hands lanes `i < d` their
            // own value back; they must not add it, hence the `lane >= d` test. Every lane
            // runs all 5 shuffles, so the collectives stay uniform.
            let mut x = v;
            for d in [1, 2, 4, 8, 16] {
                let y = lanes::shfl_up_u64(mask, x, d);
                if lane >= d {
                    x = x.wrapping_add(y);
                }
            }
            // Lane 31's inclusive sum is the total; this lane's inclusive sum less its own
            // value is the sum over the lanes below it.
            (x.wrapping_sub(v), lanes::shfl_idx_u64(mask, x, 31))
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
                let x = lanes::shfl_idx_u64(mask, v, src);
                if src < lane {
                    before = before.wrapping_add(x);
                }
                total = total.wrapping_add(x);
                rest &= rest - 1; // clear the lowest set bit
            }
            (before, total)
        }
    }

    /// The leader's `v`, on every lane of the group.
    #[inline(always)]
    fn broadcast(&self, v: u64) -> u64 {
        lanes::shfl_idx_u64(self.mask, v, self.leader())
    }

    /// `bar.warp.sync mask`: waits for the group's lanes; PTX guarantees memory ordering
    /// among the lanes taking part, so their writes before it are visible after it.
    #[inline(always)]
    fn sync(&self) {
        // SAFETY: `bar.warp.sync` touches no memory of ours; it is well defined because the
        // calling lane is in `mask` (`Warp::current` took the mask on this lane) and every
        // lane of `mask` executes it (the `Group` contract; see `Warp`). The asm is not
        // `nomem`, so it is also a compiler barrier: no memory access moves across it.
        unsafe { core::arch::asm!("bar.warp.sync {m};", m = in(reg32) self.mask, options(nostack)) };
    }
}

/// The PTX instructions [`Warp`] is built from.
///
/// None of these asm blocks is `pure`: the compiler must execute each exactly where, and as
/// often as, the source does (see `Warp` on why that is what keeps the collectives sound).
/// `shfl.sync` is well defined when the calling lane and the source lane are in `mask`; each
/// caller below passes the mask `activemask` returned on this lane and a member of it.
mod lanes {
    use core::arch::asm;

    /// `activemask.b32`: the lanes executing this instruction together with this one.
    #[inline(always)]
    pub fn active_mask() -> u32 {
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
    pub fn shfl_idx_u64(mask: u32, v: u64, src: u32) -> u64 {
        let lo = shfl_idx(mask, v as u32, src);
        let hi = shfl_idx(mask, (v >> 32) as u32, src);
        (hi as u64) << 32 | lo as u64
    }

    /// [`shfl_up`] of a 64-bit value, as two 32-bit halves.
    #[inline(always)]
    pub fn shfl_up_u64(mask: u32, v: u64, d: u32) -> u64 {
        let lo = shfl_up(mask, v as u32, d);
        let hi = shfl_up(mask, (v >> 32) as u32, d);
        (hi as u64) << 32 | lo as u64
    }
}

/// Spinning: sleep the warp briefly (`nanosleep`, sm_70+) so the SM runs other warps.
#[inline(always)]
pub fn relax() {
    // SAFETY: `nanosleep` has no memory effects.
    unsafe { core::arch::asm!("nanosleep.u32 64;", options(nostack, nomem)) };
}

/// A longer wait.
#[inline(always)]
pub fn doze() {
    // SAFETY: as above.
    unsafe { core::arch::asm!("nanosleep.u32 2000;", options(nostack, nomem)) };
}

/// A nanosecond clock shared by the whole GPU (`%globaltimer`), for measurements.
#[inline(always)]
pub fn clock_ns() -> u64 {
    let t: u64;
    // SAFETY: reads a special register.
    unsafe { core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack, nomem)) };
    t
}

/// The runtime context. The host writes this global (`cuModuleGetGlobal`) before launch.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut gpuio_context: *const Context = core::ptr::null();

/// The context the host installed, or null.
#[inline(always)]
pub fn context() -> *const Context {
    // SAFETY: the host writes the global only while no kernel of this module runs.
    unsafe { core::ptr::read_volatile(&raw const gpuio_context) }
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
