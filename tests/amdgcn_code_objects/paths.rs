//! Following values and paths through the machine code: where a field's pointer is loaded
//! and what it reaches (stores, adds), whether a path into a store misses the release,
//! and the returning atomic adds.

use std::collections::{BTreeSet, HashSet};

use crate::disasm::{regs, Code, Reg, Regs};
use crate::targets;

/// How far (in instructions walked, on each path) [`Code::adds_through`] follows a pointer.
/// Every commit add lies between 30 and 60 instructions from its pointer's load (all three
/// targets find the same adds with any reach from 60 to 300, fewer with 30). Twice the
/// farthest leaves room for codegen to move.
pub(crate) const ADD_REACH: usize = 120;

impl Code {
    /// `op args at 0x… in function`, for messages.
    pub(crate) fn at(&self, i: usize) -> String {
        let insn = &self.insns[i];
        format!("`{}` at {:#x} in {}", insn.text(), insn.addr, self.func[i])
    }

    /// The loads of a pointer field at one of `fields` (bytes from the loaded-from pointer),
    /// alone or with its neighbours in one wider load: each load's index and the two
    /// registers the pointer lands in.
    pub(crate) fn pointer_loads(&self, fields: &[usize]) -> Vec<(usize, Vec<Reg>)> {
        let mut out = Vec::new();
        for (i, insn) in self.insns.iter().enumerate() {
            let dwords = match insn.op.as_str() {
                "flat_load_dwordx2" | "global_load_dwordx2" | "flat_load_b64" | "global_load_b64" => 2,
                "flat_load_dwordx3" | "global_load_dwordx3" | "flat_load_b96" | "global_load_b96" => 3,
                "flat_load_dwordx4" | "global_load_dwordx4" | "flat_load_b128" | "global_load_b128" => 4,
                _ => continue,
            };
            let offset: usize = insn
                .args
                .split_whitespace()
                .find_map(|w| w.strip_prefix("offset:"))
                .map_or(0, |o| o.parse().unwrap());
            let dest = regs(insn.args.split(", ").next().unwrap());
            for &f in fields {
                if f >= offset && (f - offset).is_multiple_of(4) && f + 8 <= offset + 4 * dwords && dest.len() == dwords
                {
                    let k = (f - offset) / 4;
                    out.push((i, dest[k..k + 2].to_vec()));
                }
            }
        }
        out
    }

    /// Follows registers that hold a pointer (or an address computed from it) through one
    /// instruction: an ALU result computed from one of them holds one too; any other write
    /// (a loaded value, an unrelated result) replaces it.
    pub(crate) fn propagate(&self, i: usize, held: &mut Regs) {
        for (op, ops) in self.insns[i].halves() {
            let no_dest = op.starts_with("s_waitcnt")
                || op.starts_with("s_cbranch")
                || op.starts_with("s_cmp")
                || op.starts_with("v_cmpx")
                // Scratch stores, cache writebacks and invalidations write no register; a
                // scratch load (a spilled register reloaded) does.
                || (op.starts_with("buffer_") && !op.starts_with("buffer_load"))
                || op.contains("_store")
                || matches!(
                    op,
                    "s_branch" | "s_nop" | "s_delay_alu" | "s_sleep" | "s_setpc_b64" | "s_endpgm"
                )
                || (op.contains("_atomic_") && !self.insns[i].returns());
            if no_dest {
                continue;
            }
            let dest = regs(ops[0]);
            let alu = op.starts_with("v_") || op.starts_with("s_");
            let from_held = alu && !op.starts_with("s_load") && ops[1..].iter().any(|o| held.any(&regs(o)));
            for r in dest {
                if from_held {
                    held.insert(r);
                } else {
                    held.remove(r);
                }
            }
        }
    }

    /// The first 32-bit store through an address computed from the pointer a load put in
    /// `ptr`, in the straight line after it (falling through conditional branches).
    pub(crate) fn store32_through(&self, load: usize, ptr: &[Reg]) -> Option<usize> {
        let mut held = Regs::of(ptr);
        for j in load + 1..(load + 64).min(self.insns.len()) {
            let insn = &self.insns[j];
            if self.starts[j] {
                return None;
            }
            // A computed address: an array element, not a field at a fixed offset.
            if insn.is_store32() && !insn.args.contains("offset:") && held.any(&insn.address_regs()) {
                return Some(j);
            }
            // An unconditional branch or the end of the function ends the straight line.
            if self.succs[j].iter().all(|&s| s != j + 1) {
                return None;
            }
            self.propagate(j, &mut held);
            if held.is_empty() {
                return None;
            }
        }
        None
    }

    /// The 32-bit atomic adds without a result through an address computed from the pointer
    /// a load put in `ptr`, within [`ADD_REACH`] instructions of it on any path from it
    /// (loops included: the pointer may be loaded at the end of one iteration for the next).
    /// The search is bounded; what it misses is not checked, so the test prints how many it
    /// found.
    pub(crate) fn adds_through(&self, load: usize, ptr: &[Reg], found: &mut BTreeSet<usize>) {
        let mut seen = HashSet::new();
        // (instruction, registers holding the pointer, instructions walked from the load)
        let mut work = vec![(load, Regs::of(ptr), 0)];
        let mut steps = 0;
        while let Some((k, held, walked)) = work.pop() {
            steps += 1;
            if steps > 50_000 {
                break;
            }
            // A commit uses the pointer within a few hundred instructions of loading it.
            // Farther, the walk is mostly lost in joins of divergent branches, where one
            // register holds different values on different lanes and this path-insensitive
            // tracking took an unrelated address for the pointer: the reaper's relaxed
            // counter adds, once several rings put their bases in spilled registers.
            if walked > ADD_REACH {
                continue;
            }
            for &j in &self.succs[k] {
                let insn = &self.insns[j];
                if insn.is_add32_no_return() && !insn.args.contains("offset:") && held.any(&insn.address_regs()) {
                    found.insert(j);
                    continue;
                }
                let mut next = held;
                self.propagate(j, &mut next);
                if !next.is_empty() && seen.insert((j, next)) {
                    work.push((j, next, walked + 1));
                }
            }
        }
    }

