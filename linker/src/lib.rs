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
//! - amdgcn: `-Ctarget-cpu=gfxNNN -Cllvm-args=--amdhsa-code-object-version=N
//!   -Cllvm-args=-amdgpu-inline-arg-alloca-cost=0` (rust-lld links the code object; the
//!   last flag keeps LLVM from inlining every call that passes a struct by reference,
//!   which rustc's ignored `#[inline(never)]` cannot: `GpuTarget::rustflags` says why).
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
//! For a kernel in CUDA C++ or HIP on an AMD GPU, [`library_bitcode`] builds gpuio's device
//! library (`kernels-c/`) as bitcode and [`join_amdgcn`] joins the kernel's device bitcode
//! (clang's `-fgpu-rdc`) with it into one code object, with `llvm-tools` (`join.rs`).
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

mod cargo;
mod components;
mod error;
mod join;
mod kernel_crate;
mod launch_bounds;
mod target;

pub use cargo::build_kernel_crate;
pub use components::ensure_components;
pub use error::Error;
pub use join::{join_amdgcn, library_bitcode};
pub use kernel_crate::{Built, KernelCrate};

/// The name [`KernelCrate`] had before: the host's `Kernels` are the kernels a runtime has
/// loaded, so the build script's builder is named for what it builds.
#[deprecated(note = "renamed to gpuio_linker::KernelCrate (the host's `Kernels` are a runtime's loaded kernels)")]
pub type Kernels = KernelCrate;
pub use target::{GpuTarget, DEFAULT_AMDHSA_CODE_OBJECT_VERSION};
