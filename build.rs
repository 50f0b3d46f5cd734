//! Builds the example kernels in `kernels/` for the GPUs, with `gpuio-linker`:
//!
//! - `nvptx64-nvidia-cuda`, `sm_90` → `GPUIO_KERNELS_PTX` (path of the `.ptx`), and `sm_60`
//!   → `GPUIO_KERNELS_PTX_SM60`: the lockstep build (PTX before sm_70 runs without
//!   independent thread scheduling, as AMD wavefronts do; `gpuio_device::arch` says why it
//!   matters). `GPUIO_KERNELS_NVPTX` is the path of a generated Rust expression,
//!   `&[(&str, &[u8])]`, pairing `sm_90` and `sm_60` with their PTX, for
//!   `Runtime::load_matching` (which picks by `Builder::lockstep`).
//! - `amdgcn-amd-amdhsa`, code object v5, one ELF code object per GPU in [`AMDGPU_TARGETS`]
//!   (gfx90a, gfx942, gfx1100) → `GPUIO_KERNELS_HSACO_GFX90A`, `GPUIO_KERNELS_HSACO_GFX942`,
//!   `GPUIO_KERNELS_HSACO_GFX1100` (paths of the `.hsaco` files, all in one directory,
//!   `GPUIO_KERNELS_HSACO_DIR`). `GPUIO_KERNELS_HSACO` is the gfx90a one, as before.
//! - `GPUIO_KERNELS_AMDGCN`: the path of a generated Rust expression,
//!   `&[(&str, &[u8])]`, pairing each processor name with its code object
//!   (`include!(env!("GPUIO_KERNELS_AMDGCN"))`), for `Runtime::load_matching`.
//!
//! All are compile-time environment variables of this crate (`env!`). Missing toolchain
//! components (rust-src, llvm-tools, llvm-bitcode-linker) are added with rustup first. A
//! failed GPU build fails the build, with the compiler's messages.
//!
//! The GPU builds run in parallel, each in its own target directory (each builds `core`
//! for its processor). A clean `cargo build --release` took 96 s on a 2-vCPU CI-like
//! machine, against 53 s with PTX and gfx90a only: the two extra amdgcn builds add about
//! 45 s (each is 15-25 s of one core, mostly `core`). Rebuilds after a change to the
//! kernels or the device crate recompile only those, a few seconds per GPU.
//!
//! `GPUIO_SKIP_GPU_BUILD=1` skips the GPU builds (e.g. for a quick host-only check): the
//! path variables then name empty files, the table is empty, and whatever loads a code
//! object (the GPU backends, the code object tests) fails at run time.

use std::path::{Path, PathBuf};

use gpuio_linker::{build_kernel_crate, ensure_components, GpuTarget};

/// The NVIDIA PTX targets the example kernels are built for: `sm_90` (H100/H200, and what
/// any sm_70+ GPU runs with independent thread scheduling) and `sm_60`, the lockstep build.
const NVPTX_TARGETS: &[&str] = &["sm_90", "sm_60"];

