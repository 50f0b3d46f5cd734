//! The machine code as the tests read it: the toolchain's llvm tools, each target's code
//! disassembled once into instructions, the registers they name, and the control flow
//! between them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::{read, targets, Target};

/// `<sysroot>/lib/rustlib/<host>/bin/<tool>` of the toolchain that built the kernels.
pub(crate) fn llvm_tool(tool: &str) -> PathBuf {
    let rustc = |arg: &str| {
        let out = Command::new("rustc")
            .arg(arg)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("running rustc");
        String::from_utf8(out.stdout).expect("rustc output")
    };
    let sysroot = rustc("--print=sysroot").trim().to_string();
    let host = rustc("-vV")
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV prints the host")
        .to_string();
    let path = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(host)
        .join("bin")
        .join(tool);
    assert!(
        path.is_file(),
        "{} not found: add the llvm-tools component (rustup component add llvm-tools)",
        path.display()
    );
    path
}

pub(crate) fn run(tool: &Path, args: &[&str], file: &str) -> String {
    let out = Command::new(tool)
        .args(args)
        .arg(file)
        .output()
        .expect("running an llvm tool");
    assert!(
        out.status.success(),
        "{} failed: {}",
        tool.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("llvm tool output")
}

/// One disassembled instruction: address, mnemonic and operands.
pub(crate) struct Insn {
    pub(crate) addr: u64,
    pub(crate) op: String,
    pub(crate) args: String,
}

impl Insn {
    /// `op args`, for messages.
    pub(crate) fn text(&self) -> String {
        format!("{} {}", self.op, self.args).trim_end().to_string()
    }

    /// The operands, and for a gfx11 dual-issue (VOPD) line, the second half's too, each
    /// half with its own mnemonic.
    pub(crate) fn halves(&self) -> Vec<(&str, Vec<&str>)> {
        match self.args.split_once(" :: ") {
            Some((first, second)) => {
                let (op2, args2) = second.split_once(' ').unwrap_or((second, ""));
                vec![
                    (self.op.as_str(), first.split(", ").collect()),
                    (op2, args2.split(", ").collect()),
                ]
            }
            None => vec![(self.op.as_str(), self.args.split(", ").collect())],
        }
    }

    pub(crate) fn is_plain_store(&self) -> bool {
        self.op.starts_with("flat_store") || self.op.starts_with("global_store")
    }

    pub(crate) fn is_store32(&self) -> bool {
        matches!(
            self.op.as_str(),
            "flat_store_dword" | "global_store_dword" | "flat_store_b32" | "global_store_b32"
        )
    }

    /// An atomic add of 32 bits that returns nothing (a relaxed counter bump).
    pub(crate) fn is_add32_no_return(&self) -> bool {
        let ops = [
            "flat_atomic_add",
            "global_atomic_add",
            "flat_atomic_add_u32",
            "global_atomic_add_u32",
        ];
        ops.contains(&self.op.as_str()) && !self.returns()
    }

    /// Whether an atomic writes the old value back: the `glc` bit, `sc0` on gfx942.
    pub(crate) fn returns(&self) -> bool {
        self.args.split_whitespace().any(|w| w == "glc" || w == "sc0")
    }

    /// The registers holding the address of a store or of an atomic that returns nothing:
    /// `vaddr` (and `saddr` for global instructions).
    pub(crate) fn address_regs(&self) -> Vec<Reg> {
        let ops: Vec<&str> = self.args.split(", ").collect();
        let mut r = regs(ops[0]);
        if self.op.starts_with("global_") && ops.len() > 2 {
            r.extend(regs(ops[2]));
        }
        r
    }
}

/// A register: file (`v`, `s`, `a`) and number.
pub(crate) type Reg = (u8, u32);

/// A set of registers (v0-v255, a0-a255, s0-s127), one bit each.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct Regs([u64; 10]);

impl Regs {
    pub(crate) fn bit(r: Reg) -> Option<usize> {
        let (base, count) = match r.0 {
            b'v' => (0, 256),
            b'a' => (256, 256),
            b's' => (512, 128),
            _ => return None,
        };
        let n = r.1 as usize;
        (n < count).then_some(base + n)
    }
    pub(crate) fn of(rs: &[Reg]) -> Regs {
        let mut set = Regs::default();
        rs.iter().for_each(|&r| set.insert(r));
        set
    }
    pub(crate) fn insert(&mut self, r: Reg) {
        if let Some(b) = Regs::bit(r) {
            self.0[b / 64] |= 1 << (b % 64);
        }
    }
    pub(crate) fn remove(&mut self, r: Reg) {
        if let Some(b) = Regs::bit(r) {
            self.0[b / 64] &= !(1 << (b % 64));
        }
    }
    pub(crate) fn contains(&self, r: Reg) -> bool {
        Regs::bit(r).is_some_and(|b| self.0[b / 64] & (1 << (b % 64)) != 0)
    }
    pub(crate) fn any(&self, rs: &[Reg]) -> bool {
        rs.iter().any(|&r| self.contains(r))
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0 == [0; 10]
    }
}

/// The registers an operand names: `v7`, `v[4:5]`, `s[0:1]`, `a3` (and none for `vcc`,
/// `exec`, constants, modifiers).
pub(crate) fn regs(operand: &str) -> Vec<Reg> {
    let tok = operand.split_whitespace().next().unwrap_or("");
    let Some(&file @ (b'v' | b's' | b'a')) = tok.as_bytes().first() else {
        return Vec::new();
    };
    let rest = &tok[1..];
    let range: Option<(u32, u32)> = match rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        Some(r) => r
            .split_once(':')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?))),
        None => rest.parse().ok().map(|n| (n, n)),
    };
    range
        .map(|(a, b)| (a..=b).map(|n| (file, n)).collect())
        .unwrap_or_default()
}

