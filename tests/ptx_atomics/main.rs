//! The PTX that build.rs produced from `kernels/` carries the memory scope and the ordering
//! that the ring protocol needs, and the warp-aggregated print path: the `sm_90` build (the
//! PTX memory model, sm_70+) and the `sm_60` lockstep build (before sm_70: volatile
//! accesses, `atom.sys` and `membar.sys`; see `lockstep.rs`). No GPU needed.
//!
//! Why read the PTX: Rust 1.95's LLVM lowers `fetch_add`/`swap`/`fetch_or` with *any*
//! ordering to a plain `atom.*`, which PTX defines as relaxed at GPU scope: the ordering and
//! the system scope (the host and the kernel's SQPOLL thread read these words) are silently
//! dropped. `device/src/protocol/arch/nvptx/atomic.rs` writes those read-modify-writes in `asm!`; these tests
//! fail if any atomic in the module escapes that path (a new `core::sync::atomic` use, a
//! compiler change), or if an ordering the protocol relies on is missing.
//!
//! What the PTX holds today (sm_90, Rust 1.95), by protocol step:
//!
//! | instruction | protocol step |
//! |---|---|
//! | `atom.relaxed.sys.add.u64` / `.u32` | stream reservation (`Stream::reserve`), SQ tickets |
//! | `fence.acq_rel.sys` then `atom.relaxed.sys.add` | stream commit counters (`Stream::commit`) |
//! | `ld.relaxed.sys` then `fence.acq_rel.sys` | the flusher's look at them (`Stream::complete_prefix`) |
//! | `atom.acq_rel.sys.exch.b32` | combiner requests and the holder's take of them |
//! | `atom.acquire.sys.cas.b32` | combiner lock (`compare_exchange(0, 1, Acquire, Relaxed)`) |
//! | `fence.sc.sys` | the combiner's two store-buffering fences |
//! | `st.release.sys.b32` | SQ tail, ready flags, CQ head, `reaped`, combiner unlocks (not the reaper's after a reap that took CQEs) |
//! | `fence.acq_rel.sys` then `st.relaxed.sys.b32` | the CQ head after the dispatch's fence; the reaper's unlock after a reap that took CQEs, and a waiter's own slot given back after that reap |
//! | `atom.relaxed.sys.and.b32` | the reaper's unlock after a reap that took nothing (`Combiner::try_run`) |
//! | `ld.acquire.sys.b32` / `.b64` | kernel's SQ head / CQ tail, ready flags, `released` |
//! | `ld.relaxed.sys.b64` then `ld.acquire.sys.b64` | a producer's look at `released` while it waits for room (`Stream::room`: the acquire only once there is) |
//! | `activemask.b32`, `shfl.sync.*`, `bar.warp.sync` | one record per warp (`arch::Warp`) |
//!
//! Two exceptions, in the sm_90 build, words only the GPU's own threads touch: the solo
//! ring's lock (taken in `Solo::lock`, given back in `Solo::let_go`), which they hand to one another, is GPU scope
//! (`ld.relaxed.gpu.b64`, `atom.acquire.gpu.cas.b64`, `fence.acq_rel.gpu`,
//! `st.relaxed.gpu.b64`), checked by (f); and the print turns' per-SM counts
//! (`PrintTurn::take` and its `drop`: `ld.relaxed.gpu.b64`, `atom.relaxed.gpu.add.u64`), which order
//! nothing, checked by (g). Every other atomic instruction in the module names `.sys` and
//! an order.
//!
//! The checks, by module: `orderings.rs` ((a) and (b): every atomic at system scope with an
//! order, each protocol step's ordering, in the sm_90 build), `lockstep.rs` ((d) and (e):
//! the sm_60 build's pre-Volta operations and orderings), `gpu_scope.rs` ((f) and (g):
//! the two GPU-scope exceptions, the solo ring's round trip and the print turns); (c), the
//! warp-aggregated print path, is here, over `warp.rs`; `ptx.rs` reads the PTX.

