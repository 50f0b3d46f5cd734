//! The CUDA driver API's types, constants and entry points (`cuda.h`), as gpuio uses them.

use std::ffi::{c_char, c_void};

use crate::backend::dl::dl_api;

pub(super) type CuResult = i32;
pub(super) type CuDevice = i32;
pub(super) type CuContext = *mut c_void;
pub(super) type CuModule = *mut c_void;
pub(super) type CuFunction = *mut c_void;
/// A device address.
pub type CuDevicePtr = u64;

pub(super) const CUDA_ERROR_INVALID_CONTEXT: CuResult = 201;
pub(super) const CUDA_ERROR_NOT_FOUND: CuResult = 500;
pub(super) const CUDA_ERROR_NOT_READY: CuResult = 600;
pub(super) const CU_MEMHOSTREGISTER_PORTABLE: u32 = 1;
pub(super) const CU_MEMHOSTREGISTER_DEVICEMAP: u32 = 2;
pub(super) const CU_STREAM_NON_BLOCKING: u32 = 1;
/// An exception while a kernel ran (a `trap`, and so a gpuio panic, reports this one).
pub(super) const CUDA_ERROR_LAUNCH_FAILED: CuResult = 719;
pub(super) const CU_LIMIT_STACK_SIZE: i32 = 0;
pub(super) const CU_LIMIT_PRINTF_FIFO_SIZE: i32 = 1;
// CUfunction_attribute and CUdevice_attribute values (cuda.h).
pub(super) const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: i32 = 0;
pub(super) const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: i32 = 1;
pub(super) const CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: i32 = 3;
pub(super) const CU_FUNC_ATTRIBUTE_NUM_REGS: i32 = 4;
pub(super) const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
pub(super) const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
/// The dynamic shared memory a launch gets without opting in (48 KiB on every GPU since
/// Volta; past it the kernel's `MAX_DYNAMIC_SHARED_SIZE_BYTES` must be raised first).
pub(super) const SHARED_MEM_WITHOUT_OPT_IN: u32 = 48 << 10;
// CUjit_option values (cuda.h).
pub(super) const CU_JIT_MAX_REGISTERS: u32 = 0;
pub(super) const CU_JIT_THREADS_PER_BLOCK: u32 = 1;
pub(super) const CU_JIT_WALL_TIME: u32 = 2;
pub(super) const CU_JIT_ERROR_LOG_BUFFER: u32 = 5;
pub(super) const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: u32 = 6;
pub(super) const CU_JIT_OVERRIDE_DIRECTIVE_VALUES: u32 = 33;
// CUjitInputType (cuda.h).
pub(super) const CU_JIT_INPUT_PTX: u32 = 1;

dl_api! {
    "libcuda.so.1",
    "Driver entry points (signatures from `cuda.h`).",
    cuInit: fn(u32) -> CuResult;
    cuDeviceGet: fn(*mut CuDevice, i32) -> CuResult;
    cuDeviceGetCount: fn(*mut i32) -> CuResult;
    cuDeviceGetName: fn(*mut c_char, i32, CuDevice) -> CuResult;
    cuDeviceGetPCIBusId: fn(*mut c_char, i32, CuDevice) -> CuResult;
    cuDevicePrimaryCtxRetain: fn(*mut CuContext, CuDevice) -> CuResult;
    cuDevicePrimaryCtxRelease_v2: fn(CuDevice) -> CuResult;
    cuCtxSetCurrent: fn(CuContext) -> CuResult;
    cuCtxSynchronize: fn() -> CuResult;
    cuCtxSetLimit: fn(i32, usize) -> CuResult;
    cuCtxGetLimit: fn(*mut usize, i32) -> CuResult;
    cuStreamQuery: fn(*mut c_void) -> CuResult;
    cuStreamCreate: fn(*mut *mut c_void, u32) -> CuResult;
    cuStreamDestroy_v2: fn(*mut c_void) -> CuResult;
    cuStreamSynchronize: fn(*mut c_void) -> CuResult;
    cuMemcpyDtoHAsync_v2: fn(*mut c_void, CuDevicePtr, usize, *mut c_void) -> CuResult;
    cuModuleLoadDataEx: fn(*mut CuModule, *const c_void, u32, *mut u32, *mut *mut c_void) -> CuResult;
    cuModuleLoadData: fn(*mut CuModule, *const c_void) -> CuResult;
    cuLinkCreate_v2: fn(u32, *mut u32, *mut *mut c_void, *mut *mut c_void) -> CuResult;
    cuLinkAddData_v2: fn(*mut c_void, u32, *mut c_void, usize, *const c_char, u32, *mut u32, *mut *mut c_void) -> CuResult;
    cuLinkComplete: fn(*mut c_void, *mut *mut c_void, *mut usize) -> CuResult;
    cuLinkDestroy: fn(*mut c_void) -> CuResult;
    cuModuleUnload: fn(CuModule) -> CuResult;
    cuModuleGetFunction: fn(*mut CuFunction, CuModule, *const c_char) -> CuResult;
    #[cfg_attr(not(feature = "cudarc"), allow(dead_code))]
    cuFuncGetModule: fn(*mut CuModule, CuFunction) -> CuResult;
    cuModuleGetGlobal_v2: fn(*mut CuDevicePtr, *mut usize, CuModule, *const c_char) -> CuResult;
    cuMemAlloc_v2: fn(*mut CuDevicePtr, usize) -> CuResult;
    cuMemFree_v2: fn(CuDevicePtr) -> CuResult;
    cuMemsetD8_v2: fn(CuDevicePtr, u8, usize) -> CuResult;
    cuMemcpyHtoD_v2: fn(CuDevicePtr, *const c_void, usize) -> CuResult;
    cuMemcpyDtoH_v2: fn(*mut c_void, CuDevicePtr, usize) -> CuResult;
    cuMemHostRegister_v2: fn(*mut c_void, usize, u32) -> CuResult;
    cuMemHostUnregister: fn(*mut c_void) -> CuResult;
    cuMemHostGetDevicePointer_v2: fn(*mut CuDevicePtr, *mut c_void, u32) -> CuResult;
    cuFuncSetAttribute: fn(CuFunction, i32, i32) -> CuResult;
    cuFuncGetAttribute: fn(*mut i32, i32, CuFunction) -> CuResult;
    cuDeviceGetAttribute: fn(*mut i32, i32, CuDevice) -> CuResult;
    cuLaunchKernel: fn(CuFunction, u32, u32, u32, u32, u32, u32, u32, *mut c_void, *mut *mut c_void, *mut *mut c_void) -> CuResult;
    cuGetErrorName: fn(CuResult, *mut *const c_char);
}
