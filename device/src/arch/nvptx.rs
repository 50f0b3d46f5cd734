//! NVIDIA PTX (`nvptx64-nvidia-cuda`, sm_70 or newer).

use crate::context::Context;
use crate::group::SingleLane;

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

/// Until warp aggregation lands on PTX, each lane prints on its own.
pub type Warp = SingleLane;

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
