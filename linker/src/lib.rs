//! Builds a gpuio kernel crate into a GPU code object: a `.ptx` module for NVIDIA GPUs or an
//! amdgcn ELF code object (`.hsaco`) for AMD GPUs.
//!
//! A kernel crate is an ordinary `#![no_std]` library (crate type `rlib`, so the host can
//! call its kernels as plain functions on the CPU backend) that depends on `gpuio-device`.
//! [`build_kernel_crate`] runs a separate, clean `cargo` on it:
//!
//! ```text
//! cargo rustc --release --lib --crate-type cdylib --target <triple> -Zbuild-std=core
//!       --manifest-path <crate>/Cargo.toml --target-dir <out_dir>/target
//! ```
//!
//! with `RUSTC_BOOTSTRAP=1` (only in that cargo's environment: `-Zbuild-std` and the
//! `gpu-kernel` ABI are unstable), LTO, `panic=abort`, and per target:
//!
//! - nvptx: `-Ctarget-cpu=sm_NN -Zunstable-options -Clinker-flavor=llbc` (rustc's
//!   llvm-bitcode-linker links the bitcode and writes PTX);
//! - amdgcn: `-Ctarget-cpu=gfxNNN -Cllvm-args=--amdhsa-code-object-version=N` (rust-lld
//!   links the code object).
//!
//! Use it from a build script:
//!
//! ```no_run
//! use std::path::Path;
//! use gpuio_linker::{build_kernel_crate, ensure_components, GpuTarget};
//!
//! let out_dir = std::env::var_os("OUT_DIR").unwrap();
//! let target = GpuTarget::amdgcn("gfx90a");
//! ensure_components(&[&target])?;
//! let hsaco = build_kernel_crate(Path::new("kernels"), &target, Path::new(&out_dir))?;
//! println!("cargo:rustc-env=MY_KERNELS_HSACO={}", hsaco.display());
//! # Ok::<(), gpuio_linker::Error>(())
//! ```
//!
//! The toolchain needs the `rust-src` component (both targets) and `llvm-tools` plus
//! `llvm-bitcode-linker` (nvptx). [`ensure_components`] adds missing ones with rustup.
//!
//! ## AMDGPU code object versions
//!
//! An amdgcn build is one ELF code object per processor (`gfx90a`, `gfx942`, `gfx1100`,
//! ...): `-Ctarget-cpu` decides the instruction set, and a code object for one processor
//! does not load on another. Build one per GPU you support and pick at run time by the
//! HSA agent's name (gpuio's `Runtime::load_matching` does). Without `xnack`/`sramecc`
//! in the target features the object says "any" for both, so it loads in either mode.
//!
//! The version is in the ELF header's `EI_ABIVERSION` (2, 3, 4 for v4, v5, v6). Which
//! ROCm loaders accept it (ROCR-Runtime's `libamdhsacode`, checked in its sources):
//!
//! | version | `EI_ABIVERSION` | loaded by |
//! |---|---|---|
//! | v4 | 2 | ROCm 4.1 and later |
//! | v5 (our default) | 3 | ROCm 5.2 and later (Debian 12's `libhsa-runtime64-1` is 5.2.3) |
//! | v6 (rustc's default) | 4 | ROCm 6.2 and later |
//!
//! v5 also moves the hidden kernel arguments (block counts, group sizes, ...) to a fixed
//! layout that the metadata note describes; a launcher fills them from that note.

mod kernels;
pub use kernels::{Built, Kernels};

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// The code object version used by [`GpuTarget::amdgcn`]: v5, which ROCm's loader accepts
/// from ROCm 5.2 on (Rust's default, v6, needs ROCm 6.2). See the crate docs.
pub const DEFAULT_AMDHSA_CODE_OBJECT_VERSION: u32 = 5;

/// A GPU to build for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GpuTarget {
    /// NVIDIA, `nvptx64-nvidia-cuda`; produces PTX.
    Nvptx {
        /// The PTX target architecture, e.g. `sm_90`.
        sm: String,
    },
    /// AMD, `amdgcn-amd-amdhsa`; produces an ELF code object.
    Amdgcn {
        /// The processor, e.g. `gfx90a` (MI210/MI250) or `gfx942` (MI300).
        gfx: String,
        /// The AMDHSA code object version (4, 5 or 6).
        code_object_version: u32,
    },
}

