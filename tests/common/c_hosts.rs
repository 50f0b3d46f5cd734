//! C and C++ hosts of the C API: `libgpuio` built by cargo (with the features a test asks
//! for) and hosts compiled with the compiler the `cc` crate finds, as a build script would
//! (`CC`/`CXX` and `CFLAGS`/`CXXFLAGS` are honoured).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{missing_program, skip};

/// Where the C API was built.
pub struct Built {
    /// `target/<profile>`: `libgpuio.a`, `libgpuio.so`, `gpuio.pc`.
    pub libdir: PathBuf,
    /// Compiled hosts go here.
    pub bin: PathBuf,
}

/// The repository's root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The C (or, with `cpp`, C++) compiler, as the `cc` crate picks it for this machine.
pub fn compiler(cpp: bool) -> cc::Tool {
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    cc::Build::new()
        .cpp(cpp)
        .target(&target)
        .host(&target)
        .opt_level(1)
        .debug(false)
        .cargo_metadata(false)
        .get_compiler()
}

/// Whether cargo and a C compiler can run here (the tests build the C API and C hosts); if
/// not, reports the test as skipped (the GPU machine runs prebuilt test binaries, without a
/// toolchain).
pub fn toolchain_here(test: &str) -> bool {
    let cc = compiler(false).path().display().to_string();
    match missing_program("cargo").or_else(|| missing_program(&cc)) {
        Some(why) => {
            skip(test, &format!("it builds the C API and C hosts: {why}"));
            false
        }
        None => true,
    }
}

/// Builds `gpuio-capi`'s libraries with `features` (`cargo build -p gpuio-capi`, same
/// profile and target directory as the running test binary: `cargo test` does not build
/// other members' C libraries).
pub fn build_capi(features: &[&str]) -> Built {
    // This binary is target/<profile>/deps/<test>-<hash>: the libraries land two up.
    let exe = std::env::current_exe().expect("current_exe");
    let libdir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary in target/<profile>/deps")
        .to_path_buf();
    let profile = libdir
        .file_name()
        .and_then(|p| p.to_str())
        .unwrap_or("debug")
        .to_owned();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(root()).args(["build", "-p", "gpuio-capi", "--lib"]);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    // Same target directory as this test (CARGO_TARGET_DIR, if set, is inherited).
    if let Some(target) = libdir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let out = cmd.output().expect("running cargo");
    assert!(
        out.status.success(),
        "`cargo build -p gpuio-capi` failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["libgpuio.a", "libgpuio.so", "gpuio.pc"] {
        assert!(
            libdir.join(f).exists(),
            "{} missing after the build",
            libdir.join(f).display()
        );
    }
    let bin = libdir.join("capi-hosts");
    std::fs::create_dir_all(&bin).expect("create capi-hosts");
    Built { libdir, bin }
}

/// The fields of `gpuio.pc` (`Cflags`, `Libs`, `Libs.private`), variables substituted.
pub fn pc_fields(pc: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(pc).expect("read gpuio.pc");
    let mut vars = BTreeMap::new();
    let mut fields = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let subst = |v: &str, vars: &BTreeMap<String, String>| {
            vars.iter()
                .fold(v.trim().to_string(), |s, (k, val)| s.replace(&format!("${{{k}}}"), val))
        };
        if let Some((k, v)) = line.split_once(':') {
            fields.insert(k.trim().to_string(), subst(v, &vars));
        } else if let Some((k, v)) = line.split_once('=') {
            let v = subst(v, &vars);
            vars.insert(k.trim().to_string(), v);
        }
    }
    fields
}

/// `s` split at whitespace.
pub fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// Runs `tool` with `args`; fails the test with the compiler's messages.
pub fn compile(tool: &cc::Tool, args: &[String]) {
    let mut cmd = tool.to_command();
    cmd.args(args);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the compiler `{}`: {e}", tool.path().display()));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
