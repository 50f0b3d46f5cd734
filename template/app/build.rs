//! Builds `../kernels` for the GPUs: PTX for NVIDIA (sm_70: Volta and every GPU after it)
//! and code objects for AMD's MI200, MI300 and RDNA3: those this machine's GPUs run, unless
//! `GPUIO_GPU_TARGETS` says otherwise (`all`, `none`, or a list; `gpuio_linker::KernelCrate`).
fn main() {
    if let Err(e) = gpuio_linker::KernelCrate::new("../kernels")
        .nvptx(["sm_70"])
        .amdgcn(["gfx90a", "gfx942", "gfx1100"])
        .build()
    {
        eprintln!("error: building the GPU kernels: {e}");
        std::process::exit(1);
    }
}
