//! gpuio's own sm_90 code, compiled by the CUDA toolkit's ptxas as the driver compiles it,
//! holds no uniform register across a `YIELD` within a basic block.
//!
//! Why: a uniform register (`URn`) belongs to the warp, not to a lane. With independent
//! thread scheduling a warp's lanes come back from a waiting call (`io::open`, `fsync`,
//! `pread`, ...) one by one, each when its own request is done, and the early ones run on
//! in the caller while the others are still inside the call. A `YIELD` (ptxas puts one in
//! loops, so that the warp's other paths make progress) lets those other paths run, and
//! inside the call the uniform registers below `UR36` are scratch. ptxas (CUDA 13.0, as the
//! driver's JIT compiles at its default level) sometimes loads a uniform register before a
//! `YIELD` and reads it after, instead of loading it again: the lanes
//! back from the `YIELD` then compute with whatever the call left there. A test kernel
//! (`file_check`: `open`, then a loop of `write_all_at`) read its transfer's length so
//! when `transfer::solo` was compiled out of line: 1,655 of its 2,120 writes completed with
//! 0 bytes (an io_uring trace), where the build that loaded the length again after the
//! `YIELD` wrote every byte (docs/PROTOCOL.md, "Compilers").
//!
//! The check: compile each module gpuio ships (the test kernels, the example kernels,
//! bench_observer's kernels, the device library for C++ kernels) with `ptxas -c
//! -arch=sm_90`, as one input (as the driver compiles a module that does file I/O),
//! disassemble it with `nvdisasm`, and look in every basic block for a uniform register
//! that an instruction after a `YIELD` reads while its last write is before that `YIELD`
//! (the shape that failed). A load hoisted above a loop whose body yields is in another
//! block and not seen (one such: `lockstep_probe`, with no waiting call before its loop).
//! The checker itself is tried on the shape that failed and on the one that did not
//! ([`the_checker_finds_the_shape_that_failed`]), and on pairs, predicates and branches.
//!
//! Needs ptxas and nvdisasm (`PTXAS` and `NVDISASM`, else the PATH, else /usr/local/cuda/bin; on
//! a machine without the toolkit `pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm` puts
//! them under `nvidia/cu13/bin` of the Python packages); says SKIPPED without them.

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::process::Command;

use common::skip;

/// A uniform register read after a `YIELD` with the value it had before it.
#[derive(Debug, PartialEq)]
struct Held {
    function: String,
    yield_at: u32,
    register: String,
    read_at: u32,
}

/// The uniform registers an operand list reads: each `URn` (`URZ` aside), and both of the
/// pair a memory descriptor (`desc[URn]`) names.
fn uniform_registers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("UR") {
        let start = i + at;
        let before_ok = start == 0 || !bytes[start - 1].is_ascii_alphanumeric();
        let digits = text[start + 2..].bytes().take_while(u8::is_ascii_digit).count();
        if before_ok && digits > 0 {
            let n: u32 = text[start + 2..start + 2 + digits].parse().unwrap();
            out.push(format!("UR{n}"));
            if text[..start].ends_with("desc[") {
                out.push(format!("UR{}", n + 1));
            }
        }
        i = start + 2;
    }
    out
}

/// The uniform registers an instruction writes: its first operand where that is one (a
/// `.64` or `.WIDE` form writes the pair). Branches name registers they read.
fn written(op: &str, operands: &str) -> Vec<String> {
    let base = op.split('.').next().unwrap_or(op);
    if [
        "BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BREAK", "BSYNC", "BSSY", "WARPSYNC",
    ]
    .contains(&base)
    {
        return Vec::new();
    }
    let first = operands.split(',').next().unwrap_or("").trim();
    let Some(n) = first.strip_prefix("UR").and_then(|n| n.parse::<u32>().ok()) else {
        return Vec::new();
    };
    if op.contains(".64") || op.contains(".WIDE") {
        vec![format!("UR{n}"), format!("UR{}", n + 1)]
    } else {
        vec![format!("UR{n}")]
    }
}

