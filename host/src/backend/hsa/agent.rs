//! The HSA runtime opened for one GPU agent: its names, memory pools, queue and
//! completion signal; host memory made GPU-visible, device memory and copies.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::ffi::*;
use crate::backend::dl::Library;
use crate::error::{DriverError, Error, Result};

/// The HSA runtime, initialised, with one GPU agent, its memory pools, an AQL queue and a
/// completion signal.
pub struct Hsa {
    pub(super) api: Api,
    pub(super) gpu: Handle,
    /// The agent's name: the processor, e.g. `gfx90a`.
    pub(super) name: String,
    /// The agent's ISA name, e.g. `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`.
    pub(super) isa: String,
    /// The marketing name, e.g. `AMD Instinct MI210`.
    pub(super) product: String,
    pub(super) profile: u32,
    /// GPU-local, coarse-grained: the protocol state.
    pub(super) device_pool: Handle,
    /// System memory for kernel arguments.
    pub(super) kernarg_pool: Handle,
    /// System memory, fine-grained: host memory is locked to it (see `lock`).
    pub(super) fine_pool: Handle,
    pub(super) queue: *mut HsaQueue,
    /// Counts dispatches in flight: +1 per dispatch, -1 by the packet processor.
    pub(super) done: Handle,
    /// The first error the queue reported (0: none); boxed: the callback keeps its address.
    pub(super) queue_error: Box<AtomicU32>,
    /// Kernel argument blocks of dispatches in flight, freed by `synchronize`.
    pub(super) kernargs: Mutex<Vec<usize>>,
    /// Per-thread private segment for kernels with a dynamic stack.
    pub(super) stack_bytes: AtomicUsize,
    _lib: Library,
}

// SAFETY: HSA handles and the queue may be used from any thread: the runtime is thread-safe,
// and packet slots are claimed with the queue's atomic write index.
unsafe impl Send for Hsa {}
// SAFETY: as for `Send`: HSA handles and the queue may be used from any thread: the runtime is thread-safe, and packet slots are claimed with the queue's atomic write index.
unsafe impl Sync for Hsa {}

/// Collects handles from an HSA iteration callback.
unsafe extern "C" fn collect(h: Handle, data: *mut c_void) -> Status {
    // SAFETY: `data` is the `Vec<Handle>` the caller passed, alive for the iteration.
    unsafe { (*(data as *mut Vec<Handle>)).push(h) };
    HSA_STATUS_SUCCESS
}