impl GpuTarget {
    /// NVIDIA GPU of architecture `sm` (e.g. `"sm_90"`).
    pub fn nvptx(sm: impl Into<String>) -> Self {
        GpuTarget::Nvptx { sm: sm.into() }
    }

    /// AMD GPU `gfx` (e.g. `"gfx90a"`), code object version
    /// [`DEFAULT_AMDHSA_CODE_OBJECT_VERSION`].
    pub fn amdgcn(gfx: impl Into<String>) -> Self {
        GpuTarget::Amdgcn {
            gfx: gfx.into(),
            code_object_version: DEFAULT_AMDHSA_CODE_OBJECT_VERSION,
        }
    }

    /// The rustc target triple.
    pub fn triple(&self) -> &'static str {
        match self {
            GpuTarget::Nvptx { .. } => "nvptx64-nvidia-cuda",
            GpuTarget::Amdgcn { .. } => "amdgcn-amd-amdhsa",
        }
    }

    /// The processor name passed as `-Ctarget-cpu` (`sm_90`, `gfx90a`).
    pub fn arch(&self) -> &str {
        match self {
            GpuTarget::Nvptx { sm } => sm,
            GpuTarget::Amdgcn { gfx, .. } => gfx,
        }
    }

    /// The extension of the code object [`build_kernel_crate`] returns: `ptx` or `hsaco`.
    pub fn extension(&self) -> &'static str {
        match self {
            GpuTarget::Nvptx { .. } => "ptx",
            GpuTarget::Amdgcn { .. } => "hsaco",
        }
    }

    /// The extension of the file rustc itself writes for a cdylib on this target.
    fn rustc_extension(&self) -> &'static str {
        match self {
            GpuTarget::Nvptx { .. } => "ptx",
            GpuTarget::Amdgcn { .. } => "elf",
        }
    }

    /// The rustup components a build for this target needs.
    pub fn required_components(&self) -> &'static [&'static str] {
        match self {
            GpuTarget::Nvptx { .. } => &["rust-src", "llvm-tools", "llvm-bitcode-linker"],
            GpuTarget::Amdgcn { .. } => &["rust-src"],
        }
    }

    /// The rustc flags for every crate of the build (core included).
    pub fn rustflags(&self) -> Vec<String> {
        match self {
            GpuTarget::Nvptx { sm } => {
                let mut flags = vec![
                    format!("-Ctarget-cpu={sm}"),
                    "-Zunstable-options".into(),
                    "-Clinker-flavor=llbc".into(),
                ];
                // LLVM writes the oldest PTX version the processor allows (5.0 for sm_60,
                // 6.0 for sm_70), but gpuio-device's warp collectives (`activemask`) need
                // PTX 6.2, and its waits on sm_70 and later (`nanosleep`) PTX 6.3. From
                // sm_75 on, the oldest version allowed is newer than both.
                match self.sm_number() {
                    Some(n) if n < 70 => flags.push("-Ctarget-feature=+ptx62".into()),
                    Some(n) if n < 75 => flags.push("-Ctarget-feature=+ptx63".into()),
                    _ => {}
                }
                flags
            }
            GpuTarget::Amdgcn {
                gfx,
                code_object_version,
            } => vec![
                format!("-Ctarget-cpu={gfx}"),
                format!("-Cllvm-args=--amdhsa-code-object-version={code_object_version}"),
            ],
        }
    }

    /// The number of an NVIDIA target (`70` for `sm_70`, `90` for `sm_90a`).
    fn sm_number(&self) -> Option<u32> {
        match self {
            GpuTarget::Nvptx { sm } => sm
                .strip_prefix("sm_")?
                .trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .parse()
                .ok(),
            GpuTarget::Amdgcn { .. } => None,
        }
    }

    /// Whether this is an NVIDIA target before sm_70 (Volta): PTX for it runs without
    /// independent thread scheduling, the lanes of a warp in lockstep, also on newer GPUs.
    /// gpuio builds its kernels for `sm_60` to test the lockstep hazards of AMD wavefronts
    /// on NVIDIA hardware.
    pub fn is_pre_volta(&self) -> bool {
        self.sm_number().is_some_and(|n| n < 70)
    }

    /// Checks the architecture name, so that a typo fails here and not deep in LLVM.
    fn validate(&self) -> Result<(), Error> {
        let ok = match self {
            GpuTarget::Nvptx { sm } => sm
                .strip_prefix("sm_")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric())),
            GpuTarget::Amdgcn {
                gfx,
                code_object_version,
            } => {
                gfx.strip_prefix("gfx").is_some_and(|n| {
                    !n.is_empty() && n.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_')
                }) && (4..=6).contains(code_object_version)
            }
        };
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidTarget(self.clone()))
        }
    }
}