/// Every [`Held`] register in `sass` (nvdisasm's text), **within one basic block**: a
/// uniform register that an instruction after a `YIELD` reads while its last write is
/// before that `YIELD`. A block ends at a label and after an unconditional branch, a call,
/// a return, an exit, a `BREAK`, a `BSYNC` or a `WARPSYNC` (a predicated branch's
/// fall-through keeps the block). A predicated write may not happen: after the `YIELD` it
/// does not end the register's hold; before it, it counts as the last write. Not seen: a
/// register written in one block and read after a `YIELD` in another (a load hoisted above
/// a loop whose body yields), which would take liveness over the control flow.
fn held_across_yields(sass: &str) -> Vec<Held> {
    let mut found = Vec::new();
    let mut function = String::new();
    // The uniform registers written so far in this block, and those held across its last
    // YIELD (written before it, not surely since).
    let mut written_here: Vec<String> = Vec::new();
    let mut across: Option<(u32, Vec<String>)> = None;
    for line in sass.lines() {
        let t = line.trim();
        if let Some(name) = t
            .strip_prefix("//")
            .and_then(|r| r.trim_matches('-').trim().strip_prefix(".text."))
        {
            function = name.trim().to_string();
            written_here.clear();
            across = None;
            continue;
        }
        if t.starts_with('.') && t.ends_with(':') {
            written_here.clear();
            across = None;
            continue;
        }
        // `/*7160*/   @!P0 ULDC UR6, c[0x0][0x220] ;`
        let Some(rest) = t.strip_prefix("/*") else { continue };
        let Some((addr, inst)) = rest.split_once("*/") else {
            continue;
        };
        let Ok(addr) = u32::from_str_radix(addr, 16) else {
            continue;
        };
        let inst = inst.split(';').next().unwrap_or("").trim();
        let (predicated, inst) = match inst.strip_prefix('@') {
            Some(p) => (true, p.split_once(' ').map_or("", |(_, i)| i).trim()),
            None => (false, inst),
        };
        let (op, operands) = inst.split_once(' ').unwrap_or((inst, ""));
        let base = op.split('.').next().unwrap_or(op);
        let writes = written(op, operands);
        let reads: Vec<String> = if writes.is_empty() {
            uniform_registers(operands)
        } else {
            uniform_registers(operands.split_once(',').map_or("", |(_, r)| r))
        };
        if let Some((yield_at, held)) = &mut across {
            for r in &reads {
                if held.contains(r) {
                    found.push(Held {
                        function: function.clone(),
                        yield_at: *yield_at,
                        register: r.clone(),
                        read_at: addr,
                    });
                }
            }
            if !predicated {
                held.retain(|r| !writes.contains(r));
            }
        }
        for w in writes {
            if !written_here.contains(&w) {
                written_here.push(w);
            }
        }
        if base == "YIELD" {
            across = Some((addr, written_here.clone()));
        }
        let branch = ["BRA", "BRX", "JMP", "JMX"].contains(&base);
        if (branch && !predicated) || ["CALL", "RET", "EXIT", "BREAK", "BSYNC", "WARPSYNC"].contains(&base) {
            written_here.clear();
            across = None;
        }
    }
    found
}

/// The loop head of the failing build's `file_check` (nvdisasm of `ptxas -c -arch=sm_90`,
/// CUDA 13.0): the transfer's length (`R38`) from `UR6`, loaded before the `YIELD`.
const FAILED: &str = "
//--------------------- .text.file_check          --------------------------
.L_x_12713:
        /*7160*/                   ULDC UR6, c[0x0][0x220] ;
        /*7170*/                   ULDC UR4, c[0x0][0x228] ;
        /*7180*/                   IMAD R0, R24, UR6, RZ ;
        /*7190*/                   LEA R0, R0, UR4, 0x1 ;
        /*71a0*/                   YIELD ;
        /*71b0*/                   UMOV UR4, 32@lo(gpuio_context) ;
        /*71c0*/                   UMOV UR5, 32@hi(gpuio_context) ;
        /*71d0*/                   IMAD.U32 R52, RZ, RZ, UR4 ;
        /*71e0*/                   IMAD.U32 R53, RZ, RZ, UR5 ;
        /*71f0*/                   LDG.E.64.STRONG.SYS R52, desc[UR36][R52.64] ;
        /*7200*/                   IADD3 R44, P2, R27.reuse, R0, RZ ;
        /*7210*/                   BSSY B7, `(.L_x_12690) ;
        /*7220*/                   IADD3 R38, P1, -R27, UR6, RZ ;
        /*7230*/                   BRA `(.L_x_12691) ;