/// Records the first error of the queue (a fault in a kernel, say).
unsafe extern "C" fn on_queue_error(status: Status, _queue: *mut HsaQueue, data: *mut c_void) {
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
        Hsa::open_gpu(0)
    }

    /// Loads the runtime, initialises it, and takes GPU agent `index` (0: the first GPU in
    /// the order HSA lists its agents).
    pub fn open_gpu(index: u32) -> std::result::Result<Arc<Hsa>, String> {
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
        hsa.setup(index)?;
        Ok(Arc::new(hsa))
    }

    /// Sets this up on GPU agent `index`: the agents, the GPU's description, the memory
    /// pools, the queue.
    pub(super) fn setup(&mut self, index: u32) -> std::result::Result<(), String> {
        let (gpu, cpu) = self.find_agents(index)?;
        self.describe(gpu);
        self.choose_pools(gpu, cpu)?;
        self.create_queue(gpu)
    }

    /// GPU agent `index` and the CPU agent (whose pools hold system memory).
    fn find_agents(&self, index: u32) -> std::result::Result<(Handle, Handle), String> {
        let mut agents: Vec<Handle> = Vec::new();
        self.check_str(
            // SAFETY: `collect` matches the callback type; `agents` outlives the call.
            unsafe { (self.api.hsa_iterate_agents)(collect, &mut agents as *mut _ as *mut c_void) },
            "hsa_iterate_agents",
        )?;
        let kind = |a: Handle| {
            let mut t = u32::MAX;
            // SAFETY: HSA_AGENT_INFO_DEVICE is a 4-byte hsa_device_type_t.
            unsafe { (self.api.hsa_agent_get_info)(a, HSA_AGENT_INFO_DEVICE, &mut t as *mut u32 as *mut c_void) };
            t
        };
        let gpus: Vec<Handle> = agents
            .iter()
            .copied()
            .filter(|&a| kind(a) == HSA_DEVICE_TYPE_GPU)
            .collect();
        let cpu = agents.iter().copied().find(|&a| kind(a) == HSA_DEVICE_TYPE_CPU);
        if gpus.is_empty() {
            return Err(format!(
                "no AMD GPU agent (HSA lists {} agent(s), none a GPU)",
                agents.len()
            ));
        }
        let Some(&gpu) = gpus.get(index as usize) else {
            return Err(format!(
                "AMD GPU {index} does not exist: HSA lists {} GPU agent(s), numbered from 0",
                gpus.len()
            ));
        };
        let cpu = cpu.ok_or("HSA lists no CPU agent (no system memory pools)")?;
        Ok((gpu, cpu))
    }

    /// Takes `gpu` as this agent, with its name, product, profile and ISA.
    fn describe(&mut self, gpu: Handle) {
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
    }

    /// `agent`'s memory pools: `(pool, segment, global flags, runtime allocation allowed)`.
    fn memory_pools(&self, agent: Handle) -> std::result::Result<Vec<(Handle, u32, u32, bool)>, String> {
        let mut pools: Vec<Handle> = Vec::new();
        self.check_str(
            // SAFETY: as for the agents.
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
    }

    /// The pools the runtime allocates from: device memory on the GPU, kernel arguments and
    /// fine-grained (GPU-visible) system memory on the CPU agent.
    fn choose_pools(&mut self, gpu: Handle, cpu: Handle) -> std::result::Result<(), String> {
        let global = |pools: &[(Handle, u32, u32, bool)], want: u32, avoid: u32| {
            pools
                .iter()
                .find(|&&(_, seg, flags, alloc)| {
                    seg == HSA_AMD_SEGMENT_GLOBAL && alloc && flags & want == want && flags & avoid == 0
                })
                .map(|p| p.0)
        };
        let gpu_pools = self.memory_pools(gpu)?;
        let cpu_pools = self.memory_pools(cpu)?;
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
        Ok(())
    }

    /// The dispatch queue (1024 packets, within the agent's limits) and the completion
    /// signal the launches use.
    fn create_queue(&mut self, gpu: Handle) -> std::result::Result<(), String> {
        let (mut min, mut max) = (0u32, 0u32);
        // SAFETY: both are 4-byte values.
        unsafe {
            (self.api.hsa_agent_get_info)(gpu, HSA_AGENT_INFO_QUEUE_MIN_SIZE, &mut min as *mut u32 as *mut c_void);
            (self.api.hsa_agent_get_info)(gpu, HSA_AGENT_INFO_QUEUE_MAX_SIZE, &mut max as *mut u32 as *mut c_void);
        }
        let size = 1024u32.clamp(min.max(1), max.max(1));
        let mut queue = std::ptr::null_mut();
        self.check_str(
            // SAFETY: the callback's data is the boxed error slot, which outlives the queue
            // (Drop destroys the queue first). u32::MAX: no private/group segment hints.
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
        self.check_str(
            // SAFETY: valid out-pointer; no consumer list.
            unsafe { (self.api.hsa_signal_create)(0, 0, std::ptr::null(), &mut done) },
            "hsa_signal_create",
        )?;
        self.done = done;
        Ok(())
    }

    /// A `char[64]` agent attribute.
    pub(super) fn agent_string(&self, agent: Handle, attribute: u32) -> String {
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
    pub(super) fn isa_name(&self, agent: Handle) -> Option<String> {
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

    pub(super) fn status_name(&self, rc: Status) -> String {
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

    pub(super) fn check_str(&self, rc: Status, what: &str) -> std::result::Result<(), DriverError> {
        if rc == HSA_STATUS_SUCCESS {
            return Ok(());
        }
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: hsa_status_string writes a pointer to a static string.
        let ok = unsafe { (self.api.hsa_status_string)(rc, &mut p) } == HSA_STATUS_SUCCESS;
        let name = if ok && !p.is_null() {
            // SAFETY: a NUL-terminated static string from the runtime.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        } else {
            String::new()
        };
        Err(DriverError::call(what, rc as i64, &name, &format!("{rc:#x}")))
    }

    pub(super) fn check(&self, rc: Status, what: &str) -> Result<()> {
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
    /// (the host's shared memory is such anonymous mappings).
    ///
    /// # Safety
    /// The range is mapped memory that stays mapped until [`Hsa::unlock`].
    pub unsafe fn lock(&self, ptr: *mut u8, len: usize) -> Result<*mut u8> {
        let mut agent = self.gpu;
        let mut agent_ptr = std::ptr::null_mut();
        self.check(
            // SAFETY: the caller keeps the range mapped; one agent; flags must be 0.
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
        self.check(
            // SAFETY: valid out-pointer; flags 0.
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
