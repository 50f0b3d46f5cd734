//! The header against the Rust definitions: `tests/abi_layout.c` prints the size,
//! alignment and field offsets of every struct and the value of every constant of
//! `gpuio.h`, compiled as C11 and as C++11 (`-Wall -Wextra -Werror -pedantic`); this
//! test prints the same from the Rust types and compares. It also checks that the header
//! declares exactly the functions this crate exports.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::status::{gpuio_status, STATUS_NAMES};
use crate::types::*;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What the Rust side says, in the C program's format.
fn rust_lines() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    macro_rules! ty {
        ($c:expr, $t:ty) => {
            out.insert(format!("size {} {}", $c, size_of::<$t>()));
            out.insert(format!("align {} {}", $c, align_of::<$t>()));
        };
    }
    macro_rules! layout {
        ($t:ident { $($f:ident),* $(,)? }) => {
            ty!(stringify!($t), $t);
            $(out.insert(format!("offset {}.{} {}", stringify!($t), stringify!($f), std::mem::offset_of!($t, $f)));)*
        };
    }
    macro_rules! value {
        ($($v:ident),* $(,)?) => {
            $(out.insert(format!("value {} {}", stringify!($v), $v as i64));)*
        };
    }
    ty!("gpuio_status", gpuio_status);
    ty!("gpuio_backend", i32);
    ty!("gpuio_sandbox", i32);
    ty!("gpuio_arg_kind", i32);
    ty!("gpuio_cpu_kernel", gpuio_cpu_kernel);
    layout!(gpuio_runtime_options {
        struct_size,
        backend,
        sq_entries,
        cq_entries,
        log_bytes,
        stdout_fd,
        stderr_fd,
        max_flights,
        sq_thread_idle_ms,
        gpu_stack_bytes,
        arena_bytes,
        arena_block_bytes,
        sandbox,
        hang_timeout_ms,
        rings,
        reserved,
        gpu,
        reserved2,
    });
    layout!(gpuio_output_errors {
        fd,
        failed_writes,
        last_errno,
        format_errors,
        lost_bytes,
        lost_lines
    });
    layout!(gpuio_sync_report { num_outputs, outputs });
    layout!(gpuio_thread {
        thread_idx,
        block_idx,
        block_dim,
        grid_dim,
        global_idx
    });
    layout!(gpuio_arg { kind, value });
    for (status, name) in STATUS_NAMES {
        out.insert(format!("value {} {}", name.to_str().unwrap(), status as i64));
    }
    value!(
        GPUIO_BACKEND_AUTO,
        GPUIO_BACKEND_CPU,
        GPUIO_BACKEND_CUDA,
        GPUIO_BACKEND_HSA,
        GPUIO_SANDBOX_PRINT_ONLY,
        GPUIO_SANDBOX_FILE_IO,
        GPUIO_SANDBOX_OFF,
        GPUIO_ARG_U32,
        GPUIO_ARG_U64,
        GPUIO_ARG_F32,
        GPUIO_ARG_F64,
        GPUIO_MAX_OUTPUTS,
    );
    out
}

/// The C (or, with `cpp`, C++) compiler, as the `cc` crate picks it for this machine
/// (`CC`/`CXX` and their flags honoured, as in a build script).
fn compiler(cpp: bool) -> cc::Tool {
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    cc::Build::new()
        .cpp(cpp)
        .target(&target)
        .host(&target)
        .opt_level(0)
        .debug(false)
        .cargo_metadata(false)
        .get_compiler()
}

/// Compiles and runs the C program with `compiler` and `flags`; its output lines.
fn c_lines(compiler: &cc::Tool, flags: &str, exe: &Path) -> BTreeSet<String> {
    let dir = manifest_dir();
    let mut cmd = compiler.to_command();
    let out = cmd
        .args(flags.split_whitespace())
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(dir.join("include"))
        .arg(dir.join("tests/abi_layout.c"))
        .arg("-o")
        .arg(exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", compiler.path().display()));
    assert!(
        out.status.success(),
        "{cmd:?} abi_layout.c:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(exe).output().expect("run abi_layout");
    assert!(run.status.success());
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn temp_exe(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpuio-capi-{name}-{}", std::process::id()))
}

#[test]
fn header_layouts_and_values_match_rust() {
    let rust = rust_lines();
    for (cpp, flags, name) in [(false, "-std=c11", "abi-c"), (true, "-x c++ -std=c++11", "abi-cxx")] {
        let exe = temp_exe(name);
        let compiler = compiler(cpp);
        let c = c_lines(&compiler, flags, &exe);
        let _ = std::fs::remove_file(&exe);
        let only_c: Vec<_> = c.difference(&rust).collect();
        let only_rust: Vec<_> = rust.difference(&c).collect();
        assert!(
            only_c.is_empty() && only_rust.is_empty(),
            "gpuio.h ({} {flags}) and the Rust definitions differ:\n  header: {only_c:?}\n  Rust:   {only_rust:?}",
            compiler.path().display()
        );
    }
}

/// Names of the functions a C-ish source declares or defines, by a line-start pattern.
fn names(text: &str, prefixes: &[&str]) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| prefixes.iter().find_map(|p| l.strip_prefix(p)))
        .filter_map(|rest| rest.split_once('(').map(|(name, _)| name.trim().to_string()))
        .collect()
}

#[test]
fn header_declares_exactly_the_exported_functions() {
    let header = std::fs::read_to_string(manifest_dir().join("include/gpuio.h")).unwrap();
    // Declarations start at column 0 with their return type; the static inline helpers
    // (gpuio_printf, gpuio_arg_u32, ...) start with `static inline` and are not exports.
    let declared = names(&header, &["gpuio_status gpuio_", "const char *gpuio_"]);
    // The files that hold the exported functions.
    let lib: String = ["lib.rs", "runtime.rs", "cpu.rs", "module.rs", "link.rs"]
        .iter()
        .map(|f| std::fs::read_to_string(manifest_dir().join("src").join(f)).unwrap())
        .collect();
    let exported = names(
        &lib,
        &["pub unsafe extern \"C\" fn gpuio_", "pub extern \"C\" fn gpuio_"],
    );
    assert_eq!(declared, exported, "gpuio.h declarations vs #[no_mangle] exports");
    assert!(declared.len() >= 17, "parsed only {declared:?}");
    let no_mangle = lib.matches("#[no_mangle]").count();
    assert_eq!(
        no_mangle,
        exported.len(),
        "every export is #[no_mangle] and found by the parser"
    );
}