";

/// The same loop head in the build that passed: the length's `UR4` loaded again after the
/// `YIELD`.
const PASSED: &str = "
//--------------------- .text.file_check          --------------------------
.L_x_13376:
        /*7130*/                   ULDC UR4, c[0x0][0x220] ;
        /*7140*/                   ULDC.64 UR6, c[0x0][0x228] ;
        /*7150*/                   IMAD.WIDE.U32 R2, R44, UR4, RZ ;
        /*7160*/                   IMAD R3, R47, UR4, R3 ;
        /*7170*/                   LEA R55, P0, R2, UR6, 0x1 ;
        /*7180*/                   LEA.HI.X R0, R2, UR7, R3, 0x1, P0 ;
        /*7190*/                   YIELD ;
        /*71a0*/                   UMOV UR4, 32@lo(gpuio_context) ;
        /*71b0*/                   UMOV UR5, 32@hi(gpuio_context) ;
        /*71c0*/                   IMAD.U32 R60, RZ, RZ, UR4 ;
        /*71d0*/                   ULDC UR4, c[0x0][0x220] ;
        /*71e0*/                   IMAD.U32 R61, RZ, RZ, UR5 ;
        /*71f0*/                   LDG.E.64.STRONG.SYS R60, desc[UR36][R60.64] ;
        /*7240*/                   IADD3 R2, P2, -R28, UR4, RZ ;
        /*7250*/                   BRA `(.L_x_13344) ;
";

#[test]
fn the_checker_finds_the_shape_that_failed() {
    assert_eq!(
        held_across_yields(FAILED),
        [Held {
            function: "file_check".into(),
            yield_at: 0x71a0,
            register: "UR6".into(),
            read_at: 0x7220,
        }]
    );
    assert_eq!(held_across_yields(PASSED), []);
    // `UR36` (the memory descriptor, loaded once in the kernel's prologue) is read after
    // the YIELD in both, but written in neither block: not reported.
}

#[test]
fn the_checker_reads_pairs_predicates_and_branches() {
    let held = |body: &str| -> Vec<(String, u32)> {
        let sass = format!("//--------------------- .text.k --------------------------\n.L_x_1:\n{body}");
        held_across_yields(&sass)
            .into_iter()
            .map(|h| (h.register, h.read_at))
            .collect()
    };
    let ur = |r: &str, at: u32| (r.to_string(), at);
    // The high half of a `.WIDE` pair.
    let wide = "/*0010*/ UIMAD.WIDE.U32 UR6, UR4, UR5, URZ ;\n/*0020*/ YIELD ;\n/*0030*/ IADD3 R2, R3, UR7, RZ ;";
    assert_eq!(held(wide), [ur("UR7", 0x30)]);
    // A predicated load after the YIELD may not happen: the read may still see the old value.
    let predicated = "/*0010*/ ULDC UR6, c[0x0][0x220] ;\n/*0020*/ YIELD ;\n\
                      /*0030*/ @!P0 ULDC UR6, c[0x0][0x220] ;\n/*0040*/ IADD3 R2, R3, UR6, RZ ;";
    assert_eq!(held(predicated), [ur("UR6", 0x40)]);
    // A load that surely happens after the YIELD ends the hold.
    let reloaded = "/*0010*/ ULDC UR6, c[0x0][0x220] ;\n/*0020*/ YIELD ;\n\
                    /*0030*/ ULDC UR6, c[0x0][0x220] ;\n/*0040*/ IADD3 R2, R3, UR6, RZ ;";
    assert_eq!(held(reloaded), []);
    // `BRA.DIV UR4, ...` reads UR4, and a predicated branch's fall-through stays in the block.
    let branches = "/*0010*/ ULDC UR4, c[0x0][0x0] ;\n/*0020*/ YIELD ;\n\
                    /*0030*/ @P0 BRA `(.L_x_2) ;\n/*0040*/ BRA.DIV UR4, `(.L_x_3) ;";
    assert_eq!(held(branches), [ur("UR4", 0x40)]);
    // Both registers of a memory descriptor.
    let desc = "/*0010*/ ULDC.64 UR4, c[0x0][0x208] ;\n/*0020*/ YIELD ;\n/*0030*/ LDG.E R2, desc[UR4][R2.64] ;";
    assert_eq!(held(desc), [ur("UR4", 0x30), ur("UR5", 0x30)]);
    // An unconditional branch ends the block.
    let ended = "/*0010*/ ULDC UR6, c[0x0][0x220] ;\n/*0020*/ YIELD ;\n\
                 /*0030*/ BRA `(.L_x_2) ;\n/*0040*/ IADD3 R2, R3, UR6, RZ ;";
    assert_eq!(held(ended), []);
}

