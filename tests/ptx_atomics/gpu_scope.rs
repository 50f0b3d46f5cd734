//! (f) and (g): the two GPU-scope exceptions, words only the GPU's own threads touch: the
//! solo ring's round trip (its lock) and the print turns' per-SM counts.

use std::collections::BTreeSet;

use crate::ptx::{function_name, instructions, ptx, ptx_sm60, Inst};
use crate::{common, is_memory, narrow, PRINT_TURN, SOLO_STEPS};

/// (f) The solo ring's round trip, in both builds, in its three out-of-line steps:
/// `Solo::lock` (the take), `SoloTurn::call` (the request) and `Solo::let_go` (a turn's
/// drop, after its call and after the caller's copy out of the staging buffer), each one
/// function:
/// - the lock acquires (sm_90: `atom.acquire.gpu.cas.b64` after a relaxed look, GPU scope:
///   only the GPU's threads hand the ring on; sm_60: `atom.sys.cas.b64`, then `membar.sys`);
/// - the call's SQ tail store releases the SQE, the payload and the result's mark written
///   before it at system scope (sm_90: `st.release.sys`; sm_60: (e), in `lockstep.rs`, covers
///   every function's `membar.sys` before a volatile store after plain ones), and on every
///   path from it to the return the wait acquires at system scope (sm_90: `ld.acquire.sys`,
///   of the CQ tail or of the CQE's `res`);
/// - on every path through the let-go, the lock's word is stored after a barrier that comes
///   after the CQ head's store and after every load (invariant 3: the next holder must not
///   overwrite the buffer under our reads, which come before the call to it, nor its CQ head
///   store come before ours), branches followed;
/// - nothing in them is narrower than the system but, in sm_90, the GPU-scope instructions
///   each step may hold ([`SOLO_STEPS`]: none in the call).
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
        let step = |(end, allowed): (&str, &[&str])| -> Vec<&Inst> {
            let funcs: BTreeSet<&str> = insts
                .iter()
                .filter(|i| i.func.ends_with(end))
                .map(|i| i.func.as_str())
                .collect();
            assert_eq!(
                funcs.len(),
                1,
                "{build}: the solo ring's step {end} is not one out-of-line function in the PTX: {funcs:?}"
            );
            let ops: Vec<&Inst> = insts.iter().filter(|i| i.func.ends_with(end) && is_memory(i)).collect();
            let stray: Vec<&str> = ops
                .iter()
                .filter(|i| narrow(i) && (build != "sm_90" || !allowed.contains(&i.op.as_str())))
                .map(|i| i.op.as_str())
                .collect();
            assert!(
                stray.is_empty(),
                "{build}: {end}: narrower than the system: {stray:?} in {:?}",
                names(&ops)
            );
            ops
        };
        let (lock, call) = (step(SOLO_STEPS[0]), step(SOLO_STEPS[1]));
        step(SOLO_STEPS[2]);
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
        // The request: after the tail's release, every path to the return acquires.
        if build == "sm_90" {
            let blocks = blocks(&text, SOLO_STEPS[1].0);
            let tail = |op: &str| op.starts_with("st.") && op.contains(".sys") && op.contains(".release");
            paths_reaching(&blocks, |pending, op, _| match () {
                _ if tail(op) => true,
                _ if op.starts_with("ld.acquire.sys") => false,
                _ if op == "ret" && pending => panic!(
                    "{build}: a path through the call returns after the tail's release without an \
                     acquire at system scope: {:?}",
                    names(&call)
                ),
                _ => pending,
            });
            assert!(
                blocks.iter().flatten().any(|(op, _)| tail(op)),
                "{build}: no release store (the SQ tail) in the call: {:?}",
                names(&call)
            );
        }
        // The let-go: on every path, a barrier between the last load or store before the lock's
        // word and the word's store.
        // The lock's own barrier is GPU scope in sm_90; sm_60 spells every barrier `membar.sys`.
        let barrier = |op: &str| {
            (build == "sm_90" && op == "fence.acq_rel.gpu")
                || op.starts_with("fence.acq_rel.sys")
                || op.starts_with("fence.sc.sys")
                || op == "membar.sys"
        };
        let lock_store = |op: &str| op == "st.relaxed.gpu.b64" || op == "st.volatile.b64";
        let global = |op: &str, args: &str| {
            (op.starts_with("ld.") || op.starts_with("st."))
                && ![".local", ".param", ".shared"].iter().any(|s| op.contains(s))
                && !args.contains("param")
        };
        let blocks = blocks(&text, SOLO_STEPS[2].0);
        let mut stores = 0;
        paths_reaching(&blocks, |unfenced, op, args| match () {
            _ if lock_store(op) => {
                assert!(
                    !unfenced,
                    "{build}: a path through the let-go stores the lock's word with no barrier after \
                     its last load or store: {blocks:?}"
                );
                stores += 1;
                false
            }
            _ if barrier(op) => false,
            _ if global(op, args) => true,
            _ => unfenced,
        });
        assert!(stores > 0, "{build}: the let-go stores no lock word: {blocks:?}");
        assert!(
            blocks
                .iter()
                .flatten()
                .any(|(op, args)| global(op, args) && op.starts_with("st.") && !lock_store(op)),
            "{build}: the let-go stores no CQ head: {blocks:?}"
        );
    }
}