impl fmt::Display for GpuTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuTarget::Nvptx { sm } => write!(f, "nvptx64 {sm}"),
            GpuTarget::Amdgcn {
                gfx,
                code_object_version,
            } => {
                write!(f, "amdgcn {gfx} (code object v{code_object_version})")
            }
        }
    }
}

/// Why a GPU build failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The target's architecture name or code object version is not valid.
    InvalidTarget(GpuTarget),
    /// A program could not be run, or a file could not be read or written.
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// Toolchain components are missing (or could not be listed) and could not be added.
    MissingComponents {
        /// The missing components.
        components: Vec<String>,
        /// The command that adds them, to run by hand.
        command: String,
        /// What went wrong: listing or adding them.
        detail: String,
    },
    /// The inner cargo failed.
    Cargo {
        /// The GPU target being built.
        target: GpuTarget,
        /// The command line.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// The last lines of its standard error.
        stderr_tail: String,
    },
    /// The inner cargo succeeded but reported no code object.
    NoArtifact {
        /// The GPU target being built.
        target: GpuTarget,
        /// The command line.
        command: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidTarget(t) => write!(
                f,
                "invalid GPU target {t}: expected sm_NN for nvptx, gfxNNN and code object version 4..=6 for amdgcn"
            ),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::MissingComponents { components, command, detail } => write!(
                f,
                "building GPU kernels needs the Rust toolchain component(s) {}, but {detail}.\n\
                 Add them by hand:\n    {command}",
                components.join(", ")
            ),
            Error::Cargo { target, command, status, stderr_tail } => write!(
                f,
                "building the GPU kernels for {target} failed ({status})\ncommand: {command}\n{stderr_tail}"
            ),
            Error::NoArtifact { target, command } => write!(
                f,
                "building the GPU kernels for {target} produced no .{} file (is the crate a library?)\ncommand: {command}",
                target.rustc_extension()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// The toolchain the caller runs under: rustup's `RUSTUP_TOOLCHAIN` (rustup sets it for
/// cargo and therefore for build scripts), if any.
fn rustup_toolchain() -> Option<String> {
    std::env::var("RUSTUP_TOOLCHAIN").ok().filter(|t| !t.is_empty())
}

/// Lists the installed rustup components of the toolchain in use.
fn installed_components() -> Result<Vec<String>, Error> {
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
fn is_installed(installed: &[String], component: &str) -> bool {
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

/// The last `n` lines of `s`.
fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Environment variables of an enclosing cargo or build script that must not reach the
/// inner cargo: they would redirect its target directory, add host flags to GPU crates,
/// swap its compiler or describe the outer package.
fn is_outer_build_var(key: &str) -> bool {
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
fn toolchain_rustc() -> Result<PathBuf, Error> {
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
fn toolchain_cargo() -> OsString {
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
fn json_strings(line: &str) -> Vec<String> {
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

    #[test]
    fn targets() {
        assert!(GpuTarget::nvptx("sm_90").validate().is_ok());
        assert!(GpuTarget::amdgcn("gfx90a").validate().is_ok());
        assert!(GpuTarget::amdgcn("gfx942").validate().is_ok());
        assert!(GpuTarget::nvptx("90").validate().is_err());
        assert!(GpuTarget::amdgcn("gfx 90a").validate().is_err());
        assert!(GpuTarget::Amdgcn {
            gfx: "gfx90a".into(),
            code_object_version: 3
        }
        .validate()
        .is_err());
        assert_eq!(
            GpuTarget::amdgcn("gfx90a").rustflags(),
            ["-Ctarget-cpu=gfx90a", "-Cllvm-args=--amdhsa-code-object-version=5"]
        );
        assert!(GpuTarget::nvptx("sm_60").is_pre_volta());
        assert!(!GpuTarget::nvptx("sm_70").is_pre_volta());
        assert!(!GpuTarget::nvptx("sm_90a").is_pre_volta());
        assert!(!GpuTarget::amdgcn("gfx90a").is_pre_volta());
        assert!(GpuTarget::nvptx("sm_60")
            .rustflags()
            .contains(&"-Ctarget-feature=+ptx62".to_string()));
        assert!(!GpuTarget::nvptx("sm_90").rustflags().iter().any(|f| f.contains("ptx")));
    }

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
