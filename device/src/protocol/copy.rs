//! Copies between the arena (host memory) and a thread's buffer, shared by the lanes that
//! make them together.
//!
//! On a GPU, host memory is reached over PCIe, one transaction per load or store
//! instruction of each lane. A thread copying its own buffer alone issues one small,
//! scattered transaction per 16 bytes (the lanes of its warp copy other buffers, far
//! apart); throughput then is bounded by the transaction rate, not the bandwidth. So the
//! lanes executing a copy together (a [`Group`]: on NVIDIA GPUs the lanes of a warp that
//! reach the call together) copy each member's range in turn, all of them at once: lane `r`
//! of `n` moves 16-byte units `r, r + n, ...`, so a warp's stores to one range are
//! contiguous and PCIe carries full-size transactions.
//!
//! The lanes only move bytes here: no lane waits for anything but the group's own
//! collectives, and which collectives run depends only on the group (see `arch::Warp`).

use crate::protocol::group::Group;

/// Copies `len` bytes from `src` to `dst` for each lane of `g` (each its own ranges),
/// the lanes sharing the work. Returns when this lane's `dst` holds its bytes, and every
/// other member's writes are visible to this lane.
///
/// A lane whose `src` or `dst` is in its own private memory (a buffer on its stack: local
/// memory on NVIDIA GPUs, scratch on AMD GPUs) copies alone: the same generic address
/// means *its own* stack to whichever lane uses it, so no other lane can copy it.
///
/// # Safety
/// On every lane: `src .. src + len` is valid for reads and `dst .. dst + len` for writes,
/// not overlapping, and no other agent writes them during the call. Every lane of the
/// group makes this call (the `Group` contract).
///
/// The caller forms the group (`arch::Warp::default()`) right before the call: at a call
/// site, not inside this shared function, where lanes from different call sites can meet.
#[inline(never)] // one copy loop in the code object; tests/ptx_atomics/ finds it by name
pub unsafe fn group_copy(g: &impl Group, dst: *mut u8, src: *const u8, len: usize) {
    let private = crate::protocol::arch::is_thread_private(dst) || crate::protocol::arch::is_thread_private(src);
    let g = g.split(private);
    let (rank, count) = if private { (0, 1) } else { g.exclusive_sum(1) };
    if count == 1 {
        // SAFETY: the caller's contract; this lane copies its own ranges alone.
        unsafe { strided(dst, src, len, 0, 1) };
        return;
    }
    for k in 0..count {
        // Member k's value, on every lane: the sum over the group of `v` on member k, 0
        // elsewhere. The same collectives run on every lane (they depend on `count` only).
        let pick = |v: u64| g.exclusive_sum(if rank == k { v } else { 0 }).1;
        let (d, s, n) = (pick(dst as u64), pick(src as u64), pick(len as u64));
        // SAFETY: member k's ranges, valid by the caller's contract on member k and in
        // global memory (not private to member k: see above); the lanes write disjoint
        // units of them.
        unsafe { strided(d as *mut u8, s as *const u8, n as usize, rank, count) };
    }
    // Every member's writes to every range happen-before what each lane does next (its
    // own reads of `dst`, or its submission, whose release then covers them).
    g.sync();
}

/// Copies `len` bytes from `src` to `dst` on the calling lane alone, as a lane of a group of
/// one does in [`group_copy`]: for a thread that copies while no sibling is with it (the
/// holder of the solo ring, `crate::protocol::solo`, whose siblings went through the shared rings).
///
/// # Safety
/// `src .. src + len` is valid for reads and `dst .. dst + len` for writes, not overlapping,
/// and no other agent writes them during the call.
pub unsafe fn copy_alone(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { strided(dst, src, len, 0, 1) }
}

/// Units a lane loads before it stores them: loads from host memory take a PCIe round
/// trip each, so a lane keeps several in flight instead of one.
const BATCH: usize = 32;

/// This lane's share of a copy: 16-byte units `rank, rank + count, ...` (loaded
/// [`BATCH`] at a time), then the bytes after the last whole unit likewise.
///
/// # Safety
/// As for [`group_copy`], for this one range.
#[inline(never)] // one copy of the unrolled loops in a code object
unsafe fn strided(dst: *mut u8, src: *const u8, len: usize, rank: u64, count: u64) {
    let (rank, count) = (rank as usize, count as usize);
    let units = len / 16;
    // SAFETY: every access stays inside `[0, len)` of the ranges.
    unsafe {
        let (d, s) = (dst as *mut u128, src as *const u128);
        if (dst as usize | src as usize).is_multiple_of(16) {
            units16::<true>(d, s, units, rank, count);
        } else {
            units16::<false>(d, s, units, rank, count);
        }
        let mut b = units * 16 + rank;
        while b < len {
            *dst.add(b) = *src.add(b);
            b += count;
        }
    }
}

/// Copies units `rank, rank + count, ...` below `units`: with `ALIGNED`, with plain 16-byte
/// loads and stores, else with unaligned ones.
///
/// # Safety
/// `dst` and `src` are valid for every unit below `units`, and 16-byte aligned if
/// `ALIGNED`.
#[inline(always)]
unsafe fn units16<const ALIGNED: bool>(dst: *mut u128, src: *const u128, units: usize, rank: usize, count: usize) {
    let mut i = rank;
    // SAFETY: indices stay below `units` (the caller's contract covers them), and the loads
    // and stores are aligned ones only where the caller vouches for the alignment.
    unsafe {
        let load = |p| {
            if ALIGNED {
                core::ptr::read(p)
            } else {
                core::ptr::read_unaligned(p)
            }
        };
        let store = |p, v| {
            if ALIGNED {
                core::ptr::write(p, v)
            } else {
                core::ptr::write_unaligned(p, v)
            }
        };
        while i + (BATCH - 1) * count < units {
            batch::<false>(dst, src, i, count, units, &load, &store);
            i += BATCH * count;
        }
        // Fewer than BATCH units left for this lane: one more batch, each slot's load and
        // store guarded by its own bound. A plain loop (`store(load)`, a unit at a time)
        // cannot issue a load before the store above it (they may alias), so each unit
        // would take its own PCIe round trip: up to BATCH - 1 where this takes one. For
        // ranges of a few KiB shared by a warp (a 32-lane warp has 8 units per lane of a
        // 4 KiB range) those round trips are most of the copy.
        if i < units {
            batch::<true>(dst, src, i, count, units, &load, &store);
        }
    }
}

/// Units `i, i + count, ...`, [`BATCH`] of them, all loaded before any is stored (so that
/// the loads are in flight together); with `GUARDED`, only those below `units` (without,
/// the caller has checked that the last one is).
///
/// # Safety
/// `load` and `store` are valid for every unit the batch moves.
#[inline(always)]
unsafe fn batch<const GUARDED: bool>(
    dst: *mut u128,
    src: *const u128,
    i: usize,
    count: usize,
    units: usize,
    load: &impl Fn(*const u128) -> u128,
    store: &impl Fn(*mut u128, u128),
) {
    let mut v = [0u128; BATCH];
    // SAFETY: only the units the caller vouches for.
    unsafe {
        for (j, x) in v.iter_mut().enumerate() {
            if !GUARDED || i + j * count < units {
                *x = load(src.add(i + j * count));
            }
        }
        for (j, x) in v.iter().enumerate() {
            if !GUARDED || i + j * count < units {
                store(dst.add(i + j * count), *x);
            }
        }
    }
}
