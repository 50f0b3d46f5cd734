//! The PTX that build.rs produced from `kernels/` carries the memory scope and the ordering
//! that the ring protocol needs, and the warp-aggregated print path: the `sm_90` build (the
//! PTX memory model, sm_70+) and the `sm_60` lockstep build (before sm_70: volatile
//! accesses, `atom.sys` and `membar.sys`; see the end of this file). No GPU needed.
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
//! ring's lock (`Solo::try_call`), which they hand to one another, is GPU scope
//! (`ld.relaxed.gpu.b64`, `atom.acquire.gpu.cas.b64`, `fence.acq_rel.gpu`,
//! `st.relaxed.gpu.b64`), checked by (f); and the print turns' per-SM counts
//! (`PrintTurn::take` and its `drop`: `ld.relaxed.gpu.b64`, `atom.relaxed.gpu.add.u64`), which order
//! nothing, checked by (g). Every other atomic instruction in the module names `.sys` and
//! an order.

mod ptx;
mod warp;

#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeSet;

use ptx::{assert_present, instructions, ops, ptx, ptx_sm60, Inst};
use warp::check_warp_collectives;

/// Whether `i` is in the solo ring's round trip (`Solo::try_call`).
fn in_solo(i: &Inst) -> bool {
    i.func.contains("4Solo8try_call")
}

/// The solo ring lock's instructions (sm_90): GPU scope, one of the two exceptions.
const SOLO_LOCK: [&str; 4] = [
    "ld.relaxed.gpu.b64",
    "atom.acquire.gpu.cas.b64",
    "fence.acq_rel.gpu",
    "st.relaxed.gpu.b64",
];

