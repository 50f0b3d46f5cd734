//! Launch shapes in three dimensions, as CUDA's `dim3`.

/// Sizes or indices in x, y and z: CUDA's `dim3` (`threadIdx`, `blockIdx`, `blockDim`,
/// `gridDim`). A one-dimensional shape is `(n, 1, 1)`, an index `(i, 0, 0)`.
///
/// ```
/// use gpuio_device::Dim3;
/// assert_eq!(Dim3::from(64), Dim3 { x: 64, y: 1, z: 1 });
/// assert_eq!(Dim3::from((8, 4)).count(), 32);
/// assert_eq!(Dim3::from((2, 3, 4)).count(), 24);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// The x dimension (the fastest-varying one in linear order).
    pub x: u32,
    /// The y dimension.
    pub y: u32,
    /// The z dimension.
    pub z: u32,
}

impl Dim3 {
    /// `(x, y, z)`.
    pub const fn new(x: u32, y: u32, z: u32) -> Dim3 {
        Dim3 { x, y, z }
    }

    /// `x * y * z`: how many threads (or blocks) a shape holds (`u64::MAX` for a shape
    /// past it, which no launch takes).
    pub const fn count(self) -> u64 {
        (self.x as u64 * self.y as u64).saturating_mul(self.z as u64)
    }

    /// The linear rank of index `self` in a shape `dim`: `x + y * dim.x + z * dim.x * dim.y`
    /// (x varies fastest, as CUDA numbers the threads of a block).
    pub const fn rank_in(self, dim: Dim3) -> u64 {
        self.x as u64 + dim.x as u64 * (self.y as u64 + dim.y as u64 * self.z as u64)
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}
