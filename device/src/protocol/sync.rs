//! The atomics and shared cells the protocol is written with.
//!
//! Protocol code names `crate::protocol::sync::{AtomicU32, AtomicU64, fence, Ordering}` and never
//! `core::sync::atomic` directly, so that:
//! - on every target the atomics are **system scope** (visible to the host CPU, the GPU and
//!   the kernel's SQPOLL thread): see `arch::atomic` for how each target guarantees that;
//!   except [`DeviceAtomicU64`] and [`device_fence`], for words that only the device's own
//!   threads synchronize through (GPU scope on NVIDIA sm_70+, where that is cheaper);
//! - under `--cfg loom` the same code runs on loom's model-checked atomics and cells.
//!
//! [`SharedCell`] marks memory that is written without atomics but handed between agents by
//! the atomics' release/acquire pairs (SQE slots, payload bytes). Under loom it is loom's
//! `UnsafeCell`, which reports any access not ordered by a happens-before edge.

#[cfg(not(loom))]
pub use crate::protocol::arch::atomic::{device_fence, fence, AtomicI32, AtomicU32, AtomicU64, DeviceAtomicU64};
pub use core::sync::atomic::Ordering;
#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64};
#[cfg(loom)]
pub use loom::sync::atomic::{fence as device_fence, AtomicU64 as DeviceAtomicU64};

/// Memory written with plain stores and published through an atomic release/acquire pair.
#[cfg(not(loom))]
#[repr(transparent)]
pub struct SharedCell<T>(core::cell::UnsafeCell<T>);

/// Memory written with plain stores and published through an atomic release/acquire pair
/// (loom's `UnsafeCell`, which checks that every access is ordered).
#[cfg(loom)]
pub struct SharedCell<T>(loom::cell::UnsafeCell<T>);

// SAFETY: every access goes through the unsafe `read`/`write`/`copy_*` functions, whose
// callers guarantee (by the protocol's release/acquire edges) that no two agents access a
// cell concurrently with at least one writing.
unsafe impl<T: Send> Sync for SharedCell<T> {}

impl<T: Copy> SharedCell<T> {
    /// A cell holding `v`.
    pub fn new(v: T) -> Self {
        #[cfg(not(loom))]
        return Self(core::cell::UnsafeCell::new(v));
        #[cfg(loom)]
        return Self(loom::cell::UnsafeCell::new(v));
    }

    /// Reads the value.
    ///
    /// # Safety
    /// No other agent may be writing this cell; the last write must happen-before this read.
    #[inline(always)]
    pub unsafe fn read(&self) -> T {
        #[cfg(not(loom))]
        // SAFETY: exclusive-or-shared access guaranteed by the caller.
        return unsafe { core::ptr::read_volatile(self.0.get()) };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        return self.0.with(|p| unsafe { *p });
    }

    /// Writes the value.
    ///
    /// # Safety
    /// No other agent may be accessing this cell; earlier accesses must happen-before.
    #[inline(always)]
    pub unsafe fn write(&self, v: T) {
        #[cfg(not(loom))]
        // SAFETY: exclusive access guaranteed by the caller.
        unsafe {
            core::ptr::write(self.0.get(), v)
        };
        #[cfg(loom)]
        // SAFETY: as above; loom checks it.
        self.0.with_mut(|p| unsafe { *p = v });
    }
}

/// Copies `src` into the cells starting at `dst`.
///
/// # Safety
/// `dst .. dst + src.len()` are valid cells that no other agent accesses concurrently.
#[inline(always)]
pub unsafe fn copy_to_cells(dst: *const SharedCell<u8>, src: &[u8]) {
    #[cfg(not(loom))]
    // SAFETY: SharedCell<u8> is a transparent UnsafeCell<u8>, so the cells are plain,
    // writable bytes; the caller guarantees exclusivity. The word stores below stay inside
    // `dst .. dst + len` and are 8-byte aligned; the word loads stay inside `src`, and are
    // aligned loads only where `src + i` was found 8-byte aligned.
    unsafe {
        // Bytes until the destination is 8-byte aligned, then whole words, then the rest:
        // on a GPU each store to host memory is a PCIe transaction, and an unaligned
        // memcpy would be lowered to one per byte.
        let d = dst as *mut u8;
        let n = src.len();
        let head = (d.align_offset(8)).min(n);
        let mut i = 0;
        while i < head {
            *d.add(i) = src[i];
            i += 1;
        }
        // Whole words: with the source aligned too (a line buffer on the stack usually is,
        // and log positions of lines of equal length stay aligned) one load per word;
        // otherwise an unaligned read, which the GPU does as 8 byte loads.
        if (src.as_ptr() as usize + i).is_multiple_of(8) {
            while i + 8 <= n {
                let w = core::ptr::read(src.as_ptr().add(i) as *const u64);
                core::ptr::write(d.add(i) as *mut u64, w);
                i += 8;
            }
        } else {
            while i + 8 <= n {
                let w = core::ptr::read_unaligned(src.as_ptr().add(i) as *const u64);
                core::ptr::write(d.add(i) as *mut u64, w);
                i += 8;
            }
        }
        while i < n {
            *d.add(i) = src[i];
            i += 1;
        }
    };
    #[cfg(loom)]
    for (i, b) in src.iter().enumerate() {
        // SAFETY: as above, cell by cell.
        unsafe { (*dst.add(i)).write(*b) };
    }
}

