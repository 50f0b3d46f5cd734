//! (f) and (g): the two GPU-scope exceptions, words only the GPU's own threads touch: the
//! solo ring's round trip (its lock) and the print turns' per-SM counts.

use std::collections::BTreeSet;

use crate::ptx::{instructions, ptx, ptx_sm60, Inst};
use crate::{common, is_memory, narrow, PRINT_TURN, SOLO_LOCK, SOLO_STEPS};

/// (f) The solo ring's round trip, in both builds, in its three out-of-line steps:
/// `Solo::lock` (the take), `SoloTurn::call` (the request) and `Solo::let_go` (a turn's
/// drop, after its call and after the caller's copy out of the staging buffer):
/// - the lock acquires (sm_90: `atom.acquire.gpu.cas.b64` after a relaxed look, GPU scope:
///   only the GPU's threads hand the ring on; sm_60: `atom.sys.cas.b64`, then `membar.sys`);
/// - the call's SQ tail store releases the SQE, the payload and the result's mark written
///   before it at system scope (sm_90: `st.release.sys`; sm_60: (e), in `lockstep.rs`, covers
///   every function's `membar.sys` before a volatile store after plain ones), and its wait
///   acquires at system scope (sm_90: `ld.acquire.sys.b32`, of the CQ tail or of the CQE's
///   `res`);
/// - the let-go stores the lock's word after a barrier that comes after the CQ head's
///   store and its own loads (invariant 3: the next holder must not overwrite the buffer
///   under our reads, which come before the call to it, nor its CQ head store come before
///   ours);
/// - nothing else in them is narrower than the system (the lock's four instructions are the
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
        let step = |part: &str| -> Vec<&Inst> {
            let ops: Vec<&Inst> = insts.iter().filter(|i| i.func.contains(part) && is_memory(i)).collect();
            assert!(
                !ops.is_empty(),
                "{build}: the solo ring's step {part} is not an out-of-line function with memory operations in the PTX"
            );
            ops
        };
        let names = |ops: &[&Inst]| ops.iter().map(|i| i.op.clone()).collect::<Vec<_>>();
        let (lock, call, let_go) = (step(SOLO_STEPS[0]), step(SOLO_STEPS[1]), step(SOLO_STEPS[2]));
        for ops in [&lock, &call, &let_go] {
            let stray: Vec<&str> = ops
                .iter()
                .filter(|i| narrow(i) && (build != "sm_90" || !SOLO_LOCK.contains(&i.op.as_str())))
                .map(|i| i.op.as_str())
                .collect();
            assert!(
                stray.is_empty(),
                "{build}: {}: narrower than the system: {stray:?} in {:?}",
                ops[0].func,
                names(ops)
            );
        }
        // The take.
        let take = lock.iter().position(|i| i.is_rmw() && i.has("cas"));
        let Some(take) = take else {
            panic!(
                "{build}: no compare-and-swap (the take) in the lock: {:?}",
                names(&lock)
            )
        };
        if build == "sm_90" {
            assert_eq!(
                lock[take].op,
                "atom.acquire.gpu.cas.b64",
                "{build}: the take: {:?}",
                names(&lock)
            );
            assert!(
                lock[..take].iter().any(|i| i.op == "ld.relaxed.gpu.b64"),
                "{build}: no relaxed look before the take: {:?}",
                names(&lock)
            );
        } else {
            assert_eq!(
                lock[take].op,
                "atom.sys.cas.b64",
                "{build}: the take: {:?}",
                names(&lock)
            );
            assert!(
                lock.get(take + 1).is_some_and(|i| i.op == "membar.sys"),
                "{build}: the take is not followed by membar.sys (an acquire): {:?}",
                names(&lock)
            );
        }
        // The request.
        if build == "sm_90" {
            let tail = call
                .iter()
                .position(|i| i.op.starts_with("st.") && i.has("sys") && i.has("release"));
            assert!(
                tail.is_some(),
                "{build}: no release store (the SQ tail) in the call: {:?}",
                names(&call)
            );
            assert!(
                call[tail.unwrap()..].iter().any(|i| i.op.starts_with("ld.acquire.sys")),
                "{build}: the wait does not acquire at system scope: {:?}",
                names(&call)
            );
        }
        // The let-go. The lock's word is the one 64-bit atomic store (GPU scope on sm_90).
        let global = |i: &Inst| !i.has("local") && !i.has("param") && !i.has("shared");
        let barrier = |i: &Inst| {
            i.op == "fence.acq_rel.gpu"
                || i.op.starts_with("fence.acq_rel.sys")
                || i.op.starts_with("fence.sc.sys")
                || i.op == "membar.sys"
                || (build == "sm_60" && i.op.starts_with("membar"))
        };
        let lock_store = |i: &Inst| i.op == "st.relaxed.gpu.b64" || i.op == "st.volatile.b64";
        let last_load = let_go.iter().rposition(|i| i.op.starts_with("ld.") && global(i));
        let head_store = let_go
            .iter()
            .rposition(|i| i.op.starts_with("st.") && global(i) && !lock_store(i));
        let last_barrier = let_go.iter().rposition(|i| barrier(i));
        let lets_go = last_barrier.is_some_and(|b| let_go[b..].iter().any(|i| lock_store(i)));
        assert!(
            matches!((head_store, last_barrier), (Some(h), Some(b)) if b > h && last_load.is_none_or(|l| b > l))
                && lets_go,
            "{build}: the lock's word is not stored after a barrier that follows the CQ head's \
             store and every load: {:?}",
            names(&let_go)
        );
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
