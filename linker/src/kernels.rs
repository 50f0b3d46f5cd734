//! [`Kernels`]: one call in a host crate's `build.rs` that builds a kernel crate for the
//! GPUs and hands back what to embed.

use std::path::{Path, PathBuf};

use crate::{build_kernel_crate, ensure_components, Error, GpuTarget};

/// A kernel crate to build for a set of GPU targets, from a build script.
///
/// [`Kernels::build`] builds every target in parallel (each in its own target directory
/// under `OUT_DIR`), tells cargo to rerun when the kernel crate changes, and writes
/// `OUT_DIR/gpuio_kernels.rs`, which defines two tables for `Runtime::load_matching`:
///
/// ```text
/// pub const NVPTX: &[(&str, &[u8])] = &[("sm_70", include_bytes!("...ptx")), ...];
/// pub const AMDGCN: &[(&str, &[u8])] = &[("gfx90a", include_bytes!("...hsaco")), ...];
/// ```
///
/// In `build.rs` (its `main`):
///
/// ```no_run
/// gpuio_linker::Kernels::new("../kernels")
///     .nvptx(["sm_70"])
///     .amdgcn(["gfx90a", "gfx942", "gfx1100"])
///     .build()
///     .unwrap_or_else(|e| panic!("{e}"));
/// ```
///
/// and in the host crate:
///
/// ```ignore
/// mod kernels {
///     include!(concat!(env!("OUT_DIR"), "/gpuio_kernels.rs"));
/// }
/// let module = rt.load_matching(kernels::NVPTX)?;
/// ```
///
/// With `GPUIO_SKIP_GPU_BUILD=1` in the environment nothing is built and both tables are
/// empty (loading then fails with `Error::NoCodeObject`): a quick build for the CPU backend.
#[derive(Clone, Debug)]
pub struct Kernels {
    dir: PathBuf,
    nvptx: Vec<String>,
    amdgcn: Vec<String>,
    tables: String,
}

/// What [`Kernels::build`] built: each target's processor name and code object.
#[derive(Clone, Debug, Default)]
pub struct Built {
    /// `(sm_NN, path of the .ptx)`, in the order asked for.
    pub nvptx: Vec<(String, PathBuf)>,
    /// `(gfxNNN, path of the .hsaco)`, in the order asked for.
    pub amdgcn: Vec<(String, PathBuf)>,
    /// The generated Rust file (`OUT_DIR/gpuio_kernels.rs`, or as [`Kernels::tables`] named it).
    pub tables: PathBuf,
}

impl Kernels {
    /// The kernel crate in `dir` (relative paths are taken from the build script's package,
    /// `CARGO_MANIFEST_DIR`), for no target yet.
    pub fn new(dir: impl AsRef<Path>) -> Kernels {
        let dir = dir.as_ref();
        let dir = match std::env::var_os("CARGO_MANIFEST_DIR") {
            Some(root) if dir.is_relative() => Path::new(&root).join(dir),
            _ => dir.to_path_buf(),
        };
        Kernels {
            dir,
            nvptx: Vec::new(),
            amdgcn: Vec::new(),
            tables: "gpuio_kernels.rs".into(),
        }
    }

    /// Names the generated file in `OUT_DIR` (default `gpuio_kernels.rs`): for a build
    /// script that builds several kernel crates. Their builds for one target share a
    /// target directory, so `core` is built once per target.
    pub fn tables(mut self, file_name: impl Into<String>) -> Kernels {
        self.tables = file_name.into();
        self
    }

    /// Adds NVIDIA targets (`sm_70`: every GPU from Volta on; `sm_60`: the lockstep build).
    pub fn nvptx<S: Into<String>>(mut self, sms: impl IntoIterator<Item = S>) -> Kernels {
        self.nvptx.extend(sms.into_iter().map(Into::into));
        self
    }

    /// Adds AMD targets (`gfx90a`, `gfx942`, `gfx1100`, ...): one code object each.
    pub fn amdgcn<S: Into<String>>(mut self, gfxs: impl IntoIterator<Item = S>) -> Kernels {
        self.amdgcn.extend(gfxs.into_iter().map(Into::into));
        self
    }

