//! A C++ or HIP kernel's device code joined with gpuio's device library into one AMD code
//! object.
//!
//! On NVIDIA the join is PTX text, made when the module loads (`gpuio::link_ptx`), since the
//! driver compiles PTX then. An AMD code object is machine code, made before the program
//! runs, so the join happens here, at build time, in LLVM bitcode: the kernel's (clang's
//! `-fgpu-rdc --cuda-device-only -emit-llvm`) and the library's ([`library_bitcode`]), linked
//! into one module with the toolchain's own LLVM (`llvm-tools`: `llvm-link`, `opt`, `llc`,
//! and `rust-lld`). One module, so one metadata note lists every kernel: code objects
//! linked from two objects carry two notes, and a loader reads one.
//!
//! The toolchain's LLVM reads the bitcode of older clangs (ROCm's, Debian's clang-15), not
//! the other way round: so gpuio's bitcode cannot go into a HIP program's own device link.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cargo::{build, copy_into_place, tail, toolchain_rustc};
use crate::error::io_err;
use crate::{Error, GpuTarget};

/// The symbols of gpuio's device library that the host looks up by name: its context and
/// layout, and the drain kernel it launches. Kept visible in the joined code object.
const HOST_SYMBOLS: [&str; 3] = ["gpuio_context", "gpuio_layout", "gpuio_drain"];

/// Builds gpuio's device library crate (`kernels-c/` in gpuio's repository) at
/// `manifest_dir` for the AMD `target` as LLVM bitcode, the whole program with `core`
/// (link-time optimized), and returns its path, `out_dir/gpuio_device_library-<gfx>.bc`.
/// Built as [`build_kernel_crate`](crate::build_kernel_crate) builds a kernel crate.
pub fn library_bitcode(manifest_dir: &Path, target: &GpuTarget, out_dir: &Path) -> Result<PathBuf, Error> {
    amdgcn_only(target)?;
    std::fs::create_dir_all(out_dir).map_err(io_err(format!("creating {}", out_dir.display())))?;
    let out_dir = &std::path::absolute(out_dir).map_err(io_err(format!("resolving {}", out_dir.display())))?;
    // rustc writes the bitcode where it is told, beside the code object it links: a path
    // that stays the same, so that cargo finds the build fresh the next time and leaves it.
    let written = out_dir
        .join("target")
        .join(format!("gpuio_device_library-{}.bc", target.arch()));
    let emit = format!("--emit=llvm-bc={},link", written.display());
    build(manifest_dir, target, out_dir, &[&emit])?;
    if !written.is_file() {
        return Err(Error::Join {
            target: target.clone(),
            command: emit,
            output: format!("rustc wrote no bitcode at {}", written.display()),
        });
    }
    let dest = out_dir.join(format!("gpuio_device_library-{}.bc", target.arch()));
    copy_into_place(&written, &dest)?;
    Ok(dest)
}

/// Joins `kernels`, the device bitcode of C++ or HIP translation units for `target`'s
/// processor (each from `clang -x hip --offload-arch=<gfx> -fgpu-rdc --cuda-device-only
/// -emit-llvm -c`), with `library`, gpuio's device library for the same processor
/// ([`library_bitcode`]), into one code object, `out_dir/<first kernel's stem>-<gfx>.hsaco`,
/// for `Runtime::load_code_object`.
///
/// They are linked (`llvm-link`); every symbol is made internal but the kernels, the
/// globals the kernels' bitcode defines (for `GpuModule::global`) and the library's
/// symbols the host looks up (`gpuio_context`, `gpuio_layout`, `gpuio_drain`); then
/// optimized (`opt`, O3, with the target's LLVM flags, as a kernel crate's build:
/// [`GpuTarget::rustflags`] says why), compiled (`llc`, the target's code object version)
/// and linked into a shared object (`rust-lld`). A symbol neither defines is an error, as
/// it would be on the GPU; so is a kernel built for another processor (clang's
/// `--offload-arch`).
pub fn join_amdgcn(library: &Path, kernels: &[PathBuf], target: &GpuTarget, out_dir: &Path) -> Result<PathBuf, Error> {
    let GpuTarget::Amdgcn {
        gfx,
        code_object_version,
    } = amdgcn_only(target)?
    else {
        unreachable!("amdgcn_only returned an AMD target")
    };
    std::fs::create_dir_all(out_dir).map_err(io_err(format!("creating {}", out_dir.display())))?;
    let tools = Tools::find()?;
    let Some(first) = kernels.first() else {
        return Err(join_error(target, "no kernel bitcode to join".into()));
    };
    let stem = first
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kernels".into());
    let keep = kept_symbols(&tools, kernels, gfx, target)?;

    // Files of this join alone (another may run into the same directory).
    let tag = format!("{stem}-{gfx}-{}", std::process::id());
    let files =
        Scratch(["linked.bc", "keep.txt", "opt.bc", "o", "hsaco"].map(|ext| out_dir.join(format!(".{tag}.{ext}"))));
    let [linked, keep_file, optimized, object, tmp] = &files.0;

    let mut link = tools.command("llvm-link");
    link.arg(library).args(kernels).arg("-o").arg(linked);
    run(link, target)?;

    std::fs::write(keep_file, keep.join("\n")).map_err(io_err(format!("writing {}", keep_file.display())))?;
    let mut opt = tools.command("opt");
    opt.args(llvm_args(target))
        .arg(format!("-internalize-public-api-file={}", keep_file.display()))
        .arg("-passes=internalize,default<O3>")
        .arg(linked)
        .arg("-o")
        .arg(optimized);
    run(opt, target)?;

    let mut llc = tools.command("llc");
    llc.args(["-O3", "-mtriple=amdgcn-amd-amdhsa", "-filetype=obj"])
        .arg(format!("-mcpu={gfx}"))
        .arg(format!("--amdhsa-code-object-version={code_object_version}"))
        .arg(optimized)
        .arg("-o")
        .arg(object);
    run(llc, target)?;

    let mut lld = tools.command("rust-lld");
    lld.args(["-flavor", "gnu", "-shared", "--no-undefined"])
        .arg(object)
        .arg("-o")
        .arg(tmp);
    run(lld, target).map_err(with_builtins_hint)?;
    let dest = out_dir.join(format!("{stem}-{gfx}.hsaco"));
    std::fs::rename(tmp, &dest).map_err(io_err(format!("renaming {} to {}", tmp.display(), dest.display())))?;
    Ok(dest)
}

