//! System-scope atomics for PTX, in two variants chosen by the PTX target.
//!
//! **sm_70 and newer** (the PTX memory model, independent thread scheduling): Rust 1.95's
//! LLVM lowers loads, stores, compare-exchange and fences correctly (`ld.acquire.sys`,
//! `st.release.sys`, `atom.acq_rel.sys.cas`, `fence.sc.sys`), but it lowers
//! `fetch_add`/`fetch_or`/`swap` with any ordering to a plain `atom.*`, which PTX defines as
//! *relaxed, GPU scope*: the ordering and the system scope are silently lost. So those
//! read-modify-writes are written here in `asm!` with explicit `.sem.sys`.
//!
//! **Before sm_70** (`sm_60`: the lockstep build, see `arch/mod.rs`): there are no ordered
//! loads, stores, fences or read-modify-writes (`ld.acquire`, `st.release`, `fence.*`,
//! `atom.<sem>` all need sm_70), and LLVM refuses to lower an ordered atomic store for such
//! a target. Every operation is then written here: relaxed loads and stores are
//! `ld.volatile`/`st.volatile` (which PTX treats as relaxed at system scope), read-modify-
//! writes are `atom.sys` (relaxed, system scope), and an ordering is `membar.sys` placed as
//! C++'s fence-based mapping places it: after an acquire, before a release, on both sides of
//! acq_rel and seq_cst. `membar.sys` orders all of the thread's prior memory accesses
//! against its later ones for every observer in the system, so an acquire is the relaxed
//! access then the barrier, a release the barrier then the relaxed access.

use core::arch::asm;
use core::sync::atomic::Ordering;

/// Whether an operation with ordering `o` needs a barrier before it (it releases).
const fn releases(o: Ordering) -> bool {
    matches!(o, Ordering::Release | Ordering::AcqRel | Ordering::SeqCst)
}
/// Whether an operation with ordering `o` needs a barrier after it (it acquires).
const fn acquires(o: Ordering) -> bool {
    matches!(o, Ordering::Acquire | Ordering::AcqRel | Ordering::SeqCst)
}

/// A memory fence at system scope (`fence.{acq_rel,sc}.sys` on sm_70+, `membar.sys`
/// before). `Relaxed` panics, as core's `fence` does.
#[inline(always)]
pub fn fence(o: Ordering) {
    #[cfg(target_feature = "sm_70")]
    core::sync::atomic::fence(o);
    #[cfg(not(target_feature = "sm_70"))]
    if o != Ordering::Relaxed {
        membar_sys();
    } else {
        core::sync::atomic::compiler_fence(o);
    }
}

/// `membar.sys`: the thread's accesses before it are performed, for every observer in
/// the system, before its accesses after it.
#[allow(dead_code)] // used by the pre-Volta variant only
#[inline(always)]
fn membar_sys() {
    // SAFETY: a barrier instruction; it touches no memory (not `nomem`: the compiler
    // must not move memory accesses across it).
    unsafe { asm!("membar.sys;", options(nostack)) };
}

/// `atom.<sem>.sys.<op>` (sm_70+).
#[cfg(target_feature = "sm_70")]
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

