//! The rustup components a GPU build needs.

use std::io;
use std::process::{Command, Stdio};

use crate::cargo::tail;
use crate::error::io_err;
use crate::{Error, GpuTarget};

/// The toolchain the caller runs under: rustup's `RUSTUP_TOOLCHAIN` (rustup sets it for
/// cargo and therefore for build scripts), if any.
pub(crate) fn rustup_toolchain() -> Option<String> {
    std::env::var("RUSTUP_TOOLCHAIN").ok().filter(|t| !t.is_empty())
}

/// Lists the installed rustup components of the toolchain in use.
pub(crate) fn installed_components() -> Result<Vec<String>, Error> {
    let mut cmd = Command::new("rustup");
    cmd.args(["component", "list", "--installed"]);
    if let Some(t) = rustup_toolchain() {
        cmd.arg("--toolchain").arg(t);
    }
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .map_err(io_err("running `rustup component list --installed`"))?;
    if !out.status.success() {
        return Err(Error::Io {
            context: "running `rustup component list --installed`".into(),
            source: io::Error::other(
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .trim()
                    .to_string(),
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .collect())
}

/// Whether `component` (e.g. `llvm-tools`) is in rustup's list. Entries of host tools
/// carry the host triple (`llvm-tools-x86_64-unknown-linux-gnu`, or the older
/// `llvm-tools-preview-...`); `rust-src` has none.
pub(crate) fn is_installed(installed: &[String], component: &str) -> bool {
    installed
        .iter()
        .map(|line| line.split_whitespace().next().unwrap_or(""))
        .any(|name| {
            name == component
                || (component != "rust-src" && name.strip_prefix(component).is_some_and(|rest| rest.starts_with('-')))
        })
}

/// Makes sure the toolchain in use has the components that GPU builds for `targets` need:
/// `rust-src` (for `-Zbuild-std`), and for nvptx `llvm-tools` and `llvm-bitcode-linker`.
///
/// Missing components are added with `rustup component add` (for `RUSTUP_TOOLCHAIN` when
/// it is set), announcing it (as a `cargo:warning=` line in a build script). When
/// that fails, the error message holds the exact command to run by hand. Without rustup
/// (no `rustup` on the `PATH`) there is nothing to check or add with, and it returns `Ok`.
pub fn ensure_components(targets: &[&GpuTarget]) -> Result<(), Error> {
    let mut needed: Vec<&str> = Vec::new();
    for t in targets {
        for c in t.required_components() {
            if !needed.contains(c) {
                needed.push(c);
            }
        }
    }
    if needed.is_empty() {
        return Ok(());
    }
    let toolchain = rustup_toolchain();
    let mut command = String::from("rustup component add");
    if let Some(t) = &toolchain {
        command.push_str(" --toolchain ");
        command.push_str(t);
    }
    let installed = match installed_components() {
        Ok(i) => i,
        // Not a rustup toolchain (a distribution's or a hand-built one): nothing to add
        // with; a missing piece shows up as the inner cargo's error.
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(Error::MissingComponents {
                components: needed.iter().map(|c| c.to_string()).collect(),
                command: format!("{command} {}", needed.join(" ")),
                detail: format!("listing the installed components failed: {e}"),
            })
        }
    };
    let missing: Vec<&str> = needed.into_iter().filter(|c| !is_installed(&installed, c)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let command = format!("{command} {}", missing.join(" "));
    // In a build script (cargo sets OUT_DIR) a warning is what reaches the user.
    if std::env::var_os("OUT_DIR").is_some() {
        println!("cargo:warning=gpuio-linker: adding Rust components for GPU builds: {command}");
    } else {
        eprintln!("gpuio-linker: adding Rust components for GPU builds: {command}");
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["component", "add"]);
    if let Some(t) = &toolchain {
        cmd.arg("--toolchain").arg(t);
    }
    cmd.args(&missing);
    let fail = |detail: String| Error::MissingComponents {
        components: missing.iter().map(|c| c.to_string()).collect(),
        command: command.clone(),
        detail,
    };
    match cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(fail(format!(
            "adding them failed ({}):\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 10)
        ))),
        Err(e) => Err(fail(format!("rustup could not be run to add them: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_names() {
        let installed: Vec<String> = [
            "cargo-x86_64-unknown-linux-gnu",
            "llvm-tools-x86_64-unknown-linux-gnu",
            "rust-src",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert!(is_installed(&installed, "rust-src"));
        assert!(is_installed(&installed, "llvm-tools"));
        assert!(!is_installed(&installed, "llvm-bitcode-linker"));
        let only_std = vec!["rust-std-x86_64-unknown-linux-gnu".to_string()];
        assert!(!is_installed(&only_std, "rust-src"));
    }
}
