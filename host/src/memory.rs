//! Host memory shared with the kernel and the GPU: anonymous, page-aligned mappings.
//!
//! Anonymous private pages are what io_uring's `NO_MMAP` mode can pin and what
//! `cuMemHostRegister` / `hsa_amd_memory_lock` can make GPU-visible. (`cudaHostAlloc`
//! memory is device-file backed, and io_uring cannot pin it.)

use std::io;
use std::ptr::NonNull;

/// An anonymous read-write mapping, zero-filled, unmapped on drop.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is plain memory; who may touch which bytes is decided by the protocols
// that use it.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`: a Mapping is plain memory; who may touch which bytes is decided by the protocols that use it.
unsafe impl Sync for Mapping {}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Rounds `n` up to a multiple of `align` (a power of two).
pub fn round_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

impl Mapping {
    /// Maps `len` bytes (rounded up to pages), zeroed and populated.
    pub fn new(len: usize) -> io::Result<Mapping> {
        Self::map(len, libc::MAP_POPULATE)
    }

    /// Maps `len` bytes (rounded up to pages), zeroed and populated, in transparent huge
    /// pages where the kernel gives them: for memory that is then registered with a GPU
    /// driver (the print logs and the arena on GPU backends).
    ///
    /// Those are tens of MiB that are populated (the kernel zeroes every page) and then
    /// registered page by page: huge pages halve a GPU runtime's build. Not for the CPU
    /// backend: there asking for them can make the first runtime build of a process several
    /// times as long (the kernel compacts memory to find them), for little gain on its
    /// smaller logs. Where THP is off or absent the advice fails and base pages serve.
    pub fn huge(len: usize) -> io::Result<Mapping> {
        let m = Self::map(len, 0)?;
        let (p, n) = (m.ptr.as_ptr() as *mut libc::c_void, m.len);
        // SAFETY: advice on our own fresh mapping, `p .. p + n` exactly; neither call changes
        // its contents (zero) or its validity. A failure leaves base pages, or pages not yet
        // populated (see below).
        let populated = unsafe {
            libc::madvise(p, n, libc::MADV_HUGEPAGE);
            libc::madvise(p, n, libc::MADV_POPULATE_WRITE) == 0
        };
        // Before Linux 5.14 (EINVAL: no MADV_POPULATE_WRITE): touch every page. Any other
        // failure (out of memory, say) leaves the pages to fault in when used, as a failed
        // MAP_POPULATE would, and the error surfaces where they are registered or used.
        if !populated && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            for off in (0..n).step_by(page_size()) {
                // SAFETY: inside our own writable mapping; writing the zero it holds.
                unsafe { m.ptr.as_ptr().add(off).write_volatile(0) };
            }
        }
        Ok(m)
    }

    /// Maps `len` bytes (rounded up to pages), zeroed; a page takes memory only once it is
    /// touched.
    pub fn lazy(len: usize) -> io::Result<Mapping> {
        Self::map(len, 0)
    }

    fn map(len: usize, populate: libc::c_int) -> io::Result<Mapping> {
        let len = round_up(len.max(1), page_size());
        // SAFETY: an anonymous private mapping at an address of the kernel's choice
        // aliases nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | populate,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p as *mut u8).expect("mmap returned null"),
            len,
        })
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; every user of it is gone (the runtime drops its
        // mappings only after the ring is closed and no kernel runs).
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut _, self.len) };
    }
}
