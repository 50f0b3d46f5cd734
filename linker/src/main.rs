//! `gpuio-linker`: builds a kernel crate into a GPU code object from the command line.
//!
//! ```text
//! gpuio-linker --target nvptx  --arch sm_90  --manifest-path kernels/Cargo.toml --out DIR
//! gpuio-linker --target amdgcn --arch gfx90a [--code-object-version 5] --manifest-path ... --out DIR
//! gpuio-linker --target amdgcn --arch gfx90a --manifest-path gpuio/kernels-c/Cargo.toml \
//!              --join kernel.bc --out DIR
//! ```
//!
//! Prints the path of the code object it wrote. With `--join` (once per translation unit),
//! the crate is gpuio's device library and the code object is C++ or HIP kernels' bitcode
//! joined with it
//! (`gpuio_linker::join_amdgcn`).

use std::path::PathBuf;
use std::process::ExitCode;

use gpuio_linker::{
    build_kernel_crate, ensure_components, join_amdgcn, library_bitcode, GpuTarget, DEFAULT_AMDHSA_CODE_OBJECT_VERSION,
};

const USAGE: &str = "usage: gpuio-linker --target nvptx|amdgcn --arch ARCH [--code-object-version N] \
                     --manifest-path PATH/Cargo.toml [--join KERNEL.bc] --out DIR";

/// What `--help` prints.
fn help() -> String {
    format!(
        "gpuio-linker: builds a kernel crate into a GPU code object and prints its path

usage: gpuio-linker --target nvptx|amdgcn --arch ARCH [--code-object-version N] \
--manifest-path PATH/Cargo.toml [--join KERNEL.bc] --out DIR

  --target nvptx|amdgcn       NVIDIA PTX (.ptx) or an AMD code object (.hsaco)
  --arch ARCH                 sm_60, sm_70, sm_90, ... or gfx90a, gfx942, gfx1100, ...
  --code-object-version N     AMD code object version (default {DEFAULT_AMDHSA_CODE_OBJECT_VERSION})
  --manifest-path PATH        the kernel crate's Cargo.toml
  --join KERNEL.bc            amdgcn: join a C++ or HIP kernel's device bitcode (clang -fgpu-rdc
                              --cuda-device-only -emit-llvm) with gpuio's device library, the
                              crate --manifest-path names (gpuio's kernels-c/Cargo.toml); once
                              per translation unit
  --out DIR                   where the code object goes (made if missing)
  -h, --help                  this text
  -V, --version               the version"
    )
}

fn main() -> ExitCode {
    match run() {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpuio-linker: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The command line, read ([`parse`]).
struct Args {
    target: GpuTarget,
    manifest: PathBuf,
    out: PathBuf,
    join: Vec<PathBuf>,
}

/// Reads the command line (`--help` and `--version` print and exit here).
fn parse() -> Result<Args, String> {
    use lexopt::prelude::*;
    let (mut kind, mut arch, mut cov, mut manifest, mut out) = (None, None, None, None, None);
    let mut join: Vec<PathBuf> = Vec::new();
    let mut parser = lexopt::Parser::from_env();
    let bad = |e: lexopt::Error| format!("{e}\n{USAGE}");
    // A value that does not parse, or is not UTF-8, is named with its option.
    let named = |option: &str, e: lexopt::Error| format!("{option}: {e}\n{USAGE}");
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Short('h') | Long("help") => {
                println!("{}", help());
                std::process::exit(0);
            }
            Short('V') | Long("version") => {
                println!("gpuio-linker {}", env!("CARGO_PKG_VERSION"));
                std::process::exit(0);
            }
            Long("target") => {
                kind = Some(
                    parser
                        .value()
                        .map_err(bad)?
                        .string()
                        .map_err(|e| named("--target", e))?,
                )
            }
            Long("arch") => arch = Some(parser.value().map_err(bad)?.string().map_err(|e| named("--arch", e))?),
            Long("code-object-version") => {
                cov = Some(
                    parser
                        .value()
                        .map_err(bad)?
                        .parse::<u32>()
                        .map_err(|e| named("--code-object-version", e))?,
                )
            }
            Long("manifest-path") => manifest = Some(PathBuf::from(parser.value().map_err(bad)?)),
            Long("out") => out = Some(PathBuf::from(parser.value().map_err(bad)?)),
            Long("join") => join.push(PathBuf::from(parser.value().map_err(bad)?)),
            other => return Err(bad(other.unexpected())),
        }
    }
    let missing = |what: &str| format!("missing {what}\n{USAGE}");
    let arch = arch.ok_or_else(|| missing("--arch"))?;
    let target = match kind.as_deref() {
        Some("nvptx") | Some("nvptx64") => GpuTarget::Nvptx { sm: arch },
        Some("amdgcn") | Some("amdgpu") => GpuTarget::Amdgcn {
            gfx: arch,
            code_object_version: cov.unwrap_or(DEFAULT_AMDHSA_CODE_OBJECT_VERSION),
        },
        Some(other) => return Err(format!("unknown target {other} (nvptx or amdgcn)")),
        None => return Err(missing("--target")),
    };
    let manifest = manifest.ok_or_else(|| missing("--manifest-path"))?;
    let out = out.ok_or_else(|| missing("--out"))?;
    Ok(Args {
        target,
        manifest,
        out,
        join,
    })
}

/// Builds what the command line asks for and returns the code object's path.
fn run() -> Result<PathBuf, String> {
    let Args {
        target,
        manifest,
        out,
        join,
    } = parse()?;
    let dir = match manifest.parent() {
        Some(p) if manifest.file_name().is_some_and(|n| n == "Cargo.toml") => p.to_path_buf(),
        _ => {
            return Err(format!(
                "--manifest-path must name a Cargo.toml, not {}",
                manifest.display()
            ))
        }
    };
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    if !join.is_empty() {
        if !matches!(target, GpuTarget::Amdgcn { .. }) {
            return Err(
                "--join is for --target amdgcn: NVIDIA kernels are joined as PTX when they load \
                        (gpuio::link_ptx, or gpuio_module_load_linked from C)"
                    .into(),
            );
        }
        if let Some(missing) = join.iter().find(|k| !k.is_file()) {
            return Err(format!(
                "--join: {} is not a file (a kernel's device bitcode)",
                missing.display()
            ));
        }
    }
    ensure_components(&[&target]).map_err(|e| e.to_string())?;
    if join.is_empty() {
        return build_kernel_crate(&dir, &target, &out).map_err(|e| e.to_string());
    }
    let library = library_bitcode(&dir, &target, &out).map_err(|e| e.to_string())?;
    join_amdgcn(&library, &join, &target, &out).map_err(|e| e.to_string())
}
