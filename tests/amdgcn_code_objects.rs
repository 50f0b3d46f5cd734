//! The amdgcn code objects build.rs made from `kernels/`, one per GPU (gfx90a, gfx942,
//! gfx1100), checked without a GPU:
//!
//! - the ELF header: `EM_AMDGPU`, the HSA OS ABI, code object v5, the processor in
//!   `e_flags` (values from LLVM's `ELF.h`, written out here, not taken from gpuio);
//! - the dynamic symbols: every kernel's descriptor `<name>.kd`, `gpuio_context` and `gpuio_layout`;
//! - the `NT_AMDGPU_METADATA` note: the kernels with their segment sizes and arguments
//!   (read by gpuio's MessagePack reader, and compared with `llvm-readobj --notes`);
//! - the machine code (`llvm-objdump -d`): on every path into them, the stores of the SQ
//!   tail (invariant 1) and of the SQ ready flags, and `Stream::commit`'s counter adds,
//!   come after a system-scope release as LLVM's AMDGPU memory model lowers it on each
//!   processor; and the reservations (SQ ticket, log bytes) are device atomics that return
//!   a value.
//!
//! The llvm tools come with the toolchain's `llvm-tools` component, which the GPU build
//! already needs (build.rs adds it).

use std::collections::{BTreeSet, HashSet};
use std::mem::offset_of;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use gpuio::code_object::CodeObject;
use gpuio::device::ring::Ring;
use gpuio::device::stream::Stream;
use gpuio::device::Context;

#[allow(dead_code)]
mod common;

/// Whether the LLVM tools of the toolchain can be found (through `rustc`); if not, reports
/// the test as skipped (the GPU machine runs prebuilt test binaries, without a toolchain).
fn tools_here(test: &str) -> bool {
    match common::missing_program("rustc") {
        Some(why) => {
            common::skip(
                test,
                &format!("it reads the code objects with llvm-objdump/llvm-readobj: {why}"),
            );
            false
        }
        None => true,
    }
}

const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;
const ELFABIVERSION_AMDGPU_HSA_V5: u8 = 3;
const ET_DYN: u16 = 3;

/// One built code object and what it must be.
struct Target {
    gfx: &'static str,
    path: &'static str,
    /// `EF_AMDGPU_MACH_AMDGCN_*`.
    mach: u32,
}

const TARGETS: &[Target] = &[
    Target {
        gfx: "gfx90a",
        path: gpuio_kernels_gpu::TEST_HSACO_PATHS[0].1,
        mach: 0x3f,
    },
    Target {
        gfx: "gfx942",
        path: gpuio_kernels_gpu::TEST_HSACO_PATHS[1].1,
        mach: 0x4c,
    },
    Target {
        gfx: "gfx1100",
        path: gpuio_kernels_gpu::TEST_HSACO_PATHS[2].1,
        mach: 0x41,
    },
];

/// The kernels of `kernels/` (and the drain kernel every gpuio code object exports), with
/// their explicit arguments' sizes.
const KERNELS: &[(&str, &[u64])] = &[
    ("hello", &[]),
    ("stress", &[4, 4]),
    ("literal", &[4]),
    ("trap_after_print", &[4]),
    ("gpuio_drain", &[]),
];

fn read(t: &Target) -> Vec<u8> {
    let bytes = std::fs::read(Path::new(t.path)).unwrap_or_else(|e| panic!("reading {}: {e}", t.path));
    assert!(
        !bytes.is_empty(),
        "{} is empty: this build skipped the GPU kernels (GPUIO_SKIP_GPU_BUILD=1); rebuild without it",
        t.path
    );
    bytes
}

#[test]
fn the_build_table_lists_every_target() {
    let table: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_AMDGCN;
    let names: Vec<&str> = table.iter().map(|(g, _)| *g).collect();
    assert_eq!(names, TARGETS.iter().map(|t| t.gfx).collect::<Vec<_>>());
    for ((_, bytes), t) in table.iter().zip(TARGETS) {
        assert_eq!(*bytes, &read(t)[..], "{}: the table's bytes are the file's", t.gfx);
    }
}

