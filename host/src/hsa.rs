//! The few HSA runtime calls gpuio needs, loaded from `libhsa-runtime64.so.1` at run time:
//! our own binding (no maintained crate binds HSA), with the types and enum values of
//! ROCR-Runtime's `hsa.h` and `hsa_ext_amd.h`. Building needs no ROCm; where the runtime,
//! the driver or a GPU is absent, [`Hsa::open`] says why.
//!
//! What it does, in HSA terms:
//! - `hsa_init`, then the first GPU agent (and the first CPU agent, which owns the system
//!   memory pools): its name (`gfx90a`), its ISA name, its product name;
//! - memory pools: the GPU's coarse-grained global pool (the protocol state), the CPU's
//!   kernarg pool (kernel arguments), the CPU's fine-grained global pool (to make host
//!   memory GPU-visible, see [`Hsa::lock`]);
//! - code objects: `hsa_code_object_reader_create_from_memory`,
//!   `hsa_executable_create_alt`, `hsa_executable_load_agent_code_object`,
//!   `hsa_executable_freeze`, symbols by name (`<kernel>.kd`, `gpuio_context`);
//! - dispatch: one multi-producer AQL queue; a kernel dispatch packet whose header is
//!   stored last with a release store, then the doorbell; one completion signal that
//!   counts dispatches in flight.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::code_object::{self, CodeObject};
use crate::cuda::Arg;
use crate::dl::Library;
use crate::error::{Error, Result};

/// `hsa_status_t`.
type Status = u32;
const HSA_STATUS_SUCCESS: Status = 0;
/// `HSA_STATUS_ERROR_OUT_OF_RESOURCES`: what `hsa_init` returns when `/dev/kfd` is absent.
pub const HSA_STATUS_ERROR_OUT_OF_RESOURCES: Status = 0x1008;

/// `hsa_agent_t`, `hsa_signal_t`, ...: a struct holding one `uint64_t handle`, passed like
/// a `u64` by the C ABI.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handle(pub u64);

// hsa_agent_info_t
const HSA_AGENT_INFO_NAME: u32 = 0;
const HSA_AGENT_INFO_PROFILE: u32 = 4;
const HSA_AGENT_INFO_QUEUE_MIN_SIZE: u32 = 13;
const HSA_AGENT_INFO_QUEUE_MAX_SIZE: u32 = 14;
const HSA_AGENT_INFO_DEVICE: u32 = 17;
const HSA_AMD_AGENT_INFO_BDFID: u32 = 0xA006;
const HSA_AMD_AGENT_INFO_PRODUCT_NAME: u32 = 0xA009;
const HSA_AMD_AGENT_INFO_DOMAIN: u32 = 0xA00F;
// hsa_device_type_t
const HSA_DEVICE_TYPE_CPU: u32 = 0;
const HSA_DEVICE_TYPE_GPU: u32 = 1;
// hsa_isa_info_t
const HSA_ISA_INFO_NAME_LENGTH: u32 = 0;
const HSA_ISA_INFO_NAME: u32 = 1;
// hsa_amd_memory_pool_info_t, hsa_amd_segment_t, hsa_amd_memory_pool_global_flag_t
const HSA_AMD_MEMORY_POOL_INFO_SEGMENT: u32 = 0;
const HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: u32 = 1;
const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: u32 = 5;
const HSA_AMD_SEGMENT_GLOBAL: u32 = 0;
const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT: u32 = 1;
const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED: u32 = 2;
const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED: u32 = 4;
// hsa_queue_type32_t
const HSA_QUEUE_TYPE_MULTI: u32 = 0;
// hsa_signal_condition_t, hsa_wait_state_t
const HSA_SIGNAL_CONDITION_EQ: u32 = 0;
const HSA_WAIT_STATE_BLOCKED: u32 = 0;
// hsa_default_float_rounding_mode_t
const HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT: u32 = 0;
// hsa_executable_symbol_info_t
const HSA_EXECUTABLE_SYMBOL_INFO_TYPE: u32 = 0;
const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE: u32 = 9;
const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: u32 = 11;
const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: u32 = 13;
const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: u32 = 14;
const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK: u32 = 15;
const HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS: u32 = 21;
const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;
// hsa_symbol_kind_t
const HSA_SYMBOL_KIND_VARIABLE: u32 = 0;
const HSA_SYMBOL_KIND_KERNEL: u32 = 1;
// hsa_packet_type_t, hsa_packet_header_t, hsa_fence_scope_t
const HSA_PACKET_TYPE_KERNEL_DISPATCH: u16 = 2;
const HSA_PACKET_HEADER_BARRIER: u16 = 8;
const HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE: u16 = 9;
const HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE: u16 = 11;
const HSA_FENCE_SCOPE_SYSTEM: u16 = 2;
/// `HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS`: one dimension.
const DISPATCH_SETUP_ONE_DIMENSION: u16 = 1;