mod gpu_scope;
mod lockstep;
mod orderings;
mod ptx;
mod warp;

#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;

use ptx::{ptx, ptx_sm60, Inst};
use warp::check_warp_collectives;

/// The solo ring's round trip in its out-of-line steps, as the ends of their symbols, each
/// with the GPU-scope instructions it may hold in the sm_90 build (the lock's word, which only
/// the GPU's threads hand on, is the one GPU-scope word): the take (`Solo::lock`: a relaxed
/// look, then the acquire compare-and-swap), the request (`SoloTurn::call`: none) and the
/// let-go (`Solo::let_go`: the release fence, then the word's relaxed store).
const SOLO_STEPS: [(&str, &[&str]); 3] = [
    ("4Solo4lock", &["ld.relaxed.gpu.b64", "atom.acquire.gpu.cas.b64"]),
    ("8SoloTurn4call", &[]),
    ("4Solo6let_go", &["fence.acq_rel.gpu", "st.relaxed.gpu.b64"]),
];

/// The GPU-scope instructions allowed in `i`'s function, if it is a step of the solo ring's
/// round trip ([`SOLO_STEPS`]).
fn solo_step(i: &Inst) -> Option<&'static [&'static str]> {
    SOLO_STEPS
        .iter()
        .find(|(end, _)| i.func.ends_with(end))
        .map(|&(_, ops)| ops)
}

/// Whether `i` is in the solo ring's round trip (one of [`SOLO_STEPS`]).
fn in_solo(i: &Inst) -> bool {
    solo_step(i).is_some()
}

/// Whether `i` is one of the solo ring lock's GPU-scope instructions, in the step that may
/// hold it (checked by `the_solo_ring_orders_its_round_trip`).
fn solo_lock(i: &Inst) -> bool {
    solo_step(i).is_some_and(|ops| ops.contains(&i.op.as_str()))
}

/// The print turns' instructions (sm_90): a relaxed GPU-scope count per SM.
const PRINT_TURN: [&str; 2] = ["ld.relaxed.gpu.b64", "atom.relaxed.gpu.add.u64"];

/// Whether `i` is in `PrintTurn::take` or in `PrintTurn`'s `drop`, which gives it back.
fn in_print_turn(i: &Inst) -> bool {
    i.func.contains("9PrintTurn4take") || (i.func.contains("9PrintTurn") && i.func.contains("4Drop4drop"))
}

/// Whether `i` is one of the GPU-scope instructions allowed where the GPU's threads alone
/// use a word: the solo ring's lock, the print turns' counts.
fn device_scope(i: &Inst) -> bool {
    solo_lock(i) || (in_print_turn(i) && PRINT_TURN.contains(&i.op.as_str()))
}

/// Whether `i` is narrower than the system: GPU, CTA or cluster scope.
fn narrow(i: &Inst) -> bool {
    let memory = ["ld", "st", "atom", "red", "fence", "membar"].contains(&i.parts()[0]);
    memory && ["gpu", "cta", "cluster", "gl"].iter().any(|s| i.has(s))
}

/// (c) `println!` aggregates the warp: `arch::Warp` takes `activemask` and `%laneid`, scans
/// and broadcasts with `shfl.sync`, and waits with `bar.warp.sync`; every mask operand is the
/// group's mask (or the full mask on the full-warp path), and the shuffle clamps are right.
#[test]
fn print_aggregates_the_warp() {
    if !common::gpu_code_built(
        "print_aggregates_the_warp",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    check_warp_collectives(&ptx(), "sm_90");
}

/// The same for the lockstep build (its collectives are the same instructions).
#[test]
fn print_aggregates_the_warp_in_the_lockstep_build() {
    if !common::gpu_code_built(
        "print_aggregates_the_warp_in_the_lockstep_build",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    check_warp_collectives(&ptx_sm60(), "sm_60");
}

/// Whether `i` touches memory or orders accesses to it.
fn is_memory(i: &Inst) -> bool {
    ["ld", "st", "atom", "red", "membar", "fence"].contains(&i.parts()[0])
}
