//! Dispatching kernels on the agent's AQL queue, and waiting for them.

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU32, Ordering};

use super::agent::Hsa;
use super::ffi::*;
use crate::backend::gpu::{GpuBackend, Wait};
use crate::error::{Error, Result};

/// One kernel launch, ready for the queue.
pub(super) struct Dispatch {
    pub(super) kernel_object: u64,
    pub(super) kernarg: *mut u8,
    /// Work-items per work-group, in x, y and z.
    pub(super) block: [u16; 3],
    /// Work-items in the grid, in x, y and z (whole work-groups).
    pub(super) grid_size: [u32; 3],
    /// The dimensions the launch uses: 1, 2 or 3 (the packet's setup word,
    /// `HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS`, bits 0-1).
    pub(super) dims: u16,
    pub(super) private_segment_size: u32,
    pub(super) group_segment_size: u32,
}

impl Hsa {
    /// Sets the per-thread private segment given to kernels with a dynamic stack.
    pub fn set_stack_size(&self, bytes: usize) {
        self.stack_bytes.store(bytes, Ordering::Relaxed);
    }

    pub(super) fn queue_failed(&self) -> Option<Error> {
        match self.queue_error.load(Ordering::Acquire) {
            0 => None,
            rc => Some(Error::Kernel(format!("the HSA queue failed: {}", self.status_name(rc)))),
        }
    }

    /// Whether every dispatch has completed (errors surface as `Err`). Never blocks: the
    /// runtime's synchronize polls it under its hang watchdog.
    fn idle(&self) -> Result<bool> {
        if let Some(e) = self.queue_failed() {
            return Err(e);
        }
        // SAFETY: a signal we created; loading its value has no other effect. Acquire:
        // once it reads 0, the completed kernels' writes are visible.
        let v = unsafe { (self.api.hsa_signal_load_scacquire)(self.done) };
        Ok(v == 0)
    }

    /// Runs `wait` (until every dispatch has completed), then frees the kernel arguments
    /// of those enqueued before the call (a launch racing with it keeps its block for the
    /// next one). If `wait` fails (a failed queue, or a watchdog that gave up), the
    /// kernel arguments are kept: their dispatches may still run.
    fn synchronize_until(&self, wait: impl FnOnce() -> Result<()>) -> Result<()> {
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

    /// Enqueues one kernel dispatch packet, of the work-groups and work-items `d` says.
    ///
    /// # Safety
    /// `kernel_object` is a loaded kernel's descriptor and `kernarg` its arguments, laid
    /// out as the kernel expects, in kernarg memory that lives until `synchronize`.
    pub(super) unsafe fn dispatch(&self, d: &Dispatch) -> Result<()> {
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
            std::ptr::addr_of_mut!((*p).workgroup_size_x).write(d.block[0]);
            std::ptr::addr_of_mut!((*p).workgroup_size_y).write(d.block[1]);
            std::ptr::addr_of_mut!((*p).workgroup_size_z).write(d.block[2]);
            std::ptr::addr_of_mut!((*p).reserved0).write(0);
            std::ptr::addr_of_mut!((*p).grid_size_x).write(d.grid_size[0]);
            std::ptr::addr_of_mut!((*p).grid_size_y).write(d.grid_size[1]);
            std::ptr::addr_of_mut!((*p).grid_size_z).write(d.grid_size[2]);
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
            let word = header as u32 | (d.dims as u32) << 16;
            (*(p as *const AtomicU32)).store(word, Ordering::Release);
            (self.api.hsa_signal_store_screlease)((*q).doorbell_signal, index as i64);
        }
        Ok(())
    }

    /// Allocates `len` bytes of kernel argument memory the GPU can read.
    pub(super) fn alloc_kernarg(&self, len: usize) -> Result<*mut u8> {
        let mut p = std::ptr::null_mut();
        self.check(
            // SAFETY: valid out-pointer; flags 0.
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

    pub(super) fn symbol(&self, executable: Handle, name: &str) -> Result<Handle> {
        let cname = CString::new(name).map_err(|_| Error::Config(format!("bad symbol name {name:?}")))?;
        let mut symbol = Handle(0);
        self.check(
            // SAFETY: valid C string and out-pointer; our agent.
            unsafe { (self.api.hsa_executable_get_symbol_by_name)(executable, cname.as_ptr(), &self.gpu, &mut symbol) },
            &format!("hsa_executable_get_symbol_by_name({name})"),
        )?;
        Ok(symbol)
    }

    /// A symbol attribute of type `T` (as `hsa.h` documents for `attribute`).
    pub(super) fn symbol_info<T: Default>(&self, symbol: Handle, attribute: u32) -> Result<T> {
        let mut v = T::default();
        self.check(
            // SAFETY: the callers pair each attribute with its documented type.
            unsafe { (self.api.hsa_executable_symbol_get_info)(symbol, attribute, &mut v as *mut T as *mut c_void) },
            "hsa_executable_symbol_get_info",
        )?;
        Ok(v)
    }
}

impl GpuBackend for Hsa {
    fn name(&self) -> &str {
        self.device_name()
    }

    unsafe fn map_host(&self, ptr: *mut u8, len: usize) -> Result<*mut u8> {
        // SAFETY: the caller keeps the range mapped until `unmap_host` (the trait's
        // contract, `lock`'s).
        unsafe { self.lock(ptr, len) }
    }

    unsafe fn unmap_host(&self, ptr: *mut u8) {
        // SAFETY: locked by `map_host`, and no kernel that may touch it runs (the trait's
        // contract, `unlock`'s).
        unsafe { self.unlock(ptr) }
    }

    fn alloc_zeroed(&self, len: usize) -> Result<u64> {
        Hsa::alloc_zeroed(self, len)
    }

    fn free(&self, d: u64) {
        Hsa::free(self, d)
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        Hsa::copy_to_device(self, dst, src)
    }

    fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        Hsa::copy_from_device(self, dst, src)
    }

    fn set_stack_size(&self, bytes: usize) -> Result<()> {
        Hsa::set_stack_size(self, bytes);
        Ok(())
    }

    fn synchronize_with(&self, wait: Wait<'_>, _only: Option<&[usize]>) -> Result<()> {
        self.synchronize_until(|| wait(&mut || self.idle()))
    }
}
