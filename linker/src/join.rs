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

/// The symbols of gpuio's device library that the host looks up by name, besides the
/// kernels: kept visible in the joined code object.
const HOST_SYMBOLS: [&str; 2] = ["gpuio_context", "gpuio_layout"];

/// Builds gpuio's device library crate (`kernels-c/` in gpuio's repository) at
/// `manifest_dir` for the AMD `target` as LLVM bitcode, the whole program with `core`
/// (link-time optimized), and returns its path, copied to
/// `out_dir/<lib name>-<gfx>.bc`. Built as [`build_kernel_crate`](crate::build_kernel_crate)
/// builds a kernel crate.
pub fn library_bitcode(manifest_dir: &Path, target: &GpuTarget, out_dir: &Path) -> Result<PathBuf, Error> {
    amdgcn_only(target)?;
    let (artifact, command) = build(manifest_dir, target, out_dir, &["--emit=llvm-bc,link"])?;
    // rustc writes the bitcode beside the code object under its crate name.
    let bitcode = artifact.with_extension("bc");
    let bitcode = if bitcode.is_file() {
        bitcode
    } else {
        artifact.parent().map(|d| d.join("deps")).unwrap_or_default().join(
            bitcode
                .file_name()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("lib.bc")),
        )
    };
    if !bitcode.is_file() {
        return Err(Error::NoArtifact {
            target: target.clone(),
            command,
        });
    }
    let stem = artifact
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "library".into());
    let dest = out_dir.join(format!("{stem}-{}.bc", target.arch()));
    copy_into_place(&bitcode, &dest)?;
    Ok(dest)
}

/// Joins `kernel`, a C++ or HIP kernel's device bitcode for `target`'s processor (from
/// `clang -x hip --offload-arch=<gfx> -fgpu-rdc --cuda-device-only -emit-llvm -c`), with
/// `library`, gpuio's device library for the same processor ([`library_bitcode`]), into one
/// code object, `out_dir/<kernel's stem>-<gfx>.hsaco`, which `Runtime::load_module` loads.
///
/// The two are linked (`llvm-link`), every symbol but the kernels and the library's
/// symbols the host looks up (`gpuio_context`, `gpuio_layout`) made internal, optimized
/// (`opt`, O3, with gpuio's AMD inlining flag: [`GpuTarget::rustflags`] says why), compiled
/// (`llc`, the target's code object version)
/// and linked into a shared object (`rust-lld`): the same steps, with the same LLVM, as a
/// kernel crate's build. A symbol neither defines is an error, as it would be on the GPU.
pub fn join_amdgcn(library: &Path, kernel: &Path, target: &GpuTarget, out_dir: &Path) -> Result<PathBuf, Error> {
    let GpuTarget::Amdgcn {
        gfx,
        code_object_version,
    } = amdgcn_only(target)?
    else {
        unreachable!("amdgcn_only returned an AMD target")
    };
    std::fs::create_dir_all(out_dir).map_err(io_err(format!("creating {}", out_dir.display())))?;
    let stem = kernel
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kernels".into());
    let work = |ext: &str| out_dir.join(format!(".{stem}-{gfx}.{ext}"));
    let (linked, optimized, object) = (work("linked.bc"), work("opt.bc"), work("o"));

    let mut link = Command::new(llvm_tool("llvm-link")?);
    link.arg(library).arg(kernel).arg("-o").arg(&linked);
    run(link, target)?;

    // The kernels, by their calling convention in the linked module's text.
    let mut dis = Command::new(llvm_tool("llvm-dis")?);
    dis.arg(&linked).arg("-o").arg("-");
    let text = run(dis, target)?;
    let kernels = kernel_names(&text);
    if kernels.is_empty() {
        return Err(Error::Join {
            target: target.clone(),
            command: format!("llvm-dis {}", linked.display()),
            output: format!("{} defines no kernel (no amdgpu_kernel function)", kernel.display()),
        });
    }
    let keep: Vec<&str> = kernels.iter().map(String::as_str).chain(HOST_SYMBOLS).collect();

    let mut opt = Command::new(llvm_tool("opt")?);
    opt.arg("-amdgpu-inline-arg-alloca-cost=0")
        .arg(format!("-internalize-public-api-list={}", keep.join(",")))
        .arg("-passes=internalize,default<O3>")
        .arg(&linked)
        .arg("-o")
        .arg(&optimized);
    run(opt, target)?;

    let mut llc = Command::new(llvm_tool("llc")?);
    llc.args(["-O3", "-mtriple=amdgcn-amd-amdhsa", "-filetype=obj"])
        .arg(format!("-mcpu={gfx}"))
        .arg(format!("--amdhsa-code-object-version={code_object_version}"))
        .arg(&optimized)
        .arg("-o")
        .arg(&object);
    run(llc, target)?;

    let dest = out_dir.join(format!("{stem}-{gfx}.hsaco"));
    let tmp = work("hsaco");
    let mut lld = Command::new(llvm_tool("rust-lld")?);
    lld.args(["-flavor", "gnu", "-shared", "--no-undefined"])
        .arg(&object)
        .arg("-o")
        .arg(&tmp);
    run(lld, target).map_err(|e| match e {
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
    })?;
    std::fs::rename(&tmp, &dest).map_err(io_err(format!("renaming {} to {}", tmp.display(), dest.display())))?;
    for f in [linked, optimized, object] {
        let _ = std::fs::remove_file(f);
    }
    Ok(dest)
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

/// The names of the `amdgpu_kernel` functions an LLVM module's text defines.
fn kernel_names(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("define ") && l.contains(" amdgpu_kernel "))
        .filter_map(|l| {
            let name = l.split_once(" @")?.1;
            let name = name.split_once('(')?.0;
            Some(name.trim_matches('"').to_string())
        })
        .collect()
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

/// `<sysroot>/lib/rustlib/<host>/bin/<tool>` of the toolchain we run under (the
/// `llvm-tools` component; rust-lld comes with every toolchain).
fn llvm_tool(tool: &str) -> Result<PathBuf, Error> {
    let rustc = toolchain_rustc()?;
    let ask = |arg: &str| -> Result<String, Error> {
        let out = Command::new(&rustc)
            .arg(arg)
            .output()
            .map_err(io_err(format!("running `{} {arg}`", rustc.display())))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let sysroot = ask("--print=sysroot")?.trim().to_string();
    let host = ask("-vV")?
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or_default()
        .to_string();
    let path = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(host)
        .join("bin")
        .join(tool);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::MissingComponents {
            components: vec!["llvm-tools".into()],
            command: "rustup component add llvm-tools".into(),
            detail: format!("{} is not there", path.display()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_names;

    #[test]
    fn kernels_are_read_from_their_calling_convention() {
        let text = "define protected amdgpu_kernel void @printf_kernel(i32 noundef %0) #4 {\n\
                    define internal fastcc void @helper() {\n\
                    define amdgpu_kernel void @\"odd name\"() {\n\
                    declare void @gpuio_puts(ptr)\n";
        assert_eq!(kernel_names(text), ["printf_kernel", "odd name"]);
    }
}