/// `hsa_queue_t` (x86-64: `HSA_LARGE_MODEL`).
#[repr(C)]
pub struct Queue {
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
const _: () = assert!(size_of::<Queue>() == 40);

/// `hsa_kernel_dispatch_packet_t`.
#[repr(C)]
struct DispatchPacket {
    header: u16,
    setup: u16,
    workgroup_size_x: u16,
    workgroup_size_y: u16,
    workgroup_size_z: u16,
    reserved0: u16,
    grid_size_x: u32,
    grid_size_y: u32,
    grid_size_z: u32,
    private_segment_size: u32,
    group_segment_size: u32,
    kernel_object: u64,
    kernarg_address: *mut c_void,
    reserved2: u64,
    completion_signal: Handle,
}
const _: () = assert!(size_of::<DispatchPacket>() == 64);
const _: () = assert!(std::mem::offset_of!(DispatchPacket, grid_size_x) == 12);
const _: () = assert!(std::mem::offset_of!(DispatchPacket, kernel_object) == 32);
const _: () = assert!(std::mem::offset_of!(DispatchPacket, completion_signal) == 56);

type AgentCallback = unsafe extern "C" fn(Handle, *mut c_void) -> Status;
type QueueCallback = unsafe extern "C" fn(Status, *mut Queue, *mut c_void);

macro_rules! hsa_api {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// Runtime entry points (signatures from `hsa.h` and `hsa_ext_amd.h`).
        struct Api {
            $($name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Api {
            fn load(lib: &Library) -> std::result::Result<Api, String> {
                // SAFETY: each symbol is declared with its documented signature.
                unsafe {
                    Ok(Api {
                        $($name: lib
                            .symbol(&CString::new(stringify!($name)).unwrap())
                            .ok_or(concat!("libhsa-runtime64.so.1 lacks ", stringify!($name)))?,)*
                    })
                }
            }
        }
    };
}

hsa_api! {
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
    hsa_queue_create: fn(Handle, u32, u32, Option<QueueCallback>, *mut c_void, u32, u32, *mut *mut Queue) -> Status;
    hsa_queue_destroy: fn(*mut Queue) -> Status;
    hsa_queue_add_write_index_scacq_screl: fn(*const Queue, u64) -> u64;
    hsa_queue_load_read_index_scacquire: fn(*const Queue) -> u64;
    hsa_signal_create: fn(i64, u32, *const Handle, *mut Handle) -> Status;
    hsa_signal_destroy: fn(Handle) -> Status;
    hsa_signal_store_screlease: fn(Handle, i64);
    hsa_signal_add_scacq_screl: fn(Handle, i64);
    hsa_signal_load_scacquire: fn(Handle) -> i64;
    hsa_signal_wait_scacquire: fn(Handle, u32, i64, u64, u32) -> i64;
    hsa_code_object_reader_create_from_memory: fn(*const c_void, usize, *mut Handle) -> Status;
    hsa_code_object_reader_destroy: fn(Handle) -> Status;
    hsa_executable_create_alt: fn(u32, u32, *const c_char, *mut Handle) -> Status;
    hsa_executable_load_agent_code_object: fn(Handle, Handle, Handle, *const c_char, *mut Handle) -> Status;
    hsa_executable_freeze: fn(Handle, *const c_char) -> Status;
    hsa_executable_get_symbol_by_name: fn(Handle, *const c_char, *const Handle, *mut Handle) -> Status;
    hsa_executable_symbol_get_info: fn(Handle, u32, *mut c_void) -> Status;
    hsa_executable_destroy: fn(Handle) -> Status;
}

/// The HSA runtime, initialised, with one GPU agent, its memory pools, an AQL queue and a
/// completion signal.
pub struct Hsa {
    api: Api,
    gpu: Handle,
    /// The agent's name: the processor, e.g. `gfx90a`.
    name: String,
    /// The agent's ISA name, e.g. `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`.
    isa: String,
    /// The marketing name, e.g. `AMD Instinct MI210`.
    product: String,
    profile: u32,
    /// GPU-local, coarse-grained: the protocol state.
    device_pool: Handle,
    /// System memory for kernel arguments.
    kernarg_pool: Handle,
    /// System memory, fine-grained: host memory is locked to it (see `lock`).
    fine_pool: Handle,
    queue: *mut Queue,
    /// Counts dispatches in flight: +1 per dispatch, -1 by the packet processor.
    done: Handle,
    /// The first error the queue reported (0: none); boxed: the callback keeps its address.
    queue_error: Box<AtomicU32>,
    /// Kernel argument blocks of dispatches in flight, freed by `synchronize`.
    kernargs: Mutex<Vec<usize>>,
    /// Per-thread private segment for kernels with a dynamic stack.
    stack_bytes: AtomicUsize,
    _lib: Library,
}

// SAFETY: HSA handles and the queue may be used from any thread: the runtime is thread-safe,
// and packet slots are claimed with the queue's atomic write index.
unsafe impl Send for Hsa {}
unsafe impl Sync for Hsa {}

/// Collects handles from an HSA iteration callback.
unsafe extern "C" fn collect(h: Handle, data: *mut c_void) -> Status {
    // SAFETY: `data` is the `Vec<Handle>` the caller passed, alive for the iteration.
    unsafe { (*(data as *mut Vec<Handle>)).push(h) };
    HSA_STATUS_SUCCESS
}

/// Records the first error of the queue (a fault in a kernel, say).
unsafe extern "C" fn on_queue_error(status: Status, _queue: *mut Queue, data: *mut c_void) {
    // SAFETY: `data` is the boxed AtomicU32 of the `Hsa` that owns the queue; the queue is
    // destroyed before the box.
    let slot = unsafe { &*(data as *const AtomicU32) };
    let _ = slot.compare_exchange(0, status.max(1), Ordering::AcqRel, Ordering::Acquire);
}

/// Why `hsa_init` failed, in words.
fn init_failure(rc: Status) -> String {
    if rc == HSA_STATUS_ERROR_OUT_OF_RESOURCES {
        if std::path::Path::new("/dev/kfd").exists() {
            "hsa_init failed with 0x1008 (HSA_STATUS_ERROR_OUT_OF_RESOURCES) although /dev/kfd exists: \
             no usable AMD GPU, or no permission (is the user in the render group?)"
                .into()
        } else {
            "hsa_init failed with 0x1008 (HSA_STATUS_ERROR_OUT_OF_RESOURCES): /dev/kfd is absent, no AMD GPU driver"
                .into()
        }
    } else {
        format!("hsa_init failed with status {rc:#x}")
    }
}

impl Hsa {
    /// Loads the runtime, initialises it, and takes the first GPU agent.
    pub fn open() -> std::result::Result<Arc<Hsa>, String> {
        let lib = Library::open(c"libhsa-runtime64.so.1")
            .ok_or("libhsa-runtime64.so.1 not found (no ROCm runtime installed)")?;
        let api = Api::load(&lib)?;
        // SAFETY: no arguments.
        let rc = unsafe { (api.hsa_init)() };
        if rc != HSA_STATUS_SUCCESS {
            return Err(init_failure(rc));
        }
        // From here on, failures drop `hsa`, which shuts the runtime down.
        let mut hsa = Hsa {
            api,
            gpu: Handle(0),
            name: String::new(),
            isa: String::new(),
            product: String::new(),
            profile: 0,
            device_pool: Handle(0),
            kernarg_pool: Handle(0),
            fine_pool: Handle(0),
            queue: std::ptr::null_mut(),
            done: Handle(0),
            queue_error: Box::new(AtomicU32::new(0)),
            kernargs: Mutex::new(Vec::new()),
            stack_bytes: AtomicUsize::new(8 << 10),
            _lib: lib,
        };
        hsa.setup()?;
        Ok(Arc::new(hsa))
    }

    fn setup(&mut self) -> std::result::Result<(), String> {
        let mut agents: Vec<Handle> = Vec::new();
        // SAFETY: `collect` matches the callback type; `agents` outlives the call.
        self.check_str(
            unsafe { (self.api.hsa_iterate_agents)(collect, &mut agents as *mut _ as *mut c_void) },
            "hsa_iterate_agents",
        )?;
        let kind = |a: Handle| {
            let mut t = u32::MAX;
            // SAFETY: HSA_AGENT_INFO_DEVICE is a 4-byte hsa_device_type_t.
            unsafe { (self.api.hsa_agent_get_info)(a, HSA_AGENT_INFO_DEVICE, &mut t as *mut u32 as *mut c_void) };
            t
        };
        let gpu = agents.iter().copied().find(|&a| kind(a) == HSA_DEVICE_TYPE_GPU);
        let cpu = agents.iter().copied().find(|&a| kind(a) == HSA_DEVICE_TYPE_CPU);
        let Some(gpu) = gpu else {
            return Err(format!(
                "no AMD GPU agent (HSA lists {} agent(s), none a GPU)",
                agents.len()
            ));
        };
        let cpu = cpu.ok_or("HSA lists no CPU agent (no system memory pools)")?;
        self.gpu = gpu;
        self.name = self.agent_string(gpu, HSA_AGENT_INFO_NAME);
        self.product = self.agent_string(gpu, HSA_AMD_AGENT_INFO_PRODUCT_NAME);
        // SAFETY: HSA_AGENT_INFO_PROFILE is a 4-byte hsa_profile_t.
        unsafe {
            (self.api.hsa_agent_get_info)(
                gpu,
                HSA_AGENT_INFO_PROFILE,
                &mut self.profile as *mut u32 as *mut c_void,
            )
        };
        self.isa = self
            .isa_name(gpu)
            .unwrap_or_else(|| format!("amdgcn-amd-amdhsa--{}", self.name));

        let pools = |agent: Handle| -> std::result::Result<Vec<(Handle, u32, u32, bool)>, String> {
            let mut pools: Vec<Handle> = Vec::new();
            // SAFETY: as for the agents.
            self.check_str(
                unsafe {
                    (self.api.hsa_amd_agent_iterate_memory_pools)(agent, collect, &mut pools as *mut _ as *mut c_void)
                },
                "hsa_amd_agent_iterate_memory_pools",
            )?;
            Ok(pools
                .into_iter()
                .map(|p| {
                    let (mut segment, mut flags, mut alloc) = (u32::MAX, 0u32, false);
                    // SAFETY: SEGMENT and GLOBAL_FLAGS are 4-byte enums/bit sets,
                    // RUNTIME_ALLOC_ALLOWED a bool.
                    unsafe {
                        let info = self.api.hsa_amd_memory_pool_get_info;
                        info(
                            p,
                            HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
                            &mut segment as *mut u32 as *mut c_void,
                        );
                        info(
                            p,
                            HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                            &mut flags as *mut u32 as *mut c_void,
                        );
                        info(
                            p,
                            HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                            &mut alloc as *mut bool as *mut c_void,
                        );
                    }
                    (p, segment, flags, alloc)
                })
                .collect())
        };
        let global = |pools: &[(Handle, u32, u32, bool)], want: u32, avoid: u32| {
            pools
                .iter()
                .find(|&&(_, seg, flags, alloc)| {
                    seg == HSA_AMD_SEGMENT_GLOBAL && alloc && flags & want == want && flags & avoid == 0
                })
                .map(|p| p.0)
        };
        let gpu_pools = pools(gpu)?;
        let cpu_pools = pools(cpu)?;
        self.device_pool = global(&gpu_pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, 0)
            .ok_or_else(|| format!("{}: no coarse-grained global memory pool", self.name))?;
        self.kernarg_pool = global(&cpu_pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, 0)
            .ok_or("no kernarg memory pool on the CPU agent")?;
        self.fine_pool = global(
            &cpu_pools,
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
            HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
        )
        .or_else(|| global(&cpu_pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, 0))
        .ok_or("no fine-grained system memory pool on the CPU agent")?;

        let (mut min, mut max) = (0u32, 0u32);
        // SAFETY: both are 4-byte values.
        unsafe {
            (self.api.hsa_agent_get_info)(gpu, HSA_AGENT_INFO_QUEUE_MIN_SIZE, &mut min as *mut u32 as *mut c_void);
            (self.api.hsa_agent_get_info)(gpu, HSA_AGENT_INFO_QUEUE_MAX_SIZE, &mut max as *mut u32 as *mut c_void);
        }
        let size = 1024u32.clamp(min.max(1), max.max(1));
        let mut queue = std::ptr::null_mut();
        // SAFETY: the callback's data is the boxed error slot, which outlives the queue
        // (Drop destroys the queue first). u32::MAX: no private/group segment hints.
        self.check_str(
            unsafe {
                (self.api.hsa_queue_create)(
                    gpu,
                    size,
                    HSA_QUEUE_TYPE_MULTI,
                    Some(on_queue_error),
                    &*self.queue_error as *const AtomicU32 as *mut c_void,
                    u32::MAX,
                    u32::MAX,
                    &mut queue,
                )
            },
            "hsa_queue_create",
        )?;
        self.queue = queue;
        let mut done = Handle(0);
        // SAFETY: valid out-pointer; no consumer list.
        self.check_str(
            unsafe { (self.api.hsa_signal_create)(0, 0, std::ptr::null(), &mut done) },
            "hsa_signal_create",
        )?;
        self.done = done;
        Ok(())
    }

    /// A `char[64]` agent attribute.
    fn agent_string(&self, agent: Handle, attribute: u32) -> String {
        let mut buf = [0u8; 64];
        // SAFETY: NAME and PRODUCT_NAME are char[64].
        let rc = unsafe { (self.api.hsa_agent_get_info)(agent, attribute, buf.as_mut_ptr() as *mut c_void) };
        if rc != HSA_STATUS_SUCCESS {
            return String::new();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }

    /// The name of the agent's first ISA.
    fn isa_name(&self, agent: Handle) -> Option<String> {
        let mut isas: Vec<Handle> = Vec::new();
        // SAFETY: as for the agents.
        let rc = unsafe { (self.api.hsa_agent_iterate_isas)(agent, collect, &mut isas as *mut _ as *mut c_void) };
        let isa = *isas.first().filter(|_| rc == HSA_STATUS_SUCCESS)?;
        let mut len = 0u32;
        // SAFETY: NAME_LENGTH is a u32; NAME is a char array of that length.
        unsafe {
            if (self.api.hsa_isa_get_info_alt)(isa, HSA_ISA_INFO_NAME_LENGTH, &mut len as *mut u32 as *mut c_void)
                != HSA_STATUS_SUCCESS
            {
                return None;
            }
            let mut name = vec![0u8; len as usize + 1];
            if (self.api.hsa_isa_get_info_alt)(isa, HSA_ISA_INFO_NAME, name.as_mut_ptr() as *mut c_void)
                != HSA_STATUS_SUCCESS
            {
                return None;
            }
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            Some(String::from_utf8_lossy(&name[..end]).into_owned())
        }
    }

    fn status_name(&self, rc: Status) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: hsa_status_string writes a pointer to a static string.
        let ok = unsafe { (self.api.hsa_status_string)(rc, &mut p) } == HSA_STATUS_SUCCESS;
        if ok && !p.is_null() {
            // SAFETY: a NUL-terminated static string from the runtime.
            format!("{} ({rc:#x})", unsafe { CStr::from_ptr(p) }.to_string_lossy())
        } else {
            format!("hsa_status_t {rc:#x}")
        }
    }

    fn check_str(&self, rc: Status, what: &str) -> std::result::Result<(), String> {
        if rc == HSA_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what} failed: {}", self.status_name(rc)))
        }
    }

