//! (d) and (e): the lockstep build (`sm_60`) uses only what PTX before sm_70 has, and spells
//! each protocol step's ordering the pre-Volta way (`membar.sys` around volatile accesses).

use std::collections::BTreeSet;

use crate::ptx::{instructions, ops, ptx_sm60, Inst};
use crate::{common, in_solo, is_memory};

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
