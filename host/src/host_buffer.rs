//! Host buffers: host memory that device code reads and writes files with, without a copy.
//!
//! A device `pread`/`pwrite` on a buffer in device memory goes through the arena (a copy
//! on the GPU per piece). A [`HostBuffer`] is host memory made GPU-visible and registered
//! in the context's region table: device transfers inside it go straight from the file to
//! it (the kernel's io_uring reads or writes it), and the host reads the result without a
//! device-to-host copy.
//!
//! ```
//! use gpuio_host::{Backend, Runtime, Sandbox};
//! let rt = Runtime::builder().backend(Backend::Cpu).sandbox(Sandbox::FileIo).build()?;
//! let mut buf = rt.host_buffer(4096)?;
//! buf.as_mut_slice()[..5].copy_from_slice(b"hello");
//! let (at, len) = (buf.device_ptr(), buf.len());
//! rt.launch(1, 1, move || {
//!     // SAFETY: the buffer outlives the kernel (the host synchronizes before dropping it).
//!     let bytes = unsafe { core::slice::from_raw_parts(at as *const u8, len) };
//!     gpuio_device::io::pwrite(1, &bytes[..5], 0).ok(); // straight from the buffer
//! })?;
//! rt.synchronize()?;
//! # Ok::<(), gpuio_host::Error>(())
//! ```

use std::sync::Arc;

use gpuio_device::protocol::arena::{buffer, MAX_REGIONS};

use crate::error::{Error, Result};
use crate::memory::Mapping;
use crate::runtime::Runtime;
use crate::shared::Shared;

/// Host memory registered for direct device file I/O (see the module docs). Dropping it
/// unregisters it; if kernels launched since the last synchronize might still use it, its
/// memory stays allocated until the runtime goes (and, where transfers are `*_FIXED`
/// under `Sandbox::FileIo`, a transfer into it submitted after the drop fails with
/// `EFAULT`).
pub struct HostBuffer<'rt> {
    rt: &'rt Runtime,
    shared: Arc<Shared>,
    map: Option<Mapping>,
    len: usize,
    device_ptr: u64,
    entry: usize,
}

impl Runtime {
    /// Allocates `len` bytes (zeroed) of host memory that device code can address, and
    /// registers it for direct file I/O. At most 8 exist at once per runtime. Under
    /// [`crate::Sandbox::FileIo`] with [`crate::Stats::fixed_transfers`] it also becomes
    /// every ring's registered buffer, which counts against the locked-memory limit and
    /// may be at most 1 GiB (an error otherwise).
    pub fn host_buffer(&self, len: usize) -> Result<HostBuffer<'_>> {
        if len == 0 {
            return Err(Error::Config("a host buffer needs at least one byte".into()));
        }
        let shared = self.shared().clone();
        let mut used = shared.regions.lock().unwrap_or_else(|e| e.into_inner());
        let entry = used.iter().position(|u| !u).ok_or_else(|| {
            Error::Config(format!(
                "at most {MAX_REGIONS} host buffers can be registered at once; drop one first"
            ))
        })?;
        let map = Mapping::new(len).map_err(|e| Error::Os {
            what: "mmap of a host buffer",
            source: e,
        })?;
        let device_ptr = match self.device() {
            None => map.as_ptr(),
            // SAFETY: the mapping lives in the HostBuffer (or the retired list) until it is
            // unmapped for the GPU.
            Some(d) => unsafe { d.map_host(map.as_ptr(), len)? },
        } as u64;
        let io_base = map.as_ptr() as u64;
        let slot = buffer::REGION as u32 + entry as u32;
        if self.fixed_transfers {
            // Every ring's buffer slot for the region first: under `FileIo` transfers are
            // `*_FIXED`, and the kernel refuses one outside the rings' buffers.
            if let Err(e) = shared.update_buffers(slot, (io_base, len as u64)) {
                let _ = shared.update_buffers(slot, (0, 0));
                if let Some(d) = self.device() {
                    // SAFETY: mapped just above; never registered.
                    unsafe { d.unmap_host(map.as_ptr()) };
                }
                return Err(Error::Config(format!(
                    "registering a host buffer of {len} bytes as an io_uring buffer failed ({e}); \
                     under Sandbox::FileIo every transfer must use registered memory. Raise the \
                     locked-memory limit (ulimit -l) or give the process CAP_IPC_LOCK, keep host \
                     buffers at or under 1 GiB, or use device memory (staged through the arena)"
                )));
            }
        }
        let stored = shared
            .store(move |c| &c.arena.regions[entry].start, device_ptr)
            .and_then(|_| shared.store(move |c| &c.arena.regions[entry].io_base, io_base))
            .and_then(|_| shared.store(move |c| &c.arena.regions[entry].len, len as u64));
        if let Err(e) = stored {
            let _ = shared.store(move |c| &c.arena.regions[entry].len, 0);
            if self.fixed_transfers {
                // Nobody's buffer again, before its memory goes (the kernel holds no request
                // on it: no kernel could name the region yet).
                let _ = shared.update_buffers(slot, (0, 0));
            }
            if let Some(d) = self.device() {
                // SAFETY: mapped just above; never registered.
                unsafe { d.unmap_host(map.as_ptr()) };
            }
            return Err(e);
        }
        used[entry] = true;
        drop(used);
        Ok(HostBuffer {
            rt: self,
            shared,
            map: Some(map),
            len,
            device_ptr,
            entry,
        })
    }
}

impl HostBuffer<'_> {
    /// The buffer's address in device code (pass it to kernels).
    pub fn device_ptr(&self) -> u64 {
        self.device_ptr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: host buffers have at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bytes, from the host. Read them after `synchronize`: while a kernel runs, device
    /// transfers may be writing them.
    pub fn as_slice(&self) -> &[u8] {
        let m = self.map.as_ref().expect("present until drop");
        // SAFETY: `len` bytes of our mapping.
        unsafe { std::slice::from_raw_parts(m.as_ptr(), self.len) }
    }

    /// The bytes, writable from the host (between kernels).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let m = self.map.as_ref().expect("present until drop");
        // SAFETY: `len` bytes of our mapping; `&mut self` excludes other host references.
        unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), self.len) }
    }
}

impl Drop for HostBuffer<'_> {
    fn drop(&mut self) {
        let entry = self.entry;
        // Unregistered first: later device transfers stage instead.
        let _ = self.shared.store(move |c| &c.arena.regions[entry].len, 0);
        if self.rt.fixed_transfers {
            // Then the rings' slot. The kernel keeps the pages pinned until requests that
            // use them complete, and the mapping lives on below if a kernel may still run.
            let _ = self.shared.update_buffers(buffer::REGION as u32 + entry as u32, (0, 0));
        }
        self.shared.regions.lock().unwrap_or_else(|e| e.into_inner())[entry] = false;
        let map = self.map.take().expect("present until drop");
        let gpu = self.rt.device();
        if self.rt.kernels_pending() {
            // A kernel launched since the last synchronize may still transfer into it.
            self.shared
                .retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((map, gpu.is_some()));
            return;
        }
        if let Some(d) = gpu {
            // SAFETY: mapped in `host_buffer`; no kernel runs (checked above).
            unsafe { d.unmap_host(map.as_ptr()) };
        }
    }
}