    fn check(&self, rc: Status, what: &str) -> Result<()> {
        self.check_str(rc, what).map_err(Error::Hsa)
    }

    /// The agent's processor name, e.g. `gfx90a`.
    pub fn agent_name(&self) -> &str {
        &self.name
    }

    /// The agent's ISA name, e.g. `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`.
    pub fn isa(&self) -> &str {
        &self.isa
    }

    /// The GPU's marketing name (or its processor name when the driver gives none).
    pub fn device_name(&self) -> &str {
        if self.product.is_empty() {
            &self.name
        } else {
            &self.product
        }
    }

    /// The GPU agent's PCI location: `(domain, bus << 8 | device << 3 | function)`, as
    /// `HSA_AMD_AGENT_INFO_DOMAIN` and `HSA_AMD_AGENT_INFO_BDFID` give it (`None` if the
    /// runtime does not say). Used to match a device of another API (HIP) to this agent.
    pub fn pci_location(&self) -> Option<(u32, u32)> {
        let info = |attribute: u32| {
            let mut v = 0u32;
            // SAFETY: DOMAIN and BDFID are 4-byte values (uint32_t in hsa_ext_amd.h).
            let rc = unsafe { (self.api.hsa_agent_get_info)(self.gpu, attribute, &mut v as *mut u32 as *mut c_void) };
            (rc == HSA_STATUS_SUCCESS).then_some(v)
        };
        Some((info(HSA_AMD_AGENT_INFO_DOMAIN)?, info(HSA_AMD_AGENT_INFO_BDFID)?))
    }

