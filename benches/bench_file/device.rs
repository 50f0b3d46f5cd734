//! Where the kernels run and the memory they address: CUDA on a GPU, host threads and host
//! vectors on the CPU backend, behind the same calls.
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use gpuio::cuda::Cuda;
use gpuio::{Arg, GpuModule, Kernel, Runtime};
use gpuio_test_kernels as k;

/// Where kernels run, and the memory they address.
pub(crate) struct Gpu<'rt> {
    /// The loaded kernels; `None` on the CPU backend.
    pub(crate) module: Option<GpuModule<'rt>>,
    /// The module's CUDA context, for device memory and pinning; `None` on the CPU backend.
    pub(crate) cuda: Option<Arc<Cuda>>,
}

/// A buffer in "device memory": CUDA memory, or a host vector on the CPU backend.
pub(crate) enum DevBuf {
    Host(Vec<u8>),
    Cuda(Arc<Cuda>, u64),
}

impl DevBuf {
    pub(crate) fn new(g: &Gpu, len: usize) -> DevBuf {
        match &g.cuda {
            None => DevBuf::Host(vec![0u8; len]),
            Some(c) => DevBuf::Cuda(c.clone(), c.alloc_zeroed(len).expect("cuMemAlloc")),
        }
    }
    pub(crate) fn addr(&mut self) -> u64 {
        match self {
            DevBuf::Host(v) => v.as_mut_ptr() as u64,
            DevBuf::Cuda(_, d) => *d,
        }
    }
    pub(crate) fn upload(&mut self, at: usize, src: &[u8]) {
        match self {
            DevBuf::Host(v) => v[at..at + src.len()].copy_from_slice(src),
            DevBuf::Cuda(c, d) => c.copy_to_device(*d + at as u64, src).expect("cuMemcpyHtoD"),
        }
    }
    pub(crate) fn download(&self, at: usize, dst: &mut [u8]) {
        match self {
            DevBuf::Host(v) => dst.copy_from_slice(&v[at..at + dst.len()]),
            DevBuf::Cuda(c, d) => c.copy_from_device(dst, *d + at as u64).expect("cuMemcpyDtoH"),
        }
    }
}

/// A [`DevBuf`] that host-pipeline threads share, each copying in and out of its own ranges.
pub(crate) struct DevRanges<'a> {
    /// The buffer's address (device, or host on the CPU backend).
    addr: u64,
    /// Its length, for the host vector's bounds (CUDA checks its own).
    len: usize,
    cuda: Option<&'a Cuda>,
    _buf: PhantomData<&'a mut DevBuf>,
}

impl DevRanges<'_> {
    /// Copies `src` to `at`.
    ///
    /// # Safety
    /// No other thread reads or writes `at .. at + src.len()` meanwhile.
    pub(crate) unsafe fn upload(&self, at: usize, src: &[u8]) {
        match self.cuda {
            Some(c) => c.copy_to_device(self.addr + at as u64, src).expect("cuMemcpyHtoD"),
            None => {
                assert!(at + src.len() <= self.len, "upload out of bounds");
                // SAFETY: in bounds (asserted) of the vector we borrow mutably, so nothing
                // else holds a reference into it; the caller keeps the range to this thread.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (self.addr as *mut u8).add(at), src.len()) }
            }
        }
    }

    /// Copies the bytes at `at` to `dst`.
    ///
    /// # Safety
    /// No other thread writes `at .. at + dst.len()` meanwhile.
    pub(crate) unsafe fn download(&self, at: usize, dst: &mut [u8]) {
        match self.cuda {
            Some(c) => c.copy_from_device(dst, self.addr + at as u64).expect("cuMemcpyDtoH"),
            None => {
                assert!(at + dst.len() <= self.len, "download out of bounds");
                // SAFETY: in bounds (asserted) of the vector we borrow; `dst` is another
                // allocation; the caller keeps writers of the range away.
                unsafe { std::ptr::copy_nonoverlapping((self.addr as *const u8).add(at), dst.as_mut_ptr(), dst.len()) }
            }
        }
    }
}

