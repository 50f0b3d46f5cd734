//! Which blocks still run. The threads of a kernel declared with
//! [`kernel!`](crate::kernel) count themselves in, by block, when they start and out when
//! they return, so that a hang report can name the blocks whose threads have not returned:
//! a GPU driver says only that a kernel still runs. (The CPU backend knows its threads and
//! names them itself; kernels not declared with `kernel!` are not counted.)
//!
//! The cost is one atomic add per warp as it starts and one as it returns, by its lowest
//! lane, on a word of the context in device memory; no collective (the lanes' count is the
//! warp's active mask's).

use crate::protocol::group::Group;
use crate::protocol::sync::{AtomicU32, Ordering};

/// How many block counters a context holds: block `b` counts in counter `b % BLOCK_SLOTS`,
/// so that a report names blocks modulo this where a grid has more blocks (the context
/// says so, [`Running::wrapped`]). 2 KiB of the context.
pub const BLOCK_SLOTS: usize = if cfg!(loom) { 2 } else { 512 };

/// Threads started and not yet returned, by block (see the module docs).
///
/// Every access is `Relaxed`: the counts order nothing. The host reads them from a copy of
/// the context taken while kernels run, each word at some moment of the run, so a report
/// shows each block as it was at one moment, not all blocks at one moment.
#[repr(C)]
pub struct Running {
    /// Counter `i`: the threads started and not returned of the blocks of rank `i` modulo
    /// [`BLOCK_SLOTS`] (wrapping: a count only ever goes back to where it started).
    threads: [AtomicU32; BLOCK_SLOTS],
    /// Non-zero once a block of rank [`BLOCK_SLOTS`] or more started.
    wrapped: AtomicU32,
}

impl Running {
    /// No thread counted.
    pub fn new() -> Running {
        Running {
            threads: core::array::from_fn(|_| AtomicU32::new(0)),
            wrapped: AtomicU32::new(0),
        }
    }

    /// Counts the calling thread in, until the guard drops (which counts it out): a
    /// kernel declared with `kernel!` does so as it starts, through
    /// `context::count_running`, and keeps the guard until it returns.
    #[inline(always)]
    pub fn enter(&self) -> Entered<'_> {
        let rank = crate::protocol::arch::block_idx_3d().rank_in(crate::protocol::arch::grid_dim_3d());
        if rank >= BLOCK_SLOTS as u64 {
            self.wrapped.store(1, Ordering::Relaxed);
        }
        let slot = (rank % BLOCK_SLOTS as u64) as usize;
        self.add(slot, 1);
        Entered { running: self, slot }
    }

    /// Adds `n` per lane to counter `slot`, one atomic for the lanes executing this
    /// together (every lane of a warp calls it with the same `slot`: one block's).
    #[inline(always)]
    fn add(&self, slot: usize, n: u32) {
        let group = crate::protocol::arch::Warp::default();
        if group.is_leader() {
            // Relaxed: a count that orders nothing (see the type's docs).
            self.threads[slot].fetch_add(group.lanes().wrapping_mul(n), Ordering::Relaxed);
        }
    }

    /// Each counter that is not zero, `(slot, threads)`, in slot order.
    pub fn busy(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.threads
            .iter()
            .enumerate()
            .map(|(i, t)| (i, t.load(Ordering::Relaxed)))
            .filter(|&(_, t)| t != 0)
    }

    /// Whether a block of rank [`BLOCK_SLOTS`] or more has started: block numbers in a
    /// report are then modulo [`BLOCK_SLOTS`].
    pub fn wrapped(&self) -> bool {
        self.wrapped.load(Ordering::Relaxed) != 0
    }
}

impl Default for Running {
    fn default() -> Running {
        Running::new()
    }
}

/// A thread counted in [`Running`]; dropping it counts the thread out.
#[must_use = "the thread counts as running only while this lives"]
pub struct Entered<'a> {
    running: &'a Running,
    /// Its counter.
    slot: usize,
}

impl Drop for Entered<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.running.add(self.slot, u32::MAX); // minus one per lane, wrapping
    }
}
