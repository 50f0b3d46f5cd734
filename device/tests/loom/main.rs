//! Exhaustive interleaving checks (loom) of the lock-free parts: the combiner (and its
//! uncontended fast path, which catches a missing store-buffering fence), the ring's
//! reservation / in-order publication / CQ credits, and a print stream's fill / flush /
//! recycling, each against a model of the kernel's side of io_uring. File I/O too: the
//! completion slots route each result to its own waiter whoever reaps, through a reused
//! slot and in whatever order the kernel completes (`request_results_reach_their_own_waiters*`),
//! and staged `pread`/`pwrite` pieces hand an arena block's bytes between the kernel and a
//! waiter (`staged_read_sees_the_kernels_bytes`) and the block between two threads
//! (`staged_read_and_write_share_one_block`).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p gpuio-device --release --test loom`
//! (`.ci/run` does). The preemption bound defaults to 1 (`LOOM_MAX_PREEMPTIONS` raises it):
//! at 1 these models already catch a Relaxed ready flag (an SQE published before it is
//! written), a log reused before its write completed, a Relaxed `DONE` or a slot freed
//! before its result was read (a waiter gets a stale or foreign result), and an arena block
//! given back before its request completed or without Release; at 2 they run for many
//! minutes. Loom reports any access to a `SharedCell` (SQE slots, payload bytes, arena
//! blocks) that is not ordered by a happens-before edge, and any assertion that fails in
//! some interleaving.
//!
//! The models, one module per part: `combiner.rs` (the combiner and its try-lock),
//! `ring.rs` (reaping, publication in order, SQ and CQ never overrun), `stream.rs` (a print
//! stream's fill, flush and recycling), `requests.rs` (the completion slots), `staged.rs`
//! (staged `pread`/`pwrite` through the arena), `solo.rs` (the solo ring's hand-offs); over
//! `kernel.rs` (the kernel's side of io_uring) and `world.rs` (a context over it).
#![cfg(loom)]

use gpuio_device::io;
use gpuio_device::protocol::arch::host::ThreadIds;
use gpuio_device::protocol::arena::Arena;
use gpuio_device::protocol::combine::{Combiner, Left};
use gpuio_device::protocol::context::enter;
use gpuio_device::protocol::context::{Context, CONTEXT_MAGIC};
use gpuio_device::protocol::group::SingleLane;
use gpuio_device::protocol::pool::{Pool, FREE};
use gpuio_device::protocol::print::emit;
use gpuio_device::protocol::request::Requests;
use gpuio_device::protocol::ring::Ring;
use gpuio_device::protocol::solo::Solo;
use gpuio_device::protocol::stream::{chunk_count, Flight, Stream};
use gpuio_device::protocol::sync::{copy_to_cells, fence, read_cells, AtomicI32, AtomicU32, Ordering, SharedCell};
use gpuio_device::protocol::uapi::{Cqe, Sqe, IORING_OP_READ, IORING_OP_WRITE, OFF_CURRENT_POSITION};
use loom::sync::atomic::AtomicBool;
use loom::sync::{Arc, Mutex};
use loom::thread;

mod combiner;
mod kernel;
mod requests;
mod ring;
mod solo;
mod staged;
mod stream;
mod world;
use kernel::{InlineKernel, KernelRings};
use world::{enter_world, model_file, serve_transfer, world, World, FD};

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(1, f)
}

/// [`model`] with `preemptions` as the default preemption bound (`LOOM_MAX_PREEMPTIONS`
/// overrides it).
fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("LOOM_MAX_PREEMPTIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(preemptions),
    );
    // Spin-waits (with yields) are part of the protocol; allow long executions.
    b.max_branches = 100_000;
    b.check(f);
}