/// One lane's share of a group's copy of `len` bytes from the cells at `src` to the cells at
/// `dst`: the group's `n` lanes call it together, lane `rank` (`0..n`) copying every `n`-th
/// 16-byte unit of the aligned middle, lane 0 the unaligned bytes at either end. So each
/// store instruction of the group writes `16 * n` contiguous bytes, which a GPU sends as a
/// few large writes where one lane's line would go out as many small ones (the reason for
/// copying at all: `print::emit` on GPUs).
///
/// `dst` and `src` must have the same offset modulo 16 for the wide copy; otherwise lane 0
/// copies everything bytewise.
///
/// # Safety
/// Both ranges are valid cells, no other agent accesses them concurrently (other than the
/// group's lanes, each on its own units), and they do not overlap.
#[inline(always)]
pub unsafe fn copy_cells_together(
    dst: *const SharedCell<u8>,
    src: *const SharedCell<u8>,
    len: usize,
    rank: usize,
    n: usize,
) {
    #[cfg(not(loom))]
    // SAFETY: transparent UnsafeCell<u8> cells, valid for `len` bytes each (the caller's
    // contract). The 16-byte accesses start at `head`, where `d` is 16-aligned and so is `s`
    // (same phase, checked), and end at or before `len`; the byte copies stay in
    // `0..head` and in `body_end..len`. Each byte is copied by exactly one lane.
    unsafe {
        let (d, s) = (dst as *mut u8, src as *const u8);
        let same_phase = (d as usize ^ s as usize) & 15 == 0;
        let head = if same_phase { d.align_offset(16).min(len) } else { len };
        let units = (len - head) / 16;
        let body_end = head + units * 16;
        if rank == 0 {
            for i in (0..head).chain(body_end..len) {
                *d.add(i) = *s.add(i);
            }
        }
        let mut u = rank;
        while u < units {
            let at = head + u * 16;
            let w = core::ptr::read(s.add(at) as *const u128);
            core::ptr::write(d.add(at) as *mut u128, w);
            u += n;
        }
    }
    #[cfg(loom)]
    let _ = n;
    #[cfg(loom)]
    if rank == 0 {
        for i in 0..len {
            // SAFETY: as above, cell by cell.
            unsafe { (*dst.add(i)).write((*src.add(i)).read()) };
        }
    }
}

/// Copies `len` bytes from the cells at `src` to `dst` (plain memory, such as a GPU
/// thread's buffer in device memory).
///
/// # Safety
/// The cells are valid and no agent writes them concurrently; `dst .. dst + len` is valid
/// for writes and does not overlap them.
#[inline(always)]
pub unsafe fn copy_from_cells(src: *const SharedCell<u8>, dst: *mut u8, len: usize) {
    #[cfg(not(loom))]
    // SAFETY: transparent UnsafeCell<u8> cells, not written concurrently, and not
    // overlapping `dst` (the caller's contract). (Staged reads on GPUs copy with
    // `copy::group_copy` instead; this is the per-thread form.)
    unsafe {
        core::ptr::copy_nonoverlapping(src as *const u8, dst, len)
    };
    #[cfg(loom)]
    for i in 0..len {
        // SAFETY: as above, cell by cell.
        unsafe { *dst.add(i) = (*src.add(i)).read() };
    }
}

/// Reads `len` bytes starting at `src` through `f`, one contiguous slice at a time.
///
/// # Safety
/// The cells are valid, and no agent writes them concurrently.
pub unsafe fn read_cells(src: *const SharedCell<u8>, len: usize, mut f: impl FnMut(&[u8])) {
    #[cfg(not(loom))]
    // SAFETY: transparent UnsafeCell<u8> cells, not written concurrently (caller).
    f(unsafe { core::slice::from_raw_parts(src as *const u8, len) });
    #[cfg(loom)]
    for i in 0..len {
        // SAFETY: as above, cell by cell.
        f(&[unsafe { (*src.add(i)).read() }]);
    }
}

/// Hints that the caller is spinning; lets a model checker or the OS run someone else.
#[inline(always)]
pub fn relax() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    crate::protocol::arch::relax();
}

/// A value alone on its cache line(s), so that hot counters do not share lines.
#[repr(C, align(128))]
pub struct Padded<T>(pub T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Escalating wait for spin loops: a few pauses, then [`relax`], then long dozes (a waiter
/// behind a slow pipe reader should not burn a core).
pub struct Backoff(u32);

impl Backoff {
    /// A fresh backoff.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Backoff(0)
    }

    /// Waits a little, longer on each call.
    #[inline]
    pub fn snooze(&mut self) {
        self.0 = self.0.saturating_add(1);
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        if self.0 < 8 {
            core::hint::spin_loop();
        } else if self.0 < 4096 {
            crate::protocol::arch::relax();
        } else {
            crate::protocol::arch::doze();
        }
    }
}
