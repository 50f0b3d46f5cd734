//! gpuio's kernel crates built for the GPUs by this crate's build script, for gpuio's own
//! examples and tests (a dev-dependency: a crate that depends on gpuio builds none of this):
//!
//! - the example kernels (`kernels/`): [`OBJECTS`], [`NVPTX`], [`AMDGCN`], [`PTX`], ...;
//! - the test and benchmark kernels (`kernels-test/`, with the example kernels):
//!   [`TEST_OBJECTS`], [`TEST_NVPTX`], [`TEST_AMDGCN`], [`TEST_PTX`], ...;
//! - bench_observer's kernels (`kernels-observer/`): [`OBSERVER_NVPTX`];
//! - the device library for C++ kernels (`kernels-c/`): [`C_LIBRARY_NVPTX`].
//!
//! With `GPUIO_SKIP_GPU_BUILD=1` at build time the tables are empty and the files empty:
//! loading them fails at run time, clearly.

/// The tables `gpuio_linker::KernelCrate::build` wrote for the example kernels.
mod example {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}
/// The tables it wrote for the test kernels.
mod test {
    include!(concat!(env!("OUT_DIR"), "/test_kernels.rs"));
}
/// The tables it wrote for bench_observer's kernels.
mod observer {
    include!(concat!(env!("OUT_DIR"), "/observer_kernels.rs"));
}
/// The tables it wrote for the device library of C++ kernels.
mod c_library {
    include!(concat!(env!("OUT_DIR"), "/c_library.rs"));
}

/// Every code object of the example kernels, for `Runtime::kernels` and
/// `Runtime::load_matching`: [`NVPTX`] then [`AMDGCN`].
pub const OBJECTS: &[(&str, &[u8])] = example::OBJECTS;
/// The example kernels as PTX for `sm_90` and `sm_60` (the lockstep build).
pub const NVPTX: &[(&str, &[u8])] = example::NVPTX;
/// The example kernels as amdgcn code objects for gfx90a, gfx942 and gfx1100.
pub const AMDGCN: &[(&str, &[u8])] = example::AMDGCN;
/// The example kernels' `sm_90` PTX.
pub const PTX: &str = include_str!(env!("GPUIO_KERNELS_PTX"));
/// The path of the example kernels' `sm_90` PTX.
pub const PTX_PATH: &str = env!("GPUIO_KERNELS_PTX");

/// Every code object of the test kernels (and the example kernels): [`TEST_NVPTX`] then
/// [`TEST_AMDGCN`].
pub const TEST_OBJECTS: &[(&str, &[u8])] = test::OBJECTS;
/// The test kernels (and the example kernels) as PTX for `sm_90` and `sm_60`.
pub const TEST_NVPTX: &[(&str, &[u8])] = test::NVPTX;
/// The test kernels (and the example kernels) as amdgcn code objects for gfx90a, gfx942 and
/// gfx1100.
pub const TEST_AMDGCN: &[(&str, &[u8])] = test::AMDGCN;
/// The test kernels' `sm_90` PTX.
pub const TEST_PTX: &str = include_str!(env!("GPUIO_TEST_KERNELS_PTX"));
/// The path of the test kernels' `sm_90` PTX.
pub const TEST_PTX_PATH: &str = env!("GPUIO_TEST_KERNELS_PTX");
/// The path of the test kernels' `sm_60` PTX (the lockstep build).
pub const TEST_PTX_SM60_PATH: &str = env!("GPUIO_TEST_KERNELS_PTX_SM60");
/// The paths of the test kernels' code objects, by processor.
pub const TEST_HSACO_PATHS: &[(&str, &str)] = &[
    ("gfx90a", env!("GPUIO_TEST_KERNELS_HSACO_GFX90A")),
    ("gfx942", env!("GPUIO_TEST_KERNELS_HSACO_GFX942")),
    ("gfx1100", env!("GPUIO_TEST_KERNELS_HSACO_GFX1100")),
];

/// bench_observer's kernels (`kernels-observer/`) as PTX for `sm_90` and `sm_60`.
pub const OBSERVER_NVPTX: &[(&str, &[u8])] = observer::NVPTX;

/// The device runtime's C ABI (`kernels-c/`, `device/include/gpuio/device.h`) as PTX for
/// `sm_90` and `sm_60`: no kernel of its own, for a C++ kernel's PTX to be linked with.
pub const C_LIBRARY_NVPTX: &[(&str, &[u8])] = c_library::NVPTX;
