//! HSA's types, constants and entry points (ROCR-Runtime's `hsa.h` and `hsa_ext_amd.h`),
//! as gpuio uses them.

use std::ffi::{c_char, c_void};

use crate::backend::dl::dl_api;

/// `hsa_status_t`.
pub type Status = u32;
pub(super) const HSA_STATUS_SUCCESS: Status = 0;
/// `HSA_STATUS_ERROR_OUT_OF_RESOURCES`: what `hsa_init` returns when `/dev/kfd` is absent.
pub const HSA_STATUS_ERROR_OUT_OF_RESOURCES: Status = 0x1008;

/// `hsa_agent_t`, `hsa_signal_t`, ...: a struct holding one `uint64_t handle`, passed like
/// a `u64` by the C ABI.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handle(pub u64);

// hsa_agent_info_t
pub(super) const HSA_AGENT_INFO_NAME: u32 = 0;
pub(super) const HSA_AGENT_INFO_PROFILE: u32 = 4;
pub(super) const HSA_AGENT_INFO_QUEUE_MIN_SIZE: u32 = 13;
pub(super) const HSA_AGENT_INFO_QUEUE_MAX_SIZE: u32 = 14;
pub(super) const HSA_AGENT_INFO_DEVICE: u32 = 17;
pub(super) const HSA_AMD_AGENT_INFO_BDFID: u32 = 0xA006;
pub(super) const HSA_AMD_AGENT_INFO_PRODUCT_NAME: u32 = 0xA009;
pub(super) const HSA_AMD_AGENT_INFO_DOMAIN: u32 = 0xA00F;
// hsa_device_type_t
pub(super) const HSA_DEVICE_TYPE_CPU: u32 = 0;
pub(super) const HSA_DEVICE_TYPE_GPU: u32 = 1;
// hsa_isa_info_t
pub(super) const HSA_ISA_INFO_NAME_LENGTH: u32 = 0;
pub(super) const HSA_ISA_INFO_NAME: u32 = 1;
// hsa_amd_memory_pool_info_t, hsa_amd_segment_t, hsa_amd_memory_pool_global_flag_t
pub(super) const HSA_AMD_MEMORY_POOL_INFO_SEGMENT: u32 = 0;
pub(super) const HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: u32 = 1;
pub(super) const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: u32 = 5;
pub(super) const HSA_AMD_SEGMENT_GLOBAL: u32 = 0;
pub(super) const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT: u32 = 1;
pub(super) const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED: u32 = 2;
pub(super) const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED: u32 = 4;
// hsa_queue_type32_t
pub(super) const HSA_QUEUE_TYPE_MULTI: u32 = 0;
// hsa_default_float_rounding_mode_t
pub(super) const HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT: u32 = 0;
// hsa_executable_symbol_info_t
pub(super) const HSA_EXECUTABLE_SYMBOL_INFO_TYPE: u32 = 0;
pub(super) const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE: u32 = 9;
pub(super) const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: u32 = 11;
pub(super) const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: u32 = 13;
pub(super) const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: u32 = 14;
pub(super) const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK: u32 = 15;
pub(super) const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS: u32 = 21;
pub(super) const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;
// hsa_symbol_kind_t
pub(super) const HSA_SYMBOL_KIND_VARIABLE: u32 = 0;
pub(super) const HSA_SYMBOL_KIND_KERNEL: u32 = 1;
// hsa_packet_type_t, hsa_packet_header_t, hsa_fence_scope_t
pub(super) const HSA_PACKET_TYPE_KERNEL_DISPATCH: u16 = 2;
pub(super) const HSA_PACKET_HEADER_BARRIER: u16 = 8;
pub(super) const HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE: u16 = 9;
pub(super) const HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE: u16 = 11;
pub(super) const HSA_FENCE_SCOPE_SYSTEM: u16 = 2;

/// `hsa_queue_t` (x86-64: `HSA_LARGE_MODEL`).
#[repr(C)]
pub struct HsaQueue {
    /// `hsa_queue_type32_t`.
    pub kind: u32,
    /// `hsa_queue_feature_t` bits.
    pub features: u32,
    /// The ring of 64-byte AQL packets.
    pub base_address: *mut c_void,
    /// Written with the packet index to tell the packet processor.
    pub doorbell_signal: Handle,
    /// Packets in the ring (a power of two).
    pub size: u32,
    /// Reserved.
    pub reserved1: u32,
    /// Queue id.
    pub id: u64,
}
const _: () = assert!(size_of::<HsaQueue>() == 40);