/// A failed join of `target`'s, `output` saying why.
fn join_error(target: &GpuTarget, output: String) -> Error {
    Error::Join {
        target: target.clone(),
        command: String::new(),
        output,
    }
}

/// The symbols a join keeps external: the kernels and globals the kernels' bitcode defines
/// (each file disassembled by `llvm-dis`), and the library's that the host looks up. An
/// error if a file was built for another processor than `gfx`, or if none defines a kernel.
fn kept_symbols(tools: &Tools, kernels: &[PathBuf], gfx: &str, target: &GpuTarget) -> Result<Vec<String>, Error> {
    let (mut keep, mut found) = (Vec::new(), 0);
    for kernel in kernels {
        let mut dis = tools.command("llvm-dis");
        dis.arg(kernel).arg("-o").arg("-");
        let text = run(dis, target)?;
        if let Some(other) = processors(&text).into_iter().find(|p| p != gfx) {
            return Err(join_error(
                target,
                format!(
                    "{} was built for {other}, not {gfx}: build it with --offload-arch={gfx}",
                    kernel.display()
                ),
            ));
        }
        let names = kernel_names(&text);
        found += names.len();
        keep.extend(names);
        keep.extend(global_names(&text));
    }
    if found == 0 {
        return Err(join_error(
            target,
            format!(
                "{} define(s) no kernel (no amdgpu_kernel function: a `__global__` function built with \
                 --cuda-device-only)",
                kernels
                    .iter()
                    .map(|k| k.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    keep.extend(HOST_SYMBOLS.map(String::from));
    Ok(keep)
}

/// `rust-lld`'s error, with the way out where the code object calls ROCm's device libraries
/// (an undefined `__ockl_` symbol).
fn with_builtins_hint(e: Error) -> Error {
    match e {
        Error::Join {
            target,
            command,
            output,
        } if output.contains("__ockl_") => Error::Join {
            target,
            command,
            output: format!(
                "{output}\n(HIP's builtins, blockIdx and the like, call ROCm's device libraries: build the \
                 kernel's bitcode with them, without -nogpulib)"
            ),
        },
        e => e,
    }
}

/// A join's intermediate files, removed however it ends.
struct Scratch([PathBuf; 5]);

impl Drop for Scratch {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// `target` if it is an AMD one; joining is for AMD code objects only.
fn amdgcn_only(target: &GpuTarget) -> Result<&GpuTarget, Error> {
    target.validate()?;
    match target {
        GpuTarget::Amdgcn { .. } => Ok(target),
        GpuTarget::Nvptx { .. } => Err(Error::Join {
            target: target.clone(),
            command: String::new(),
            output: "NVIDIA code is joined as PTX when it loads (gpuio::link_ptx), not here".into(),
        }),
    }
}

/// The LLVM options among the target's rustc flags (`-Cllvm-args=...`), for `opt`.
fn llvm_args(target: &GpuTarget) -> Vec<String> {
    target
        .rustflags()
        .iter()
        .filter_map(|f| f.strip_prefix("-Cllvm-args="))
        .filter(|a| !a.starts_with("--amdhsa-code-object-version"))
        .map(String::from)
        .collect()
}

/// A name as LLVM's text writes it after `@`: plain, or quoted (with `\XX` escapes); the
/// name and the rest of the line.
fn llvm_name(at: &str) -> Option<(String, &str)> {
    if let Some(quoted) = at.strip_prefix('"') {
        let end = quoted.find('"')?;
        let (raw, rest) = (&quoted[..end], &quoted[end + 1..]);
        let mut name = Vec::new();
        let bytes = raw.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let escaped = (bytes[i] == b'\\')
                .then(|| raw.get(i + 1..i + 3))
                .flatten()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok());
            if let Some(b) = escaped {
                name.push(b);
                i += 3;
                continue;
            }
            name.push(bytes[i]);
            i += 1;
        }
        Some((String::from_utf8_lossy(&name).into_owned(), rest))
    } else {
        let end = at
            .find(|c: char| !(c.is_ascii_alphanumeric() || "._$-".contains(c)))
            .unwrap_or(at.len());
        Some((at[..end].to_string(), &at[end..]))
    }
}

/// The names of the `amdgpu_kernel` functions an LLVM module's text defines.
fn kernel_names(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("define ") && l.contains(" amdgpu_kernel "))
        .filter_map(|l| Some(llvm_name(l.split_once(" @")?.1)?.0))
        .collect()
}

/// The globals an LLVM module's text defines with external linkage (not `internal`,
/// `private` or a declaration).
fn global_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = llvm_name(l.strip_prefix('@')?)?;
            let rest = rest.strip_prefix(" = ")?;
            let local = ["internal ", "private ", "external "].iter().any(|w| rest.contains(w));
            let global = rest.contains("global ") || rest.contains("constant ");
            (global && !local && !name.starts_with("llvm.")).then_some(name)
        })
        .collect()
}

