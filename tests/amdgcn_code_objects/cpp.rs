//! The CUDA C++ kernels of `tests/cuda/printf_kernel.cu` and `file_kernel.cu` built for AMD
//! as HIP, and joined with the device library: the steps docs/USAGE.md gives ("From CUDA C++
//! kernels", "On AMD GPUs").

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuio_linker::{join_amdgcn, library_bitcode, GpuTarget};

use crate::{common, Target};

/// The processor it is built for (one is enough: the joined code is the same steps for each).
const GFX: &str = "gfx90a";

/// What the joined code object holds: the C++ kernels (`unsigned n, int *counts`; `int fd,
/// unsigned n, int *results`) and the device library's drain kernel.
const KERNELS: &[(&str, &[u64])] = &[
    ("printf_kernel", &[4, 8]),
    ("file_kernel", &[4, 4, 8]),
    ("gpuio_drain", &[]),
];

/// ROCm's device libraries (`ockl`: HIP's `blockIdx` and friends call into it) as Debian's
/// `rocm-device-libs` installs them.
const DEVICE_LIBS: &str = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";

/// clang's flags for HIP device code as bitcode, with HIP's headers and device libraries
/// as Debian's `hipcc` installs them (`/usr`).
const CLANG_FLAGS: &[&str] = &[
    "-x",
    "hip",
    "--rocm-path=/usr",
    "--hip-version=5.2",
    "--cuda-device-only",
    "-fgpu-rdc",
    "-emit-llvm",
    "-O2",
    "-std=c++17",
    "-include",
    "hip/hip_runtime.h",
];

/// The joined code object as a [`Target`], or `None` (said as a skip) where no clang with
/// HIP's headers is here; an error where it is and the build or the join fails.
pub(crate) fn joined() -> Result<Option<Target>, String> {
    const TEST: &str = "amdgcn_code_objects: the C++ kernel joined for AMD";
    let Some(clang) = clang_with_hip() else {
        common::skip(
            TEST,
            "no clang with HIP's headers here (Debian: apt install hipcc, which brings clang-15 and \
             /usr/include/hip)",
        );
        return Ok(None);
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("amdgcn_cpp");
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    // Two translation units, as a program has: one prints, one does file I/O.
    let mut kernels = Vec::new();
    for name in ["printf_kernel", "file_kernel"] {
        let bitcode = out.join(format!("{name}.bc"));
        let source = root.join(format!("tests/cuda/{name}.cu"));
        let status = Command::new(&clang)
            .args(CLANG_FLAGS)
            .arg(format!("--offload-arch={GFX}"))
            .arg(format!("--hip-device-lib-path={DEVICE_LIBS}"))
            .arg("-I")
            .arg(root.join("device/include"))
            .arg("-c")
            .arg(&source)
            .arg("-o")
            .arg(&bitcode)
            .status()
            .map_err(|e| format!("running {}: {e}", clang.display()))?;
        if !status.success() {
            return Err(format!(
                "{} could not build {} for {GFX}",
                clang.display(),
                source.display()
            ));
        }
        kernels.push(bitcode);
    }
    let target = GpuTarget::amdgcn(GFX);
    let library = library_bitcode(&root.join("kernels-c"), &target, &out).map_err(|e| e.to_string())?;
    let hsaco = join_amdgcn(&library, &kernels, &target, &out).map_err(|e| e.to_string())?;
    Ok(Some(Target {
        gfx: "gfx90a C++",
        path: Box::leak(hsaco.to_string_lossy().into_owned().into_boxed_str()),
        mach: 0x3f,
        kernels: KERNELS,
        printers: &["printf_kernel"],
    }))
}

/// A clang that builds HIP device code with the headers under `/usr/include/hip`.
fn clang_with_hip() -> Option<PathBuf> {
    if !Path::new("/usr/include/hip/hip_runtime.h").is_file() || !Path::new(DEVICE_LIBS).is_dir() {
        return None;
    }
    ["clang++-15", "clang++-16", "clang++-17", "clang++"]
        .iter()
        .map(PathBuf::from)
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}
