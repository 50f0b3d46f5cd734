//! Everything target-specific, and the linear ids made from the per-target ones (here, so
//! that the crate root and the protocol both take them from below).
//!
//! Each target module provides the same small surface (what the two GPU targets do alike is
//! written once: `gpu.rs` for the doorbells, the flusher's rule, the context global and a
//! failed thread's end, `gpu_warp.rs` for the `Warp` over each target's lane primitives):
//! - `atomic`: `AtomicU32`, `AtomicU64`, `AtomicI32`, `fence` with **system scope** for
//!   every ordering other than `Relaxed` (and system-scope coherence for `Relaxed`); and
//!   `DeviceAtomicU64`, `device_fence` for words that only the device's own threads
//!   synchronize through (GPU scope where the target can say so, else system scope);
//! - `relax()`, `doze()`: what a spinning thread does; `yield_to_siblings()`: what a waiter
//!   does while another lane reaps for it; `by_one_lane(round)`: a waiter's round, run by
//!   one of the lanes waiting together while the others wait for it (NVIDIA sm_70+), or by
//!   every lane (lockstep targets, the CPU);
//! - `ring_doorbell()`: what a thread does after it published SQEs, and while it waits for
//!   an SQ slot: nothing on GPUs (SQPOLL consumes their rings); on the CPU backend, whose
//!   rings may have no SQPOLL thread, it calls the doorbell the host installed on the
//!   thread, if any (it tells the host's waker to submit), or performs the requests itself
//!   where the host made the thread a performer of its ring (`arch::host::install_performer`);
//!   `ring_doorbell_for_lines()`: the same after a flush published a print stream's write,
//!   except on a performer, which leaves those writes for its next wait (or the host's
//!   waker's next look) so that lines printed meanwhile go out in the same write;
//! - `clock_ns()`: a nanosecond clock for measurements (GPU-wide on GPUs);
//! - `flusher_sees_flights_through()`: whether a flush with every flight out and no print
//!   in progress waits for a flight itself (GPUs), or leaves that to the host (the CPU);
//! - `installed_context()`: the runtime context the host installed (a device global on GPUs,
//!   a thread-local on the CPU backend), untyped: [`crate::protocol::context::current`] types it, so
//!   that this module depends on nothing above it;
//! - ids: `thread_idx`, `block_idx`, `block_dim`, `grid_dim` (x dimension) and their
//!   `_3d` forms (from which this module makes [`global_thread_idx`] and [`block_rank`]
//!   for every target);
//! - `is_thread_private(p)`: whether `p` is in the calling thread's own private memory;
//! - `thread_key()`: two words that name the calling thread among every thread running
//!   now, in any launch (GPUs have no thread-locals; `print` finds its own state by it);
//! - `Warp`: the lanes executing a call together, as a [`crate::protocol::group::Group`]. Form it
//!   right before the collectives that use it: a group formed before a wait in which its
//!   lanes part (for an arena block, a completion slot) and used after it makes the lanes
//!   that leave the wait first wait in the collective for the others (on sm_70+ a `.sync`
//!   collective waits for every lane of its mask), a deadlock if those wait for something
//!   the first ones hold. `by_one_lane` forms one inside a wait on purpose: its lanes are
//!   all in the same round of the same wait, and the round it runs waits for nothing they
//!   hold (see there);
//! - `WaitGroup`: the lanes whose waits must end together (see below).
//! - `turns::PrintTurn`: a group's turn to write a print record; NVIDIA sm_70+ lets a few
//!   warps of an SM in at a time (`nvptx/turns.rs` says why), every other target all.
//!
//! # The lockstep rule
//! On AMD GPUs the lanes of a wavefront run in lockstep, and so do the lanes of an NVIDIA
//! warp running PTX built for a target before sm_70 (`sm_60`: the driver then runs it
//! without independent thread scheduling, also on Hopper, which is why the `lockstep`
//! configuration of `tests/gpu/` runs the sm_60 build on NVIDIA GPUs).
//! A lane that leaves a loop its siblings are still in stays masked off, doing nothing,
//! until every lane of the wavefront has left it. So in a wait loop a lane that got what
//! it waited for (a ring slot, log room, an arena block, a completion slot) must not leave
//! the loop holding it while a sibling spins for more of it, or for something only its
//! next step would free: the sibling would spin forever.
//!
//! Every device wait is therefore written one way, [`crate::protocol::wait::until`] (the drain, run by
//! one thread, has its own loop): each round, every
//! lane still waiting *attempts* its step without blocking, and a lane whose attempt
//! succeeds does all of the dependent work (writes and publishes its SQE, writes and
//! commits its line, uses and gives back its block) inside that attempt, before the
//! wavefront checks again. The loop ends when it ended for every lane of its `WaitGroup`
//! (a vote), so the exit is uniform and no compiler can move the attempt's work out of the
//! loop into a divergent exit. Waits nested inside an attempt obey the same rule, and a
//! lane waits only for the kernel, for reaping (anyone's), and for lanes that are
//! themselves inside a wait loop.
//!
//! With independent thread scheduling (sm_70+, and the CPU backend) `WaitGroup` is a
//! single lane: each lane leaves as soon as it is done. (On sm_70+ a lane whose request
//! completed may still wait out the round its sibling goes for it, `by_one_lane`, before it
//! looks again.)
//!
//! The lockstep rule is invariant 10 of the protocol (`docs/PROTOCOL.md` lists them all).

#[cfg(target_arch = "amdgpu")]
mod amdgcn;
#[cfg(target_arch = "amdgpu")]
pub use amdgcn::*;

#[cfg(target_arch = "nvptx64")]
mod nvptx;
#[cfg(target_arch = "nvptx64")]
pub use nvptx::*;

// What the two GPU targets share: the warp as a `Group` over each target's lane
// primitives (`gpu_warp.rs`), and what a device with no host thread on its data path does
// (`gpu.rs`).
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
mod gpu;
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
pub use gpu::*;
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
mod gpu_warp;
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
pub use gpu_warp::Warp;

#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub mod host;
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub use host::*;

/// The global index of the calling thread, one linear index over all three dimensions:
/// `block_rank * threads_per_block + thread_rank`, where x varies fastest (for a 1-D
/// launch, `block_idx * block_dim + thread_idx`).
#[inline]
pub fn global_thread_idx() -> u64 {
    let block = block_dim_3d();
    block_rank() * block.count() + thread_idx_3d().rank_in(block)
}

/// The linear index of the calling thread's block in the grid (x varies fastest; for a
/// 1-D launch, `block_idx`).
#[inline]
pub fn block_rank() -> u64 {
    block_idx_3d().rank_in(grid_dim_3d())
}

/// Print turns where none are taken: every group goes in at once (the CPU, AMD GPUs, and
/// NVIDIA's lockstep build; `nvptx/turns.rs` says why NVIDIA sm_70+ takes them).
#[cfg(not(all(target_arch = "nvptx64", target_feature = "sm_70")))]
pub mod turns {
    use crate::protocol::group::Group;

    /// No turn: nothing to give back.
    pub struct PrintTurn;

    impl PrintTurn {
        /// Goes in at once.
        #[inline(always)]
        pub fn take<G: Group>(_g: &G) -> Self {
            PrintTurn
        }

        /// Nothing to give back.
        #[inline(always)]
        pub fn give_back(self) {}
    }
}