    /// The GPU agent's handle (for code that loads executables itself).
    pub fn agent(&self) -> Handle {
        self.gpu
    }

    /// Makes `ptr .. ptr + len` of host memory GPU-visible and returns the address the GPU
    /// sees it at (on discrete GPUs without the SVM API this differs from `ptr`).
    ///
    /// The memory is locked to the CPU's fine-grained pool (`hsa_amd_memory_lock_to_pool`):
    /// the GPU's accesses are then coherent with the CPU's and the kernel's while a kernel
    /// runs, which the ring protocol needs (the SQPOLL thread reads SQEs while the GPU
    /// writes them). Plain `hsa_amd_memory_lock` would use the coarse-grained system pool,
    /// whose contents are coherent only at kernel boundaries. Locking rather than
    /// allocating keeps the pages plain anonymous memory that io_uring can pin as well
    /// (see [`crate::memory`]).
    ///
    /// # Safety
    /// The range is mapped memory that stays mapped until [`Hsa::unlock`].
    pub unsafe fn lock(&self, ptr: *mut u8, len: usize) -> Result<*mut u8> {
        let mut agent = self.gpu;
        let mut agent_ptr = std::ptr::null_mut();
        // SAFETY: the caller keeps the range mapped; one agent; flags must be 0.
        self.check(
            unsafe {
                (self.api.hsa_amd_memory_lock_to_pool)(
                    ptr as *mut c_void,
                    len,
                    &mut agent,
                    1,
                    self.fine_pool,
                    0,
                    &mut agent_ptr,
                )
            },
            "hsa_amd_memory_lock_to_pool",
        )?;
        Ok(agent_ptr as *mut u8)
    }

    /// Undoes [`Hsa::lock`].
    ///
    /// # Safety
    /// `ptr` was locked, and no kernel that may touch it is running.
    pub unsafe fn unlock(&self, ptr: *mut u8) {
        // SAFETY: the caller's contract.
        unsafe { (self.api.hsa_amd_memory_unlock)(ptr as *mut c_void) };
    }

    /// Allocates zeroed GPU memory (coarse-grained, GPU-local).
    pub fn alloc_zeroed(&self, len: usize) -> Result<u64> {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0.
        self.check(
            unsafe { (self.api.hsa_amd_memory_pool_allocate)(self.device_pool, len, 0, &mut p) },
            "hsa_amd_memory_pool_allocate(device)",
        )?;
        let zeros = vec![0u8; len];
        if let Err(e) = self.copy_to_device(p as u64, &zeros) {
            self.free(p as u64);
            return Err(e);
        }
        Ok(p as u64)
    }

