//! The error a GPU build returns, and the helper that wraps I/O errors with their context.

use std::fmt;
use std::io;
use std::process::ExitStatus;

use crate::GpuTarget;

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
        /// The compiler's errors as rustc renders them, or, with none, the last lines of
        /// cargo's standard error.
        output: String,
    },
    /// The kernel crate does not compile for the host either: its CPU build (a dependency
    /// of the host crate, usually) prints the errors, so this names only the first.
    KernelCrate {
        /// The kernel crate's manifest.
        manifest: std::path::PathBuf,
        /// The first error's headline and location.
        first_error: String,
    },
    /// `GPUIO_GPU_TARGETS` names a target the build script does not build.
    UnknownTarget {
        /// The name given.
        named: String,
        /// The targets the build script builds.
        built: Vec<String>,
    },
    /// Joining a C++ or HIP kernel's bitcode with gpuio's device library failed (a tool of
    /// the toolchain's `llvm-tools`, or the input).
    Join {
        /// The AMD target.
        target: GpuTarget,
        /// The command that failed, if one did.
        command: String,
        /// What it said, or what was wrong.
        output: String,
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
            Error::Cargo { target, command, status, output } => write!(
                f,
                "building the GPU kernels for {target} failed ({status}):\n{output}\n(the build: {command})"
            ),
            Error::KernelCrate { manifest, first_error } => write!(
                f,
                "the kernel crate does not compile ({first_error}); its CPU build prints every error, or run \
                 cargo check --manifest-path {}",
                manifest.display()
            ),
            Error::UnknownTarget { named, built } => write!(
                f,
                "GPUIO_GPU_TARGETS names {named}, which this crate does not build: it builds {} \
                 (or say all, none or auto)",
                built.join(", ")
            ),
            Error::Join { target, command, output } => {
                write!(f, "joining a kernel with gpuio's device library for {target} failed: {output}")?;
                if !command.is_empty() {
                    write!(f, "\n(the step: {command})")?;
                }
                Ok(())
            }
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

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
