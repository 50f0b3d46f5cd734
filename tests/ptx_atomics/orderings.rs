//! (a) and (b): in the sm_90 build every atomic names system scope and an order, nothing is
//! narrower than the system, and each protocol step's atomic carries the order it needs.

use std::collections::BTreeSet;

use crate::ptx::{assert_present, instructions, ops, ptx, Inst};
use crate::{common, device_scope, narrow};

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