    /// Frees memory from [`Hsa::alloc_zeroed`].
    pub fn free(&self, d: u64) {
        // SAFETY: `d` came from a pool allocation; the caller no longer uses it.
        unsafe { (self.api.hsa_amd_memory_pool_free)(d as *mut c_void) };
    }

    /// Copies host bytes to GPU memory (`hsa_memory_copy`, synchronous).
    pub fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        // SAFETY: `src` is valid for its length; `dst` is GPU memory the caller owns.
        self.check(
            unsafe { (self.api.hsa_memory_copy)(dst as *mut c_void, src.as_ptr() as *const c_void, src.len()) },
            "hsa_memory_copy(to device)",
        )
    }

    /// Copies GPU memory to host bytes (`hsa_memory_copy`, synchronous).
    pub fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        // SAFETY: `dst` is valid for its length; `src` is GPU memory the caller owns.
        self.check(
            unsafe { (self.api.hsa_memory_copy)(dst.as_mut_ptr() as *mut c_void, src as *const c_void, dst.len()) },
            "hsa_memory_copy(from device)",
        )
    }

    /// Sets the per-thread private segment given to kernels with a dynamic stack.
    pub fn set_stack_size(&self, bytes: usize) {
        self.stack_bytes.store(bytes, Ordering::Relaxed);
    }

    fn queue_failed(&self) -> Option<Error> {
        match self.queue_error.load(Ordering::Acquire) {
            0 => None,
            rc => Some(Error::Kernel(format!("the HSA queue failed: {}", self.status_name(rc)))),
        }
    }

    /// Whether every dispatch has completed (errors surface as `Err`). Never blocks: the
    /// runtime's synchronize polls it under its hang watchdog.
    pub fn idle(&self) -> Result<bool> {
        if let Some(e) = self.queue_failed() {
            return Err(e);
        }
        // SAFETY: a signal we created; loading its value has no other effect. Acquire:
        // once it reads 0, the completed kernels' writes are visible.
        let v = unsafe { (self.api.hsa_signal_load_scacquire)(self.done) };
        Ok(v == 0)
    }

    /// Waits until every dispatch has completed, then frees the kernel arguments of those
    /// enqueued before the call (a launch racing with it keeps its block for the next one).
    /// Blocks for as long as that takes; the runtime's synchronize waits through
    /// `synchronize_with` instead, under its hang watchdog.
    pub fn synchronize(&self) -> Result<()> {
        self.synchronize_with(|| self.wait_idle())
    }

    /// [`Hsa::synchronize`] with `wait` waiting until [`Hsa::idle`]. If `wait` fails (a
    /// failed queue, or a watchdog that gave up), the kernel arguments are kept: their
    /// dispatches may still run.
    pub(crate) fn synchronize_with(&self, wait: impl FnOnce() -> Result<()>) -> Result<()> {
        let blocks = std::mem::take(&mut *self.kernargs.lock().unwrap_or_else(|e| e.into_inner()));
        let waited = wait();
        if waited.is_err() {
            self.kernargs.lock().unwrap_or_else(|e| e.into_inner()).extend(blocks);
            return waited;
        }
        for b in blocks {
            // SAFETY: kernarg blocks of completed dispatches.
            unsafe { (self.api.hsa_amd_memory_pool_free)(b as *mut c_void) };
        }
        Ok(())
    }

    fn wait_idle(&self) -> Result<()> {
        loop {
            if let Some(e) = self.queue_failed() {
                return Err(e);
            }
            // SAFETY: a signal we created. The timeout is a hint (in timestamp ticks);
            // waking now and then lets us notice a failed queue, whose dispatches never
            // complete.
            let v = unsafe {
                (self.api.hsa_signal_wait_scacquire)(
                    self.done,
                    HSA_SIGNAL_CONDITION_EQ,
                    0,
                    100_000_000,
                    HSA_WAIT_STATE_BLOCKED,
                )
            };
            if v == 0 {
                return Ok(());
            }
        }
    }

    /// Enqueues one kernel dispatch packet: `grid` work-groups of `block` work-items (x).
    ///
    /// # Safety
    /// `kernel_object` is a loaded kernel's descriptor and `kernarg` its arguments, laid
    /// out as the kernel expects, in kernarg memory that lives until `synchronize`.
    unsafe fn dispatch(&self, d: &Dispatch) -> Result<()> {
        if let Some(e) = self.queue_failed() {
            return Err(e);
        }
        let q = self.queue;
        // SAFETY: the queue lives as long as `self`; slot `index` is ours once the write
        // index moved past it, and free once the read index is within `size` of it.
        unsafe {
            let index = (self.api.hsa_queue_add_write_index_scacq_screl)(q, 1);
            let size = (*q).size as u64;
            while index.wrapping_sub((self.api.hsa_queue_load_read_index_scacquire)(q)) >= size {
                if let Some(e) = self.queue_failed() {
                    return Err(e);
                }
                std::thread::yield_now();
            }
            let p = ((*q).base_address as *mut DispatchPacket).add((index & (size - 1)) as usize);
            // Everything but the header first: the packet processor reads the packet only
            // once the header says KERNEL_DISPATCH.
            std::ptr::addr_of_mut!((*p).workgroup_size_x).write(d.block);
            std::ptr::addr_of_mut!((*p).workgroup_size_y).write(1);
            std::ptr::addr_of_mut!((*p).workgroup_size_z).write(1);
            std::ptr::addr_of_mut!((*p).reserved0).write(0);
            std::ptr::addr_of_mut!((*p).grid_size_x).write(d.grid_size);
            std::ptr::addr_of_mut!((*p).grid_size_y).write(1);
            std::ptr::addr_of_mut!((*p).grid_size_z).write(1);
            std::ptr::addr_of_mut!((*p).private_segment_size).write(d.private_segment_size);
            std::ptr::addr_of_mut!((*p).group_segment_size).write(d.group_segment_size);
            std::ptr::addr_of_mut!((*p).kernel_object).write(d.kernel_object);
            std::ptr::addr_of_mut!((*p).kernarg_address).write(d.kernarg as *mut c_void);
            std::ptr::addr_of_mut!((*p).reserved2).write(0);
            std::ptr::addr_of_mut!((*p).completion_signal).write(self.done);
            // Count the dispatch before it can complete.
            (self.api.hsa_signal_add_scacq_screl)(self.done, 1);
            // Barrier: in order after the queue's earlier dispatches, like a CUDA stream.
            // System-scope acquire and release: kernels see host writes made before the
            // dispatch, and the host (and copies) see the kernel's writes after it.
            let header = (HSA_PACKET_TYPE_KERNEL_DISPATCH)
                | (1 << HSA_PACKET_HEADER_BARRIER)
                | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
                | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
            // The header and setup words, as one 32-bit release store: the body above is
            // visible to the packet processor before the packet becomes valid.
            let word = header as u32 | (DISPATCH_SETUP_ONE_DIMENSION as u32) << 16;
            (*(p as *const AtomicU32)).store(word, Ordering::Release);
            (self.api.hsa_signal_store_screlease)((*q).doorbell_signal, index as i64);
        }
        Ok(())
    }

    /// Allocates `len` bytes of kernel argument memory the GPU can read.
    fn alloc_kernarg(&self, len: usize) -> Result<*mut u8> {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0.
        self.check(
            unsafe { (self.api.hsa_amd_memory_pool_allocate)(self.kernarg_pool, len.max(64), 0, &mut p) },
            "hsa_amd_memory_pool_allocate(kernarg)",
        )?;
        // SAFETY: `p` is our allocation; one agent, no flags.
        let rc = unsafe { (self.api.hsa_amd_agents_allow_access)(1, &self.gpu, std::ptr::null(), p) };
        if rc != HSA_STATUS_SUCCESS {
            // SAFETY: allocated just above, never handed out.
            unsafe { (self.api.hsa_amd_memory_pool_free)(p) };
            return self
                .check(rc, "hsa_amd_agents_allow_access(kernarg)")
                .map(|_| unreachable!());
        }
        // SAFETY: fresh host-accessible system memory of at least `len` bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, len) };
        Ok(p as *mut u8)
    }

    /// Points the `gpuio_context` global of an executable loaded for this agent (by us or
    /// by the host program itself) at `context`, a GPU address. The executable must be
    /// frozen, and no kernel of it may be running.
    pub fn install_context(&self, executable: Handle, context: u64) -> Result<()> {
        let symbol = self.symbol(executable, "gpuio_context")?;
        let (kind, size, addr) = (
            self.symbol_info::<u32>(symbol, HSA_EXECUTABLE_SYMBOL_INFO_TYPE)?,
            self.symbol_info::<u32>(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE)?,
            self.symbol_info::<u64>(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS)?,
        );
        if kind != HSA_SYMBOL_KIND_VARIABLE || size != 8 {
            return Err(Error::Config(format!(
                "gpuio_context is not a pointer variable (symbol kind {kind}, {size} bytes)"
            )));
        }
        self.copy_to_device(addr, &context.to_ne_bytes())
    }

    fn symbol(&self, executable: Handle, name: &str) -> Result<Handle> {
        let cname = CString::new(name).map_err(|_| Error::Config(format!("bad symbol name {name:?}")))?;
        let mut symbol = Handle(0);
        // SAFETY: valid C string and out-pointer; our agent.
        self.check(
            unsafe { (self.api.hsa_executable_get_symbol_by_name)(executable, cname.as_ptr(), &self.gpu, &mut symbol) },
            &format!("hsa_executable_get_symbol_by_name({name})"),
        )?;
        Ok(symbol)
    }

    /// A symbol attribute of type `T` (as `hsa.h` documents for `attribute`).
    fn symbol_info<T: Default>(&self, symbol: Handle, attribute: u32) -> Result<T> {
        let mut v = T::default();
        // SAFETY: the callers pair each attribute with its documented type.
        self.check(
            unsafe { (self.api.hsa_executable_symbol_get_info)(symbol, attribute, &mut v as *mut T as *mut c_void) },
            "hsa_executable_symbol_get_info",
        )?;
        Ok(v)
    }
}