/// `ptx` compiled for sm_90 and disassembled.
fn sass(ptxas: &Path, nvdisasm: &Path, dir: &Path, name: &str, ptx: &[u8]) -> Result<String, String> {
    let (input, object) = (dir.join(format!("{name}.ptx")), dir.join(format!("{name}.o")));
    std::fs::write(&input, ptx).map_err(|e| format!("{}: {e}", input.display()))?;
    let run = |cmd: &mut Command| {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{cmd:?}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run(Command::new(ptxas)
        .args(["-arch=sm_90", "-c"])
        .arg(&input)
        .arg("-o")
        .arg(&object))?;
    run(Command::new(nvdisasm).arg("-c").arg(&object))
}

#[test]
fn no_uniform_register_is_held_across_a_yield_in_gpuios_sm90_code() {
    let test = "no_uniform_register_is_held_across_a_yield_in_gpuios_sm90_code";
    let (Some(ptxas), Some(nvdisasm)) = (
        common::cuda_tool("ptxas", "PTXAS"),
        common::cuda_tool("nvdisasm", "NVDISASM"),
    ) else {
        skip(
            test,
            "no ptxas and nvdisasm that run (PTXAS and NVDISASM, the PATH, /usr/local/cuda/bin; pip install nvidia-cuda-nvcc \
             nvidia-cuda-nvdisasm brings them)",
        );
        return;
    };
    let sm90 =
        |set: &'static [(&'static str, &'static [u8])]| set.iter().find(|(arch, _)| *arch == "sm_90").map(|(_, p)| *p);
    let examples = std::fs::read(gpuio_kernels_gpu::PTX_PATH).ok();
    let modules: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("test_kernels", Some(gpuio_kernels_gpu::TEST_PTX.as_bytes().to_vec())),
        ("example_kernels", examples),
        (
            "observer_kernels",
            sm90(gpuio_kernels_gpu::OBSERVER_NVPTX).map(<[u8]>::to_vec),
        ),
        (
            "device_library",
            sm90(gpuio_kernels_gpu::C_LIBRARY_NVPTX).map(<[u8]>::to_vec),
        ),
    ];
    let modules: Vec<(&str, Vec<u8>)> = modules
        .into_iter()
        .filter_map(|(name, ptx)| ptx.filter(|p| !p.is_empty()).map(|p| (name, p)))
        .collect();
    if modules.len() < 4 {
        skip(
            test,
            "this build has no sm_90 PTX of every module (GPUIO_GPU_TARGETS=sm_90 or all builds them)",
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("gpuio-sass-yield-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let results: Vec<(&str, Result<String, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = modules
            .iter()
            .map(|(name, ptx)| {
                let (ptxas, nvdisasm, dir) = (&ptxas, &nvdisasm, &dir);
                (*name, s.spawn(move || sass(ptxas, nvdisasm, dir, name, ptx)))
            })
            .collect();
        handles.into_iter().map(|(n, h)| (n, h.join().unwrap())).collect()
    });
    let _ = std::fs::remove_dir_all(&dir);
    let mut held = Vec::new();
    for (name, sass) in results {
        let sass = sass.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            sass.contains("YIELD"),
            "{name}: no YIELD at all in its SASS: is this nvdisasm's text?"
        );
        held.extend(held_across_yields(&sass).into_iter().map(|h| {
            format!(
                "{name}: {}: {} written before the YIELD at {:#x}, read at {:#x}",
                h.function, h.register, h.yield_at, h.read_at
            )
        }));
    }
    assert!(
        held.is_empty(),
        "ptxas ({}) holds a uniform register across a YIELD, where lanes of the warp still inside a \
         call may overwrite it (this file's docs): {held:#?}",
        ptxas.display()
    );
}
