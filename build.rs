//! Builds the example kernels in `kernels/` for the GPUs, with `gpuio-linker`:
//!
//! - `nvptx64-nvidia-cuda`, `sm_90` → `GPUIO_KERNELS_PTX` (path of the `.ptx`);
//! - `amdgcn-amd-amdhsa`, `gfx90a`, code object v5 → `GPUIO_KERNELS_HSACO` (path of the
//!   ELF code object).
//!
//! Both paths are compile-time environment variables of this crate (`env!`). Missing
//! toolchain components (rust-src, llvm-tools, llvm-bitcode-linker) are added with rustup
//! first. A failed GPU build fails the build, with the compiler's messages.
//!
//! `GPUIO_SKIP_GPU_BUILD=1` skips the GPU builds (e.g. for a quick host-only check): both
//! variables then name empty files, and whatever loads a code object (the GPU backends,
//! the `gpu_code_objects` test) fails at run time.

use std::path::{Path, PathBuf};

use gpuio_linker::{build_kernel_crate, ensure_components, GpuTarget};

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
    if std::env::var_os("GPUIO_SKIP_GPU_BUILD").is_some_and(|v| v == "1") {
        // Empty files, so that `include_str!(env!(..))` still compiles; loading them fails
        // at run time with a clear error.
        for (var, name) in [
            ("GPUIO_KERNELS_PTX", "skipped.ptx"),
            ("GPUIO_KERNELS_HSACO", "skipped.hsaco"),
        ] {
            let path = out_dir.join(name);
            std::fs::write(&path, b"").expect("write to OUT_DIR");
            println!("cargo:rustc-env={var}={}", path.display());
        }
        return;
    }

    let nvptx = GpuTarget::nvptx("sm_90");
    let amdgcn = GpuTarget::amdgcn("gfx90a");
    if let Err(e) = ensure_components(&[&nvptx, &amdgcn]) {
        fail(&e);
    }
    let kernels = root.join("kernels");
    let ptx = build(&kernels, &nvptx, &out_dir);
    let hsaco = build(&kernels, &amdgcn, &out_dir);
    println!("cargo:rustc-env=GPUIO_KERNELS_PTX={}", ptx.display());
    println!("cargo:rustc-env=GPUIO_KERNELS_HSACO={}", hsaco.display());
}

fn build(kernels: &Path, target: &GpuTarget, out_dir: &Path) -> PathBuf {
    build_kernel_crate(kernels, target, out_dir).unwrap_or_else(|e| fail(&e))
}

fn fail(e: &gpuio_linker::Error) -> ! {
    eprintln!("error: gpuio: {e}");
    eprintln!("(GPUIO_SKIP_GPU_BUILD=1 skips the GPU kernel builds.)");
    std::process::exit(1);
}