/// The processors an LLVM module's text names in its functions' `"target-cpu"` attributes.
fn processors(text: &str) -> Vec<String> {
    let mut found: Vec<String> = text
        .split("\"target-cpu\"=\"")
        .skip(1)
        .filter_map(|s| Some(s.split_once('"')?.0.to_string()))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// Runs `cmd`; its standard output, or an error with its standard error.
fn run(mut cmd: Command, target: &GpuTarget) -> Result<String, Error> {
    let command = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("running `{command}`")))?;
    if !out.status.success() {
        return Err(Error::Join {
            target: target.clone(),
            command,
            output: tail(&String::from_utf8_lossy(&out.stderr), 20),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `<sysroot>/lib/rustlib/<host>/bin/` of the toolchain we run under: the `llvm-tools`
/// component's tools, and rust-lld, which comes with every toolchain.
struct Tools(PathBuf);

impl Tools {
    fn find() -> Result<Tools, Error> {
        let rustc = toolchain_rustc()?;
        let ask = |arg: &str| -> Result<String, Error> {
            let out = Command::new(&rustc)
                .arg(arg)
                .output()
                .map_err(io_err(format!("running `{} {arg}`", rustc.display())))?;
            if !out.status.success() {
                return Err(Error::Io {
                    context: format!("running `{} {arg}`", rustc.display()),
                    source: std::io::Error::other(tail(&String::from_utf8_lossy(&out.stderr), 5)),
                });
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let sysroot = ask("--print=sysroot")?.trim().to_string();
        let host = ask("-vV")?
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .unwrap_or_default()
            .to_string();
        let dir = Path::new(&sysroot).join("lib/rustlib").join(host).join("bin");
        let tools = Tools(dir);
        for tool in ["llvm-link", "llvm-dis", "opt", "llc", "rust-lld"] {
            if !tools.0.join(tool).is_file() {
                return Err(Error::MissingComponents {
                    components: vec!["llvm-tools".into()],
                    command: "rustup component add llvm-tools".into(),
                    detail: format!("{} is not there", tools.0.join(tool).display()),
                });
            }
        }
        Ok(tools)
    }

    fn command(&self, tool: &str) -> Command {
        Command::new(self.0.join(tool))
    }
}

#[cfg(test)]
mod tests {
    use super::{global_names, kernel_names, processors};

    #[test]
    fn kernels_globals_and_processors_are_read_from_the_module_text() {
        let text = "@counter = addrspace(1) global i32 0, align 4\n\
                    @table = protected addrspace(4) constant [2 x i32] [i32 1, i32 2]\n\
                    @.str = private unnamed_addr addrspace(4) constant [4 x i8] c\"odd\\00\"\n\
                    @hidden = internal addrspace(1) global i32 0\n\
                    @elsewhere = external addrspace(1) global i32\n\
                    define protected amdgpu_kernel void @printf_kernel(i32 noundef %0) #4 {\n\
                    define internal fastcc void @helper() {\n\
                    define amdgpu_kernel void @\"odd(name\\22\"() {\n\
                    declare void @gpuio_puts(ptr)\n\
                    attributes #4 = { \"target-cpu\"=\"gfx90a\" }\n\
                    attributes #5 = { \"target-cpu\"=\"gfx90a\" \"uniform-work-group-size\"=\"true\" }\n";
        assert_eq!(kernel_names(text), ["printf_kernel", "odd(name\""]);
        assert_eq!(global_names(text), ["counter", "table"]);
        assert_eq!(processors(text), ["gfx90a"]);
    }
}