/// The AMD GPUs the example kernels are built for: MI200 (gfx90a), MI300 (gfx942) and
/// RDNA3 (gfx1100, Radeon RX 7900 / PRO W7900).
const AMDGPU_TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx1100"];

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    for dir in [
        "device/src",
        "device/Cargo.toml",
        "kernels/src",
        "kernels/Cargo.toml",
        "linker/src",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=GPUIO_SKIP_GPU_BUILD");

    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let hsaco_dir = out_dir.join("hsaco");
    std::fs::create_dir_all(&hsaco_dir).expect("create OUT_DIR/hsaco");
    println!("cargo:rustc-env=GPUIO_KERNELS_HSACO_DIR={}", hsaco_dir.display());
    if std::env::var_os("GPUIO_SKIP_GPU_BUILD").is_some_and(|v| v == "1") {
        // Empty files, so that `include_str!(env!(..))` still compiles; loading them fails
        // at run time with a clear error.
        let skipped = |var: &str, path: PathBuf| {
            std::fs::write(&path, b"").expect("write to OUT_DIR");
            println!("cargo:rustc-env={var}={}", path.display());
        };
        skipped("GPUIO_KERNELS_PTX", out_dir.join("skipped.ptx"));
        skipped("GPUIO_KERNELS_PTX_SM60", out_dir.join("skipped-sm60.ptx"));
        write_table(&out_dir, "GPUIO_KERNELS_NVPTX", "nvptx_kernels.rs", &[]);
        skipped("GPUIO_KERNELS_HSACO", out_dir.join("skipped.hsaco"));
        for gfx in AMDGPU_TARGETS {
            skipped(&hsaco_var(gfx), out_dir.join(format!("skipped-{gfx}.hsaco")));
        }
        write_table(&out_dir, "GPUIO_KERNELS_AMDGCN", "amdgcn_kernels.rs", &[]);
        return;
    }

    let nvptx: Vec<GpuTarget> = NVPTX_TARGETS.iter().map(|sm| GpuTarget::nvptx(*sm)).collect();
    let amdgcn: Vec<GpuTarget> = AMDGPU_TARGETS.iter().map(|gfx| GpuTarget::amdgcn(*gfx)).collect();
    let all: Vec<&GpuTarget> = nvptx.iter().chain(&amdgcn).collect();
    if let Err(e) = ensure_components(&all) {
        fail(&e);
    }
    let kernels = root.join("kernels");
    // One thread and one target directory per GPU build: they do not wait on each other's
    // cargo lock, and each keeps its own `core` (built for its processor).
    let results: Vec<Result<PathBuf, gpuio_linker::Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = all
            .iter()
            .map(|t| {
                let (kernels, dir) = (&kernels, out_dir.join(format!("build-{}", t.arch())));
                s.spawn(move || build_kernel_crate(kernels, t, &dir))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("GPU build thread panicked"))
            .collect()
    });
    let mut paths = Vec::new();
    for r in results {
        paths.push(r.unwrap_or_else(|e| fail(&e)));
    }
    println!("cargo:rustc-env=GPUIO_KERNELS_PTX={}", paths[0].display());
    println!("cargo:rustc-env=GPUIO_KERNELS_PTX_SM60={}", paths[1].display());
    let ptx: Vec<(&str, PathBuf)> = NVPTX_TARGETS.iter().copied().zip(paths.iter().cloned()).collect();
    write_table(&out_dir, "GPUIO_KERNELS_NVPTX", "nvptx_kernels.rs", &ptx);
    let mut table = Vec::new();
    for (gfx, built) in AMDGPU_TARGETS.iter().zip(&paths[NVPTX_TARGETS.len()..]) {
        let dest = hsaco_dir.join(built.file_name().expect("a file name"));
        std::fs::copy(built, &dest)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", built.display(), dest.display()));
        println!("cargo:rustc-env={}={}", hsaco_var(gfx), dest.display());
        if *gfx == "gfx90a" {
            println!("cargo:rustc-env=GPUIO_KERNELS_HSACO={}", dest.display());
        }
        table.push((*gfx, dest));
    }
    write_table(&out_dir, "GPUIO_KERNELS_AMDGCN", "amdgcn_kernels.rs", &table);
}

/// `GPUIO_KERNELS_HSACO_GFX90A` for `gfx90a`.
fn hsaco_var(gfx: &str) -> String {
    format!("GPUIO_KERNELS_HSACO_{}", gfx.to_ascii_uppercase())
}

/// Writes `file`, `&[("gfx90a", include_bytes!("...")), ...]`, and points `var` at it.
fn write_table(out_dir: &Path, var: &str, file: &str, table: &[(&str, PathBuf)]) {
    let mut text = String::from("&[\n");
    for (gfx, path) in table {
        text.push_str(&format!(
            "    ({gfx:?}, include_bytes!({:?}) as &[u8]),\n",
            path.display().to_string()
        ));
    }
    text.push(']');
    let path = out_dir.join(file);
    std::fs::write(&path, text).expect("write to OUT_DIR");
    println!("cargo:rustc-env={var}={}", path.display());
}

fn fail(e: &gpuio_linker::Error) -> ! {
    eprintln!("error: gpuio: {e}");
    eprintln!("(GPUIO_SKIP_GPU_BUILD=1 skips the GPU kernel builds.)");
    std::process::exit(1);
}