/// (f) also: a transfer's and a path call's try of the solo ring (`io::transfer::solo`,
/// `io::paths_on_solo`) stay inside their callers in the sm_90 build. With `transfer::solo`
/// called out of line, ptxas held a uniform register across a `YIELD` in a test kernel's
/// loops after `open` and `fsync`, and its transfers went wrong (docs/PROTOCOL.md,
/// "Compilers"; `tests/sass_yield.rs` looks for that shape where ptxas is found); this keeps
/// an edit from bringing that layout back unnoticed.
#[test]
fn the_solo_ring_is_tried_inline() {
    if !common::gpu_code_built(
        "the_solo_ring_is_tried_inline",
        &[gpuio_kernels_gpu::TEST_PTX_PATH, gpuio_kernels_gpu::TEST_PTX_SM60_PATH],
    ) {
        return;
    }
    let out_of_line: BTreeSet<String> = instructions(&ptx())
        .into_iter()
        .map(|i| i.func)
        .filter(|f| f.ends_with("2io8transfer4solo") || f.contains("2io13paths_on_solo"))
        .collect();
    assert!(
        out_of_line.is_empty(),
        "sm_90: the solo ring's try is out of line: {out_of_line:?}"
    );
}

/// The memory operations' names.
fn names(ops: &[&Inst]) -> Vec<String> {
    ops.iter().map(|i| i.op.clone()).collect()
}

/// The basic blocks of the function whose symbol ends with `end`, as `(op, args)` lists (a
/// labelled block's first entry is `("label", its label)`), each ending at a branch or a
/// label; a guard predicate (`@%p` / `@!%p`) is left off the op but said in the args (`?`
/// first), so that a guarded branch falls through as well.
fn blocks(text: &str, end: &str) -> Vec<Vec<(String, String)>> {
    // The definition: its header, then its parameters, then `{` (a declaration ends in `;`).
    let all: Vec<&str> = text.lines().collect();
    let body = (0..all.len())
        .filter(|&k| function_name(all[k]).is_some_and(|n| n.ends_with(end)))
        .find_map(|k| {
            let open = k + all[k..]
                .iter()
                .position(|l| l.trim() == "{" || l.trim_end().ends_with(';'))?;
            (all[open].trim() == "{").then_some(open + 1)
        })
        .unwrap_or_else(|| panic!("no function ending in {end} is defined"));
    let mut blocks = vec![(None, Vec::new())];
    for &line in &all[body..] {
        if line == "}" {
            break;
        }
        let line = line.split("//").next().unwrap_or("").trim();
        if let Some(label) = line.strip_suffix(':').filter(|l| l.starts_with('$')) {
            blocks.push((Some(label.to_string()), Vec::new()));
            continue;
        }
        if line.is_empty() || line.starts_with(['.', '{', '}', ')']) {
            continue;
        }
        let line = line.trim_end_matches(';').trim();
        let (guard, inst) = match line.strip_prefix('@') {
            Some(rest) => ("?", rest.split_once(char::is_whitespace).map_or("", |(_, i)| i.trim())),
            None => ("", line),
        };
        let (op, args) = inst.split_once(char::is_whitespace).unwrap_or((inst, ""));
        blocks
            .last_mut()
            .unwrap()
            .1
            .push((op.to_string(), format!("{guard}{}", args.trim())));
        // A branch ends its block: what follows a guarded one (LLVM gives it no label) is
        // the path not taken.
        if op.starts_with("bra") {
            blocks.push((None, Vec::new()));
        }
    }
    // A block's label as its first entry, for the branches.
    blocks
        .into_iter()
        .map(|(label, mut insts)| {
            if let Some(label) = label {
                insts.insert(0, ("label".to_string(), label));
            }
            insts
        })
        .collect()
}

/// Runs `step` over every instruction of `blocks` with the state each path carries (a bool,
/// false on entry; where paths join, true if true on any of them), until nothing changes:
/// `step(state, op, args)` returns the state after the instruction.
fn paths_reaching(blocks: &[Vec<(String, String)>], mut step: impl FnMut(bool, &str, &str) -> bool) {
    let index = |label: &str| {
        blocks
            .iter()
            .position(|b| b.first().is_some_and(|(op, l)| op == "label" && l == label))
            .unwrap_or_else(|| panic!("no block {label}"))
    };
    // Each block's successors: its branches' targets, and the next block unless it ends in
    // an unguarded branch or a return.
    let succs: Vec<Vec<usize>> = blocks
        .iter()
        .enumerate()
        .map(|(k, b)| {
            let last = b.last().filter(|(op, _)| op != "label");
            let mut next: Vec<usize> = last
                .filter(|(op, _)| op.starts_with("bra"))
                .map(|(_, args)| index(args.trim_start_matches('?').trim()))
                .into_iter()
                .collect();
            let ends = last.is_some_and(|(op, args)| (op.starts_with("bra") && !args.starts_with('?')) || op == "ret");
            if !ends && k + 1 < blocks.len() {
                next.push(k + 1);
            }
            next
        })
        .collect();
    let mut entry: Vec<Option<bool>> = vec![None; blocks.len()];
    entry[0] = Some(false);
    let mut work = vec![0];
    while let Some(k) = work.pop() {
        let mut state = entry[k].unwrap();
        for (op, args) in &blocks[k] {
            if op != "label" {
                state = step(state, op, args);
            }
        }
        for &n in &succs[k] {
            let joined = entry[n].map_or(state, |s| s || state);
            if entry[n] != Some(joined) {
                entry[n] = Some(joined);
                work.push(n);
            }
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
