//! The amdgcn code objects kernels-gpu/build.rs made from `kernels-test/` (the test
//! kernels, the example kernels among them), one per GPU (gfx90a, gfx942, gfx1100),
//! checked without a GPU:
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
//!   a value;
//! - the kernels that print spill few registers (the request path is not inlined into each
//!   print site).
//!
//! The same checks run on two CUDA C++ translation units (`tests/cuda/printf_kernel.cu`,
//! `file_kernel.cu`) built for AMD as HIP by clang (`-fgpu-rdc`, bitcode) and joined with the
//! device library by `gpuio_linker::join_amdgcn`, where a clang with HIP's headers is here
//! (Debian's `hipcc`); else they say they skipped it.
//!
//! The llvm tools come with the toolchain's `llvm-tools` component, which the GPU build
//! already needs (build.rs adds it).

use std::collections::BTreeSet;
use std::mem::offset_of;
use std::path::Path;
use std::sync::OnceLock;

use gpuio::code_object::CodeObject;
use gpuio::device::protocol::context::Context;
use gpuio::device::protocol::ring::Ring;
use gpuio::device::protocol::stream::Stream;

#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;
mod cpp;
mod disasm;
mod paths;

use disasm::{disassembled, llvm_tool, run};
use paths::{assert_none, returning_adds};

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
    /// The processor, and for a C++ kernel joined with the device library, that.
    gfx: &'static str,
    path: &'static str,
    /// `EF_AMDGPU_MACH_AMDGCN_*`.
    mach: u32,
    /// Its kernels, with their explicit arguments' sizes.
    kernels: &'static [(&'static str, &'static [u64])],
    /// Its kernels that print (and format: a dynamic stack).
    printers: &'static [&'static str],
}

impl Target {
    /// The processor the code object is for.
    fn processor(&self) -> &str {
        self.gfx.split(' ').next().unwrap_or(self.gfx)
    }
}

/// The test kernels' code objects, one per processor (kernels-gpu/build.rs).
const RUST_TARGETS: [Target; 3] = [
    rust_target("gfx90a", 0, 0x3f),
    rust_target("gfx942", 1, 0x4c),
    rust_target("gfx1100", 2, 0x41),
];

const fn rust_target(gfx: &'static str, i: usize, mach: u32) -> Target {
    Target {
        gfx,
        path: gpuio_kernels_gpu::TEST_HSACO_PATHS[i].1,
        mach,
        kernels: KERNELS,
        printers: &["hello", "stress", "literal", "wait_for_flag"],
    }
}

/// The kernels of `kernels/` (and the drain kernel every gpuio code object exports), with
/// their explicit arguments' sizes.
const KERNELS: &[(&str, &[u64])] = &[
    ("hello", &[]),
    ("stress", &[4, 4]),
    ("literal", &[4]),
    ("trap_after_print", &[4]),
    ("gpuio_drain", &[]),
];

/// Every code object checked here: the test kernels', and the C++ kernel joined with the
/// device library where clang can build it ([`cpp::joined`]).
/// (Built once: where the join fails, each test fails with its error, without building again.)
fn targets() -> &'static [Target] {
    static ALL: OnceLock<Result<Vec<Target>, String>> = OnceLock::new();
    match ALL.get_or_init(|| Ok(RUST_TARGETS.into_iter().chain(cpp::joined()?).collect())) {
        Ok(all) => all,
        Err(e) => panic!("the C++ kernel joined for AMD: {e}"),
    }
}

/// Whether build.rs built the test kernels' code objects; if not, reports `test` as skipped
/// (`common::gpu_code_built`).
fn objects_built(test: &str) -> bool {
    let paths: Vec<&str> = gpuio_kernels_gpu::TEST_HSACO_PATHS.iter().map(|(_, p)| *p).collect();
    common::gpu_code_built(test, &paths)
}

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
    if !objects_built("the_build_table_lists_every_target") {
        return;
    }
    let table: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_AMDGCN;
    let names: Vec<&str> = table.iter().map(|(g, _)| *g).collect();
    assert_eq!(names, RUST_TARGETS.iter().map(|t| t.gfx).collect::<Vec<_>>());
    for ((_, bytes), t) in table.iter().zip(&RUST_TARGETS) {
        assert_eq!(*bytes, &read(t)[..], "{}: the table's bytes are the file's", t.gfx);
    }
}

