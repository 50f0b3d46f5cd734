//! Building a kernel crate: the inner cargo invocation and the artifacts it reports.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::io_err;
use crate::{Error, GpuTarget};

/// The last `n` lines of `s`.
pub(crate) fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Environment variables of an enclosing cargo or build script that must not reach the
/// inner cargo: they would redirect its target directory, add host flags to GPU crates,
/// swap its compiler or describe the outer package.
pub(crate) fn is_outer_build_var(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_LINKER",
        "RUSTC_BOOTSTRAP",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_ENCODED_RUSTDOCFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_INCREMENTAL",
        "OUT_DIR",
        "TARGET",
        "HOST",
        "NUM_JOBS",
        "OPT_LEVEL",
        "PROFILE",
        "DEBUG",
    ];
    const PREFIXES: &[&str] = &[
        "CARGO_BUILD_",
        "CARGO_PROFILE_",
        "CARGO_TARGET_",
        "CARGO_CFG_",
        "CARGO_FEATURE_",
        "CARGO_PKG_",
        "CARGO_BIN_",
        "CARGO_UNSTABLE_",
        "DEP_",
    ];
    EXACT.contains(&key) || PREFIXES.iter().any(|p| key.starts_with(p))
}

/// The compiler of the toolchain we run under: `$RUSTC` (cargo sets it for build scripts)
/// resolved to the real binary in its sysroot, so that the inner build uses exactly the
/// same toolchain and its rust-lld / llvm-bitcode-linker.
pub(crate) fn toolchain_rustc() -> Result<PathBuf, Error> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(io_err(format!("running `{} --print sysroot`", rustc.to_string_lossy())))?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let real = Path::new(&sysroot).join("bin").join("rustc");
    Ok(if out.status.success() && real.is_file() {
        real
    } else {
        PathBuf::from(rustc)
    })
}

/// The cargo of the toolchain we run under (`$CARGO`, set by cargo for build scripts).
pub(crate) fn toolchain_cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Builds the kernel crate at `manifest_dir` for `target` and returns the code object,
/// copied to `out_dir/<lib name>-<arch>.<ptx|hsaco>` (e.g. `gpuio_kernels-sm_90.ptx`); PTX
/// with each kernel's `#[launch_bounds]` written as its `.maxntid` (`launch_bounds.rs`).
///
/// The build uses its own target directory, `out_dir/target`, so it never waits on the
/// lock of an enclosing cargo, and a clean environment (see the crate docs). The crate is
/// built in release mode with LTO, `panic=abort` and one codegen unit whatever its
/// manifest says; everything it calls must be in Rust (no undefined symbols).
pub fn build_kernel_crate(manifest_dir: &Path, target: &GpuTarget, out_dir: &Path) -> Result<PathBuf, Error> {
    let artifact = build(manifest_dir, target, out_dir, &[])?;
    let stem = artifact
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kernels".into());
    let dest = out_dir.join(format!("{stem}-{}.{}", target.arch(), target.extension()));
    // PTX: each kernel's launch bounds as directives (`launch_bounds.rs`).
    let ptx = match target {
        GpuTarget::Nvptx { .. } => std::fs::read_to_string(&artifact)
            .ok()
            .and_then(|ptx| crate::launch_bounds::write_directives(&ptx)),
        _ => None,
    };
    match ptx {
        Some(ptx) => write_into_place(ptx.as_bytes(), &dest)?,
        None => copy_into_place(&artifact, &dest)?,
    }
    Ok(dest)
}