/// Whether `i` is one of the solo ring lock's GPU-scope instructions, in its function
/// (checked by `the_solo_ring_orders_its_round_trip`).
fn solo_lock(i: &Inst) -> bool {
    in_solo(i) && SOLO_LOCK.contains(&i.op.as_str())
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

/// (a) Every `atom`/`red` names system scope and an explicit order. A plain `atom.add`,
/// `atom.global.exch`, `atom.or`, `atom.cas` ... is relaxed at GPU scope: the host and the
/// kernel's SQPOLL thread would not be ordered with it, and other GPUs' (or the host's)
/// accesses not be atomic with it.
#[test]
fn every_atomic_rmw_names_system_scope_and_an_order() {
    if !common::gpu_code_built(
        "every_atomic_rmw_names_system_scope_and_an_order",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    let insts = instructions(&ptx());
    let rmws: Vec<&Inst> = insts.iter().filter(|i| i.is_rmw()).collect();
    assert!(
        !rmws.is_empty(),
        "no atom/red instruction at all: did the ring code vanish?"
    );
    let bad: BTreeSet<&str> = rmws
        .iter()
        .filter(|i| !device_scope(i) && (!i.has("sys") || i.order().is_none()))
        .map(|i| i.op.as_str())
        .collect();
    assert!(
        bad.is_empty(),
        "read-modify-writes without an explicit `.sys` scope and order (PTX's default is relaxed, \
         GPU scope; the ring lives in host memory shared with the kernel): {bad:?}. Route them \
         through gpuio_device::protocol::sync atomics (arch/nvptx/atomic.rs writes them in asm!)."
    );
}

/// Fences and ordered loads/stores are system scope too; nothing is narrower than `.sys`.
#[test]
fn fences_and_ordered_loads_and_stores_are_system_scope() {
    if !common::gpu_code_built(
        "fences_and_ordered_loads_and_stores_are_system_scope",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    let insts = instructions(&ptx());
    let narrow = ops(&insts, |i| narrow(i) && !device_scope(i));
    assert!(
        narrow.is_empty(),
        "memory operations at a scope narrower than the system: {narrow:?}. The SQ/CQ words, \
         SQEs and payloads are read by the kernel on the CPU: GPU scope does not order them."
    );
    let unscoped = ops(&insts, |i| {
        let ordered = i.order().is_some() && !i.is_rmw();
        (i.op.starts_with("fence") || i.op.starts_with("membar") || ordered) && !i.has("sys") && !device_scope(i)
    });
    assert!(
        unscoped.is_empty(),
        "fences or ordered loads/stores without `.sys`: {unscoped:?} (the release before the SQ \
         tail store must cover the SQE and payload bytes for the kernel: invariant 1)"
    );
}

/// (b) Each protocol step's atomic carries the order the step relies on.
#[test]
fn protocol_steps_have_the_orderings_they_need() {
    if !common::gpu_code_built(
        "protocol_steps_have_the_orderings_they_need",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    let insts = instructions(&ptx());

    // Reservations: uniqueness only, so relaxed is enough, but at system scope.
    assert_present(
        &insts,
        "atom.relaxed.sys.add.u64",
        "Stream::reserve (a warp's one fetch_add for its record) must be a system-scope atomic add",
    );
    assert_present(
        &insts,
        "atom.relaxed.sys.add.u32",
        "Ring::submit step 1 (SQ ticket) must be a system-scope atomic add",
    );

    // Commits: the bytes written before them must happen-before the flusher's acquire.
    // `Stream::commit` (kept out of line so that it can be found here) issues one release
    // fence, then relaxed adds to the chunk counters and to `committed` (fence-to-fence
    // synchronisation); `Stream::complete_prefix` reads them relaxed and ends with an acquire
    // fence before the flush uses what it found.
    let in_fn = |name: &str| -> Vec<&Inst> { insts.iter().filter(|i| i.func.contains(name)).collect() };
    let commit = in_fn("6Stream6commit");
    assert!(
        !commit.is_empty(),
        "Stream::commit is not an out-of-line function in the PTX"
    );
    let first_rmw = commit
        .iter()
        .position(|i| i.is_rmw())
        .expect("Stream::commit has no atomic add");
    assert!(
        commit[..first_rmw]
            .iter()
            .any(|i| i.op == "fence.acq_rel.sys" || i.op == "fence.sc.sys"),
        "Stream::commit's adds are not preceded by a system-scope release fence: the flusher could \
         submit bytes still being written (invariant 5)"
    );
    assert!(
        commit
            .iter()
            .filter(|i| i.is_rmw())
            .all(|i| i.has("add") && i.has("sys")),
        "Stream::commit should only add, at system scope"
    );
    let prefix = in_fn("15complete_prefix");
    assert!(
        !prefix.is_empty(),
        "Stream::complete_prefix is not an out-of-line function in the PTX"
    );
    let last_load = prefix.iter().rposition(|i| i.op.starts_with("ld.") && i.has("sys"));
    let last_fence = prefix
        .iter()
        .rposition(|i| i.op == "fence.acq_rel.sys" || i.op == "fence.sc.sys");
    assert!(
        matches!((last_load, last_fence), (Some(l), Some(f)) if f > l),
        "Stream::complete_prefix must end with a system-scope acquire fence after its last load of a \
         counter: without it the bytes it found committed need not be visible to the submission"
    );

    // Combiner requests: AcqRel swaps extend the release sequence the holder acquires.
    assert_present(
        &insts,
        "atom.acq_rel.sys.exch.b32",
        "Combiner::request (pending.swap(1, AcqRel)) and the holder's pending.swap(0, AcqRel)",
    );
    let weak_exch = ops(&insts, |i| i.is_rmw() && i.has("exch") && i.order() != Some("acq_rel"));
    assert!(
        weak_exch.is_empty(),
        "swaps that are not acq_rel: {weak_exch:?}. Swaps are the combiner's requests: without \
         release a request's input (a ready SQE, a commit) may be invisible to the run it asks \
         for; without acquire the holder's run may not see it. A stranded SQE hangs the kernel."
    );

    // Combiner lock: compare_exchange(0, 1, Acquire, Relaxed).
    let cas: Vec<&Inst> = insts.iter().filter(|i| i.is_rmw() && i.has("cas")).collect();
    assert!(
        !cas.is_empty(),
        "no atom.*.cas: Combiner::run takes its lock with compare_exchange"
    );
    let weak_cas: BTreeSet<&str> = cas
        .iter()
        .filter(|i| !matches!(i.order(), Some("acquire" | "acq_rel")))
        .map(|i| i.op.as_str())
        .collect();
    assert!(
        weak_cas.is_empty(),
        "compare-exchanges without acquire: {weak_cas:?}. The combiner lock's CAS must acquire, or \
         the previous holder's tail/flush work does not happen-before ours (two publishers could \
         store an older SQ tail over a newer one: invariant 2)"
    );

    // The store-buffering fences of the combiner, and the lock release.
    assert_present(
        &insts,
        "fence.sc.sys",
        "Combiner::run's fence(SeqCst) between request and lock look (and unlock and pending \
         look): without it requester and holder can miss each other and a request is lost",
    );
    // Every function that runs a combiner takes its lock (CAS) and releases it with a release
    // store. Those are the functions with a CAS and the combiner's store-buffering fence
    // (`Combiner::run`, and `run_fast` wherever the publisher is inlined); other CASes take
    // pool slots, which are given back elsewhere, when their request is done. Every function
    // that makes a combiner request (acq_rel exch) also has the store-buffering fence. (The
    // reaper's try-lock makes no request and needs none.)
    let funcs = |pred: &dyn Fn(&Inst) -> bool| {
        insts
            .iter()
            .filter(|i| pred(i))
            .map(|i| i.func.clone())
            .collect::<BTreeSet<_>>()
    };
    let has = |f: &str, op: &str| insts.iter().any(|i| i.func == f && i.op == op);
    let runners: Vec<String> = funcs(&|i| i.is_rmw() && i.has("cas"))
        .into_iter()
        .filter(|f| has(f, "fence.sc.sys"))
        .collect();
    assert!(
        !runners.is_empty(),
        "no function takes a combiner lock (a CAS beside fence.sc.sys)"
    );
    for f in runners {
        assert!(
            has(&f, "st.release.sys.b32"),
            "function {f} takes a combiner lock (CAS) but never releases one with st.release.sys: the \
             next holder would not see its work"
        );
    }
    // A request is `pending.swap(1)`: an exchange of the constant 1 (an immediate, or a
    // register a `mov` set to 1 in the same function). Exchanges of 0 (the holder taking
    // requests, a stream's kick being taken) are not requests.
    let is_request = |i: &Inst| {
        i.op == "atom.acq_rel.sys.exch.b32"
            && i.args.get(2).is_some_and(|src| {
                src == "1"
                    || insts.iter().any(|m| {
                        m.func == i.func
                            && m.op.starts_with("mov.")
                            && m.args.len() == 2
                            && &m.args[0] == src
                            && m.args[1] == "1"
                    })
            })
    };
    let requesters = funcs(&is_request);
    assert!(
        !requesters.is_empty(),
        "no combiner request (exch of 1) found: the check below would be vacuous"
    );
    for f in requesters {
        assert!(
            has(&f, "fence.sc.sys"),
            "function {f} makes combiner requests (acq_rel exch) without fence.sc.sys: a requester and \
             the holder could miss each other, stranding a flush or a publication"
        );
    }

    // SQ tail and ready flags (and CQ head, unlock): release stores at system scope.
    assert_present(
        &insts,
        "st.release.sys.b32",
        "the SQ tail store must be a system-scope release: the SQEs and payloads below it \
         happen-before the kernel's smp_load_acquire of the tail (invariant 1); so must the ready \
         flags (Ring::submit step 4)",
    );
    // The kernel's SQ head and CQ tail, the ready flags: acquire loads at system scope.
    assert_present(
        &insts,
        "ld.acquire.sys.b32",
        "loads of the kernel's SQ head (slot free: invariant 2) and CQ tail (CQEs written, buffers \
         done: invariant 3), and of the ready flags, must be system-scope acquires",
    );
    assert_present(
        &insts,
        "ld.acquire.sys.b64",
        "Stream::room's load of `released` and the flusher's load of `committed` must be \
         system-scope acquires (invariants 3 and 5)",
    );
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

/// (d) The lockstep build (`sm_60`) uses only what PTX before sm_70 has, or the driver
/// refuses the module: no `fence`, no ordered (`.acquire`, `.release`, `.relaxed`,
/// `.acq_rel`) loads, stores or read-modify-writes, no `nanosleep`; every read-modify-write
/// is `atom.sys` and every barrier `membar.sys` (the ring lives in host memory, shared with
/// the kernel on the CPU).
#[test]
fn the_lockstep_build_uses_only_pre_volta_memory_operations() {
    if !common::gpu_code_built(
        "the_lockstep_build_uses_only_pre_volta_memory_operations",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    let ptx = ptx_sm60();
    assert!(
        ptx.lines().any(|l| l.trim() == ".target sm_60"),
        "TEST_PTX_SM60_PATH does not target sm_60"
    );
    let insts = instructions(&ptx);
    let newer = ops(&insts, |i| {
        i.op.starts_with("fence.")
            || i.op.starts_with("nanosleep")
            || i.op.starts_with("match.")
            || ((i.op.starts_with("ld.") || i.op.starts_with("st.") || i.is_rmw()) && i.order().is_some())
    });
    assert!(
        newer.is_empty(),
        "instructions that need sm_70 in the sm_60 build: {newer:?}. gpuio_device::protocol::arch::nvptx must \
         write them with volatile accesses, atom.sys and membar.sys before sm_70"
    );
    let unscoped = ops(&insts, |i| i.is_rmw() && !i.has("sys"));
    assert!(
        unscoped.is_empty(),
        "read-modify-writes without .sys in the sm_60 build: {unscoped:?} (GPU scope does not reach \
         the host's and the kernel's accesses to the rings)"
    );
    let narrow = ops(&insts, |i| {
        i.op.starts_with("membar") && i.op != "membar.sys" && !in_solo(i)
    });
    assert!(narrow.is_empty(), "barriers narrower than the system: {narrow:?}");
    assert!(
        insts.iter().any(|i| i.op == "membar.sys") && insts.iter().any(|i| i.op == "atom.sys.cas.b32"),
        "no membar.sys or atom.sys.cas in the sm_60 build: the protocol's orderings are missing"
    );
}

/// (e) In the lockstep build each protocol step has its ordering, spelled the pre-Volta
/// way: a release is `membar.sys` right before the store or read-modify-write, an acquire
/// is `membar.sys` right after the load (nothing that touches memory in between).
#[test]
fn the_lockstep_build_orders_the_protocol_steps() {
    if !common::gpu_code_built(
        "the_lockstep_build_orders_the_protocol_steps",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    let insts = instructions(&ptx_sm60());
    let in_fn = |name: &str| -> Vec<&Inst> { insts.iter().filter(|i| i.func.contains(name)).collect() };
    // The memory instructions of a function, in order.
    let memory = |f: &[&Inst]| -> Vec<String> { f.iter().filter(|i| is_memory(i)).map(|i| i.op.clone()).collect() };

    // Stream::commit: a release barrier before its adds to the chunk counters.
    let commit = memory(&in_fn("6Stream6commit"));
    let first_add = commit
        .iter()
        .position(|op| op.starts_with("atom."))
        .expect("Stream::commit has no atomic add in the sm_60 build");
    assert!(
        commit[..first_add].iter().any(|op| op == "membar.sys"),
        "Stream::commit's adds are not preceded by membar.sys: the flusher could submit bytes still \
         being written (invariant 5). Its memory instructions: {commit:?}"
    );

    // Stream::complete_prefix: an acquire barrier after its last load of a counter.
    let prefix = memory(&in_fn("15complete_prefix"));
    let last_load = prefix.iter().rposition(|op| op.starts_with("ld.volatile"));
    let last_barrier = prefix.iter().rposition(|op| op == "membar.sys");
    assert!(
        matches!((last_load, last_barrier), (Some(l), Some(b)) if b > l),
        "Stream::complete_prefix does not end with membar.sys after its last counter load: {prefix:?}"
    );

    // Ring::submit (inlined wherever it is used): the SQE is written with plain stores (step
    // 3), then the ready flag is stored with release (step 4): an atomic (volatile) store that
    // follows a run of plain stores must have a `membar.sys` after them, or the kernel could
    // see the flag (and then the tail) before the SQE (invariant 1). "Follows" within
    // straight-line code: the count starts again at a branch target, since the stores before
    // it in the text need not run before it (a reap's relaxed store of an errno, placed
    // after a loop that copies a line into the log, is no publication of that line).
    // Release stores: a st.volatile.b32 right after a membar.sys.
    let mut released = 0;
    // The functions with a release store whose membar.sys follows at least 4 plain stores
    // of the same block: the SQE publications this check is for, seen where it looks.
    let mut guarded = BTreeSet::new();
    for f in insts.iter().map(|i| i.func.as_str()).collect::<BTreeSet<_>>() {
        let body: Vec<&Inst> = insts.iter().filter(|i| i.func == f && is_memory(i)).collect();
        let (mut plain, mut fenced, mut block, mut previous) = (0, 0, None, "");
        for inst in &body {
            if block != Some(inst.block) {
                (plain, fenced, block) = (0, 0, Some(inst.block));
            }
            let op = inst.op.as_str();
            let parts = inst.parts();
            if op == "membar.sys" {
                (plain, fenced) = (0, fenced + plain);
            } else if parts[0] == "st" && !parts.iter().any(|p| ["volatile", "local", "param"].contains(p)) {
                plain += 1;
            } else if op == "st.volatile.b32" {
                assert!(
                    plain < 4,
                    "{f}: an atomic store (st.volatile.b32) right after {plain} plain stores with no \
                     membar.sys between them: a ready flag published before its SQE? Its memory \
                     instructions: {:?}",
                    body.iter().map(|i| i.op.as_str()).collect::<Vec<_>>()
                );
                if previous == "membar.sys" {
                    released += 1;
                    if fenced >= 4 {
                        guarded.insert(f);
                    }
                }
            }
            previous = op;
        }
    }
    assert!(
        released >= 2,
        "no release stores (membar.sys; st.volatile.b32) at all in the sm_60 build"
    );
    // Requests (Context::submit) and print flights (Stream::flush_work or its
    // submit_flight) each publish an SQE this check sees whole in one block.
    for (what, names) in [
        ("Context::submit", &["7Context6submit"][..]),
        ("a print flight's submission", &["13submit_flight", "10flush_work"][..]),
    ] {
        assert!(
            guarded.iter().any(|f| names.iter().any(|n| f.contains(n))),
            "no release store after a membar.sys that follows the SQE's plain stores in one \
             block in {what}: the SQE publication is not where this check looks (its stores \
             and its ready flag split across blocks, or the function inlined elsewhere?). \
             Functions where it was seen: {guarded:?}"
        );
    }

    // Acquires: the combiner's lock (a CAS) and the loads of the kernel's words and of
    // `released` are followed by a barrier.
    let acquired_cas = insts
        .windows(2)
        .any(|w| w[0].op == "atom.sys.cas.b32" && w[1].op == "membar.sys");
    assert!(
        acquired_cas,
        "no atom.sys.cas.b32 followed by membar.sys: the combiner's lock does not acquire"
    );
    for width in ["b32", "b64"] {
        let load = format!("ld.volatile.{width}");
        let acquired = insts.iter().enumerate().any(|(n, i)| {
            i.op == load
                && insts[n + 1..]
                    .iter()
                    .find(|j| is_memory(j))
                    .is_some_and(|j| j.op == "membar.sys")
        });
        assert!(
            acquired,
            "no {load} followed by membar.sys: the protocol's acquire loads are missing"
        );
    }
}

/// (f) The solo ring's round trip (`Solo::try_call`, out of line), in both builds:
/// - the take acquires (sm_90: `atom.acquire.gpu.cas.b64` after a relaxed look, GPU scope:
///   only the GPU's threads hand the ring on; sm_60: `atom.sys.cas.b64`, then `membar.sys`);
/// - the SQ tail's store releases the SQE, the payload and the result's mark written before
///   it at system scope (sm_90: `st.release.sys`; sm_60: the check above covers every
///   function's `membar.sys` before a volatile store after plain ones);
/// - the wait acquires at system scope (sm_90: `ld.acquire.sys.b32`, of the CQ tail or of
///   the CQE's `res`);
/// - the store that lets go (the lock's word) comes after a barrier that comes after every
///   load of the CQE, the tail and the result and after the CQ head's store (invariant 3:
///   the next holder must not overwrite the buffer under our reads, nor its CQ head store
///   come before ours);
/// - nothing else in it is narrower than the system (the lock's four instructions are the
///   only GPU-scope ones, and only in sm_90).
#[test]
fn the_solo_ring_orders_its_round_trip() {
    if !common::gpu_code_built(
        "the_solo_ring_orders_its_round_trip",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    for (build, text) in [("sm_90", ptx()), ("sm_60", ptx_sm60())] {
        let insts = instructions(&text);
        let funcs: BTreeSet<&str> = insts.iter().filter(|i| in_solo(i)).map(|i| i.func.as_str()).collect();
        assert!(
            !funcs.is_empty(),
            "{build}: Solo::try_call is not an out-of-line function in the PTX"
        );
        let lock_barrier: &[&str] = if build == "sm_90" {
            &["fence.acq_rel.gpu"]
        } else {
            &["membar.sys"]
        };
        for f in funcs {
            let ops: Vec<&Inst> = insts.iter().filter(|i| i.func == f && is_memory(i)).collect();
            let names: Vec<&str> = ops.iter().map(|i| i.op.as_str()).collect();
            let stray: Vec<&str> = ops
                .iter()
                .filter(|i| narrow(i) && (build != "sm_90" || !SOLO_LOCK.contains(&i.op.as_str())))
                .map(|i| i.op.as_str())
                .collect();
            assert!(
                stray.is_empty(),
                "{build}: {f}: narrower than the system: {stray:?} in {names:?}"
            );
            let global = |i: &Inst| !i.has("local") && !i.has("param") && !i.has("shared");
            let barrier = |i: &Inst| {
                lock_barrier.contains(&i.op.as_str())
                    || i.op.starts_with("fence.acq_rel.sys")
                    || i.op.starts_with("fence.sc.sys")
                    || i.op == "membar.sys"
            };
            let take = ops.iter().position(|i| i.is_rmw() && i.has("cas"));
            let Some(take) = take else {
                panic!("{build}: {f}: no compare-and-swap (the take): {names:?}")
            };
            if build == "sm_90" {
                assert_eq!(ops[take].op, "atom.acquire.gpu.cas.b64", "{build}: the take: {names:?}");
                let tail = ops[take..]
                    .iter()
                    .position(|i| i.op.starts_with("st.") && i.has("sys") && i.has("release"))
                    .map(|k| take + k);
                assert!(
                    tail.is_some(),
                    "{build}: no release store (the SQ tail) after the take: {names:?}"
                );
                assert!(
                    ops[tail.unwrap()..].iter().any(|i| i.op.starts_with("ld.acquire.sys")),
                    "{build}: the wait does not acquire at system scope: {names:?}"
                );
            } else {
                assert_eq!(ops[take].op, "atom.sys.cas.b64", "{build}: the take: {names:?}");
                assert!(
                    ops.get(take + 1).is_some_and(|i| i.op == "membar.sys"),
                    "{build}: the take is not followed by membar.sys (an acquire): {names:?}"
                );
            }
            // The lock's word is the one 64-bit atomic store (GPU scope on sm_90).
            let lock_store = |i: &Inst| i.op == "st.relaxed.gpu.b64" || i.op == "st.volatile.b64";
            let last_load = ops
                .iter()
                .rposition(|i| i.op.starts_with("ld.") && global(i) && !narrow(i));
            let last_sys_store = ops
                .iter()
                .rposition(|i| i.op.starts_with("st.") && global(i) && !lock_store(i));
            let last_barrier = ops.iter().rposition(|i| barrier(i));
            let lets_go = last_barrier.is_some_and(|b| ops[b..].iter().any(|i| lock_store(i)));
            assert!(
                matches!((last_load, last_sys_store, last_barrier), (Some(l), Some(h), Some(b)) if b > l && b > h)
                    && lets_go,
                "{build}: {f}: the lock's word is not stored after a barrier that follows every load \
                 and the CQ head's store: {names:?}"
            );
        }
    }
}

/// (g) The print turns (`arch/nvptx/turns.rs`): in the sm_90 build `PrintTurn::take` and
/// `PrintTurn`'s `drop` are out-of-line functions whose only memory operations are the per-SM
/// count's relaxed GPU-scope look and adds (a count that orders nothing: each record's own
/// system-scope atomics order its bytes), the take naps between looks and comes after the
/// group's exclusive sum; the lockstep build takes no turns at all.
#[test]
fn print_turns_are_a_gpu_scope_count_in_the_sm90_build_only() {
    if !common::gpu_code_built(
        "print_turns_are_a_gpu_scope_count_in_the_sm90_build_only",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    let insts = instructions(&ptx());
    for (name, part) in [("take", "9PrintTurn4take"), ("drop", "4Drop4drop")] {
        let here = |i: &Inst| i.func.contains("9PrintTurn") && i.func.contains(part);
        let ops: Vec<&Inst> = insts.iter().filter(|i| here(i) && is_memory(i)).collect();
        let names: Vec<&str> = ops.iter().map(|i| i.op.as_str()).collect();
        assert!(
            names.contains(&"atom.relaxed.gpu.add.u64"),
            "sm_90: no `PrintTurn` {name} with a relaxed GPU-scope add in the PTX: {names:?}"
        );
        let stray: Vec<&str> = ops
            .iter()
            .filter(|i| !i.has("param") && !i.has("local") && !PRINT_TURN.contains(&i.op.as_str()))
            .map(|i| i.op.as_str())
            .collect();
        assert!(
            stray.is_empty(),
            "sm_90: `PrintTurn` {name} touches memory otherwise: {stray:?}"
        );
    }
    assert!(
        insts
            .iter()
            .any(|i| i.func.contains("9PrintTurn4take") && i.op.starts_with("nanosleep")),
        "sm_90: `PrintTurn::take` does not nap between looks"
    );
    // The turn is taken after the group's exclusive sum (`shfl.sync.up`), which every lane
    // reaches only once it formatted its line: a print a `Display` makes must not wait for
    // a turn its own group holds.
    let takes: Vec<usize> = (0..insts.len())
        .filter(|&k| insts[k].op.starts_with("call") && insts[k].args.iter().any(|a| a.contains("9PrintTurn4take")))
        .collect();
    assert!(!takes.is_empty(), "sm_90: nothing calls `PrintTurn::take`");
    for k in takes {
        let f = &insts[k].func;
        assert!(
            insts[..k]
                .iter()
                .any(|i| &i.func == f && i.op.starts_with("shfl.sync.up")),
            "sm_90: {f} takes a print turn before the group's exclusive sum"
        );
    }
    let lockstep = instructions(&ptx_sm60());
    let turns: BTreeSet<&str> = lockstep
        .iter()
        .filter(|i| i.func.contains("PrintTurn"))
        .map(|i| i.func.as_str())
        .collect();
    assert!(
        turns.is_empty(),
        "sm_60: the lockstep build takes print turns: {turns:?}"
    );
}