#[test]
fn headers_symbols_and_metadata() {
    if !objects_built("headers_symbols_and_metadata") {
        return;
    }
    for t in targets() {
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
        assert_eq!(co.processor(), Some(t.processor()), "{g}: processor name");
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

        for &(name, explicit) in t.kernels {
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
        for name in t.printers.iter().filter(|n| t.kernels.iter().any(|(k, _)| k == *n)) {
            assert!(
                co.kernel(name).unwrap().uses_dynamic_stack,
                "{g}: {name} formats, it should use a dynamic stack"
            );
        }
    }
}

#[test]
fn metadata_agrees_with_llvm_readobj() {
    if !objects_built("metadata_agrees_with_llvm_readobj") {
        return;
    }
    if !tools_here("metadata_agrees_with_llvm_readobj") {
        return;
    }
    let readobj = llvm_tool("llvm-readobj");
    for t in targets() {
        let co = CodeObject::parse(&read(t)).unwrap();
        let entries = readobj_kernels(&readobj, t);
        for &(name, _) in t.kernels {
            let get = |key: &str| field(&entries, t, name, key);
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

/// Each kernel's scalar metadata fields as `llvm-readobj --notes` prints them: `(".name",
/// "hello")`, `(".sgpr_spill_count", "2")`, ...
fn readobj_kernels(readobj: &Path, t: &Target) -> Vec<Vec<(String, String)>> {
    let yaml = run(readobj, &["--notes"], t.path);
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
    entries
}

/// Field `key` of kernel `name` in [`readobj_kernels`]' `entries` (a panic if there is no
/// such kernel).
fn field<'a>(entries: &'a [Vec<(String, String)>], t: &Target, name: &str, key: &str) -> Option<&'a str> {
    let entry = entries
        .iter()
        .find(|e| e.iter().any(|(k, v)| k == ".name" && v == name))
        .unwrap_or_else(|| panic!("{}: llvm-readobj shows no kernel {name}", t.gfx));
    entry.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// A kernel that prints spills few registers to scratch. rustc gives amdgpu functions no
/// `noinline`, and LLVM's AMDGPU inliner, left to itself, inlines every call that passes a
/// struct by reference, so each print site carried its own copy of the request path:
/// these kernels spilled 900-1,100 registers each (`hello`: 896 scalar, 187 vector on
/// gfx90a). The linker turns that bonus off (`GpuTarget::rustflags`).
#[test]
fn print_kernels_spill_few_registers() {
    if !objects_built("print_kernels_spill_few_registers") {
        return;
    }
    if !tools_here("print_kernels_spill_few_registers") {
        return;
    }
    const MOST: u64 = 64;
    let readobj = llvm_tool("llvm-readobj");
    for t in targets() {
        let entries = readobj_kernels(&readobj, t);
        for name in t.printers {
            let count = |key: &str| -> u64 {
                field(&entries, t, name, key)
                    .unwrap_or_else(|| panic!("{}: {name} has no {key}", t.gfx))
                    .parse()
                    .unwrap()
            };
            let (sgprs, vgprs) = (count(".sgpr_spill_count"), count(".vgpr_spill_count"));
            println!("{}: {name} spills {sgprs} scalar and {vgprs} vector registers", t.gfx);
            assert!(
                sgprs + vgprs <= MOST,
                "{}: {name} spills {sgprs} scalar and {vgprs} vector registers, more than {MOST}: \
                 is the request path inlined into each caller again?",
                t.gfx
            );
        }
    }
}

#[test]
fn sq_tail_store_is_a_system_release_and_reservations_are_returning_atomics() {
    if !objects_built("sq_tail_store_is_a_system_release_and_reservations_are_returning_atomics") {
        return;
    }
    if !tools_here("sq_tail_store_is_a_system_release_and_reservations_are_returning_atomics") {
        return;
    }
    let sq_tail = offset_of!(Context, rings) + offset_of!(Ring, sq_tail);
    let tickets = offset_of!(Context, rings) + offset_of!(Ring, tickets);
    // `reserved` of a stream: from the stream, or from the context (stdout's, stderr's).
    let in_stream = offset_of!(Stream, reserved);
    let from_ctx = offset_of!(Context, streams) + in_stream;
    let reserved = [in_stream, from_ctx, from_ctx + size_of::<Stream>()];
    let mut problems = Vec::new();
    for (t, code) in targets().iter().zip(disassembled()) {
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
            if let Some(why) = code.unreleased_path(t.processor(), j) {
                problems.push(format!(
                    "{g}: the SQ tail store {} is not preceded by a system-scope release on every path: {why}",
                    code.at(j)
                ));
            } else if t.processor() == "gfx942" && !insns[j].args.ends_with("sc0 sc1") {
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
        if returning_adds(t.processor(), code, &[tickets], false) == 0 {
            problems.push(format!(
                "{g}: no returning 32-bit atomic add on the SQ tickets (Context offset {tickets})"
            ));
        }
        if returning_adds(t.processor(), code, &reserved, true) == 0 {
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
/// plus a computed index. Each inlined `submit` takes one ticket and stores one flag, but
/// not every flag is found: a device request's ring is `rings[block_idx % n]`, and where
/// LLVM keeps that ring's pointers in spilled registers the load is not seen. So the flags
/// found (at least one, at most one per ticket add) are checked, and the count printed.
#[test]
fn sq_ready_flag_store_is_a_system_release() {
    if !objects_built("sq_ready_flag_store_is_a_system_release") {
        return;
    }
    if !tools_here("sq_ready_flag_store_is_a_system_release") {
        return;
    }
    let ready = offset_of!(Context, rings) + offset_of!(Ring, ready);
    let tickets = offset_of!(Context, rings) + offset_of!(Ring, tickets);
    let mut problems = Vec::new();
    for (t, code) in targets().iter().zip(disassembled()) {
        let g = t.gfx;
        let stores: BTreeSet<usize> = code
            .pointer_loads(&[ready])
            .into_iter()
            .filter_map(|(load, ptr)| code.store32_through(load, &ptr))
            .collect();
        let submits = returning_adds(t.processor(), code, &[tickets], false);
        if stores.is_empty() || stores.len() > submits {
            problems.push(format!(
                "{g}: found {} ready-flag store(s) (32-bit stores into the array whose pointer is at Context offset {ready}) \
                 for {submits} SQ ticket add(s): each Ring::submit makes one of each",
                stores.len()
            ));
        }
        for &j in &stores {
            if let Some(why) = code.unreleased_path(t.processor(), j) {
                problems.push(format!(
                    "{g}: the SQ ready-flag store {} is not preceded by a system-scope release on every path: {why}",
                    code.at(j)
                ));
            } else if t.processor() == "gfx942" && !code.insns[j].args.ends_with("sc0 sc1") {
                problems.push(format!(
                    "{g}: the SQ ready-flag store {} lacks `sc0 sc1` (system scope)",
                    code.at(j)
                ));
            }
        }
        eprintln!(
            "{g}: {} SQ ready-flag store(s) checked, for {submits} ticket add(s)",
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
/// (LLVM's `noinline` is not set for that target), so commit may be inlined at any call;
/// its adds are found by their address instead: a counter of the array whose
/// pointer is `Stream::chunks`, loaded from a stream (or from the Context's streams).
#[test]
fn stream_commit_fences_before_its_counter_adds() {
    if !objects_built("stream_commit_fences_before_its_counter_adds") {
        return;
    }
    if !tools_here("stream_commit_fences_before_its_counter_adds") {
        return;
    }
    let chunks = offset_of!(Stream, chunks);
    let mut fields = vec![chunks];
    for s in 0..gpuio::device::protocol::context::STREAMS {
        fields.push(offset_of!(Context, streams) + s * size_of::<Stream>() + chunks);
    }
    let mut problems = Vec::new();
    for (t, code) in targets().iter().zip(disassembled()) {
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
            if let Some(why) = code.unreleased_path(t.processor(), j) {
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