/// `hsa_kernel_dispatch_packet_t`.
#[repr(C)]
pub(super) struct DispatchPacket {
    pub(super) header: u16,
    pub(super) setup: u16,
    pub(super) workgroup_size_x: u16,
    pub(super) workgroup_size_y: u16,
    pub(super) workgroup_size_z: u16,
    pub(super) reserved0: u16,
    pub(super) grid_size_x: u32,
    pub(super) grid_size_y: u32,
    pub(super) grid_size_z: u32,
    pub(super) private_segment_size: u32,
    pub(super) group_segment_size: u32,
    pub(super) kernel_object: u64,
    pub(super) kernarg_address: *mut c_void,
    pub(super) reserved2: u64,
    pub(super) completion_signal: Handle,
}
const _: () = assert!(size_of::<DispatchPacket>() == 64);
const _: () = assert!(std::mem::offset_of!(DispatchPacket, grid_size_x) == 12);
const _: () = assert!(std::mem::offset_of!(DispatchPacket, kernel_object) == 32);
const _: () = assert!(std::mem::offset_of!(DispatchPacket, completion_signal) == 56);

pub(super) type AgentCallback = unsafe extern "C" fn(Handle, *mut c_void) -> Status;
pub(super) type QueueCallback = unsafe extern "C" fn(Status, *mut HsaQueue, *mut c_void);

dl_api! {
    "libhsa-runtime64.so.1",
    "Runtime entry points (signatures from `hsa.h` and `hsa_ext_amd.h`).",
    hsa_init: fn() -> Status;
    hsa_shut_down: fn() -> Status;
    hsa_status_string: fn(Status, *mut *const c_char) -> Status;
    hsa_iterate_agents: fn(AgentCallback, *mut c_void) -> Status;
    hsa_agent_get_info: fn(Handle, u32, *mut c_void) -> Status;
    hsa_agent_iterate_isas: fn(Handle, AgentCallback, *mut c_void) -> Status;
    hsa_isa_get_info_alt: fn(Handle, u32, *mut c_void) -> Status;
    hsa_amd_agent_iterate_memory_pools: fn(Handle, AgentCallback, *mut c_void) -> Status;
    hsa_amd_memory_pool_get_info: fn(Handle, u32, *mut c_void) -> Status;
    hsa_amd_memory_pool_allocate: fn(Handle, usize, u32, *mut *mut c_void) -> Status;
    hsa_amd_memory_pool_free: fn(*mut c_void) -> Status;
    hsa_amd_agents_allow_access: fn(u32, *const Handle, *const u32, *const c_void) -> Status;
    hsa_amd_memory_lock_to_pool: fn(*mut c_void, usize, *mut Handle, i32, Handle, u32, *mut *mut c_void) -> Status;
    hsa_amd_memory_unlock: fn(*mut c_void) -> Status;
    hsa_memory_copy: fn(*mut c_void, *const c_void, usize) -> Status;
    hsa_queue_create: fn(Handle, u32, u32, Option<QueueCallback>, *mut c_void, u32, u32, *mut *mut HsaQueue) -> Status;
    hsa_queue_destroy: fn(*mut HsaQueue) -> Status;
    hsa_queue_add_write_index_scacq_screl: fn(*const HsaQueue, u64) -> u64;
    hsa_queue_load_read_index_scacquire: fn(*const HsaQueue) -> u64;
    hsa_signal_create: fn(i64, u32, *const Handle, *mut Handle) -> Status;
    hsa_signal_destroy: fn(Handle) -> Status;
    hsa_signal_store_screlease: fn(Handle, i64);
    hsa_signal_add_scacq_screl: fn(Handle, i64);
    hsa_signal_load_scacquire: fn(Handle) -> i64;
    hsa_code_object_reader_create_from_memory: fn(*const c_void, usize, *mut Handle) -> Status;
    hsa_code_object_reader_destroy: fn(Handle) -> Status;
    hsa_executable_create_alt: fn(u32, u32, *const c_char, *mut Handle) -> Status;
    hsa_executable_load_agent_code_object: fn(Handle, Handle, Handle, *const c_char, *mut Handle) -> Status;
    hsa_executable_freeze: fn(Handle, *const c_char) -> Status;
    hsa_executable_get_symbol_by_name: fn(Handle, *const c_char, *const Handle, *mut Handle) -> Status;
    hsa_executable_symbol_get_info: fn(Handle, u32, *mut c_void) -> Status;
    hsa_executable_destroy: fn(Handle) -> Status;
}
