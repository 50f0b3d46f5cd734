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
/// copied to `out_dir/<lib name>-<arch>.<ptx|hsaco>` (e.g. `gpuio_kernels-sm_90.ptx`).
///
/// The build uses its own target directory, `out_dir/target`, so it never waits on the
/// lock of an enclosing cargo, and a clean environment (see the crate docs). The crate is
/// built in release mode with LTO, `panic=abort` and one codegen unit whatever its
/// manifest says; everything it calls must be in Rust (no undefined symbols).
pub fn build_kernel_crate(manifest_dir: &Path, target: &GpuTarget, out_dir: &Path) -> Result<PathBuf, Error> {
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
    .arg("--message-format=json-render-diagnostics")
    .arg("--manifest-path")
    .arg(&manifest)
    .arg("--target-dir")
    .arg(&target_dir)
    .current_dir(manifest_dir);
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
         -Zbuild-std=core --manifest-path {} --target-dir {}",
        rustflags.join(" "),
        target.triple(),
        manifest.display(),
        target_dir.display()
    );

    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(io_err(format!("running `{command}`")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(Error::Cargo {
            target: target.clone(),
            command,
            status: out.status,
            stderr_tail: tail(&String::from_utf8_lossy(&out.stderr), 60),
        });
    }

    let suffix = format!(".{}", target.rustc_extension());
    let artifact = stdout
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .flat_map(json_strings)
        .rfind(|s| s.ends_with(&suffix))
        .map(PathBuf::from)
        .ok_or_else(|| Error::NoArtifact {
            target: target.clone(),
            command: command.clone(),
        })?;

    let stem = artifact
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kernels".into());
    let dest = out_dir.join(format!("{stem}-{}.{}", target.arch(), target.extension()));
    let tmp = out_dir.join(format!(".{stem}-{}.{}.tmp", target.arch(), target.extension()));
    std::fs::copy(&artifact, &tmp).map_err(io_err(format!("copying {} to {}", artifact.display(), tmp.display())))?;
    std::fs::rename(&tmp, &dest).map_err(io_err(format!("renaming {} to {}", tmp.display(), dest.display())))?;
    Ok(dest)
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
    fn artifact_names_from_json() {
        let line = r#"{"reason":"compiler-artifact","filenames":["/t/a b/x.ptx","C:\\k\\y.elf"],"x":"\u0041"}"#;
        let s = json_strings(line);
        assert!(s.contains(&"/t/a b/x.ptx".to_string()));
        assert!(s.contains(&"C:\\k\\y.elf".to_string()));
        assert!(s.contains(&"A".to_string()));
    }
}