/// `atom.sys.<op>` between the barriers its ordering needs (before sm_70).
#[cfg(not(target_feature = "sm_70"))]
macro_rules! rmw {
    ($ptr:expr, $v:expr, $o:expr, $op:expr, $reg:ident, $t:ty) => {{
        let (p, o) = ($ptr, $o);
        let v: $t = $v;
        let r: $t;
        if releases(o) {
            membar_sys();
        }
        // SAFETY: `p` points to a live atomic of this width (it comes from `&self`);
        // the instruction is a single atomic read-modify-write at system scope.
        unsafe {
            asm!(concat!("atom.sys.", $op, " {r}, [{p}], {v};"),
                r = out($reg) r, p = in(reg64) p, v = in($reg) v, options(nostack))
        };
        if acquires(o) {
            membar_sys();
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

            /// `ld.{relaxed,acquire}.sys` (sm_70+, lowered correctly by LLVM);
            /// `ld.volatile`, then `membar.sys` if it acquires (before sm_70).
            #[inline(always)]
            pub fn load(&self, o: Ordering) -> $t {
                #[cfg(target_feature = "sm_70")]
                return self.0.load(o);
                #[cfg(not(target_feature = "sm_70"))]
                {
                    if o == Ordering::SeqCst {
                        membar_sys();
                    }
                    let r: $t;
                    // SAFETY: a load of a live, aligned atomic of this width.
                    unsafe {
                        asm!(concat!("ld.volatile.", $bits, " {r}, [{p}];"),
                            r = out($reg) r, p = in(reg64) self.0.as_ptr(), options(nostack))
                    };
                    if acquires(o) {
                        membar_sys();
                    }
                    r
                }
            }

            /// `st.{relaxed,release}.sys` (sm_70+, lowered correctly by LLVM);
            /// `membar.sys` if it releases, then `st.volatile` (before sm_70).
            #[inline(always)]
            pub fn store(&self, v: $t, o: Ordering) {
                #[cfg(target_feature = "sm_70")]
                self.0.store(v, o);
                #[cfg(not(target_feature = "sm_70"))]
                {
                    if releases(o) {
                        membar_sys();
                    }
                    // SAFETY: a store to a live, aligned atomic of this width.
                    unsafe {
                        asm!(concat!("st.volatile.", $bits, " [{p}], {v};"),
                            p = in(reg64) self.0.as_ptr(), v = in($reg) v, options(nostack))
                    };
                    if o == Ordering::SeqCst {
                        membar_sys();
                    }
                }
            }

            /// `atom.{sem}.sys.cas` (sm_70+, lowered correctly by LLVM); `atom.sys.cas`
            /// between the barriers the stronger of the two orderings needs (before
            /// sm_70).
            #[inline(always)]
            pub fn compare_exchange(&self, c: $t, n: $t, s: Ordering, f: Ordering) -> Result<$t, $t> {
                #[cfg(target_feature = "sm_70")]
                return self.0.compare_exchange(c, n, s, f);
                #[cfg(not(target_feature = "sm_70"))]
                {
                    if releases(s) {
                        membar_sys();
                    }
                    let r: $t;
                    // SAFETY: one atomic compare-and-swap of a live, aligned atomic.
                    unsafe {
                        asm!(concat!("atom.sys.cas.", $bits, " {r}, [{p}], {c}, {n};"),
                            r = out($reg) r, p = in(reg64) self.0.as_ptr(), c = in($reg) c,
                            n = in($reg) n, options(nostack))
                    };
                    if acquires(s) || acquires(f) {
                        membar_sys();
                    }
                    if r == c {
                        Ok(r)
                    } else {
                        Err(r)
                    }
                }
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

/// A fence at GPU scope ([`DeviceAtomicU64`]): `fence.{acq_rel,sc}.gpu`. `Relaxed`
/// panics, as core's `fence` does.
#[cfg(target_feature = "sm_70")]
#[inline(always)]
pub fn device_fence(o: Ordering) {
    assert!(o != Ordering::Relaxed, "there is no relaxed fence");
    // SAFETY: barrier instructions; they touch no memory (not `nomem`: the compiler must
    // not move memory accesses across them).
    unsafe {
        if o == Ordering::SeqCst {
            asm!("fence.sc.gpu;", options(nostack))
        } else {
            asm!("fence.acq_rel.gpu;", options(nostack))
        }
    };
}

/// A 64-bit atomic that only the threads of one GPU use while a kernel runs: GPU scope
/// (`ld`/`st`/`atom.<sem>.gpu`). A GPU-scope fence need not wait for PCIe, and costs
/// about half a system-scope one (BENCHMARKS.md). The host may look at it (a relaxed
/// read of device memory, for reports) but never synchronizes through it. (Before
/// sm_70, in the lockstep build, it is [`AtomicU64`]: `membar.gl` is not documented as
/// cumulative, and that build's speed does not matter.)
#[cfg(target_feature = "sm_70")]
#[repr(transparent)]
pub struct DeviceAtomicU64(core::sync::atomic::AtomicU64);

#[cfg(target_feature = "sm_70")]
impl DeviceAtomicU64 {
    /// A new atomic holding `v`.
    pub const fn new(v: u64) -> Self {
        Self(core::sync::atomic::AtomicU64::new(v))
    }

    /// `ld.{relaxed,acquire}.gpu`.
    #[inline(always)]
    pub fn load(&self, o: Ordering) -> u64 {
        if o == Ordering::SeqCst {
            device_fence(o);
        }
        let p = self.0.as_ptr();
        let r: u64;
        // SAFETY: a load of a live, aligned 64-bit atomic.
        unsafe {
            if acquires(o) {
                asm!("ld.acquire.gpu.b64 {r}, [{p}];", r = out(reg64) r, p = in(reg64) p, options(nostack))
            } else {
                asm!("ld.relaxed.gpu.b64 {r}, [{p}];", r = out(reg64) r, p = in(reg64) p, options(nostack))
            }
        };
        r
    }

    /// `st.{relaxed,release}.gpu`.
    #[inline(always)]
    pub fn store(&self, v: u64, o: Ordering) {
        let p = self.0.as_ptr();
        // SAFETY: a store to a live, aligned 64-bit atomic.
        unsafe {
            if releases(o) {
                asm!("st.release.gpu.b64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack))
            } else {
                asm!("st.relaxed.gpu.b64 [{p}], {v};", p = in(reg64) p, v = in(reg64) v, options(nostack))
            }
        };
        if o == Ordering::SeqCst {
            device_fence(o);
        }
    }

    /// `atom.{sem}.gpu.add.u64` (`SeqCst`: `fence.sc.gpu` first, as PTX maps C++'s).
    #[inline(always)]
    pub fn fetch_add(&self, v: u64, o: Ordering) -> u64 {
        let p = self.0.as_ptr();
        let r: u64;
        // SAFETY: one atomic add to a live, aligned 64-bit atomic.
        unsafe {
            match o {
                Ordering::Relaxed => asm!("atom.relaxed.gpu.add.u64 {r}, [{p}], {v};", r = out(reg64) r,
                    p = in(reg64) p, v = in(reg64) v, options(nostack)),
                Ordering::Acquire => asm!("atom.acquire.gpu.add.u64 {r}, [{p}], {v};", r = out(reg64) r,
                    p = in(reg64) p, v = in(reg64) v, options(nostack)),
                Ordering::Release => asm!("atom.release.gpu.add.u64 {r}, [{p}], {v};", r = out(reg64) r,
                    p = in(reg64) p, v = in(reg64) v, options(nostack)),
                Ordering::AcqRel => asm!("atom.acq_rel.gpu.add.u64 {r}, [{p}], {v};", r = out(reg64) r,
                    p = in(reg64) p, v = in(reg64) v, options(nostack)),
                _ => asm!("fence.sc.gpu;\n\tatom.acq_rel.gpu.add.u64 {r}, [{p}], {v};", r = out(reg64) r,
                    p = in(reg64) p, v = in(reg64) v, options(nostack)),
            }
        };
        r
    }

    /// `atom.{sem}.gpu.cas.b64`, the semantics the stronger of the two orderings needs.
    #[inline(always)]
    pub fn compare_exchange(&self, c: u64, n: u64, s: Ordering, f: Ordering) -> Result<u64, u64> {
        let (p, acq, rel) = (self.0.as_ptr(), acquires(s) || acquires(f), releases(s));
        if s == Ordering::SeqCst {
            device_fence(s);
        }
        let r: u64;
        // SAFETY: one atomic compare-and-swap of a live, aligned 64-bit atomic.
        unsafe {
            match (acq, rel) {
                (false, false) => asm!("atom.relaxed.gpu.cas.b64 {r}, [{p}], {c}, {n};", r = out(reg64) r,
                    p = in(reg64) p, c = in(reg64) c, n = in(reg64) n, options(nostack)),
                (true, false) => asm!("atom.acquire.gpu.cas.b64 {r}, [{p}], {c}, {n};", r = out(reg64) r,
                    p = in(reg64) p, c = in(reg64) c, n = in(reg64) n, options(nostack)),
                (false, true) => asm!("atom.release.gpu.cas.b64 {r}, [{p}], {c}, {n};", r = out(reg64) r,
                    p = in(reg64) p, c = in(reg64) c, n = in(reg64) n, options(nostack)),
                (true, true) => asm!("atom.acq_rel.gpu.cas.b64 {r}, [{p}], {c}, {n};", r = out(reg64) r,
                    p = in(reg64) p, c = in(reg64) c, n = in(reg64) n, options(nostack)),
            }
        };
        if r == c {
            Ok(r)
        } else {
            Err(r)
        }
    }
}

/// Before sm_70 (the lockstep build): system scope, as every other atomic.
#[cfg(not(target_feature = "sm_70"))]
pub use fence as device_fence;
/// Before sm_70 (the lockstep build): system scope, as every other atomic.
#[cfg(not(target_feature = "sm_70"))]
pub use AtomicU64 as DeviceAtomicU64;
