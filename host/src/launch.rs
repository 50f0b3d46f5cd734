//! A launch's shape: how many blocks, of how many threads, in up to three dimensions, and
//! the dynamic shared memory each block gets.

pub use gpuio_device::Dim3;

use crate::error::{Error, Result};

/// The grid and block of a launch, as CUDA's `<<<grid, block>>>` (and cudarc's
/// `LaunchConfig`): `grid` blocks of `block` threads, each in x, y and z. Kernels read
/// their place with `gpuio_device::thread_idx_3d()` and friends; `global_thread_idx()` is
/// one linear index over all three dimensions.
///
/// Dynamic shared memory ([`LaunchConfig::with_shared_mem`], CUDA's third `<<<>>>`
/// argument) is what `gpuio_device::dynamic_shared_memory()` returns in each block: on CUDA
/// up to the GPU's limit per block (227 KiB on H100; past 48 KiB the launch opts in for
/// the kernel), on the CPU backend up to [`LaunchConfig::CPU_SHARED_MEM_MAX`]. AMD GPUs have
/// none yet (Rust cannot declare the dynamic LDS): a launch there that asks for some is
/// refused.
///
/// ```
/// use gpuio_host::LaunchConfig;
/// let cfg = LaunchConfig::new((8, 8), (16, 16, 2));
/// assert_eq!(cfg.threads(), 8 * 8 * 16 * 16 * 2);
/// assert_eq!(LaunchConfig::new(4, 64), LaunchConfig::linear(4, 64));
/// assert_eq!(LaunchConfig::linear(4, 64).with_shared_mem(256).shared_mem_bytes, 256);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads per block.
    pub block: Dim3,
    /// Bytes of dynamic shared memory per block (0: none).
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// `grid` blocks of `block` threads: a `u32` is x alone, `(x, y)` and `(x, y, z)` more.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> LaunchConfig {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            shared_mem_bytes: 0,
        }
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub const fn with_shared_mem(self, bytes: u32) -> LaunchConfig {
        LaunchConfig {
            shared_mem_bytes: bytes,
            ..self
        }
    }

    /// The most dynamic shared memory a CPU-backend block takes: what an H100 or H200
    /// gives a block (227 KiB), so that a kernel the CPU backend runs fits those GPUs too
    /// (each block's is a host allocation while its threads run).
    pub const CPU_SHARED_MEM_MAX: u32 = 227 << 10;

    /// A launch for `n` elements, as cudarc's `LaunchConfig::for_num_elems`: blocks of 1,024
    /// threads, as many as `n` needs (one block for `n == 0`, which no backend takes as a
    /// grid of 0), so the last block may have threads past `n`: the kernel checks its index.
    /// A kernel compiled with more than 64 registers a thread cannot run 1,024 threads a
    /// block (the launch fails; kernels of a module that does file I/O from device code may
    /// use up to 255 with a print),
    /// and the CPU backend runs at most 65,536 threads a launch: there, pick the shape with
    /// [`LaunchConfig::linear`] and loop inside each thread.
    ///
    /// ```
    /// use gpuio_host::LaunchConfig;
    /// assert_eq!(LaunchConfig::for_num_elems(5000), LaunchConfig::linear(5, 1024));
    /// ```
    pub const fn for_num_elems(n: u32) -> LaunchConfig {
        let blocks = n.div_ceil(1024);
        LaunchConfig::linear(if blocks == 0 { 1 } else { blocks }, 1024)
    }

    /// A one-dimensional launch: `grid` blocks of `block` threads.
    pub const fn linear(grid: u32, block: u32) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::new(grid, 1, 1),
            block: Dim3::new(block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Threads in all: blocks times threads per block (`u64::MAX` for a shape past it,
    /// which every backend refuses).
    pub const fn threads(&self) -> u64 {
        self.grid.count().saturating_mul(self.block.count())
    }

    /// Whether the launch is in x alone (y and z at 1, as in a 1-D launch).
    pub const fn is_linear(&self) -> bool {
        self.grid.y == 1 && self.grid.z == 1 && self.block.y == 1 && self.block.z == 1
    }

    /// An error unless every dimension is at least 1.
    pub(crate) fn check(&self) -> Result<()> {
        let LaunchConfig { grid: g, block: b, .. } = self;
        if [g.x, g.y, g.z, b.x, b.y, b.z].contains(&0) {
            return Err(Error::Config(format!(
                "a launch of ({}, {}, {}) blocks of ({}, {}, {}) threads: every dimension must be at \
                 least 1",
                g.x, g.y, g.z, b.x, b.y, b.z
            )));
        }
        Ok(())
    }

    /// Threads in each block.
    pub const fn block_threads(&self) -> u64 {
        self.block.count()
    }

    /// An error if the launch asks for dynamic shared memory on `gpu`, an AMD GPU: device
    /// code there cannot reach it (see the type's docs).
    pub(crate) fn refuse_shared_mem(&self, gpu: &str) -> Result<()> {
        if self.shared_mem_bytes == 0 {
            return Ok(());
        }
        Err(Error::Config(format!(
            "a launch with {} bytes of dynamic shared memory on {gpu}: gpuio's AMD kernels cannot \
             reach dynamic LDS yet (Rust cannot declare the external group-segment array it \
             takes), so it would go unused; launch with none (LaunchConfig::shared_mem_bytes = 0)",
            self.shared_mem_bytes
        )))
    }
}

/// Refuses a launch of `kernel` in blocks of more threads than it declares it takes
/// (`max`: `kernel!`'s `#[launch_bounds(MAX)]`, CUDA C++'s `__launch_bounds__`; a PTX
/// `.reqntid` counts as its threads in all, the driver checking each dimension): on NVIDIA
/// the kernel was compiled for at most that many, and the driver would refuse the launch or
/// not by what registers it happened to take.
pub(crate) fn check_launch_bounds(kernel: &str, cfg: &LaunchConfig, max: Option<u32>) -> Result<()> {
    match max {
        Some(max) if cfg.block_threads() > u64::from(max) => Err(Error::Config(format!(
            "kernel {kernel}: a block of {} threads, but the kernel declares blocks of at most {max} \
             (its launch bounds: #[launch_bounds] in kernel!, __launch_bounds__ in CUDA C++): launch \
             blocks of at most {max} threads, or raise its bound and rebuild the kernels",
            cfg.block_threads()
        ))),
        _ => Ok(()),
    }
}

#[cfg(feature = "cudarc")]
impl From<cudarc::driver::LaunchConfig> for LaunchConfig {
    /// cudarc's launch shape as gpuio's: `grid_dim`, `block_dim` and `shared_mem_bytes`.
    fn from(c: cudarc::driver::LaunchConfig) -> LaunchConfig {
        LaunchConfig::new(c.grid_dim, c.block_dim).with_shared_mem(c.shared_mem_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_for_n_elements_covers_them_in_blocks_of_1024() {
        for (n, blocks) in [(0, 1), (1, 1), (1024, 1), (1025, 2), (u32::MAX, 4_194_304)] {
            let cfg = LaunchConfig::for_num_elems(n);
            assert_eq!(
                (cfg.grid, cfg.block),
                (Dim3::new(blocks, 1, 1), Dim3::new(1024, 1, 1)),
                "{n}"
            );
            assert!(cfg.threads() >= u64::from(n));
        }
    }

    #[cfg(feature = "cudarc")]
    #[test]
    fn cudarcs_launch_config_converts_field_by_field() {
        let c = cudarc::driver::LaunchConfig {
            grid_dim: (3, 2, 1),
            block_dim: (32, 4, 2),
            shared_mem_bytes: 512,
        };
        assert_eq!(
            LaunchConfig::from(c),
            LaunchConfig::new((3, 2, 1), (32, 4, 2)).with_shared_mem(512)
        );
        let n = cudarc::driver::LaunchConfig::for_num_elems(5000);
        assert_eq!(LaunchConfig::from(n), LaunchConfig::for_num_elems(5000));
    }

    #[test]
    fn dynamic_shared_memory_is_refused_on_amd_only_when_asked_for() {
        assert!(LaunchConfig::linear(1, 64)
            .refuse_shared_mem("an AMD GPU (HSA)")
            .is_ok());
        let e = LaunchConfig::linear(1, 64)
            .with_shared_mem(256)
            .refuse_shared_mem("an AMD GPU (HSA)")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("256 bytes of dynamic shared memory on an AMD GPU (HSA)") && e.contains("launch with none"),
            "{e}"
        );
    }
}

/// What one thread of a kernel holds on the GPU, as the driver compiled it
/// ([`GpuModule::resources`](crate::GpuModule::resources)): what sets how many of its warps
/// an SM runs at once.
///
/// A kernel's registers are the most that any function it may call uses: with gpuio's
/// default, its device functions (the print path, `core::fmt`) are compiled apart with a cap
/// of 32 (`GPUIO_PRINT_REGISTERS`), so a kernel with a `println!` uses the larger of its own
/// code's count and 32 (docs/PROTOCOL.md, "What a print costs the kernel around it").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelResources {
    /// Registers per thread.
    pub registers: u32,
    /// Local memory per thread, in bytes: its stack frames and what it spills.
    pub local_bytes: u32,
    /// Static shared memory per block, in bytes (dynamic shared memory comes on top, per
    /// launch).
    pub shared_bytes: u32,
    /// The most threads a block of the kernel can have as compiled (the driver's
    /// `MAX_THREADS_PER_BLOCK`): 1,024, or fewer where the kernel declares launch bounds
    /// (`#[launch_bounds]`) or its registers allow no more.
    pub max_block_threads: u32,
}
