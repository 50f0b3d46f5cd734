//! The amdgcn code objects build.rs made from `kernels/`, one per GPU (gfx90a, gfx942,
//! gfx1100), checked without a GPU:
//!
//! - the ELF header: `EM_AMDGPU`, the HSA OS ABI, code object v5, the processor in
//!   `e_flags` (values from LLVM's `ELF.h`, written out here, not taken from gpuio);
//! - the dynamic symbols: every kernel's descriptor `<name>.kd`, `gpuio_context` and `gpuio_layout`;
//! - the `NT_AMDGPU_METADATA` note: the kernels with their segment sizes and arguments
//!   (read by gpuio's MessagePack reader, and compared with `llvm-readobj --notes`);
//! - the machine code (`llvm-objdump -d`): the store of the SQ tail is a system-scope
//!   release (invariant 1), as LLVM's AMDGPU memory model lowers it on each processor, and
//!   the reservations (SQ ticket, log bytes) are device atomics that return a value.
//!
//! The llvm tools come with the toolchain's `llvm-tools` component, which the GPU build
//! already needs (build.rs adds it).

use std::mem::offset_of;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpuio::code_object::CodeObject;
use gpuio::device::ring::Ring;
use gpuio::device::stream::Stream;
use gpuio::device::Context;

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
        path: env!("GPUIO_KERNELS_HSACO_GFX90A"),
        mach: 0x3f,
    },
    Target {
        gfx: "gfx942",
        path: env!("GPUIO_KERNELS_HSACO_GFX942"),
        mach: 0x4c,
    },
    Target {
        gfx: "gfx1100",
        path: env!("GPUIO_KERNELS_HSACO_GFX1100"),
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
    let table: &[(&str, &[u8])] = include!(env!("GPUIO_KERNELS_AMDGCN"));
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

/// One disassembled instruction: mnemonic and operands.
struct Insn {
    op: String,
    args: String,
}

fn disassemble(objdump: &Path, t: &Target) -> Vec<Insn> {
    let text = run(objdump, &["-d", "--no-show-raw-insn"], t.path);
    text.lines()
        .filter(|l| l.starts_with('\t'))
        .map(|l| {
            let code = l.trim().split("//").next().unwrap_or("").trim();
            let (op, args) = code.split_once(' ').unwrap_or((code, ""));
            Insn {
                op: op.to_string(),
                args: args.trim().to_string(),
            }
        })
        .filter(|i| !i.op.is_empty())
        .collect()
}

/// The system-scope release LLVM's AMDGPU memory model emits before a store (AMDGPUUsage,
/// "Memory Model"): write back L2 on gfx90a (`buffer_wbl2`) and gfx942
/// (`buffer_wbl2 sc0 sc1`), then wait for the earlier stores and loads; gfx11 has no L2
/// writeback to do, it waits for stores (`s_waitcnt_vscnt`) and loads.
fn is_system_release(gfx: &str, before: &[&Insn], store: &Insn) -> bool {
    let has = |op: &str, args: &dyn Fn(&str) -> bool| before.iter().any(|i| i.op == op && args(&i.args));
    let waits_vm = has("s_waitcnt", &|a| a.contains("vmcnt(0)"));
    match gfx {
        "gfx90a" => has("buffer_wbl2", &|a| a.is_empty()) && waits_vm,
        "gfx942" => has("buffer_wbl2", &|a| a == "sc0 sc1") && waits_vm && store.args.ends_with("sc0 sc1"),
        "gfx1100" => has("s_waitcnt_vscnt", &|a| a == "null, 0x0") && waits_vm,
        _ => unreachable!(),
    }
}

#[test]
fn sq_tail_store_is_a_system_release_and_reservations_are_returning_atomics() {
    let objdump = llvm_tool("llvm-objdump");
    let sq_tail = offset_of!(Context, ring) + offset_of!(Ring, sq_tail);
    let tickets = offset_of!(Context, ring) + offset_of!(Ring, tickets);
    // `reserved` of a stream: from the stream, or from the context (stdout's, stderr's).
    let in_stream = offset_of!(Stream, reserved);
    let from_ctx = offset_of!(Context, streams) + in_stream;
    let reserved = [in_stream, from_ctx, from_ctx + size_of::<Stream>()];
    for t in TARGETS {
        let code = disassemble(&objdump, t);
        let g = t.gfx;
        // The tail store: load the `sq_tail` pointer (a 64-bit load at its offset in the
        // Context), then a 32-bit store through that register pair.
        let mut tail_stores = 0;
        for (i, load) in code.iter().enumerate() {
            let is_ptr_load = matches!(
                load.op.as_str(),
                "flat_load_dwordx2" | "global_load_dwordx2" | "flat_load_b64" | "global_load_b64"
            );
            if !is_ptr_load || !load.args.ends_with(&format!("offset:{sq_tail}")) {
                continue;
            }
            let reg = load.args.split(',').next().unwrap().trim().to_string();
            let Some(j) = (i + 1..(i + 12).min(code.len())).find(|&j| {
                let s = &code[j];
                matches!(
                    s.op.as_str(),
                    "flat_store_dword" | "global_store_dword" | "flat_store_b32" | "global_store_b32"
                ) && s.args.starts_with(&format!("{reg},"))
            }) else {
                continue;
            };
            let window: Vec<&Insn> = code[i + 1..j].iter().collect();
            assert!(
                is_system_release(g, &window, &code[j]),
                "{g}: the SQ tail store `{} {}` is not preceded by a system-scope release; between the pointer load and it: {:?}",
                code[j].op,
                code[j].args,
                window.iter().map(|i| format!("{} {}", i.op, i.args)).collect::<Vec<_>>()
            );
            tail_stores += 1;
        }
        assert!(
            tail_stores > 0,
            "{g}: found no store of the SQ tail (pointer at Context offset {sq_tail})"
        );

        // Reservations: fetch_add with the old value returned (a destination register and
        // the `glc` bit on gfx90a and gfx11, `sc0` on gfx942, where `sc1` also makes it
        // system scope), at the field's offset: in the instruction, or added to the
        // address just before (the stream is picked at run time).
        let returning = |at: usize, offs: &[usize], wide: bool| {
            let i = &code[at];
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
            let returns = i.args.split(", ").count() == 3
                && match g {
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
        };
        assert!(
            (0..code.len()).any(|i| returning(i, &[tickets], false)),
            "{g}: no returning 32-bit atomic add on the SQ tickets (Context offset {tickets})"
        );
        assert!(
            (0..code.len()).any(|i| returning(i, &reserved, true)),
            "{g}: no returning 64-bit atomic add on a log's reserved bytes (offsets {reserved:#x?})"
        );
        eprintln!("{g}: {tail_stores} SQ tail store(s), each after a system-scope release");
    }
}