/// A code object's machine code in address order, with its control flow.
pub(crate) struct Code {
    pub(crate) insns: Vec<Insn>,
    /// Whether an instruction is the first of a function (symbol).
    pub(crate) starts: Vec<bool>,
    /// The function each instruction belongs to, for messages.
    pub(crate) func: Vec<String>,
    /// The instructions that may run right before each one: the one above it (unless that
    /// one ends its block unconditionally) and every branch to it.
    pub(crate) preds: Vec<Vec<usize>>,
    /// The reverse.
    pub(crate) succs: Vec<Vec<usize>>,
}

/// Where a direct branch goes: `s_branch` and `s_cbranch_*` take a signed count of words
/// from the next instruction (objdump prints it as an unsigned 16-bit number).
pub(crate) fn branch_target(i: &Insn) -> Option<u64> {
    if i.op != "s_branch" && !i.op.starts_with("s_cbranch_") {
        return None;
    }
    let words: u16 = i
        .args
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("a branch without a word count: {}", i.text()));
    Some(i.addr.wrapping_add(4).wrapping_add_signed(4 * i64::from(words as i16)))
}

/// Each target's code, disassembled once for all the tests here (llvm-objdump takes
/// seconds per code object).
pub(crate) fn disassembled() -> &'static [Code] {
    static CODE: OnceLock<Vec<Code>> = OnceLock::new();
    CODE.get_or_init(|| {
        let objdump = llvm_tool("llvm-objdump");
        std::thread::scope(|s| {
            let each: Vec<_> = targets().iter().map(|t| s.spawn(|| disassemble(&objdump, t))).collect();
            each.into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    })
}

pub(crate) fn disassemble(objdump: &Path, t: &Target) -> Code {
    read(t); // says so if the GPU builds were skipped
    let text = run(objdump, &["-d", "--no-show-raw-insn", "--demangle"], t.path);
    let (mut insns, mut starts, mut func) = (Vec::new(), Vec::new(), Vec::new());
    let (mut name, mut new_fn) = (String::new(), false);
    for line in text.lines() {
        // `0000000000004700 <name>:` opens a function.
        if let Some((_, n)) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")) {
            (name, new_fn) = (n.to_string(), true);
            continue;
        }
        if !line.starts_with('\t') {
            continue;
        }
        // Each instruction's comment starts with its address (padding, `...`, has none).
        let (code, comment) = line.split_once("//").unwrap_or((line, ""));
        let addr = comment
            .trim()
            .split(':')
            .next()
            .and_then(|a| u64::from_str_radix(a, 16).ok());
        let (code, Some(addr)) = (code.trim(), addr) else {
            continue;
        };
        if code.is_empty() {
            continue;
        }
        let (op, args) = code.split_once(' ').unwrap_or((code, ""));
        insns.push(Insn {
            addr,
            op: op.to_string(),
            args: args.trim().to_string(),
        });
        starts.push(std::mem::take(&mut new_fn));
        func.push(name.clone());
    }
    let mut preds = vec![Vec::new(); insns.len()];
    let mut succs = vec![Vec::new(); insns.len()];
    for (i, insn) in insns.iter().enumerate() {
        if let Some(target) = branch_target(insn) {
            let j = insns.binary_search_by_key(&target, |x| x.addr).unwrap_or_else(|_| {
                panic!(
                    "{}: the branch at {:#x} goes to {target:#x}, not an instruction",
                    t.gfx, insn.addr
                )
            });
            preds[j].push(i);
            succs[i].push(j);
        }
        let ends = matches!(insn.op.as_str(), "s_branch" | "s_setpc_b64" | "s_endpgm");
        if !ends && i + 1 < insns.len() && !starts[i + 1] {
            preds[i + 1].push(i);
            succs[i].push(i + 1);
        }
    }
    Code {
        insns,
        starts,
        func,
        preds,
        succs,
    }
}