impl Drop for Hsa {
    fn drop(&mut self) {
        // SAFETY: created in `setup` (null / zero when setup failed before); no dispatch
        // is in flight once the runtime synchronized.
        unsafe {
            if !self.queue.is_null() {
                (self.api.hsa_queue_destroy)(self.queue);
            }
            if self.done != Handle(0) {
                (self.api.hsa_signal_destroy)(self.done);
            }
            (self.api.hsa_shut_down)();
        }
    }
}

/// One kernel launch, ready for the queue.
struct Dispatch {
    kernel_object: u64,
    kernarg: *mut u8,
    block: u16,
    grid_size: u32,
    private_segment_size: u32,
    group_segment_size: u32,
}

/// What a dispatch needs to know about a kernel, from its symbol and the metadata.
#[derive(Clone)]
struct KernelInfo {
    kernel_object: u64,
    kernarg_segment_size: u32,
    group_segment_size: u32,
    private_segment_size: u32,
    dynamic_stack: bool,
    meta: code_object::Kernel,
}

/// A code object loaded into an HSA executable for the runtime's agent.
pub struct Executable {
    hsa: Arc<Hsa>,
    handle: Handle,
    /// Zero for an executable the host program loaded (see [`Executable::attach`]).
    reader: Handle,
    /// Destroyed on drop (false: the host program owns it).
    owned: bool,
    /// Metadata of the code object (None for attached executables).
    info: Option<CodeObject>,
    kernels: Mutex<Vec<(String, KernelInfo)>>,
    /// The code object bytes, alive as long as the reader.
    _image: Vec<u8>,
}

// SAFETY: executable handles may be used from any thread.
unsafe impl Send for Executable {}
unsafe impl Sync for Executable {}

