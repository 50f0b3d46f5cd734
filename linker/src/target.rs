//! The GPU targets: which rustc target, CPU and flags each builds with.

use std::fmt;

use crate::Error;

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

    /// The extension of the code object [`build_kernel_crate`](crate::build_kernel_crate) returns: `ptx` or `hsaco`.
    pub fn extension(&self) -> &'static str {
        match self {
            GpuTarget::Nvptx { .. } => "ptx",
            GpuTarget::Amdgcn { .. } => "hsaco",
        }
    }

    /// The extension of the file rustc itself writes for a cdylib on this target.
    pub(crate) fn rustc_extension(&self) -> &'static str {
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
                // rustc gives amdgpu functions no `noinline` (it ignores `#[inline(never)]`
                // there), and LLVM's AMDGPU inliner raises the threshold of any call that
                // passes pointers to up to 256 bytes of the caller's stack by 4,000 (times
                // its threshold multiplier: tens of thousands in effect), so every call that
                // passes a struct by reference (an `Sqe` to `Context::call`) is inlined, each
                // copy with all it inlined itself. With that bonus gpuio's test kernels are 8.4 MB for
                // gfx90a, with a 140 KB copy of the request path in each of `close`, `fsync`,
                // `fdatasync`, ..., a printing kernel spills about 1,000 registers to
                // scratch, and LLVM's codegen takes about 13 times as long as without it
                // (2.1 MB; tests/amdgcn_code_objects holds the spills down). What it costs:
                // such a struct stays in the caller's scratch memory for the call (64 bytes
                // for an `Sqe`). The option is LLVM's own, hidden one: an LLVM without it
                // stops the build with "Unknown command line argument", which the build
                // error shows with the command.
                "-Cllvm-args=-amdgpu-inline-arg-alloca-cost=0".into(),
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
    pub(crate) fn validate(&self) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
            [
                "-Ctarget-cpu=gfx90a",
                "-Cllvm-args=--amdhsa-code-object-version=5",
                "-Cllvm-args=-amdgpu-inline-arg-alloca-cost=0"
            ]
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
}