impl DevBuf {
    /// The buffer as ranges for several threads.
    pub(crate) fn ranges(&mut self) -> DevRanges<'_> {
        let (addr, len, cuda) = match self {
            DevBuf::Host(v) => (v.as_mut_ptr() as u64, v.len(), None),
            DevBuf::Cuda(c, d) => (*d, usize::MAX, Some(&**c)),
        };
        DevRanges {
            addr,
            len,
            cuda,
            _buf: PhantomData,
        }
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if let DevBuf::Cuda(c, d) = self {
            c.free(*d);
        }
    }
}

/// Pinned host memory for the host pipeline (plain memory on the CPU backend): an
/// anonymous mapping of `len` bytes, registered with the driver.
pub(crate) struct Pinned {
    ptr: *mut u8,
    len: usize,
    cuda: Option<Arc<Cuda>>,
}

impl Pinned {
    pub(crate) fn new(cuda: Option<Arc<Cuda>>, len: usize) -> Pinned {
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        let ptr = ptr as *mut u8;
        if let Some(c) = &cuda {
            // SAFETY: the mapping lives until Drop, which unregisters it first.
            unsafe { c.register(ptr, len) }.expect("cuMemHostRegister");
        }
        Pinned { ptr, len, cuda }
    }
    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn slice(&mut self) -> &mut [u8] {
        // SAFETY: our mapping, `len` bytes, borrowed through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// SAFETY: a Pinned owns its mapping alone (reached only through `&mut self`), so moving it
// to another thread moves the only access.
unsafe impl Send for Pinned {}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(c) = &self.cuda {
            // SAFETY: registered in `new`; no copy uses it any more.
            unsafe { c.unregister(self.ptr) };
        }
        // SAFETY: the mapping `new` made, unmapped once; no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Launches `name` on `threads` threads (blocks of at most 128) with `(fd, a, b, c, d)` and
/// waits for it; returns the seconds from the launch to the end of the synchronize.
pub(crate) fn launch(rt: &Runtime, g: &Gpu, name: &str, threads: u32, args: [u64; 5]) -> f64 {
    let block = threads.min(128);
    let grid = threads.div_ceil(block);
    let t0 = Instant::now();
    match &g.module {
        Some(m) => {
            let a = [
                Arg::U32(args[0] as u32),
                Arg::U64(args[1]),
                Arg::U64(args[2]),
                Arg::U64(args[3]),
                Arg::U64(args[4]),
            ];
            m.launch(name, grid, block, &a).expect("launch");
        }
        None => {
            let [fd, a, b, c, d] = args;
            let kernel = match name {
                "pwrite_bulk" => k::pwrite_bulk,
                "pread_bulk" => k::pread_bulk,
                "pread_random" => k::pread_random,
                "pread_random_phases" => k::pread_random_phases,
                "pread_random_parts" => k::pread_random_parts,
                _ => panic!("no CPU kernel {name}"),
            };
            rt.launch(grid, block, move || kernel(fd as i32, a, b, c, d))
                .expect("launch");
        }
    }
    rt.synchronize().expect("synchronize");
    t0.elapsed().as_secs_f64()
}

/// Runs `kernel` on one thread with `(fd, iters, out)`, and waits for it.
pub(crate) fn one_thread(rt: &Runtime, g: &Gpu, kernel: Kernel<fn(i32, u32, u64)>, fd: i32, iters: u32, out: u64) {
    match &g.module {
        Some(m) => m
            .launch(
                kernel.name(),
                1,
                1,
                &[Arg::U32(fd as u32), Arg::U32(iters), Arg::U64(out)],
            )
            .expect("launch"),
        None => rt.launch(1, 1, move || kernel(fd, iters, out)).expect("launch"),
    }
    rt.synchronize().expect("synchronize");
}

/// `n` little-endian u64s from the start of `buf`.
pub(crate) fn download_u64(buf: &DevBuf, n: usize) -> Vec<u64> {
    let mut raw = vec![0u8; n * 8];
    buf.download(0, &mut raw);
    raw.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Zeroes the first `size` bytes of `dev`.
pub(crate) fn zero(dev: &mut DevBuf, size: usize) {
    let z = vec![0u8; (16 << 20).min(size)];
    let mut at = 0;
    while at < size {
        let n = z.len().min(size - at);
        dev.upload(at, &z[..n]);
        at += n;
    }
}