/// Writes `bytes` to `dest` as [`copy_into_place`] copies a file: through a temporary file
/// beside it.
fn write_into_place(bytes: &[u8], dest: &Path) -> Result<(), Error> {
    let tmp = beside(dest);
    std::fs::write(&tmp, bytes).map_err(io_err(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, dest).map_err(io_err(format!("renaming {} to {}", tmp.display(), dest.display())))
}

/// Copies `from` to `dest` through a temporary file beside it, so that a reader never sees
/// half a file. The temporary file is this process's own (two builds writing one `dest` at
/// once each rename a whole copy).
pub(crate) fn copy_into_place(from: &Path, dest: &Path) -> Result<(), Error> {
    let tmp = beside(dest);
    std::fs::copy(from, &tmp).map_err(io_err(format!("copying {} to {}", from.display(), tmp.display())))?;
    std::fs::rename(&tmp, dest).map_err(io_err(format!("renaming {} to {}", tmp.display(), dest.display())))
}

/// This process's temporary file beside `dest`.
fn beside(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dest.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Builds the crate at `manifest_dir` for `target` as [`build_kernel_crate`] says, rustc
/// given `rustc_args` too; the code object rustc wrote (in the inner target directory).
pub(crate) fn build(
    manifest_dir: &Path,
    target: &GpuTarget,
    out_dir: &Path,
    rustc_args: &[&str],
) -> Result<PathBuf, Error> {
    target.validate()?;
    // The inner cargo runs in the crate's directory: make relative paths absolute first.
    let manifest_dir =
        &std::path::absolute(manifest_dir).map_err(io_err(format!("resolving {}", manifest_dir.display())))?;
    let out_dir = &std::path::absolute(out_dir).map_err(io_err(format!("resolving {}", out_dir.display())))?;
    let manifest = manifest_dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(Error::Io {
            context: format!("reading {}", manifest.display()),
            source: io::Error::new(io::ErrorKind::NotFound, "no kernel crate there"),
        });
    }
    let target_dir = out_dir.join("target");
    std::fs::create_dir_all(&target_dir).map_err(io_err(format!("creating {}", target_dir.display())))?;

    let (mut cmd, command) = inner_cargo(target, &manifest, manifest_dir, &target_dir, rustc_args)?;
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(io_err(format!("running `{command}`")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let errors = rendered_errors(&stdout);
        if let Some(first) = errors.first() {
            // The crate's own errors stop its CPU build too, which prints them in full: say
            // so in one line rather than print them a second time.
            if !compiles_for_the_host(&manifest, manifest_dir, out_dir) {
                return Err(Error::KernelCrate {
                    manifest,
                    first_error: headline(first),
                });
            }
        }
        return Err(Error::Cargo {
            target: target.clone(),
            command,
            status: out.status,
            output: if errors.is_empty() {
                // No compiler error: cargo's own complaint (a toolchain, a manifest).
                tail(&String::from_utf8_lossy(&out.stderr), 30)
            } else {
                errors.concat().trim_end().to_string()
            },
        });
    }

    let suffix = format!(".{}", target.rustc_extension());
    stdout
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .flat_map(json_strings)
        .rfind(|s| s.ends_with(&suffix))
        .map(PathBuf::from)
        .ok_or_else(|| Error::NoArtifact {
            target: target.clone(),
            command,
        })
}

/// The inner cargo that builds the kernel crate of `manifest` for `target` into
/// `target_dir`, in a clean environment (see the crate docs), and the same command as a
/// person would type it, for errors.
fn inner_cargo(
    target: &GpuTarget,
    manifest: &Path,
    manifest_dir: &Path,
    target_dir: &Path,
    rustc_args: &[&str],
) -> Result<(Command, String), Error> {
    let mut cmd = Command::new(toolchain_cargo());
    cmd.args([
        "rustc",
        "--release",
        "--lib",
        "--crate-type",
        "cdylib",
        "--target",
        target.triple(),
    ])
    .arg("-Zbuild-std=core")
    .arg("--message-format=json")
    .arg("--manifest-path")
    .arg(manifest)
    .arg("--target-dir")
    .arg(target_dir)
    .current_dir(manifest_dir);
    if !rustc_args.is_empty() {
        cmd.arg("--").args(rustc_args);
    }
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_outer_build_var) {
            cmd.env_remove(&key);
        }
    }
    let rustflags = target.rustflags();
    cmd.env("RUSTC", toolchain_rustc()?)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "false")
        .env("CARGO_TERM_COLOR", "never");
    let command = format!(
        "RUSTC_BOOTSTRAP=1 CARGO_ENCODED_RUSTFLAGS='{}' cargo rustc --release --lib --crate-type cdylib --target {} \
         -Zbuild-std=core --manifest-path {} --target-dir {}{}",
        rustflags.join(" "),
        target.triple(),
        manifest.display(),
        target_dir.display(),
        if rustc_args.is_empty() {
            String::new()
        } else {
            format!(" -- {}", rustc_args.join(" "))
        }
    );
    Ok((cmd, command))
}