    /// Builds every target (adding missing toolchain components with rustup first), writes
    /// `OUT_DIR/gpuio_kernels.rs` and prints the `cargo:rerun-if-changed` lines. Only from
    /// a build script (it needs `OUT_DIR`).
    pub fn build(self) -> Result<Built, Error> {
        let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or_else(|| Error::Io {
            context: "reading OUT_DIR".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "Kernels::build runs in a build script"),
        })?);
        for watched in [self.dir.join("src"), self.dir.join("Cargo.toml")] {
            println!("cargo:rerun-if-changed={}", watched.display());
        }
        // The device runtime's sources, when this linker is used from a checkout of gpuio
        // (from crates.io they never change).
        let device = Path::new(env!("CARGO_MANIFEST_DIR")).join("../device");
        if device.join("src").is_dir() {
            println!("cargo:rerun-if-changed={}", device.join("src").display());
            println!("cargo:rerun-if-changed={}", device.join("Cargo.toml").display());
        }
        println!("cargo:rerun-if-env-changed=GPUIO_SKIP_GPU_BUILD");
        let tables = out_dir.join(&self.tables);
        let mut built = Built {
            tables: tables.clone(),
            ..Built::default()
        };
        if std::env::var_os("GPUIO_SKIP_GPU_BUILD").is_some_and(|v| v == "1") {
            write_tables(&tables, &built)?;
            return Ok(built);
        }
        let targets: Vec<GpuTarget> = self
            .nvptx
            .iter()
            .map(|sm| GpuTarget::nvptx(sm.clone()))
            .chain(self.amdgcn.iter().map(|gfx| GpuTarget::amdgcn(gfx.clone())))
            .collect();
        ensure_components(&targets.iter().collect::<Vec<_>>())?;
        // One thread and one target directory per build: they do not wait on each other's
        // cargo lock, and each keeps its own `core` (built for its processor).
        let results: Vec<Result<PathBuf, Error>> = std::thread::scope(|s| {
            let handles: Vec<_> = targets
                .iter()
                .map(|t| {
                    let (dir, out) = (&self.dir, out_dir.join(format!("build-{}", t.arch())));
                    s.spawn(move || build_kernel_crate(dir, t, &out))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("GPU build thread panicked"))
                .collect()
        });
        for (t, r) in targets.iter().zip(results) {
            let path = r?;
            match t {
                GpuTarget::Nvptx { sm } => built.nvptx.push((sm.clone(), path)),
                GpuTarget::Amdgcn { gfx, .. } => built.amdgcn.push((gfx.clone(), path)),
            }
        }
        write_tables(&tables, &built)?;
        Ok(built)
    }
}

/// Writes the `NVPTX` and `AMDGCN` tables of `built` to `path`.
fn write_tables(path: &Path, built: &Built) -> Result<(), Error> {
    let table = |entries: &[(String, PathBuf)]| {
        let mut t = String::from("&[\n");
        for (arch, path) in entries {
            t.push_str(&format!(
                "    ({arch:?}, include_bytes!({:?}) as &[u8]),\n",
                path.display().to_string()
            ));
        }
        t + "]"
    };
    let text = format!(
        "// Generated by gpuio_linker::Kernels::build.\n\
         /// The kernels as PTX, by NVIDIA target (for `Runtime::load_matching`).\n\
         #[allow(dead_code)]\n\
         pub const NVPTX: &[(&str, &[u8])] = {};\n\
         /// The kernels as amdgcn code objects, by AMD processor (for `Runtime::load_matching`).\n\
         #[allow(dead_code)]\n\
         pub const AMDGCN: &[(&str, &[u8])] = {};\n",
        table(&built.nvptx),
        table(&built.amdgcn)
    );
    std::fs::write(path, text).map_err(|source| Error::Io {
        context: format!("writing {}", path.display()),
        source,
    })
}
