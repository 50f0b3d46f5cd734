//! The warp-aggregated print path in the PTX: `activemask`, `%laneid`, `shfl.sync` and
//! `bar.warp.sync`, each mask operand traced to the group's mask or the full mask.

use std::collections::{BTreeMap, BTreeSet};

use crate::ptx::{instructions, Inst};

/// A value a lane mask operand can hold.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Mask {
    /// What `activemask` returned in this function.
    Group,
    /// All 32 lanes.
    Full,
}

pub(crate) fn check_warp_collectives(ptx: &str, build: &str) {
    let insts = instructions(ptx);
    let collective = |i: &Inst| {
        i.op == "activemask.b32"
            || i.op.starts_with("shfl.sync")
            || i.op == "bar.warp.sync"
            || i.op.starts_with("vote.sync")
    };
    let funcs: BTreeSet<&str> = insts
        .iter()
        .filter(|i| collective(i))
        .map(|i| i.func.as_str())
        .collect();
    assert!(
        !funcs.is_empty(),
        "no activemask/shfl.sync/bar.warp.sync in the PTX: arch::Warp is not used by print, so \
         every lane makes its own record (one SQE-path reservation per line instead of per warp)"
    );

    // `copy::group_copy` gets its group (mask and lane, in its `Warp` argument) from its
    // caller, which forms it with activemask right before the call (copy.rs says why): so
    // every function that calls it must execute activemask, and its own shuffles are
    // checked there for the clamp only.
    let is_group_copy = |f: &str| f.contains("4copy10group_copy");
    let callers: BTreeSet<&str> = insts
        .iter()
        .filter(|i| i.op.starts_with("call") && i.args.iter().any(|a| is_group_copy(a)))
        .map(|i| i.func.as_str())
        .collect();
    assert!(
        !callers.is_empty(),
        "{build}: no call of copy::group_copy found: the file-I/O staging copies are not shared"
    );
    for c in &callers {
        assert!(
            insts.iter().any(|i| i.func == *c && i.op == "activemask.b32"),
            "{build}: {c} calls copy::group_copy without forming the group (activemask) itself"
        );
    }
    for i in insts
        .iter()
        .filter(|i| is_group_copy(&i.func) && i.op == "shfl.sync.idx.b32")
    {
        assert!(
            ["0x1f", "31"].contains(&i.args[3].as_str()),
            "group_copy: shfl.sync.idx clamp {}",
            i.args[3]
        );
    }

    let mut seen = BTreeSet::new();
    for f in funcs.into_iter().filter(|f| !is_group_copy(f)) {
        let body: Vec<&Inst> = insts.iter().filter(|i| i.func == f).collect();
        // Registers holding a lane mask: activemask's result, the constant -1, and what is
        // computed from a group's mask alone: a ballot over it, and `and` with it (the two
        // halves of `Group::split`: `ballot` and `mask & !ballot`), copies and selections
        // of those. Each is the group or a part of it, so a collective with it involves
        // members only.
        let mut masks: BTreeMap<&str, Mask> = BTreeMap::new();
        let full = |a: &str| ["-1", "0xffffffff", "0xFFFFFFFF", "4294967295"].contains(&a);
        loop {
            let before = masks.len();
            for i in &body {
                let Some(dst) = i.args.first() else { continue };
                let arg = |n: usize| i.args.get(n).map(String::as_str).unwrap_or("");
                let group = |a: &str| masks.get(a) == Some(&Mask::Group);
                let part_of_group = (i.op == "vote.sync.ballot.b32" && group(arg(2)))
                    || (i.op == "and.b32" && (group(arg(1)) || group(arg(2))))
                    || (i.op == "selp.b32" && group(arg(1)) && group(arg(2)));
                let m = if i.op == "activemask.b32" || part_of_group {
                    Some(Mask::Group)
                } else if i.op.starts_with("mov.") && i.args.len() == 2 {
                    if full(arg(1)) {
                        Some(Mask::Full)
                    } else {
                        masks.get(arg(1)).copied()
                    }
                } else {
                    None
                };
                if let Some(m) = m {
                    masks.entry(dst.as_str()).or_insert(m);
                }
            }
            if masks.len() == before {
                break;
            }
        }
        let mask_of = |arg: &str| -> Option<Mask> {
            match arg {
                "-1" | "0xffffffff" | "0xFFFFFFFF" | "4294967295" => Some(Mask::Full),
                r => masks.get(r).copied(),
            }
        };
        assert!(
            !body.iter().any(|i| i.op.starts_with("shfl.sync"))
                || body.iter().any(|i| i.args.iter().any(|a| a == "%laneid")),
            "{f} uses warp collectives but never reads %laneid: the exclusive sum needs the lane's rank"
        );
        for i in body.iter().filter(|i| collective(i)) {
            seen.insert(i.op.as_str());
            match i.op.as_str() {
                "activemask.b32" => {}
                "vote.sync.ballot.b32" => assert_eq!(
                    mask_of(&i.args[2]),
                    Some(Mask::Group),
                    "{build} {f}: `vote.sync.ballot` membermask {} is not the group's",
                    i.args[2]
                ),
                "bar.warp.sync" => assert_eq!(
                    mask_of(&i.args[0]),
                    Some(Mask::Group),
                    "{build} {f}: `bar.warp.sync {}` must wait for exactly the group activemask returned, \
                     or the leader flushes before every lane has committed its line",
                    i.args[0]
                ),
                "shfl.sync.idx.b32" => {
                    assert_eq!(i.args.len(), 5, "{build} {f}: shfl.sync.idx operands {:?}", i.args);
                    assert!(
                        ["0x1f", "31"].contains(&i.args[3].as_str()),
                        "{build} {f}: shfl.sync.idx clamp operand is {}, not 0x1f: with a smaller clamp a \
                         read from a high lane returns the reader's own value, so sums and the \
                         broadcast reservation would be wrong (overlapping records)",
                        i.args[3]
                    );
                    assert!(
                        mask_of(&i.args[4]).is_some(),
                        "{build} {f}: shfl.sync.idx membermask {} is neither activemask's result nor the full \
                         mask: shuffling with lanes outside the group hangs or reads garbage",
                        i.args[4]
                    );
                }
                "shfl.sync.up.b32" => {
                    assert_eq!(i.args.len(), 5, "{build} {f}: shfl.sync.up operands {:?}", i.args);
                    assert_eq!(
                        i.args[3], "0",
                        "{build} {f}: shfl.sync.up clamp operand must be 0 (no segments, lanes below the \
                         offset keep their own value, which the scan then ignores)"
                    );
                    assert_eq!(
                        mask_of(&i.args[4]),
                        Some(Mask::Full),
                        "{build} {f}: shfl.sync.up membermask {} is not the full mask: the shfl.up scan is \
                         only right when every lane is a member (a hole would feed a non-member's \
                         value into the sums)",
                        i.args[4]
                    );
                }
                other => panic!("{build} {f}: unexpected warp collective `{other}`"),
            }
        }
    }
    // (No `bar.warp.sync` is required in print: since the leader no longer waits for its
    // lanes, print uses none; `copy::group_copy` has one, checked with its callers above.)
    for op in ["activemask.b32", "shfl.sync.idx.b32", "shfl.sync.up.b32"] {
        assert!(
            seen.contains(op),
            "{build}: no `{op}` in the PTX: arch::Warp's {} is missing",
            match op {
                "activemask.b32" => "group formation (the lanes printing together)",
                "shfl.sync.idx.b32" => "broadcast of the reservation / generic exclusive sum",
                "shfl.sync.up.b32" => "full-warp scan",
                _ => "wait for every lane's line before the leader flushes",
            }
        );
    }
}