impl Executable {
    /// Loads an ELF code object for the agent: checks its processor against the agent's
    /// (a clear error instead of the loader's `HSA_STATUS_ERROR_INVALID_ISA`), then reader,
    /// executable, load, freeze.
    pub fn load(hsa: &Arc<Hsa>, image: &[u8]) -> Result<Executable> {
        let info = CodeObject::parse(image).map_err(|e| Error::Config(e.to_string()))?;
        let want = code_object::processor_of_isa(&hsa.name);
        match info.processor() {
            Some(p) if p == want => {}
            other => {
                return Err(Error::Config(format!(
                    "no code object for this GPU: it is {} ({}), the code object is for {}",
                    want,
                    hsa.isa,
                    other.map_or_else(|| format!("EF_AMDGPU_MACH {:#x}", info.flags & 0xff), String::from)
                )))
            }
        }
        let image = image.to_vec();
        let api = &hsa.api;
        let mut reader = Handle(0);
        // SAFETY: `image` lives as long as the reader (both in the Executable).
        hsa.check(
            unsafe {
                (api.hsa_code_object_reader_create_from_memory)(
                    image.as_ptr() as *const c_void,
                    image.len(),
                    &mut reader,
                )
            },
            "hsa_code_object_reader_create_from_memory",
        )?;
        let mut exe = Executable {
            hsa: hsa.clone(),
            handle: Handle(0),
            reader,
            owned: true,
            info: Some(info),
            kernels: Mutex::new(Vec::new()),
            _image: image,
        };
        let mut handle = Handle(0);
        // SAFETY: valid out-pointer; no options.
        hsa.check(
            unsafe {
                (api.hsa_executable_create_alt)(
                    hsa.profile,
                    HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                    std::ptr::null(),
                    &mut handle,
                )
            },
            "hsa_executable_create_alt",
        )?;
        exe.handle = handle;
        // SAFETY: handles created above; no options; the loaded code object handle is not
        // needed.
        hsa.check(
            unsafe {
                (api.hsa_executable_load_agent_code_object)(
                    handle,
                    hsa.gpu,
                    reader,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                )
            },
            "hsa_executable_load_agent_code_object",
        )?;
        // SAFETY: a loaded executable; no options.
        hsa.check(
            unsafe { (api.hsa_executable_freeze)(handle, std::ptr::null()) },
            "hsa_executable_freeze",
        )?;
        Ok(exe)
    }

    /// Wraps a frozen executable that the host program loaded itself for this agent (the
    /// C API's "attach"): it is not destroyed on drop. Its kernels' explicit arguments are
    /// not known (no metadata), so `launch` lays them out in order at natural alignment.
    ///
    /// # Safety
    /// `handle` is a frozen executable of this HSA runtime, loaded for [`Hsa::agent`], that
    /// outlives the returned value.
    pub unsafe fn attach(hsa: &Arc<Hsa>, handle: Handle) -> Executable {
        Executable {
            hsa: hsa.clone(),
            handle,
            reader: Handle(0),
            owned: false,
            info: None,
            kernels: Mutex::new(Vec::new()),
            _image: Vec::new(),
        }
    }

    /// The executable's handle.
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// The address and size of a global variable.
    pub fn global(&self, name: &str) -> Result<(u64, usize)> {
        let s = self.hsa.symbol(self.handle, name)?;
        let size = self
            .hsa
            .symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE)?;
        let addr = self
            .hsa
            .symbol_info::<u64>(s, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS)?;
        Ok((addr, size as usize))
    }

    /// Points this executable's `gpuio_context` at `context`.
    pub fn install_context(&self, context: u64) -> Result<()> {
        self.hsa.install_context(self.handle, context)
    }

    /// Checks that the executable has a kernel `name` (its descriptor symbol `name.kd`).
    pub fn check_kernel(&self, name: &str) -> Result<()> {
        self.kernel(name).map(|_| ())
    }

    /// The kernel `name`: its descriptor symbol `name.kd` and its metadata.
    fn kernel(&self, name: &str) -> Result<KernelInfo> {
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = kernels.iter().find(|(n, _)| n == name) {
            return Ok(k.clone());
        }
        let meta = match &self.info {
            Some(info) => info
                .kernel(name)
                .cloned()
                .ok_or_else(|| Error::Config(format!("the code object has no kernel {name:?}")))?,
            None => code_object::Kernel::default(),
        };
        let hsa = &self.hsa;
        let s = hsa.symbol(self.handle, &format!("{name}.kd"))?;
        let kind = hsa.symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_TYPE)?;
        if kind != HSA_SYMBOL_KIND_KERNEL {
            return Err(Error::Config(format!("{name}.kd is not a kernel (symbol kind {kind})")));
        }
        let k = KernelInfo {
            kernel_object: hsa.symbol_info::<u64>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT)?,
            kernarg_segment_size: hsa.symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE)?,
            group_segment_size: hsa.symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE)?,
            private_segment_size: hsa.symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE)?,
            dynamic_stack: hsa.symbol_info::<bool>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK)?,
            meta,
        };
        kernels.push((name.to_string(), k.clone()));
        Ok(k)
    }

    /// Launches `name` on `grid` work-groups of `block` work-items with `args`
    /// (asynchronous; [`Hsa::synchronize`] waits).
    ///
    /// Explicit arguments are checked against the kernel's metadata (count and sizes) and
    /// placed at its offsets; hidden arguments get the launch's values (block counts,
    /// group sizes, grid dimensions) or zero.
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        let k = self.kernel(name)?;
        let block16 = u16::try_from(block)
            .ok()
            .filter(|&b| b > 0 && b <= 1024)
            .ok_or_else(|| Error::Config(format!("{block} work-items per work-group: expected 1..=1024")))?;
        let grid_size = grid
            .checked_mul(block)
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::Config(format!("{grid} x {block} work-items do not fit a u32 grid")))?;
        let kernarg = kernarg_bytes(&k, name, grid, block16, args)?;
        let block_mem = self.hsa.alloc_kernarg(kernarg.len())?;
        // SAFETY: `block_mem` holds at least `kernarg.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(kernarg.as_ptr(), block_mem, kernarg.len()) };
        self.hsa
            .kernargs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(block_mem as usize);
        let stack = self.hsa.stack_bytes.load(Ordering::Relaxed).min(u32::MAX as usize) as u32;
        let private_segment_size = if k.dynamic_stack {
            k.private_segment_size.max(stack)
        } else {
            k.private_segment_size
        };
        // SAFETY: a kernel object of this executable, its arguments laid out as its
        // metadata says, in kernarg memory freed only by `synchronize`.
        unsafe {
            self.hsa.dispatch(&Dispatch {
                kernel_object: k.kernel_object,
                kernarg: block_mem,
                block: block16,
                grid_size,
                private_segment_size,
                group_segment_size: k.group_segment_size,
            })
        }
    }
}