#[test]
fn headers_symbols_and_metadata() {
    for t in TARGETS {
        let bytes = read(t);
        let co = CodeObject::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", t.gfx));
        let g = t.gfx;
        assert_eq!(co.machine, EM_AMDGPU, "{g}: e_machine");
        assert_eq!(co.os_abi, ELFOSABI_AMDGPU_HSA, "{g}: EI_OSABI");
        assert_eq!(
            co.abi_version, ELFABIVERSION_AMDGPU_HSA_V5,
            "{g}: EI_ABIVERSION (code object v5)"
        );
        assert_eq!(co.kind, ET_DYN, "{g}: e_type");
        assert_eq!(
            co.flags & 0xff,
            t.mach,
            "{g}: EF_AMDGPU_MACH in e_flags {:#x}",
            co.flags
        );
        assert_eq!(co.processor(), Some(g), "{g}: processor name");
        assert_eq!(co.metadata_version, [1, 2], "{g}: amdhsa.version of code object v5");

        assert!(co.defines("gpuio_context"), "{g}: gpuio_context is not exported");
        assert!(
            co.defines("gpuio_layout"),
            "{g}: gpuio_layout is not exported (the host checks it before using a code object)"
        );
        let undefined: Vec<&str> = co
            .dynamic_symbols
            .iter()
            .filter(|(_, d)| !d)
            .map(|(n, _)| n.as_str())
            .collect();
        assert!(undefined.is_empty(), "{g}: undefined dynamic symbols {undefined:?}");

        for &(name, explicit) in KERNELS {
            assert!(co.defines(&format!("{name}.kd")), "{g}: no kernel descriptor {name}.kd");
            let k = co
                .kernel(name)
                .unwrap_or_else(|| panic!("{g}: the metadata lacks kernel {name}"));
            assert_eq!(k.symbol, format!("{name}.kd"), "{g}: {name}'s .symbol");
            let sizes: Vec<u64> = k.explicit_args().map(|a| a.size).collect();
            assert_eq!(sizes, explicit, "{g}: {name}'s explicit arguments");
            let end = k.args.iter().map(|a| a.offset + a.size).max().unwrap_or(0);
            assert!(
                k.kernarg_segment_size >= end,
                "{g}: {name}: .kernarg_segment_size {} < end of arguments {end}",
                k.kernarg_segment_size
            );
            assert_eq!(k.group_segment_fixed_size, 0, "{g}: {name}: no LDS expected");
        }
        // core::fmt recurses through dyn calls: the launcher must size the private segment.
        assert!(
            co.kernel("hello").unwrap().uses_dynamic_stack,
            "{g}: hello formats, it should use a dynamic stack"
        );
    }
}

