//! [`KernelCrate`]: one call in a host crate's `build.rs` that builds a kernel crate for the
//! GPUs and hands back what to embed.

use std::path::{Path, PathBuf};

use crate::{build_kernel_crate, ensure_components, Error, GpuTarget};

/// A kernel crate to build for a set of GPU targets, from a build script.
///
/// [`KernelCrate::build`] builds every target in parallel (each in its own target directory
/// under `OUT_DIR`), tells cargo to rerun when the kernel crate changes, and writes
/// `OUT_DIR/gpuio_kernels.rs`, which defines the tables `Runtime::kernels` and
/// `Runtime::load_matching` take:
///
/// ```text
/// pub const OBJECTS: &[(&str, &[u8])] = &[("sm_70", include_bytes!("...ptx")), ("gfx90a", ...), ...];
/// pub const NVPTX: &[(&str, &[u8])] = ...;  // OBJECTS' PTX
/// pub const AMDGCN: &[(&str, &[u8])] = ...; // OBJECTS' amdgcn code objects
/// ```
///
/// In `build.rs` (its `main`):
///
/// ```no_run
/// gpuio_linker::KernelCrate::new("../kernels")
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
/// let kernels = rt.kernels(kernels::OBJECTS)?; // this GPU's, or none on the CPU backend
/// kernels.launch(my_kernels::table, LaunchConfig::linear(2, 64), (100,))?;
/// ```
///
/// **Which targets build.** A machine builds GPU code only for what it can run, or what it
/// is asked for (each target costs a build of `core` for its processor: 15-25 s of a core
/// cold, a few seconds after a kernel edit). `GPUIO_GPU_TARGETS` at build time decides:
///
/// - unset (`auto`): the targets asked for that this machine's GPUs run: the NVIDIA ones
///   where an NVIDIA driver shows a GPU (`/proc/driver/nvidia/gpus`, `/dev/nvidia0`), the
///   AMD ones whose processor a GPU reports (`/sys/class/kfd`); none, silently, on a machine
///   without a GPU (the CPU backend needs no GPU code; run on a GPU, such a build says how
///   to build its kernels when `Runtime::kernels` loads them), and none with a build
///   warning where the GPUs found run none of the targets asked for. Cargo
///   reruns the choice when the variable changes, not when a GPU appears: after installing
///   one, set the variable (or `cargo clean -p` the crate whose build script builds them);
/// - `all`: every target asked for (CI's code-object checks, shipping binaries);
/// - `none` (or `GPUIO_SKIP_GPU_BUILD=1`): nothing;
/// - a list, e.g. `sm_90,gfx942`: those of the targets asked for.
///
/// Targets not built leave their tables empty (loading then fails with
/// `Error::NoCodeObject`, which names what there is).
#[derive(Clone, Debug)]
pub struct KernelCrate {
    dir: PathBuf,
    nvptx: Vec<String>,
    amdgcn: Vec<String>,
    tables: String,
}

/// What [`KernelCrate::build`] built: each target's processor name and code object.
#[derive(Clone, Debug, Default)]
pub struct Built {
    /// `(sm_NN, path of the .ptx)`, in the order asked for.
    pub nvptx: Vec<(String, PathBuf)>,
    /// `(gfxNNN, path of the .hsaco)`, in the order asked for.
    pub amdgcn: Vec<(String, PathBuf)>,
    /// The generated Rust file (`OUT_DIR/gpuio_kernels.rs`, or as [`KernelCrate::tables`] named it).
    pub tables: PathBuf,
}

impl KernelCrate {
    /// The kernel crate in `dir` (relative paths are taken from the build script's package,
    /// `CARGO_MANIFEST_DIR`), for no target yet.
    pub fn new(dir: impl AsRef<Path>) -> KernelCrate {
        let dir = dir.as_ref();
        let dir = match std::env::var_os("CARGO_MANIFEST_DIR") {
            Some(root) if dir.is_relative() => Path::new(&root).join(dir),
            _ => dir.to_path_buf(),
        };
        KernelCrate {
            dir,
            nvptx: Vec::new(),
            amdgcn: Vec::new(),
            tables: "gpuio_kernels.rs".into(),
        }
    }

