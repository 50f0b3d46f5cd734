//! Builds gpuio's kernel crates for the GPUs, with `gpuio-linker`'s [`KernelCrate`]:
//!
//! - `kernels/` (`gpuio-kernels`), the example kernels, and
//! - `kernels-test/` (`gpuio-test-kernels`), the test and benchmark kernels with the example
//!   kernels,
//! - `kernels-observer/` (`gpuio-observer-kernels`), bench_observer's compute kernels, for
//!   the NVIDIA targets only,
//! - `kernels-c/` (`gpuio-device-library`), the device runtime's C ABI for C++ kernels to
//!   be linked with, for the NVIDIA targets only,
//!
//! each for `nvptx64-nvidia-cuda` `sm_90` and `sm_60` (the lockstep build: PTX before sm_70
//! runs without independent thread scheduling, as AMD wavefronts do; `gpuio_device::protocol::arch`
//! says why it matters) and for `amdgcn-amd-amdhsa` (code object v5) gfx90a, gfx942 and
//! gfx1100 (`kernels-observer/` for the two NVIDIA targets alone). `src/lib.rs` turns what
//! it built into constants: the tables the linker writes (`OUT_DIR/kernels.rs`,
//! `OUT_DIR/test_kernels.rs`, `OUT_DIR/observer_kernels.rs`: `OBJECTS`, `NVPTX`, `AMDGCN`), and
//! PTX text and paths from these compile-time variables:
//!
//! - `GPUIO_KERNELS_PTX`, `GPUIO_KERNELS_PTX_SM60`, `GPUIO_TEST_KERNELS_PTX`,
//!   `GPUIO_TEST_KERNELS_PTX_SM60`: paths of the PTX files;
//! - `GPUIO_KERNELS_HSACO_GFX90A` (and `_GFX942`, `_GFX1100`), likewise
//!   `GPUIO_TEST_KERNELS_HSACO_...`: paths of the code objects.
//!
//! Missing toolchain components (rust-src, llvm-tools, llvm-bitcode-linker) are added with
//! rustup first. A failed GPU build fails the build, with the compiler's messages.
//!
//! The five targets build in parallel, each in its own target directory (each builds
//! `core` for its processor, 15-25 s of one core), first for the example kernels, then for
//! the test kernels and the observer kernels, which reuse that `core`. Rebuilds after a
//! change to the kernels or the device crate recompile only those, a few seconds per GPU.
//!
//! Which of them build is `GPUIO_GPU_TARGETS`' choice (`gpuio_linker::KernelCrate`): by
//! default those this machine's GPUs run, none (silently) on a machine without a GPU;
//! `all` for CI's code-object checks and the device bundle; a list such as
//! `sm_90,sm_60`; `none` (or `GPUIO_SKIP_GPU_BUILD=1`). A target not built leaves its path
//! variables naming empty files and its tables empty: whatever loads its code object (the
//! GPU backends, the code object tests) says so at run time, and the tests that read the
//! code objects skip, visibly.

use std::path::{Path, PathBuf};

use gpuio_linker::{Built, KernelCrate};

/// The NVIDIA PTX targets: `sm_90` (H100/H200) and `sm_60`, the lockstep build.
const NVPTX_TARGETS: &[&str] = &["sm_90", "sm_60"];

/// The AMD GPUs: MI200 (gfx90a), MI300 (gfx942) and RDNA3 (gfx1100, Radeon RX 7900 / PRO
/// W7900).
const AMDGPU_TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx1100"];

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    for (dir, prefix, tables) in [
        ("../kernels", "GPUIO_KERNELS", "kernels.rs"),
        ("../kernels-test", "GPUIO_TEST_KERNELS", "test_kernels.rs"),
    ] {
        let built = KernelCrate::new(dir)
            .nvptx(NVPTX_TARGETS.iter().copied())
            .amdgcn(AMDGPU_TARGETS.iter().copied())
            .tables(tables)
            .build()
            .unwrap_or_else(|e| fail(&e));
        export(&out_dir, prefix, &built);
    }
    // bench_observer's kernels: NVIDIA only (the benchmark runs on CUDA, beside CUDA C).
    KernelCrate::new("../kernels-observer")
        .nvptx(NVPTX_TARGETS.iter().copied())
        .tables("observer_kernels.rs")
        .build()
        .unwrap_or_else(|e| fail(&e));
    // The device runtime as a library for C++ kernels (its C ABI): NVIDIA only for now.
    KernelCrate::new("../kernels-c")
        .nvptx(NVPTX_TARGETS.iter().copied())
        .tables("c_library.rs")
        .build()
        .unwrap_or_else(|e| fail(&e));
}

/// Sets `PREFIX_*` (see the crate docs) for what `built` holds, or for empty files where
/// the GPU builds were skipped.
fn export(out_dir: &Path, prefix: &str, built: &Built) {
    let lower = prefix.to_ascii_lowercase();
    let path_of = |arch: &str, list: &[(String, PathBuf)], ext: &str| {
        list.iter()
            .find(|(a, _)| a == arch)
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| {
                // Skipped: an empty file, so that `include_str!(env!(..))` still compiles.
                let empty = out_dir.join(format!("{lower}-skipped-{arch}.{ext}"));
                std::fs::write(&empty, b"").expect("write to OUT_DIR");
                empty
            })
    };
    println!(
        "cargo:rustc-env={prefix}_PTX={}",
        path_of("sm_90", &built.nvptx, "ptx").display()
    );
    println!(
        "cargo:rustc-env={prefix}_PTX_SM60={}",
        path_of("sm_60", &built.nvptx, "ptx").display()
    );
    for gfx in AMDGPU_TARGETS {
        println!(
            "cargo:rustc-env={prefix}_HSACO_{}={}",
            gfx.to_ascii_uppercase(),
            path_of(gfx, &built.amdgcn, "hsaco").display()
        );
    }
}

fn fail(e: &gpuio_linker::Error) -> ! {
    eprintln!("error: gpuio: {e}");
    eprintln!("(GPUIO_GPU_TARGETS=none skips the GPU kernel builds; a list such as sm_90 builds only those.)");
    std::process::exit(1);
}
