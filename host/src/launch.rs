//! A launch's shape: how many blocks, of how many threads, in up to three dimensions.

pub use gpuio_device::Dim3;

use crate::error::{Error, Result};

/// The grid and block of a launch, as CUDA's `<<<grid, block>>>` (and cudarc's
/// `LaunchConfig`): `grid` blocks of `block` threads, each in x, y and z. Kernels read
/// their place with `gpuio_device::thread_idx_3d()` and friends; `global_thread_idx()` is
/// one linear index over all three dimensions.
///
/// There is no dynamic shared memory size: Rust device code has no way to reach the
/// dynamic shared segment (neither `core::arch::nvptx` nor `core::arch::amdgpu` names it),
/// so a size here would reserve memory no kernel could use.
///
/// ```
/// use gpuio_host::LaunchConfig;
/// let cfg = LaunchConfig::new((8, 8), (16, 16, 2));
/// assert_eq!(cfg.threads(), 8 * 8 * 16 * 16 * 2);
/// assert_eq!(LaunchConfig::new(4, 64), LaunchConfig::linear(4, 64));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads per block.
    pub block: Dim3,
}

impl LaunchConfig {
    /// `grid` blocks of `block` threads: a `u32` is x alone, `(x, y)` and `(x, y, z)` more.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> LaunchConfig {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
        }
    }

    /// A one-dimensional launch: `grid` blocks of `block` threads.
    pub const fn linear(grid: u32, block: u32) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::new(grid, 1, 1),
            block: Dim3::new(block, 1, 1),
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
        let LaunchConfig { grid: g, block: b } = self;
        if [g.x, g.y, g.z, b.x, b.y, b.z].contains(&0) {
            return Err(Error::Config(format!(
                "a launch of ({}, {}, {}) blocks of ({}, {}, {}) threads: every dimension must be at \
                 least 1",
                g.x, g.y, g.z, b.x, b.y, b.z
            )));
        }
        Ok(())
    }
}