/// Lays out a kernel's argument block.
fn kernarg_bytes(k: &KernelInfo, name: &str, grid: u32, block: u16, args: &[Arg]) -> Result<Vec<u8>> {
    let value = |a: &Arg| a.bytes()[..a.size()].to_vec();
    let mut bytes = vec![0u8; k.kernarg_segment_size as usize];
    let mut put = |offset: u64, v: &[u8]| {
        let at = offset as usize;
        let end = at + v.len();
        if end > bytes.len() {
            bytes.resize(end, 0);
        }
        bytes[at..end].copy_from_slice(v);
    };
    if k.meta.args.is_empty() && k.meta.name.is_empty() {
        // No metadata (an attached executable): explicit arguments in order, naturally
        // aligned; hidden arguments stay zero.
        let mut at = 0u64;
        for a in args {
            let v = value(a);
            at = at.next_multiple_of(v.len() as u64);
            put(at, &v);
            at += v.len() as u64;
        }
        return Ok(bytes);
    }
    let explicit: Vec<&code_object::KernelArg> = k.meta.explicit_args().collect();
    if explicit.len() != args.len() {
        return Err(Error::Config(format!(
            "kernel {name} takes {} argument(s), {} given",
            explicit.len(),
            args.len()
        )));
    }
    for (i, (m, a)) in explicit.iter().zip(args).enumerate() {
        let v = value(a);
        if m.size != v.len() as u64 {
            return Err(Error::Config(format!(
                "kernel {name}: argument {i} is {} bytes, {a:?} is {}",
                m.size,
                v.len()
            )));
        }
        put(m.offset, &v);
    }
    for h in k.meta.args.iter().filter(|a| a.is_hidden()) {
        let v: Option<Vec<u8>> = match (h.value_kind.as_str(), h.size) {
            ("hidden_block_count_x", 4) => Some(grid.to_ne_bytes().to_vec()),
            ("hidden_block_count_y" | "hidden_block_count_z", 4) => Some(1u32.to_ne_bytes().to_vec()),
            ("hidden_group_size_x", 2) => Some(block.to_ne_bytes().to_vec()),
            ("hidden_group_size_y" | "hidden_group_size_z", 2) => Some(1u16.to_ne_bytes().to_vec()),
            ("hidden_grid_dims", 2) => Some(1u16.to_ne_bytes().to_vec()),
            // Remainders (the grid is whole work-groups), global offsets, and the
            // buffers we do not provide (hostcall, heap, queues): zero.
            _ => None,
        };
        if let Some(v) = v {
            put(h.offset, &v);
        }
    }
    Ok(bytes)
}

impl Drop for Executable {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: created in `load`; no kernel of it runs once the runtime synchronized.
        unsafe {
            if self.handle != Handle(0) {
                (self.hsa.api.hsa_executable_destroy)(self.handle);
            }
            if self.reader != Handle(0) {
                (self.hsa.api.hsa_code_object_reader_destroy)(self.reader);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(args: &[(&str, u64, u64)], size: u32) -> KernelInfo {
        KernelInfo {
            kernel_object: 0,
            kernarg_segment_size: size,
            group_segment_size: 0,
            private_segment_size: 0,
            dynamic_stack: false,
            meta: code_object::Kernel {
                name: "k".into(),
                args: args
                    .iter()
                    .map(|&(kind, offset, size)| code_object::KernelArg {
                        offset,
                        size,
                        value_kind: kind.into(),
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn kernargs_follow_the_metadata() {
        let k = kernel(
            &[
                ("by_value", 0, 4),
                ("by_value", 8, 8),
                ("hidden_block_count_x", 16, 4),
                ("hidden_block_count_y", 20, 4),
                ("hidden_group_size_x", 28, 2),
                ("hidden_grid_dims", 40, 2),
                ("hidden_queue_ptr", 48, 8),
            ],
            64,
        );
        let b = kernarg_bytes(&k, "k", 7, 256, &[Arg::U32(5), Arg::U64(9)]).unwrap();
        assert_eq!(b.len(), 64);
        assert_eq!(b[0..4], 5u32.to_ne_bytes());
        assert_eq!(b[8..16], 9u64.to_ne_bytes());
        assert_eq!(b[16..20], 7u32.to_ne_bytes());
        assert_eq!(b[20..24], 1u32.to_ne_bytes());
        assert_eq!(b[28..30], 256u16.to_ne_bytes());
        assert_eq!(b[40..42], 1u16.to_ne_bytes());
        assert!(b[48..56].iter().all(|&x| x == 0));
        assert!(kernarg_bytes(&k, "k", 1, 1, &[Arg::U32(5)]).is_err(), "too few");
        assert!(
            kernarg_bytes(&k, "k", 1, 1, &[Arg::U64(5), Arg::U64(9)]).is_err(),
            "wrong size"
        );
    }

    #[test]
    fn packet_layout() {
        assert_eq!(std::mem::offset_of!(Queue, doorbell_signal), 16);
        assert_eq!(std::mem::offset_of!(Queue, size), 24);
        assert_eq!(std::mem::offset_of!(DispatchPacket, private_segment_size), 24);
        assert_eq!(std::mem::offset_of!(DispatchPacket, kernarg_address), 40);
    }

    #[test]
    fn open_says_why_not() {
        // On machines without an AMD GPU: a reason naming the cause; with one: a GPU.
        match Hsa::open() {
            Ok(h) => assert!(h.agent_name().starts_with("gfx")),
            Err(why) => assert!(
                why.contains("libhsa-runtime64.so.1 not found")
                    || why.contains("/dev/kfd")
                    || why.contains("no AMD GPU agent")
                    || why.contains("hsa_init failed"),
                "{why}"
            ),
        }
    }
}