    /// Names the generated file in `OUT_DIR` (default `gpuio_kernels.rs`): for a build
    /// script that builds several kernel crates. Their builds for one target share a
    /// target directory, so `core` is built once per target.
    pub fn tables(mut self, file_name: impl Into<String>) -> KernelCrate {
        self.tables = file_name.into();
        self
    }

    /// Adds NVIDIA targets (`sm_70`: every GPU from Volta on; `sm_60`: the lockstep build).
    pub fn nvptx<S: Into<String>>(mut self, sms: impl IntoIterator<Item = S>) -> KernelCrate {
        self.nvptx.extend(sms.into_iter().map(Into::into));
        self
    }

    /// Adds AMD targets (`gfx90a`, `gfx942`, `gfx1100`, ...): one code object each.
    pub fn amdgcn<S: Into<String>>(mut self, gfxs: impl IntoIterator<Item = S>) -> KernelCrate {
        self.amdgcn.extend(gfxs.into_iter().map(Into::into));
        self
    }

    /// Builds every target (adding missing toolchain components with rustup first), writes
    /// `OUT_DIR/gpuio_kernels.rs` and prints the `cargo:rerun-if-changed` lines. Only from
    /// a build script (it needs `OUT_DIR`).
    pub fn build(self) -> Result<Built, Error> {
        let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or_else(|| Error::Io {
            context: "reading OUT_DIR".into(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "KernelCrate::build runs in a build script",
            ),
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
        println!("cargo:rerun-if-env-changed={TARGETS_VAR}");
        let tables = out_dir.join(&self.tables);
        let mut built = Built {
            tables: tables.clone(),
            ..Built::default()
        };
        let asked: Vec<GpuTarget> = self
            .nvptx
            .iter()
            .map(|sm| GpuTarget::nvptx(sm.clone()))
            .chain(self.amdgcn.iter().map(|gfx| GpuTarget::amdgcn(gfx.clone())))
            .collect();
        let selection = Selection::from_env()?;
        let machine = Machine::look();
        let targets = selection.pick(&asked, &machine)?;
        if targets.is_empty() {
            if let Some(warning) = no_target_warning(&selection, &asked, &machine) {
                println!("cargo:warning={warning}");
            }
            write_tables(&tables, &built)?;
            return Ok(built);
        }
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

/// The variable that selects the GPU targets (see [`KernelCrate`]).
pub const TARGETS_VAR: &str = "GPUIO_GPU_TARGETS";

/// What `GPUIO_GPU_TARGETS` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Selection {
    Auto,
    All,
    These(Vec<String>),
}

impl Selection {
    fn from_env() -> Result<Selection, Error> {
        if std::env::var_os("GPUIO_SKIP_GPU_BUILD").is_some_and(|v| v == "1") {
            return Ok(Selection::These(Vec::new()));
        }
        let value = std::env::var(TARGETS_VAR).unwrap_or_default();
        Selection::parse(&value)
    }

    fn parse(value: &str) -> Result<Selection, Error> {
        Ok(match value.trim() {
            "" | "auto" => Selection::Auto,
            "all" => Selection::All,
            "none" => Selection::These(Vec::new()),
            list => Selection::These(
                list.split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect(),
            ),
        })
    }

    /// The targets of `asked` to build on `machine`. A listed target that was not asked
    /// for is an error naming those that were.
    fn pick(&self, asked: &[GpuTarget], machine: &Machine) -> Result<Vec<GpuTarget>, Error> {
        Ok(match self {
            Selection::All => asked.to_vec(),
            Selection::Auto => asked
                .iter()
                .filter(|t| match t {
                    GpuTarget::Nvptx { .. } => machine.nvidia,
                    // A GPU whose processor could not be read: every AMD target.
                    GpuTarget::Amdgcn { gfx, .. } => machine.amd.iter().any(|g| g == gfx || g.is_empty()),
                })
                .cloned()
                .collect(),
            Selection::These(names) => {
                if let Some(unknown) = names.iter().find(|n| !asked.iter().any(|t| t.arch() == n.as_str())) {
                    return Err(Error::UnknownTarget {
                        named: unknown.clone(),
                        built: asked.iter().map(|t| t.arch().to_string()).collect(),
                    });
                }
                asked
                    .iter()
                    .filter(|t| names.iter().any(|n| n == t.arch()))
                    .cloned()
                    .collect()
            }
        })
    }
}

/// The build warning when nothing is built (`None`: silence). Silent where no GPU was
/// found: cargo shows a build script's warnings again on every build of a local package
/// until the script runs again (every `cargo run` of the user's program), and on such a
/// machine building nothing is the expected case; a program built so and run on a GPU says
/// what to do when it loads its kernels (`Error::NoCodeObject`). A GPU that none of the
/// targets asked for runs is a mistake worth that repetition.
fn no_target_warning(selection: &Selection, asked: &[GpuTarget], machine: &Machine) -> Option<String> {
    let found = machine.nvidia || !machine.amd.is_empty();
    if !matches!(selection, Selection::Auto) || !found || asked.is_empty() {
        return None;
    }
    let gpus: Vec<&str> = machine
        .nvidia
        .then_some("an NVIDIA GPU")
        .into_iter()
        .chain(machine.amd.iter().map(String::as_str))
        .collect();
    let asked: Vec<&str> = asked.iter().map(|t| t.arch()).collect();
    Some(format!(
        "gpuio: this machine's GPUs ({}) run none of the targets asked for ({}), so no GPU \
         kernels were built: add theirs (KernelCrate::nvptx, ::amdgcn), or set {TARGETS_VAR}",
        gpus.join(", "),
        asked.join(", ")
    ))
}

/// The GPUs this machine shows.
#[derive(Debug, Default)]
struct Machine {
    /// An NVIDIA driver lists a GPU.
    nvidia: bool,
    /// The processors of the AMD GPUs (`gfx942`, ...; empty where one could not be read).
    amd: Vec<String>,
}

impl Machine {
    fn look() -> Machine {
        // The driver's list of GPUs; where /proc hides it (containers), its device node.
        let nvidia = std::fs::read_dir("/proc/driver/nvidia/gpus").is_ok_and(|mut d| d.next().is_some())
            || Path::new("/dev/nvidia0").exists();
        let mut amd = Vec::new();
        if Path::new("/dev/kfd").exists() {
            if let Ok(nodes) = std::fs::read_dir("/sys/class/kfd/kfd/topology/nodes") {
                for node in nodes.flatten() {
                    let props = std::fs::read_to_string(node.path().join("properties")).unwrap_or_default();
                    // `gfx_target_version 90402`: major * 10000 + minor * 100 + stepping (0 on CPUs).
                    let version = props
                        .lines()
                        .find_map(|l| l.strip_prefix("gfx_target_version "))
                        .and_then(|v| v.trim().parse::<u32>().ok());
                    match version {
                        Some(0) => {}
                        // Minor and stepping are hex digits in the name (90010: gfx90a).
                        Some(v) => amd.push(format!("gfx{}{:x}{:x}", v / 10000, v / 100 % 100, v % 100)),
                        None => {}
                    }
                }
            }
            if amd.is_empty() {
                amd.push(String::new());
            }
        }
        Machine { nvidia, amd }
    }
}

/// Writes the `OBJECTS`, `NVPTX` and `AMDGCN` tables of `built` to `path`: one list, of
/// which the other two are parts, so each code object is embedded once.
fn write_tables(path: &Path, built: &Built) -> Result<(), Error> {
    let mut entries = String::new();
    for (arch, path) in built.nvptx.iter().chain(&built.amdgcn) {
        entries.push_str(&format!(
            "    ({arch:?}, include_bytes!({:?}) as &[u8]),\n",
            path.display().to_string()
        ));
    }
    let text = format!(
        "// Generated by gpuio_linker::KernelCrate::build.\n\
         /// Every code object built, PTX by NVIDIA target and amdgcn by AMD processor (for\n\
         /// `Runtime::kernels` and `Runtime::load_matching`, which pick this GPU's).\n\
         #[allow(dead_code)]\n\
         pub const OBJECTS: &[(&str, &[u8])] = &[\n{entries}];\n\
         /// The kernels as PTX, by NVIDIA target.\n\
         #[allow(dead_code)]\n\
         pub const NVPTX: &[(&str, &[u8])] = OBJECTS.split_at({n}).0;\n\
         /// The kernels as amdgcn code objects, by AMD processor.\n\
         #[allow(dead_code)]\n\
         pub const AMDGCN: &[(&str, &[u8])] = OBJECTS.split_at({n}).1;\n",
        n = built.nvptx.len()
    );
    std::fs::write(path, text).map_err(|source| Error::Io {
        context: format!("writing {}", path.display()),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> Vec<GpuTarget> {
        vec![
            GpuTarget::nvptx("sm_90"),
            GpuTarget::nvptx("sm_60"),
            GpuTarget::amdgcn("gfx90a"),
            GpuTarget::amdgcn("gfx942"),
        ]
    }

    fn names(t: &[GpuTarget]) -> Vec<&str> {
        t.iter().map(|t| t.arch()).collect()
    }

    #[test]
    fn auto_builds_what_the_machine_runs() {
        let none = Machine::default();
        assert!(Selection::Auto.pick(&asked(), &none).unwrap().is_empty());
        let nvidia = Machine {
            nvidia: true,
            amd: Vec::new(),
        };
        assert_eq!(
            names(&Selection::Auto.pick(&asked(), &nvidia).unwrap()),
            ["sm_90", "sm_60"]
        );
        let mi300 = Machine {
            nvidia: false,
            amd: vec!["gfx942".into()],
        };
        assert_eq!(names(&Selection::Auto.pick(&asked(), &mi300).unwrap()), ["gfx942"]);
        let unread = Machine {
            nvidia: false,
            amd: vec![String::new()],
        };
        assert_eq!(
            names(&Selection::Auto.pick(&asked(), &unread).unwrap()),
            ["gfx90a", "gfx942"]
        );
    }

    #[test]
    fn a_gpu_that_runs_none_of_the_targets_is_warned_about_and_no_gpu_is_not() {
        let rdna2 = Machine {
            nvidia: false,
            amd: vec!["gfx1030".into()],
        };
        assert!(Selection::Auto.pick(&asked(), &rdna2).unwrap().is_empty());
        let w = no_target_warning(&Selection::Auto, &asked(), &rdna2).expect("a warning");
        assert!(
            w.contains("(gfx1030)") && w.contains("(sm_90, sm_60, gfx90a, gfx942)"),
            "{w}"
        );
        assert_eq!(no_target_warning(&Selection::Auto, &asked(), &Machine::default()), None);
        let none = Selection::parse("none").unwrap();
        assert_eq!(no_target_warning(&none, &asked(), &rdna2), None);
        assert_eq!(no_target_warning(&Selection::Auto, &[], &rdna2), None);
    }

    #[test]
    fn the_variable_names_all_none_or_a_list() {
        let m = Machine::default();
        assert_eq!(Selection::parse("").unwrap(), Selection::Auto);
        assert_eq!(
            names(&Selection::parse("all").unwrap().pick(&asked(), &m).unwrap()).len(),
            4
        );
        assert!(Selection::parse("none").unwrap().pick(&asked(), &m).unwrap().is_empty());
        let list = Selection::parse(" sm_60 , gfx942").unwrap();
        assert_eq!(names(&list.pick(&asked(), &m).unwrap()), ["sm_60", "gfx942"]);
        let e = Selection::parse("sm_80")
            .unwrap()
            .pick(&asked(), &m)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("names sm_80") && e.contains("sm_90, sm_60, gfx90a, gfx942"),
            "{e}"
        );
    }
}