/// The compiler errors among the messages cargo reported in JSON (`--message-format=json`
/// on `stdout`), each rendered as rustc prints it. Warnings are left out: the GPU builds'
/// warnings repeat the CPU build's, or concern flags the linker chose.
pub(crate) fn rendered_errors(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-message\""))
        .filter_map(|l| {
            let s = json_strings(l);
            // The message's own level comes before its children's, and its rendering is its
            // last field (the children's renderings are null).
            let level = s.iter().position(|x| x == "level").and_then(|i| s.get(i + 1))?;
            let rendered = s.iter().rposition(|x| x == "rendered").and_then(|i| s.get(i + 1))?;
            (level == "error" && !rendered.starts_with("error: aborting due to")).then(|| rendered.clone())
        })
        .collect()
}

/// A rendered error's first line and its location (`--> file:line:col`), on one line.
fn headline(rendered: &str) -> String {
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or_default().trim();
    match lines.find_map(|l| l.trim_start().strip_prefix("--> ")) {
        Some(at) => format!("{first} at {at}"),
        None => first.to_string(),
    }
}

/// Whether the kernel crate at `manifest` type-checks for the host (`cargo check`, in its
/// own target directory under `out_dir`). Asked only after a GPU build failed with compiler
/// errors, to tell the crate's own errors (which its CPU build prints) from the GPU's.
fn compiles_for_the_host(manifest: &Path, manifest_dir: &Path, out_dir: &Path) -> bool {
    let mut cmd = Command::new(toolchain_cargo());
    cmd.args(["check", "--lib", "--quiet", "--message-format=short", "--manifest-path"])
        .arg(manifest)
        .arg("--target-dir")
        .arg(out_dir.join("host-check"))
        .current_dir(manifest_dir);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_outer_build_var) {
            cmd.env_remove(&key);
        }
    }
    // Unknown (the check could not run): the GPU build's errors are shown.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_or(true, |s| s.success())
}

/// The string literals of one line of JSON, unescaped (enough to find cargo's artifact
/// file names without a JSON parser).
pub(crate) fn json_strings(line: &str) -> Vec<String> {
    let mut strings = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('r') => s.push('\r'),
                    Some('b') => s.push('\u{8}'),
                    Some('f') => s.push('\u{c}'),
                    Some('u') => {
                        let hex: String = chars.by_ref().take(4).collect();
                        s.push(
                            u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .unwrap_or('\u{fffd}'),
                        );
                    }
                    Some(other) => s.push(other),
                    None => break,
                },
                c => s.push(c),
            }
        }
        strings.push(s);
    }
    strings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outer_vars() {
        for k in [
            "RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "CARGO_CFG_UNIX",
            "CARGO_PKG_NAME",
            "OUT_DIR",
        ] {
            assert!(is_outer_build_var(k), "{k}");
        }
        for k in [
            "CARGO_HOME",
            "CARGO_MAKEFLAGS",
            "RUSTUP_TOOLCHAIN",
            "PATH",
            "CARGO_NET_OFFLINE",
        ] {
            assert!(!is_outer_build_var(k), "{k}");
        }
    }

    #[test]
    fn only_errors_are_kept_and_headlined() {
        let out = [
            r#"{"reason":"compiler-message","message":{"code":{"code":"E0425","explanation":"Some text."},"level":"error","message":"cannot find value `x`","spans":[],"children":[{"level":"help","rendered":null}],"rendered":"error[E0425]: cannot find value `x`\n  --> src/lib.rs:14:32\n   |\n"}}"#,
            r#"{"reason":"compiler-message","message":{"level":"warning","message":"unstable feature","children":[],"rendered":"warning: unstable feature\n"}}"#,
            r#"{"reason":"compiler-message","message":{"level":"error","message":"aborting","children":[],"rendered":"error: aborting due to 1 previous error\n"}}"#,
            r#"{"reason":"build-finished","success":false}"#,
        ]
        .join("\n");
        let errors = rendered_errors(&out);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            headline(&errors[0]),
            "error[E0425]: cannot find value `x` at src/lib.rs:14:32"
        );
    }

    #[test]
    fn artifact_names_from_json() {
        let line = r#"{"reason":"compiler-artifact","filenames":["/t/a b/x.ptx","C:\\k\\y.elf"],"x":"\u0041"}"#;
        let s = json_strings(line);
        assert!(s.contains(&"/t/a b/x.ptx".to_string()));
        assert!(s.contains(&"C:\\k\\y.elf".to_string()));
        assert!(s.contains(&"A".to_string()));
    }
}
