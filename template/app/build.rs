//! Builds `../kernels` for the GPUs: PTX for NVIDIA (sm_70: Volta and every GPU after it)
//! and code objects for AMD's MI200, MI300 and RDNA3; `GPUIO_SKIP_GPU_BUILD=1` skips them.
fn main() {
    if let Err(e) = gpuio_linker::Kernels::new("../kernels")
        .nvptx(["sm_70"])
        .amdgcn(["gfx90a", "gfx942", "gfx1100"])
        .build()
    {
        eprintln!("error: building the GPU kernels: {e}");
        std::process::exit(1);
    }
}