/// `<sysroot>/lib/rustlib/<host>/bin/<tool>` of the toolchain that built the kernels.
fn llvm_tool(tool: &str) -> PathBuf {
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

fn run(tool: &Path, args: &[&str], file: &str) -> String {
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

#[test]
fn metadata_agrees_with_llvm_readobj() {
    if !tools_here("metadata_agrees_with_llvm_readobj") {
        return;
    }
    let readobj = llvm_tool("llvm-readobj");
    for t in TARGETS {
        let co = CodeObject::parse(&read(t)).unwrap();
        let yaml = run(&readobj, &["--notes"], t.path);
        assert!(yaml.contains("NT_AMDGPU_METADATA"), "{}: no metadata note", t.gfx);
        // Kernels are `  - ` entries; their scalar fields are indented four spaces.
        let mut entries: Vec<Vec<(String, String)>> = Vec::new();
        for line in yaml.lines() {
            if line.starts_with("  - ") {
                entries.push(Vec::new());
            }
            let field = line.strip_prefix("  - ").or_else(|| line.strip_prefix("    "));
            if let (Some(field), Some(entry)) = (field, entries.last_mut()) {
                if let Some((k, v)) = field.split_once(':') {
                    if k.starts_with('.') && !k.contains(' ') {
                        entry.push((k.to_string(), v.trim().to_string()));
                    }
                }
            }
        }
        for &(name, _) in KERNELS {
            let entry = entries
                .iter()
                .find(|e| e.iter().any(|(k, v)| k == ".name" && v == name))
                .unwrap_or_else(|| panic!("{}: llvm-readobj shows no kernel {name}", t.gfx));
            let get = |key: &str| entry.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
            let k = co.kernel(name).unwrap();
            for (key, ours) in [
                (".kernarg_segment_size", k.kernarg_segment_size),
                (".group_segment_fixed_size", k.group_segment_fixed_size),
                (".private_segment_fixed_size", k.private_segment_fixed_size),
            ] {
                assert_eq!(get(key), Some(ours.to_string().as_str()), "{}: {name} {key}", t.gfx);
            }
            assert_eq!(
                get(".uses_dynamic_stack") == Some("true"),
                k.uses_dynamic_stack,
                "{}: {name} .uses_dynamic_stack",
                t.gfx
            );
        }
    }
}

/// One disassembled instruction: address, mnemonic and operands.
struct Insn {
    addr: u64,
    op: String,
    args: String,
}

impl Insn {
    /// `op args`, for messages.
    fn text(&self) -> String {
        format!("{} {}", self.op, self.args).trim_end().to_string()
    }

    /// The operands, and for a gfx11 dual-issue (VOPD) line, the second half's too, each
    /// half with its own mnemonic.
    fn halves(&self) -> Vec<(&str, Vec<&str>)> {
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

    fn is_plain_store(&self) -> bool {
        self.op.starts_with("flat_store") || self.op.starts_with("global_store")
    }

    fn is_store32(&self) -> bool {
        matches!(
            self.op.as_str(),
            "flat_store_dword" | "global_store_dword" | "flat_store_b32" | "global_store_b32"
        )
    }

    /// An atomic add of 32 bits that returns nothing (a relaxed counter bump).
    fn is_add32_no_return(&self) -> bool {
        let ops = [
            "flat_atomic_add",
            "global_atomic_add",
            "flat_atomic_add_u32",
            "global_atomic_add_u32",
        ];
        ops.contains(&self.op.as_str()) && !self.returns()
    }

    /// Whether an atomic writes the old value back: the `glc` bit, `sc0` on gfx942.
    fn returns(&self) -> bool {
        self.args.split_whitespace().any(|w| w == "glc" || w == "sc0")
    }

    /// The registers holding the address of a store or of an atomic that returns nothing:
    /// `vaddr` (and `saddr` for global instructions).
    fn address_regs(&self) -> Vec<Reg> {
        let ops: Vec<&str> = self.args.split(", ").collect();
        let mut r = regs(ops[0]);
        if self.op.starts_with("global_") && ops.len() > 2 {
            r.extend(regs(ops[2]));
        }
        r
    }
}

/// A register: file (`v`, `s`, `a`) and number.
type Reg = (u8, u32);

/// A set of registers (v0-v255, a0-a255, s0-s127), one bit each.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Regs([u64; 10]);

impl Regs {
    fn bit(r: Reg) -> Option<usize> {
        let (base, count) = match r.0 {
            b'v' => (0, 256),
            b'a' => (256, 256),
            b's' => (512, 128),
            _ => return None,
        };
        let n = r.1 as usize;
        (n < count).then_some(base + n)
    }
    fn of(rs: &[Reg]) -> Regs {
        let mut set = Regs::default();
        rs.iter().for_each(|&r| set.insert(r));
        set
    }
    fn insert(&mut self, r: Reg) {
        if let Some(b) = Regs::bit(r) {
            self.0[b / 64] |= 1 << (b % 64);
        }
    }
    fn remove(&mut self, r: Reg) {
        if let Some(b) = Regs::bit(r) {
            self.0[b / 64] &= !(1 << (b % 64));
        }
    }
    fn contains(&self, r: Reg) -> bool {
        Regs::bit(r).is_some_and(|b| self.0[b / 64] & (1 << (b % 64)) != 0)
    }
    fn any(&self, rs: &[Reg]) -> bool {
        rs.iter().any(|&r| self.contains(r))
    }
    fn is_empty(&self) -> bool {
        self.0 == [0; 10]
    }
}

/// The registers an operand names: `v7`, `v[4:5]`, `s[0:1]`, `a3` (and none for `vcc`,
/// `exec`, constants, modifiers).
fn regs(operand: &str) -> Vec<Reg> {
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
struct Code {
    insns: Vec<Insn>,
    /// Whether an instruction is the first of a function (symbol).
    starts: Vec<bool>,
    /// The function each instruction belongs to, for messages.
    func: Vec<String>,
    /// The instructions that may run right before each one: the one above it (unless that
    /// one ends its block unconditionally) and every branch to it.
    preds: Vec<Vec<usize>>,
    /// The reverse.
    succs: Vec<Vec<usize>>,
}

/// Where a direct branch goes: `s_branch` and `s_cbranch_*` take a signed count of words
/// from the next instruction (objdump prints it as an unsigned 16-bit number).
fn branch_target(i: &Insn) -> Option<u64> {
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
fn disassembled() -> &'static [Code] {
    static CODE: OnceLock<Vec<Code>> = OnceLock::new();
    CODE.get_or_init(|| {
        let objdump = llvm_tool("llvm-objdump");
        std::thread::scope(|s| {
            let each: Vec<_> = TARGETS.iter().map(|t| s.spawn(|| disassemble(&objdump, t))).collect();
            each.into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    })
}

fn disassemble(objdump: &Path, t: &Target) -> Code {
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

impl Code {
    /// `op args at 0x… in function`, for messages.
    fn at(&self, i: usize) -> String {
        let insn = &self.insns[i];
        format!("`{}` at {:#x} in {}", insn.text(), insn.addr, self.func[i])
    }

    /// The loads of a pointer field at one of `fields` (bytes from the loaded-from pointer),
    /// alone or with its neighbours in one wider load: each load's index and the two
    /// registers the pointer lands in.
    fn pointer_loads(&self, fields: &[usize]) -> Vec<(usize, Vec<Reg>)> {
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
    fn propagate(&self, i: usize, held: &mut Regs) {
        for (op, ops) in self.insns[i].halves() {
            let no_dest = op.starts_with("s_waitcnt")
                || op.starts_with("s_cbranch")
                || op.starts_with("s_cmp")
                || op.starts_with("v_cmpx")
                || op.starts_with("buffer_")
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
    fn store32_through(&self, load: usize, ptr: &[Reg]) -> Option<usize> {
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
    /// a load put in `ptr`, on any path from it (loops included: the pointer may be loaded
    /// at the end of one iteration for the next). The search is bounded; what it misses is
    /// not checked, so the test prints how many it found.
    fn adds_through(&self, load: usize, ptr: &[Reg], found: &mut BTreeSet<usize>) {
        let mut seen = HashSet::new();
        let mut work = vec![(load, Regs::of(ptr))];
        let mut steps = 0;
        while let Some((k, held)) = work.pop() {
            steps += 1;
            if steps > 50_000 {
                break;
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
                    work.push((j, next));
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
    fn unreleased_path(&self, gfx: &str, x: usize) -> Option<String> {
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
fn returning_adds(gfx: &str, code: &Code, offs: &[usize], wide: bool) -> usize {
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
fn assert_none(what: &str, problems: &[String]) {
    if problems.is_empty() {
        return;
    }
    let mut shown: Vec<&str> = Vec::new();
    for t in TARGETS {
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

#[test]
fn sq_tail_store_is_a_system_release_and_reservations_are_returning_atomics() {
    if !tools_here("sq_tail_store_is_a_system_release_and_reservations_are_returning_atomics") {
        return;
    }
    let sq_tail = offset_of!(Context, ring) + offset_of!(Ring, sq_tail);
    let tickets = offset_of!(Context, ring) + offset_of!(Ring, tickets);
    // `reserved` of a stream: from the stream, or from the context (stdout's, stderr's).
    let in_stream = offset_of!(Stream, reserved);
    let from_ctx = offset_of!(Context, streams) + in_stream;
    let reserved = [in_stream, from_ctx, from_ctx + size_of::<Stream>()];
    let mut problems = Vec::new();
    for (t, code) in TARGETS.iter().zip(disassembled()) {
        let insns = &code.insns;
        let g = t.gfx;
        // The tail store: load the `sq_tail` pointer (a 64-bit load at its offset in the
        // Context), then a 32-bit store through that register pair.
        let mut tail_stores = 0;
        for (i, load) in insns.iter().enumerate() {
            let is_ptr_load = matches!(
                load.op.as_str(),
                "flat_load_dwordx2" | "global_load_dwordx2" | "flat_load_b64" | "global_load_b64"
            );
            if !is_ptr_load || !load.args.ends_with(&format!("offset:{sq_tail}")) {
                continue;
            }
            let reg = load.args.split(',').next().unwrap().trim().to_string();
            let Some(j) = (i + 1..(i + 12).min(insns.len()))
                .find(|&j| insns[j].is_store32() && insns[j].args.starts_with(&format!("{reg},")))
            else {
                continue;
            };
            if let Some(why) = code.unreleased_path(g, j) {
                problems.push(format!(
                    "{g}: the SQ tail store {} is not preceded by a system-scope release on every path: {why}",
                    code.at(j)
                ));
            } else if g == "gfx942" && !insns[j].args.ends_with("sc0 sc1") {
                problems.push(format!(
                    "{g}: the SQ tail store {} lacks `sc0 sc1` (system scope)",
                    code.at(j)
                ));
            }
            tail_stores += 1;
        }
        if tail_stores == 0 {
            problems.push(format!(
                "{g}: found no store of the SQ tail (pointer at Context offset {sq_tail})"
            ));
        }

        // Reservations: fetch_add with the old value returned.
        if returning_adds(g, code, &[tickets], false) == 0 {
            problems.push(format!(
                "{g}: no returning 32-bit atomic add on the SQ tickets (Context offset {tickets})"
            ));
        }
        if returning_adds(g, code, &reserved, true) == 0 {
            problems.push(format!(
                "{g}: no returning 64-bit atomic add on a log's reserved bytes (offsets {reserved:#x?})"
            ));
        }
        eprintln!("{g}: {tail_stores} SQ tail store(s) checked");
    }
    assert_none("SQ tail stores and reservations", &problems);
}

/// `Ring::submit` step 4 (`ready[t & mask].store(t + 1, Release)`): the flag that tells
/// the publisher an SQE is written must be a system-scope release, or the kernel may read
/// the SQE (and the bytes it points at) before they are visible to it. The store is found
/// by where it stores: into the `ready` array, through the pointer loaded from the Context
/// plus a computed index; each inlined `submit` takes one ticket and stores one flag, so
/// the flags found must match the ticket adds.
#[test]
fn sq_ready_flag_store_is_a_system_release() {
    if !tools_here("sq_ready_flag_store_is_a_system_release") {
        return;
    }
    let ready = offset_of!(Context, ring) + offset_of!(Ring, ready);
    let tickets = offset_of!(Context, ring) + offset_of!(Ring, tickets);
    let mut problems = Vec::new();
    for (t, code) in TARGETS.iter().zip(disassembled()) {
        let g = t.gfx;
        let stores: BTreeSet<usize> = code
            .pointer_loads(&[ready])
            .into_iter()
            .filter_map(|(load, ptr)| code.store32_through(load, &ptr))
            .collect();
        let submits = returning_adds(g, code, &[tickets], false);
        if stores.is_empty() || stores.len() != submits {
            problems.push(format!(
                "{g}: found {} ready-flag store(s) (32-bit stores into the array whose pointer is at Context offset {ready}) \
                 for {submits} SQ ticket add(s): each Ring::submit makes one of each",
                stores.len()
            ));
        }
        for &j in &stores {
            if let Some(why) = code.unreleased_path(g, j) {
                problems.push(format!(
                    "{g}: the SQ ready-flag store {} is not preceded by a system-scope release on every path: {why}",
                    code.at(j)
                ));
            } else if g == "gfx942" && !code.insns[j].args.ends_with("sc0 sc1") {
                problems.push(format!(
                    "{g}: the SQ ready-flag store {} lacks `sc0 sc1` (system scope)",
                    code.at(j)
                ));
            }
        }
        eprintln!(
            "{g}: {} SQ ready-flag store(s) checked, one per ticket add",
            stores.len()
        );
    }
    assert_none("SQ ready-flag stores", &problems);
}

/// `Stream::commit`: one release fence, then relaxed adds to the chunk counters the
/// flusher reads. The fence is what makes the record's bytes visible to the host before
/// the flusher can see them counted: on gfx942 each XCD has its own L2, and only the
/// writer's L2 writeback puts its bytes in memory, so the flusher's later release (from
/// another XCD, perhaps) cannot stand in for it. rustc drops `#[inline(never)]` on amdgpu
/// (LLVM's `noinline` is not set for that target), so commit is inlined wherever it is
/// called; its adds are found by their address instead: a counter of the array whose
/// pointer is `Stream::chunks`, loaded from a stream (or from the Context's streams).
#[test]
fn stream_commit_fences_before_its_counter_adds() {
    if !tools_here("stream_commit_fences_before_its_counter_adds") {
        return;
    }
    let chunks = offset_of!(Stream, chunks);
    let mut fields = vec![chunks];
    for s in 0..gpuio::device::context::STREAMS {
        fields.push(offset_of!(Context, streams) + s * size_of::<Stream>() + chunks);
    }
    let mut problems = Vec::new();
    for (t, code) in TARGETS.iter().zip(disassembled()) {
        let g = t.gfx;
        let mut adds = BTreeSet::new();
        for (load, ptr) in code.pointer_loads(&fields) {
            code.adds_through(load, &ptr, &mut adds);
        }
        if adds.is_empty() {
            problems.push(format!(
                "{g}: found no chunk-counter add (a 32-bit atomic add without a result into the array \
                 whose pointer is Stream::chunks, offset {chunks} in a Stream)"
            ));
        }
        for &j in &adds {
            if let Some(why) = code.unreleased_path(g, j) {
                problems.push(format!(
                    "{g}: Stream::commit's counter add {} is not preceded by a system-scope release fence on every path: {why}",
                    code.at(j)
                ));
            }
        }
        eprintln!("{g}: {} Stream::commit counter add(s) checked", adds.len());
    }
    assert_none("Stream::commit's release fence", &problems);
}