    /// Why not every path into instruction `x` passes a system-scope release after the
    /// last store before it, or `None` if every one does. The release is what LLVM's AMDGPU
    /// memory model (AMDGPUUsage, "Memory Model") emits for a system-scope release store or
    /// fence: on gfx90a and gfx942, write back the L2 (`buffer_wbl2`, `sc0 sc1` on gfx942)
    /// and *then* wait for it (`s_waitcnt vmcnt(0)`): the writeback is a memory operation
    /// of its own, and the store may become visible before it completes otherwise. So the
    /// wait must come after the writeback, not just near it: LLVM 22 does not count the
    /// writeback in `vmcnt` and drops the wait when nothing else is outstanding
    /// (llvm/llvm-project#178316 fixes that). gfx11 has no L2 writeback to do: it waits
    /// for the earlier stores (`s_waitcnt_vscnt`). A plain store, a call, or the function's
    /// entry reached first on some path means that path has no release.
    pub(crate) fn unreleased_path(&self, gfx: &str, x: usize) -> Option<String> {
        let writeback = match gfx {
            "gfx90a" => Some(""),
            "gfx942" => Some("sc0 sc1"),
            "gfx1100" => None,
            _ => unreachable!(),
        };
        let mut seen = HashSet::new();
        // (instruction, whether a `vmcnt(0)` wait lies between it and `x` on this path)
        let mut work = vec![(x, false)];
        while let Some((k, waited)) = work.pop() {
            if self.starts[k] {
                return Some(format!("the entry of {} comes first", self.func[k]));
            }
            for &p in &self.preds[k] {
                let i = &self.insns[p];
                let waited = waited || (i.op == "s_waitcnt" && i.args.contains("vmcnt(0)"));
                if writeback.is_some_and(|w| i.op == "buffer_wbl2" && i.args == w) {
                    if waited {
                        continue;
                    }
                    return Some(format!(
                        "the L2 writeback `{}` at {:#x} is not waited for (no `s_waitcnt vmcnt(0)` between it and the store)",
                        i.text(),
                        i.addr
                    ));
                }
                if writeback.is_none() && i.op == "s_waitcnt_vscnt" && i.args == "null, 0x0" {
                    continue;
                }
                if i.is_plain_store() || i.op == "s_swappc_b64" {
                    return Some(format!(
                        "`{}` at {:#x} comes first, with no release after it",
                        i.text(),
                        i.addr
                    ));
                }
                if seen.insert((p, waited)) {
                    work.push((p, waited));
                }
            }
        }
        None
    }
}

/// The returning 32- or 64-bit atomic adds at one of `offs` (in the instruction, or added
/// to the address just before: the field is picked at run time): fetch_add with the old
/// value returned (a destination register and the `glc` bit on gfx90a and gfx11, `sc0` on
/// gfx942, where `sc1` also makes it system scope).
pub(crate) fn returning_adds(gfx: &str, code: &Code, offs: &[usize], wide: bool) -> usize {
    let ops: &[&str] = if wide {
        &[
            "flat_atomic_add_x2",
            "global_atomic_add_x2",
            "flat_atomic_add_u64",
            "global_atomic_add_u64",
        ]
    } else {
        &[
            "flat_atomic_add",
            "global_atomic_add",
            "flat_atomic_add_u32",
            "global_atomic_add_u32",
        ]
    };
    let code = &code.insns;
    (0..code.len())
        .filter(|&at| {
            let i = &code[at];
            let returns = i.args.split(", ").count() == 3
                && match gfx {
                    "gfx942" => i.args.contains(" sc0") && i.args.contains("sc1"),
                    _ => i.args.ends_with(" glc"),
                };
            let at_field = offs.iter().any(|off| {
                i.args.contains(&format!("offset:{off} "))
                    || code[at.saturating_sub(16)..at].iter().any(|a| {
                        (a.op.starts_with("v_add") || a.op.starts_with("v_lshl_add") || a.op.starts_with("s_mov"))
                            && a.args.split(", ").any(|x| x == format!("{off:#x}"))
                    })
            });
            ops.contains(&i.op.as_str()) && returns && at_field
        })
        .count()
}

/// Fails listing `problems` (each starts with its target: the first two of each), if any.
pub(crate) fn assert_none(what: &str, problems: &[String]) {
    if problems.is_empty() {
        return;
    }
    let mut shown: Vec<&str> = Vec::new();
    for t in targets() {
        let prefix = format!("{}:", t.gfx);
        shown.extend(
            problems
                .iter()
                .filter(|p| p.starts_with(&prefix))
                .take(2)
                .map(String::as_str),
        );
    }
    panic!(
        "{what}: {} problem(s); the first of each target:\n  {}",
        problems.len(),
        shown.join("\n  ")
    );
}
