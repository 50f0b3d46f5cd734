//! Device file I/O: GPU-initiated `pwrite`/`pread` against the host doing the same work
//! with syscalls and CUDA copies, side by side in one run.
//!
//! `cargo run --release --example bench_file [-- OPTIONS]`
//!
//! On the CUDA backend (a GPU present) it measures, in this order:
//! - **latency**: one GPU thread `pwrite`s 64 bytes (from its stack: device memory, so
//!   staged) at `i * 64` of a fresh file and waits for the completion, `--iters` times
//!   (default 10000); each round trip timed on the GPU's clock (`%globaltimer`). Two ways,
//!   one after the other: `pwrite` (which takes the solo ring, `Builder::solo`, when the
//!   runtime has one: `GPUIO_SOLO=off` runs without; its holder waits on each CQE's result
//!   on x86-64 hosts, on the CQ tail with `--solo-wait tail`), then `pwrite_async` and its wait (the
//!   shared rings, through the arena). Prints p50, p99, min, max of each, and how many
//!   writes went through the solo ring. `--lat-file PATH` writes there instead (an
//!   existing file is overwritten from offset 0; `/dev/null` works). Then the shared
//!   rings' round trip again, timed in phases (`latency_phases`): a diagnostic. Then the
//!   floor (`latency_floor`, a diagnostic): the same writes by one thread alone on a ring,
//!   with none of the protocol's steps (the SQE, one release of the SQ tail, acquires of
//!   the CQ tail, the CQE, one release of the CQ head), what PCIe and the kernel allow.
//!   Then the kernel's part alone: a host thread writes the same 64 bytes as often on a
//!   host SQPOLL ring, spinning on its CQ, and how often that ring's io-wq workers slept
//!   (about once per write when io_uring hands each write to one). Then the round-trip target
//!   (GPU only, on `pwrite`): p50 at most 8 us and p99 at most 15 us, `MET` or `NOT MET`.
//! - **pread**: a `--size-mib` file (default 1024) in `--dir` (default the temp dir),
//!   written and read once by the host first so that it is page-cached. `--threads` GPU
//!   threads (default 1024, blocks of 128) read chunks of `--chunk-kib` (default 1024) with
//!   `File::read_exact_at` into device memory (staged through an arena of `--arena-mib`,
//!   default 256, in blocks of `--block-kib`, default 256), and again into a host buffer
//!   (direct: no copy). Two host pipelines do the same: **host x1**, one thread, `pread`
//!   into a pinned (`cuMemHostRegister`ed) buffer of `--block-kib`, then `cuMemcpyHtoD`,
//!   until the file is in device memory; and **host xN**, `--host-threads` threads (default
//!   4) doing the same, each with its own pinned buffer, thread `j` taking blocks
//!   `j, j + N, ...`. Each GPU result, and host xN's, is checked against the file.
//! - **random 4 KiB pread**: `--rand-threads` GPU threads (default 4096; at most 128 or a
//!   multiple of 128) each `pread` 4 KiB `--rand-reads` times (default 64) at random
//!   page-aligned offsets of the same page-cached file (`pread_random`, the access pattern
//!   of BaM and GIDS), into their own 4 KiB slot of device memory (staged), each read timed
//!   on the GPU's clock; each thread's last read is checked against the file. Against it,
//!   a fio-like loop on host io_uring: as many threads as the runtime has rings, each with its own
//!   SQPOLL ring (raw `io_uring_setup`/`io_uring_enter`), together keeping as many 4 KiB
//!   reads in flight as there are GPU threads (the same total queue depth), for the same
//!   total number of reads; each read timed from submission to completion, and its first
//!   8 bytes checked. The GPU's reads run a second time into the host buffer (direct: no
//!   copy out of the arena), a diagnostic row, and once more in phases
//!   (`pread_random_phases`: taking a block and a slot, submitting, waiting, copying out;
//!   not in the lockstep build), a diagnostic table with that run's IOPS. With
//!   `GPUIO_BENCH_PARTS` set, also the same reads through the runtime's parts, untimed
//!   (`pread_random_parts`), once with `Context::wait` and once with the phases kernel's
//!   wait: the cost of the runtime's wait. Prints IOPS (reads / wall time; the GPU's
//!   includes the launch and synchronize), p50 and p99, and the issue's target: gpuio >=
//!   0.8x the host's IOPS, `MET` or `NOT MET`. (The arena's blocks bound the staged reads
//!   in flight: one each; the settings line says when there are fewer blocks than GPU
//!   threads.)
//! - **pwrite**: the same sizes the other way: GPU threads `write_all_at` from device
//!   memory into a fresh file; host x1 `cuMemcpyDtoH` into the pinned buffer, then
//!   `pwrite`; host xN the same on `--host-threads` threads. The file is checked after the
//!   GPU run and after host xN's. Then the file system alone: one host thread and
//!   `--host-threads` `pwrite` as many bytes into a fresh file from a buffer each reuses (no
//!   device copy), the most any writer could get there; where the 2x target asks more of the file
//!   than that, its verdict says so.
//!
//! `--rings N` (default: as many as the runtime takes when not told, `Builder::rings`)
//! gives the gpuio runtime N rings (`Builder::rings`: a block's
//! requests go to ring `block_idx % N`) of `--sq-entries` SQEs (default: the
//! runtime's, `Builder::sq_entries`), and the host's random-read loop as many rings; the
//! machine line says which CPUs the runtime's SQPOLL threads were bound to. After the
//! throughput table come the targets for several rings: pread into device memory
//! at least 2.5x host x1 and 1.0x host xN, pwrite at least 2x host x1, `MET` or `NOT MET`.
//!
//! Each case runs `--reps` times (default 3) alternating gpuio and host; the throughput
//! table shows the median GB/s (10^9 bytes/s) of gpuio, host x1 and host xN and the ratios
//! gpuio / host; the random-read table the median IOPS and the latencies of all reps. Without
//! a GPU the same runs on the CPU backend (kernels on host threads, "device memory" a host
//! vector, `memcpy` for the copies), default `--size-mib 64`, and says so.
//!
//! Exits 1 if a check failed, 2 on bad options.
use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use gpuio::cuda::Cuda;
use gpuio::{Arg, Backend, Error, GpuModule, Kernel, Runtime, Sandbox};
use gpuio_test_kernels as k;

mod common;
use common::{cpu_list, cpu_model, median, uname_release, utc_date, write_fresh, write_table, Cli, Source};

/// The example kernels (`kernels/`) as PTX for `sm_90` and `sm_60` (`GPUIO_LOCKSTEP=1`
/// picks the lockstep build), built by build.rs.
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_NVPTX;

const CLI: Cli = Cli {
    name: "bench_file",
    usage: "usage: bench_file [--size-mib N] [--chunk-kib N] [--threads N] [--arena-mib N] \
            [--block-kib N] [--iters N] [--reps N] [--dir PATH] [--lat-file PATH] \
            [--host-threads N] [--rand-threads N] [--rand-reads N] [--rings N] [--sq-entries N] \
            [--solo-wait result|tail]",
};

struct Config {
    size: usize,
    chunk: usize,
    threads: u32,
    arena: usize,
    block: usize,
    iters: u32,
    reps: usize,
    dir: PathBuf,
    lat_file: Option<PathBuf>,
    /// Threads of the host xN pipeline.
    host_threads: usize,
    /// GPU threads of the random-read case, and the host loop's total queue depth.
    rand_threads: u32,
    /// 4 KiB reads per GPU thread in the random-read case.
    rand_reads: u64,
    /// io_uring rings (one SQPOLL thread each): the runtime's (`Builder::rings`), and the
    /// host's random-read loop's. Without `--rings`, the runtime's own choice.
    rings: u32,
    /// `--rings` was given (otherwise the runtime chose `rings`).
    rings_named: bool,
    /// SQ entries of each of the runtime's rings (`Builder::sq_entries`; the CQ gets twice
    /// as many, and the completion slots a CQ's worth per ring).
    sq_entries: u32,
    /// The solo ring's holder waits on the CQ tail (`--solo-wait tail`) rather than on each
    /// CQE's result (the default on x86-64 hosts).
    solo_on_tail: bool,
}

/// Where kernels run, and the memory they address.
struct Gpu<'rt> {
    module: Option<GpuModule<'rt>>,
    cuda: Option<Arc<Cuda>>,
}

/// A buffer in "device memory": CUDA memory, or a host vector on the CPU backend.
enum DevBuf {
    Host(Vec<u8>),
    Cuda(Arc<Cuda>, u64),
}

impl DevBuf {
    fn new(g: &Gpu, len: usize) -> DevBuf {
        match &g.cuda {
            None => DevBuf::Host(vec![0u8; len]),
            Some(c) => DevBuf::Cuda(c.clone(), c.alloc_zeroed(len).expect("cuMemAlloc")),
        }
    }
    fn addr(&mut self) -> u64 {
        match self {
            DevBuf::Host(v) => v.as_mut_ptr() as u64,
            DevBuf::Cuda(_, d) => *d,
        }
    }
    fn upload(&mut self, at: usize, src: &[u8]) {
        match self {
            DevBuf::Host(v) => v[at..at + src.len()].copy_from_slice(src),
            DevBuf::Cuda(c, d) => c.copy_to_device(*d + at as u64, src).expect("cuMemcpyHtoD"),
        }
    }
    fn download(&self, at: usize, dst: &mut [u8]) {
        match self {
            DevBuf::Host(v) => dst.copy_from_slice(&v[at..at + dst.len()]),
            DevBuf::Cuda(c, d) => c.copy_from_device(dst, *d + at as u64).expect("cuMemcpyDtoH"),
        }
    }
}

/// A [`DevBuf`] that host-pipeline threads share, each copying in and out of its own ranges.
struct DevRanges<'a> {
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
    unsafe fn upload(&self, at: usize, src: &[u8]) {
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
    unsafe fn download(&self, at: usize, dst: &mut [u8]) {
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
    fn ranges(&mut self) -> DevRanges<'_> {
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
struct Pinned {
    ptr: *mut u8,
    len: usize,
    cuda: Option<Arc<Cuda>>,
}

impl Pinned {
    fn new(cuda: Option<Arc<Cuda>>, len: usize) -> Pinned {
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
    fn len(&self) -> usize {
        self.len
    }
    fn slice(&mut self) -> &mut [u8] {
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

/// The file's contents: 8 bytes per index, from a splitmix of the index.
fn pattern(at: usize, buf: &mut [u8]) {
    for (i, w) in buf.chunks_mut(8).enumerate() {
        let mut z = ((at / 8 + i) as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let b = (z ^ (z >> 31)).to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
}

/// A new empty file, open for reading and writing.
fn rw(path: &std::path::Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("create")
}

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn launch(rt: &Runtime, g: &Gpu, name: &str, threads: u32, args: [u64; 5]) -> f64 {
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
fn one_thread(rt: &Runtime, g: &Gpu, kernel: Kernel<fn(i32, u32, u64)>, fd: i32, iters: u32, out: u64) {
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

/// Prints the table of `latency_floor`'s round trips (`out` holds [`k::FLOOR_ROW`] words per
/// round trip); returns the whole round trip's p50 and p99 (us), or `None` (having said why)
/// if a write came back other than 64 or the kernel found the ring busy.
fn floor_table(out: &DevBuf, iters: u32) -> Option<(f64, f64)> {
    let row = k::FLOOR_ROW;
    let words = download_u64(out, iters as usize * row);
    let busy = words.chunks(row).filter(|r| r[0] == u64::MAX).count();
    let bad = words.chunks(row).filter(|r| r[row - 1] != 64).count();
    let names = [
        "stage 64 B, write the SQE",
        "store the SQ tail (Release)",
        "until the CQ tail moves (Acquire loads)",
        "load the CQE, store the CQ head (Release)",
        "whole round trip",
    ];
    let q = |k: usize, p: f64| {
        let mut v: Vec<u64> = words.chunks(row).map(|r| r[k]).collect();
        v.sort_unstable();
        v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3
    };
    println!();
    println!(
        "## the floor: the same writes, one thread alone on the ring with none of the protocol's steps \
         ({iters} iterations, {bad} results not 64)"
    );
    if busy > 0 {
        println!("the floor did not run: the ring was not idle at its launch");
        return None;
    }
    let rows = names
        .iter()
        .enumerate()
        .map(|(k, name)| {
            vec![
                name.to_string(),
                format!("{:.2}", q(k, 0.5)),
                format!("{:.2}", q(k, 0.99)),
            ]
        })
        .collect();
    write_table(&mut std::io::stdout(), &["phase", "p50 us", "p99 us"], rows, 1);
    (bad == 0).then(|| (q(row - 2, 0.5), q(row - 2, 0.99)))
}

/// The host pipeline on `pins.len()` threads (inline when one): thread `j` takes blocks
/// `j, j + n, ...` (of its pinned buffer's size) of the first `size` bytes. Reading:
/// `pread` from `file` into its pinned buffer, then a copy to `dev` at the same offset.
/// Writing: the copy from `dev`, then `pwrite`. Returns the seconds it took.
fn host_pipeline(file: &File, dev: &mut DevBuf, pins: &mut [Pinned], size: usize, write: bool) -> f64 {
    let n = pins.len();
    let dev = dev.ranges();
    let dev = &dev;
    let work = move |j: usize, pin: &mut Pinned| {
        let block = pin.len();
        let mut at = j * block;
        while at < size {
            let len = block.min(size - at);
            let buf = &mut pin.slice()[..len];
            if write {
                // SAFETY: thread `j` alone copies its blocks; nothing writes `dev` meanwhile.
                unsafe { dev.download(at, buf) };
                file.write_all_at(buf, at as u64).expect("pwrite");
            } else {
                file.read_exact_at(buf, at as u64).expect("pread");
                // SAFETY: thread `j` alone copies its blocks; nothing reads `dev` meanwhile.
                unsafe { dev.upload(at, buf) };
            }
            at += n * block;
        }
    };
    let t0 = Instant::now();
    if let [pin] = pins {
        work(0, pin);
    } else {
        std::thread::scope(|s| {
            for (j, pin) in pins.iter_mut().enumerate() {
                s.spawn(move || work(j, pin));
            }
        });
    }
    t0.elapsed().as_secs_f64()
}

/// Host io_uring with raw system calls, for the random-read loop: a ring with SQPOLL,
/// mapped the classic way (three `mmap`s), on the layouts of `gpuio_device::protocol::uapi`.
mod uring {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::atomic::{fence, AtomicU32, Ordering};

    use gpuio_device::protocol::uapi::{
        Cqe, Params, Sqe, IORING_ENTER_GETEVENTS, IORING_ENTER_SQ_WAKEUP, IORING_SETUP_SQPOLL, IORING_SQ_NEED_WAKEUP,
    };

    /// `IORING_OFF_SQ_RING`: the `mmap` offset of the SQ ring.
    const IORING_OFF_SQ_RING: libc::off_t = 0;
    /// `IORING_OFF_CQ_RING`: the `mmap` offset of the CQ ring.
    const IORING_OFF_CQ_RING: libc::off_t = 0x800_0000;
    /// `IORING_OFF_SQES`: the `mmap` offset of the SQE array.
    const IORING_OFF_SQES: libc::off_t = 0x1000_0000;

    /// One shared mapping of a ring's memory.
    struct Map {
        ptr: *mut u8,
        len: usize,
    }

    impl Map {
        /// Maps `len` bytes of ring `fd` at `offset` (one of the `IORING_OFF_*`).
        fn new(fd: i32, len: usize, offset: libc::off_t) -> io::Result<Map> {
            // SAFETY: a fresh shared mapping of the ring fd; the kernel checks `offset` and
            // `len`; we own the result until Drop.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    fd,
                    offset,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            Ok(Map { ptr: ptr.cast(), len })
        }

        /// The field at byte offset `off` (from `io_uring_params`, inside the mapping).
        fn at<T>(&self, off: u32) -> *mut T {
            debug_assert!(off as usize + std::mem::size_of::<T>() <= self.len);
            self.ptr.wrapping_add(off as usize).cast()
        }
    }

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: our mapping; no pointer into it outlives the Ring that owns it.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }

    /// An io_uring instance with a kernel SQPOLL thread, used by one thread.
    pub struct Ring {
        /// The SQ ring's head (the kernel's), tail (ours) and flags word (the kernel's).
        sq_head: *const AtomicU32,
        sq_tail: *const AtomicU32,
        sq_flags: *const AtomicU32,
        sq_mask: u32,
        sq_entries: u32,
        sqes: *mut Sqe,
        /// The CQ ring's head (ours) and tail (the kernel's), and its entries.
        cq_head: *const AtomicU32,
        cq_tail: *const AtomicU32,
        cq_mask: u32,
        cqes: *const Cqe,
        /// SQEs written, published or not (our copy of the SQ tail).
        tail: u32,
        /// CQEs reaped (our copy of the CQ head).
        head: u32,
        // Dropped in this order, after the pointers into them are gone: the mappings, then
        // the fd.
        _maps: [Map; 3],
        fd: OwnedFd,
    }

    impl Ring {
        /// A ring of `entries` SQEs (rounded up to a power of two; the CQ gets twice as
        /// many) whose SQPOLL thread sleeps after `idle_ms` without work.
        pub fn new(entries: u32, idle_ms: u32) -> io::Result<Ring> {
            let mut p = Params {
                flags: IORING_SETUP_SQPOLL,
                sq_thread_idle: idle_ms,
                ..Params::default()
            };
            // SAFETY: io_uring_setup(2) with a valid, writable `struct io_uring_params`.
            let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, entries, &mut p as *mut Params) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: a new descriptor that nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            let raw = fd.as_raw_fd();
            let sq = Map::new(
                raw,
                p.sq_off.array as usize + p.sq_entries as usize * 4,
                IORING_OFF_SQ_RING,
            )?;
            let cq = Map::new(
                raw,
                p.cq_off.cqes as usize + p.cq_entries as usize * std::mem::size_of::<Cqe>(),
                IORING_OFF_CQ_RING,
            )?;
            let sqes = Map::new(raw, p.sq_entries as usize * std::mem::size_of::<Sqe>(), IORING_OFF_SQES)?;
            let (so, co) = (p.sq_off, p.cq_off);
            // SAFETY: the kernel wrote the masks and the initial head and tail into the
            // mappings at these offsets; no request is in flight yet, so nothing writes them.
            let (sq_mask, cq_mask, tail, head) = unsafe {
                (
                    *sq.at::<u32>(so.ring_mask),
                    *cq.at::<u32>(co.ring_mask),
                    *sq.at::<u32>(so.tail),
                    *cq.at::<u32>(co.head),
                )
            };
            // SQ slot `i` always names SQE `i`: the index array is written once, before any
            // SQE is published (the Release store of the tail publishes it with the first).
            let array = sq.at::<u32>(so.array);
            for i in 0..p.sq_entries {
                // SAFETY: `sq_entries` u32s at `array`, inside the SQ mapping.
                unsafe { array.add(i as usize).write(i) };
            }
            Ok(Ring {
                sq_head: sq.at(so.head),
                sq_tail: sq.at(so.tail),
                sq_flags: sq.at(so.flags),
                sq_mask,
                sq_entries: p.sq_entries,
                sqes: sqes.at(0),
                cq_head: cq.at(co.head),
                cq_tail: cq.at(co.tail),
                cq_mask,
                cqes: cq.at(co.cqes),
                tail,
                head,
                _maps: [sq, cq, sqes],
                fd,
            })
        }

        /// Writes `sqe` into the next free SQ slot, unpublished (see [`Ring::submit`]);
        /// returns false if the SQ is full.
        pub fn push(&mut self, sqe: &Sqe) -> bool {
            // Acquire: orders the kernel's reading of the SQEs before the head it stores
            // after, before our overwriting those slots below.
            // SAFETY: the head word lives in the SQ mapping, which lives as long as `self`.
            let head = unsafe { &*self.sq_head }.load(Ordering::Acquire);
            if self.tail.wrapping_sub(head) >= self.sq_entries {
                return false;
            }
            // SAFETY: slot `tail & mask` of the SQE mapping; the kernel is done with it (the
            // head is past it) and reads it only after we publish it.
            unsafe { self.sqes.add((self.tail & self.sq_mask) as usize).write(*sqe) };
            self.tail = self.tail.wrapping_add(1);
            true
        }

        /// Publishes the SQEs pushed so far to the SQPOLL thread, and wakes it if it sleeps.
        pub fn submit(&mut self) -> io::Result<()> {
            // Release: orders our SQE writes (and the index array's) before the new tail,
            // which the SQPOLL thread loads with Acquire before it reads them.
            // SAFETY: the tail word lives in the SQ mapping, as long as `self`.
            unsafe { &*self.sq_tail }.store(self.tail, Ordering::Release);
            // SeqCst fence: orders the tail store before the flags load (liburing's
            // io_uring_smp_mb()). The SQPOLL thread sets NEED_WAKEUP, fences and looks at
            // the tail once more before it sleeps: one of us sees the other.
            fence(Ordering::SeqCst);
            // SAFETY: the flags word lives in the SQ mapping, as long as `self`.
            if unsafe { &*self.sq_flags }.load(Ordering::Relaxed) & IORING_SQ_NEED_WAKEUP != 0 {
                self.enter(0, IORING_ENTER_SQ_WAKEUP)?;
            }
            Ok(())
        }

        /// Waits in the kernel until at least one completion is posted.
        pub fn wait(&mut self) -> io::Result<()> {
            self.enter(1, IORING_ENTER_GETEVENTS)
        }

        /// Hands every posted completion to `f`, oldest first; returns how many.
        pub fn reap(&mut self, mut f: impl FnMut(Cqe)) -> usize {
            // Acquire: orders the kernel's CQE writes, before the tail it stores after,
            // before our reads of those CQEs.
            // SAFETY: the tail word lives in the CQ mapping, as long as `self`.
            let tail = unsafe { &*self.cq_tail }.load(Ordering::Acquire);
            let n = tail.wrapping_sub(self.head) as usize;
            while self.head != tail {
                // SAFETY: a posted CQE (between our head and the kernel's tail), inside the
                // CQ mapping; the kernel does not overwrite it before we move the head past.
                f(unsafe { self.cqes.add((self.head & self.cq_mask) as usize).read() });
                self.head = self.head.wrapping_add(1);
            }
            if n > 0 {
                // Release: orders our reads of the CQEs before the head that lets the
                // kernel overwrite them.
                // SAFETY: the head word lives in the CQ mapping, as long as `self`.
                unsafe { &*self.cq_head }.store(self.head, Ordering::Release);
            }
            n
        }

        /// `io_uring_enter(2)` submitting nothing (SQPOLL submits), retried on EINTR.
        fn enter(&self, min_complete: u32, flags: u32) -> io::Result<()> {
            loop {
                // SAFETY: io_uring_enter(2) on our ring with no argument structure.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_io_uring_enter,
                        self.fd.as_raw_fd(),
                        0u32,
                        min_complete,
                        flags,
                        std::ptr::null::<libc::c_void>(),
                        0usize,
                    )
                };
                if r >= 0 {
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// What one run of a random-read loop measured.
#[derive(Default)]
struct RandomRun {
    /// Wall time, seconds.
    secs: f64,
    /// The round trips of the reads that succeeded, ns.
    lat_ns: Vec<u64>,
    /// Reads that failed or came back short.
    failed: u64,
    /// Reads whose bytes were not the file's.
    wrong: u64,
}

/// What [`host_write_latency`] measured.
struct HostLatency {
    /// Each round trip, ns, sorted.
    lat_ns: Vec<u64>,
    /// Writes that failed or came back short.
    failed: u64,
    /// The io-wq worker threads of this ring (`iou-wrk-<its SQPOLL thread>`) afterwards.
    io_wq_workers: usize,
    /// How often they went to sleep waiting for work (`voluntary_ctxt_switches`): about
    /// once per write handed to them, when writes come one at a time.
    io_wq_sleeps: u64,
}

/// The 64-byte `pwrite` round trip of the GPU's latency run, from a host thread: `iters`
/// writes at `i * 64` of `path` (created, or overwritten from its start) on a host SQPOLL
/// ring, each timed from the SQ tail's store to the CQE, the thread spinning on the CQ.
/// The kernel's part of the GPU's round trip alone, with no PCIe between.
fn host_write_latency(path: &std::path::Path, iters: u32) -> std::io::Result<HostLatency> {
    use gpuio_device::protocol::uapi::{Sqe, IORING_OP_WRITE};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    // The ring's SQPOLL thread is the one that is new after the writes (just after the
    // setup it may not be listed yet); the io-wq workers it starts are named after its
    // thread id (the runtime's rings have theirs too).
    let before = threads_named("iou-sqp");
    let mut ring = uring::Ring::new(8, SQ_IDLE_MS)?;
    let buf = [b'h'; 64];
    let (mut lat_ns, mut failed) = (Vec::with_capacity(iters as usize), 0);
    for i in 0..iters {
        let sqe = Sqe {
            opcode: IORING_OP_WRITE,
            fd: file.as_raw_fd(),
            off: i as u64 * 64,
            addr: buf.as_ptr() as u64,
            len: 64,
            ..Sqe::default()
        };
        assert!(ring.push(&sqe), "an empty 8-entry SQ has room");
        let t0 = Instant::now();
        ring.submit()?;
        let mut res = None;
        while res.is_none() {
            ring.reap(|c| res = Some(c.res));
        }
        lat_ns.push(t0.elapsed().as_nanos() as u64);
        failed += (res != Some(64)) as u64;
    }
    lat_ns.sort_unstable();
    let sqpoll: Vec<u64> = threads_named("iou-sqp")
        .into_iter()
        .filter(|t| !before.contains(t))
        .map(|(tid, _)| tid)
        .collect();
    let workers: Vec<u64> = threads_named("iou-wrk")
        .into_iter()
        .filter(|(_, comm)| sqpoll.iter().any(|t| comm.trim_end() == format!("iou-wrk-{t}")))
        .map(|(tid, _)| tid)
        .collect();
    let io_wq_sleeps = workers.iter().map(|&tid| voluntary_switches(tid)).sum();
    Ok(HostLatency {
        lat_ns,
        failed,
        io_wq_workers: workers.len(),
        io_wq_sleeps,
    })
}

/// Thread `tid`'s `voluntary_ctxt_switches` (0 if it is gone).
fn voluntary_switches(tid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// This process's threads whose name starts with `prefix`: (thread id, name).
fn threads_named(prefix: &str) -> Vec<(u64, String)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            comm.starts_with(prefix).then_some((tid, comm))
        })
        .collect()
}

/// How many SQPOLL threads this process has, and the CPU time they ran together during
/// `window` of quiet, measured after twice `SQ_IDLE_MS` (the time an SQPOLL thread spins
/// on an empty ring before it sleeps), from each thread's `/proc/self/task/TID/schedstat`
/// (time on a CPU, ns). What the runtime's rings cost while nothing asks anything of them.
fn sqpoll_cpu_while_idle(window: Duration) -> (usize, Duration) {
    let on_cpu = |tid: u64| {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    std::thread::sleep(Duration::from_millis(2 * SQ_IDLE_MS as u64));
    let threads: Vec<u64> = threads_named("iou-sqp").into_iter().map(|(tid, _)| tid).collect();
    let before: u64 = threads.iter().map(|&t| on_cpu(t)).sum();
    std::thread::sleep(window);
    let after: u64 = threads.iter().map(|&t| on_cpu(t)).sum();
    (threads.len(), Duration::from_nanos(after.saturating_sub(before)))
}

/// SQPOLL idle time of the host rings, as the gpuio runtime's default.
const SQ_IDLE_MS: u32 = 50;

/// One host ring thread of [`host_random`]: keeps `depth` 4 KiB reads of `fd` in flight at
/// random pages (stream `stream` of [`k::random_page`]) until `reads` are done. Sets up
/// its ring and buffers, then waits at `start` with the others.
fn ring_loop(
    fd: i32,
    pages: u64,
    depth: usize,
    reads: u64,
    stream: u64,
    start: &Barrier,
) -> std::io::Result<RandomRun> {
    use gpuio_device::protocol::uapi::{Sqe, IORING_OP_READ};
    let page = k::RANDOM_READ as usize;
    let ring = uring::Ring::new((2 * depth).next_power_of_two() as u32, SQ_IDLE_MS);
    // One 4 KiB buffer per slot, touched now so that no read faults a page in.
    let mut bufs = vec![1u8; depth * page];
    let mut sent = vec![(Instant::now(), 0u64); depth];
    let mut run = RandomRun {
        lat_ns: Vec::with_capacity(reads as usize),
        ..RandomRun::default()
    };
    let mut done_slots = Vec::with_capacity(depth);
    start.wait();
    let mut ring = ring?;
    // Read `i` of this ring goes to `slot`.
    let issue = |ring: &mut uring::Ring,
                 i: u64,
                 slot: usize,
                 bufs: &mut [u8],
                 sent: &mut [(Instant, u64)]|
     -> std::io::Result<()> {
        let off = k::random_page(stream, i, pages) * page as u64;
        let sqe = Sqe {
            opcode: IORING_OP_READ,
            fd,
            off,
            addr: bufs[slot * page..].as_mut_ptr() as u64,
            len: page as u32,
            user_data: slot as u64,
            ..Sqe::default()
        };
        sent[slot] = (Instant::now(), off);
        // SQPOLL moves the SQ head only after a whole batch, and a page-cached read of
        // that batch completes (and is reaped, and its slot reissued here) before: so up to
        // `depth` consumed SQEs plus the `depth` in flight may be behind the head, which
        // the SQ's `2 * depth` entries hold. Should they not, publish what is pushed and
        // wait for the head.
        while !ring.push(&sqe) {
            ring.submit()?;
            std::hint::spin_loop();
        }
        Ok(())
    };
    let mut drive = || -> std::io::Result<()> {
        let first = depth.min(reads as usize);
        for slot in 0..first {
            issue(&mut ring, slot as u64, slot, &mut bufs, &mut sent)?;
        }
        ring.submit()?;
        let (mut done, mut issued) = (0u64, first as u64);
        let mut want = [0u8; 8];
        while done < reads {
            let n = ring.reap(|cqe| {
                let slot = cqe.user_data as usize;
                let (t0, off) = sent[slot];
                if cqe.res == page as i32 {
                    run.lat_ns.push(t0.elapsed().as_nanos() as u64);
                    pattern(off as usize, &mut want);
                    if bufs[slot * page..slot * page + 8] != want {
                        run.wrong += 1;
                    }
                } else {
                    run.failed += 1;
                }
                done_slots.push(slot);
            });
            if n == 0 {
                ring.wait()?;
                continue;
            }
            done += n as u64;
            for slot in done_slots.drain(..) {
                if issued < reads {
                    issue(&mut ring, issued, slot, &mut bufs, &mut sent)?;
                    issued += 1;
                }
            }
            ring.submit()?;
        }
        Ok(())
    };
    if let Err(e) = drive() {
        // Reads may still be in flight into `bufs` after the ring's fd is closed (the
        // kernel tears a ring down asynchronously): leave the buffers to them.
        std::mem::forget(bufs);
        return Err(e);
    }
    Ok(run)
}

/// The host's random-read loop, fio-like: `rings` threads, one SQPOLL ring each, together
/// keeping `depth` 4 KiB reads of `file` (`pages` pages) in flight, `total` reads in all.
fn host_random(file: &File, pages: u64, rings: u32, depth: u32, total: u64) -> std::io::Result<RandomRun> {
    let n = rings as u64;
    let start = Barrier::new(rings as usize + 1);
    let fd = file.as_raw_fd();
    let (secs, runs) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..n)
            .map(|r| {
                let depth = (depth as u64 / n + u64::from(r < depth as u64 % n)) as usize;
                let reads = total / n + u64::from(r < total % n);
                let start = &start;
                s.spawn(move || ring_loop(fd, pages, depth, reads, u64::MAX - r, start))
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let runs: Vec<_> = threads.into_iter().map(|t| t.join().expect("ring thread")).collect();
        (t0.elapsed().as_secs_f64(), runs)
    });
    let mut all = RandomRun {
        secs,
        ..RandomRun::default()
    };
    for r in runs {
        let r = r?;
        all.lat_ns.extend(r.lat_ns);
        all.failed += r.failed;
        all.wrong += r.wrong;
    }
    Ok(all)
}

/// The `p` quantile of `sorted` (ns) in us; NaN if empty.
fn quantile_us(sorted: &[u64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => sorted[((n - 1) as f64 * p) as usize] as f64 / 1e3,
    }
}

/// `n` little-endian u64s from the start of `buf`.
fn download_u64(buf: &DevBuf, n: usize) -> Vec<u64> {
    let mut raw = vec![0u8; n * 8];
    buf.download(0, &mut raw);
    raw.chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Zeroes the first `size` bytes of `dev`.
fn zero(dev: &mut DevBuf, size: usize) {
    let z = vec![0u8; (16 << 20).min(size)];
    let mut at = 0;
    while at < size {
        let n = z.len().min(size - at);
        dev.upload(at, &z[..n]);
        at += n;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    CLI.only_known(
        &args,
        &[
            "--size-mib",
            "--chunk-kib",
            "--threads",
            "--arena-mib",
            "--block-kib",
            "--iters",
            "--reps",
            "--dir",
            "--lat-file",
            "--host-threads",
            "--rand-threads",
            "--rand-reads",
            "--rings",
            "--sq-entries",
            "--solo-wait",
        ],
    );
    let gpu_present = Cuda::open().is_ok();
    let mib = |n: usize| n << 20;
    let mut cfg = Config {
        size: mib(CLI
            .opt(&args, "--size-mib")
            .unwrap_or(if gpu_present { 1024 } else { 64 })),
        chunk: CLI.opt::<usize>(&args, "--chunk-kib").unwrap_or(1024) << 10,
        threads: CLI.opt(&args, "--threads").unwrap_or(1024),
        arena: mib(CLI.opt(&args, "--arena-mib").unwrap_or(256)),
        block: CLI.opt::<usize>(&args, "--block-kib").unwrap_or(256) << 10,
        iters: CLI.opt(&args, "--iters").unwrap_or(10_000),
        reps: CLI.opt(&args, "--reps").unwrap_or(3),
        dir: CLI.opt(&args, "--dir").unwrap_or_else(std::env::temp_dir),
        lat_file: CLI.opt(&args, "--lat-file"),
        host_threads: CLI.opt(&args, "--host-threads").unwrap_or(4),
        rand_threads: CLI.opt(&args, "--rand-threads").unwrap_or(4096),
        rand_reads: CLI.opt(&args, "--rand-reads").unwrap_or(64),
        rings: CLI.opt(&args, "--rings").unwrap_or(1),
        rings_named: CLI.opt::<u32>(&args, "--rings").is_some(),
        sq_entries: CLI.opt(&args, "--sq-entries").unwrap_or(0),
        solo_on_tail: match CLI.opt::<String>(&args, "--solo-wait").as_deref() {
            None | Some("result") => false,
            Some("tail") => true,
            Some(other) => CLI.fail(&format!("--solo-wait: expected result or tail, got {other:?}")),
        },
    };
    if cfg.size == 0 || cfg.chunk == 0 || cfg.threads == 0 || cfg.reps == 0 || cfg.iters == 0 {
        CLI.fail("sizes, threads, iters and reps must be positive");
    }
    if cfg.host_threads == 0 || cfg.rand_threads == 0 || cfg.rand_reads == 0 || cfg.rings == 0 {
        CLI.fail("--host-threads, --rand-threads, --rand-reads and --rings must be positive");
    }
    // `launch` runs blocks of 128 threads; pread_random has every thread of the grid read.
    if cfg.rand_threads > 128 && !cfg.rand_threads.is_multiple_of(128) {
        CLI.fail("--rand-threads must be at most 128 or a multiple of 128");
    }
    if cfg.rings > cfg.rand_threads {
        CLI.fail("--rings must not exceed --rand-threads (the total queue depth)");
    }
    let backend = if gpu_present { Backend::Cuda } else { Backend::Cpu };
    let mut builder = Runtime::builder().backend(backend);
    if cfg.rings_named {
        builder = builder.rings(cfg.rings);
    }
    if cfg.sq_entries != 0 {
        builder = builder.sq_entries(cfg.sq_entries);
    }
    let rt = match builder
        .sandbox(Sandbox::FileIo)
        .arena_bytes(cfg.arena)
        .arena_block_bytes(cfg.block)
        .solo_waits_on_tail(cfg.solo_on_tail)
        .build()
    {
        Ok(rt) => rt,
        Err(e @ Error::Config(_)) => CLI.fail(&e.to_string()),
        Err(e) => panic!("runtime: {e}"),
    };
    cfg.rings = rt.stats().rings;
    cfg.sq_entries = rt.stats().sq_entries;
    if cfg.rings > cfg.rand_threads {
        CLI.fail("--rand-threads must be at least the runtime's rings (the total queue depth)");
    }
    let cfg = cfg;
    let module = gpu_present.then(|| rt.load_matching(NVPTX).expect("load PTX"));
    let cuda = module.as_ref().and_then(|m| m.cuda().cloned());
    let g = Gpu { module, cuda };
    println!("# bench_file ({})", utc_date());
    println!(
        "machine: {} | {} | kernel {} | backend {:?} ({}) | submission {:?}, {} ring(s), SQPOLL CPUs {}",
        rt.device_name().unwrap_or("CPU"),
        cpu_model(),
        uname_release(),
        backend,
        if gpu_present {
            "GPU"
        } else {
            "no GPU: kernels on host threads"
        },
        rt.submission(),
        cfg.rings,
        cpu_list(rt.sqpoll_cpus())
    );
    println!(
        "settings: {} ring(s){} of {} SQEs | file {} MiB in {} | GPU threads {} x chunk {} KiB | arena {} MiB in {} KiB blocks | host pinned buffer {} KiB, host xN {} threads | {} reps",
        cfg.rings,
        if cfg.rings_named { "" } else { " (the runtime's default)" },
        cfg.sq_entries,
        cfg.size >> 20,
        cfg.dir.display(),
        cfg.threads,
        cfg.chunk >> 10,
        cfg.arena >> 20,
        cfg.block >> 10,
        cfg.block >> 10,
        cfg.host_threads,
        cfg.reps
    );
    let arena_blocks = cfg.arena / cfg.block.max(1);
    println!(
        "random reads: {} GPU threads x {} reads of 4 KiB | host io_uring {} SQPOLL rings, {} reads in flight in all{}",
        cfg.rand_threads,
        cfg.rand_reads,
        cfg.rings,
        cfg.rand_threads,
        if arena_blocks < cfg.rand_threads as usize {
            format!(" | NOTE: {arena_blocks} arena blocks: at most that many staged GPU reads in flight")
        } else {
            String::new()
        }
    );
    let mut failed = false;

    // ---- latency
    let lat_path = match &cfg.lat_file {
        Some(p) => p.clone(),
        None => cfg.dir.join(format!("gpuio-bench-lat-{}", std::process::id())),
    };
    let lat_file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lat_path)
        .expect("create");
    let mut lat = DevBuf::new(&g, cfg.iters as usize * 8);
    let (fd, iters) = (lat_file.as_raw_fd(), cfg.iters);
    // The same writes two ways: `pwrite` (the solo ring while no other thread holds it),
    // then `pwrite_async` and its wait (always the shared rings).
    let mut ways = Vec::new();
    for kernel in [k::pwrite_latency, k::pwrite_latency_shared] {
        let name = kernel.name();
        let solo_before = rt.stats().solo_requests;
        one_thread(&rt, &g, kernel, fd, iters, lat.addr());
        let solo = rt.stats().solo_requests.wrapping_sub(solo_before);
        let mut ns = download_u64(&lat, cfg.iters as usize);
        let errors = ns.iter().filter(|&&v| v == u64::MAX).count();
        ns.sort_unstable();
        ways.push((name, ns, errors, solo));
    }
    let meta = std::fs::metadata(&lat_path).expect("stat");
    let written = if meta.is_file() {
        meta.len()
    } else {
        cfg.iters as u64 * 64
    };
    let q = |ns: &[u64], p: f64| ns[((ns.len() - 1) as f64 * p) as usize] as f64 / 1e3;
    let stats = rt.stats();
    println!();
    println!(
        "## one thread: pwrite 64 B and wait, {} times each way (file {} bytes)",
        cfg.iters, written
    );
    write_table(
        &mut std::io::stdout(),
        &[
            "way",
            "p50 us",
            "p99 us",
            "min us",
            "max us",
            "mean us",
            "clock step ns",
            "failed",
            "via the solo ring",
        ],
        ways.iter()
            .map(|(name, ns, errors, solo)| {
                let step = ns.windows(2).map(|w| w[1] - w[0]).filter(|&d| d > 0).min().unwrap_or(0);
                vec![
                    match *name {
                        "pwrite_latency" if !stats.solo => "pwrite (no solo ring)",
                        "pwrite_latency" if stats.solo_waits_on_results => {
                            "pwrite (solo ring where free, waiting on the result)"
                        }
                        "pwrite_latency" => "pwrite (solo ring where free, waiting on the CQ tail)",
                        _ => "pwrite_async + wait (shared rings)",
                    }
                    .to_string(),
                    format!("{:.2}", q(ns, 0.5)),
                    format!("{:.2}", q(ns, 0.99)),
                    format!("{:.2}", q(ns, 0.0)),
                    format!("{:.2}", q(ns, 1.0)),
                    format!("{:.2}", ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e3),
                    step.to_string(),
                    errors.to_string(),
                    solo.to_string(),
                ]
            })
            .collect(),
        1,
    );
    let (ns, errors) = (&ways[0].1, ways[0].2);
    let pct = |p: f64| q(ns, p);
    if ways.iter().any(|w| w.2 > 0) || written != cfg.iters as u64 * 64 {
        failed = true;
    }

    // ---- the same round trip, in phases (diagnostic), into the same file.
    let row = k::LATENCY_ROW;
    let mut ph = DevBuf::new(&g, cfg.iters as usize * row * 8);
    one_thread(&rt, &g, k::latency_phases, fd, iters, ph.addr());
    // ---- the floor (diagnostic): the same writes with none of the protocol's steps.
    let mut fl = DevBuf::new(&g, cfg.iters as usize * k::FLOOR_ROW * 8);
    one_thread(&rt, &g, k::latency_floor, fd, iters, fl.addr());
    drop(lat_file);
    if cfg.lat_file.is_none() {
        let _ = std::fs::remove_file(&lat_path);
    }
    let mut raw = vec![0u8; cfg.iters as usize * row * 8];
    ph.download(0, &mut raw);
    let words: Vec<u64> = raw
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let names = [
        "PCIe read (the CQ tail)",
        "system fence",
        "block + slot + stage 64 B",
        "Ring::submit",
        "until the CQ tail moves",
        "reap, dispatch, result",
    ];
    let mut rows = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let mut v: Vec<u64> = words.chunks(row).map(|r| r[k]).collect();
        v.sort_unstable();
        let q = |p: f64| v[((v.len() - 1) as f64 * p) as usize] as f64 / 1e3;
        rows.push(vec![
            name.to_string(),
            format!("{:.2}", q(0.5)),
            format!("{:.2}", q(0.99)),
        ]);
    }
    let bad = words.chunks(row).filter(|r| r[row - 1] != 64).count();
    println!();
    println!(
        "## the same round trip in phases ({} iterations, {} results not 64)",
        cfg.iters, bad
    );
    write_table(&mut std::io::stdout(), &["phase", "p50 us", "p99 us"], rows, 1);
    let floor = floor_table(&fl, cfg.iters);
    failed |= floor.is_none();

    // ---- the kernel's part alone: the same writes from a host thread on a host SQPOLL ring.
    let host_lat_path = match &cfg.lat_file {
        Some(p) => p.clone(),
        None => cfg.dir.join(format!("gpuio-bench-lat-host-{}", std::process::id())),
    };
    let host = host_write_latency(&host_lat_path, cfg.iters).expect("host io_uring round trip");
    if cfg.lat_file.is_none() {
        let _ = std::fs::remove_file(&host_lat_path);
    }
    let (host_p50, host_p99) = (quantile_us(&host.lat_ns, 0.5), quantile_us(&host.lat_ns, 0.99));
    println!();
    println!(
        "## the kernel's part alone: a host thread writes the same 64 B {} times on a host SQPOLL ring \
         and spins on the CQ ({} failed; io-wq workers of that ring: {}, which slept {} times)",
        cfg.iters, host.failed, host.io_wq_workers, host.io_wq_sleeps
    );
    write_table(
        &mut std::io::stdout(),
        &["p50 us", "p99 us"],
        vec![vec![format!("{host_p50:.2}"), format!("{host_p99:.2}")]],
        0,
    );
    failed |= host.failed > 0;
    // An io-wq worker that slept about once per write took most of them, each after a wake-up.
    let io_wq = if host.io_wq_sleeps >= cfg.iters as u64 / 2 {
        ": io_uring handed the writes to an io-wq worker thread"
    } else {
        ""
    };
    let (gpu_p50, gpu_p99) = (pct(0.5), pct(0.99));
    if !gpu_present {
        println!("the round-trip target (p50 <= 8 us, p99 <= 15 us): no verdict: it is for a GPU, and none is here");
    } else if errors > 0 {
        println!("the round-trip target (p50 <= 8 us, p99 <= 15 us): no verdict: {errors} round trip(s) failed");
    } else {
        println!(
            "the round-trip target (p50 <= 8 us, p99 <= 15 us): {} (p50 {gpu_p50:.2}, p99 {gpu_p99:.2}; of the p50, \
             the kernel's part alone is {host_p50:.2}{io_wq}; the floor, one thread alone on the ring \
             with none of the protocol's steps, {})",
            if gpu_p50 <= 8.0 && gpu_p99 <= 15.0 {
                "MET"
            } else {
                "NOT MET"
            },
            match floor {
                Some((p50, p99)) => format!("p50 {p50:.2}, p99 {p99:.2}"),
                None => "failed".to_string(),
            },
        );
    }

    // ---- the file for pread, page-cached.
    let path = cfg.dir.join(format!("gpuio-bench-file-{}", std::process::id()));
    {
        let f = rw(&path);
        let mut buf = vec![0u8; 16 << 20];
        let mut at = 0;
        while at < cfg.size {
            let n = buf.len().min(cfg.size - at);
            pattern(at, &mut buf[..n]);
            f.write_all_at(&buf[..n], at as u64).expect("write");
            at += n;
        }
        let mut sink = vec![0u8; 16 << 20];
        let mut at = 0;
        while at < cfg.size {
            at += f.read_at(&mut sink, at as u64).expect("read");
        }
    }
    let file = File::open(&path).expect("open");
    let fd = file.as_raw_fd() as u64;
    let mut dev = DevBuf::new(&g, cfg.size);
    let mut errs = DevBuf::new(&g, 8);
    let mut pins1 = vec![Pinned::new(g.cuda.clone(), cfg.block)];
    let mut pins_n: Vec<Pinned> = (0..cfg.host_threads)
        .map(|_| Pinned::new(g.cuda.clone(), cfg.block))
        .collect();
    let host = rt.host_buffer(cfg.size).expect("host buffer");
    let check = |what: &str, got: &dyn Fn(usize, &mut [u8]), failed: &mut bool| {
        let mut a = vec![0u8; 16 << 20];
        let mut b = vec![0u8; 16 << 20];
        let mut at = 0;
        while at < cfg.size {
            let n = a.len().min(cfg.size - at);
            got(at, &mut a[..n]);
            pattern(at, &mut b[..n]);
            if a[..n] != b[..n] {
                eprintln!("bench_file: {what}: wrong bytes in [{at}, {})", at + n);
                *failed = true;
                return;
            }
            at += n;
        }
    };
    let (mut gpu_dev, mut gpu_host) = (Vec::new(), Vec::new());
    let (mut host_pipe, mut host_pipe_n) = (Vec::new(), Vec::new());
    for rep in 0..cfg.reps {
        let (a, e) = (dev.addr(), errs.addr());
        gpu_dev.push(gbps(
            cfg.size,
            launch(
                &rt,
                &g,
                "pread_bulk",
                cfg.threads,
                [fd, a, cfg.size as u64, cfg.chunk as u64, e],
            ),
        ));
        let ha = host.device_ptr();
        gpu_host.push(gbps(
            cfg.size,
            launch(
                &rt,
                &g,
                "pread_bulk",
                cfg.threads,
                [fd, ha, cfg.size as u64, cfg.chunk as u64, e],
            ),
        ));
        host_pipe.push(gbps(
            cfg.size,
            host_pipeline(&file, &mut dev, &mut pins1, cfg.size, false),
        ));
        if rep == 0 {
            // So that the check below sees only what host xN wrote.
            zero(&mut dev, cfg.size);
        }
        host_pipe_n.push(gbps(
            cfg.size,
            host_pipeline(&file, &mut dev, &mut pins_n, cfg.size, false),
        ));
        if rep == 0 {
            check(
                &format!("host x{} pread into device memory", cfg.host_threads),
                &|at, buf| dev.download(at, buf),
                &mut failed,
            );
            // The host pipeline just rewrote `dev`; check the GPU's copy in a separate run.
            dev.upload(0, &vec![0u8; 1 << 20]);
            launch(
                &rt,
                &g,
                "pread_bulk",
                cfg.threads,
                [fd, a, cfg.size as u64, cfg.chunk as u64, e],
            );
            check(
                "pread into device memory",
                &|at, buf| dev.download(at, buf),
                &mut failed,
            );
            let hs = host.as_slice();
            check(
                "pread into a host buffer",
                &|at, buf| buf.copy_from_slice(&hs[at..at + buf.len()]),
                &mut failed,
            );
        }
        eprintln!(
            "pread rep {rep}: gpuio device {:.2} GB/s, gpuio host buffer {:.2} GB/s, host x1 {:.2} GB/s, host x{} {:.2} GB/s",
            gpu_dev[rep], gpu_host[rep], host_pipe[rep], cfg.host_threads, host_pipe_n[rep]
        );
    }
    let mut e = [0u8; 8];
    errs.download(0, &mut e);
    if u64::from_le_bytes(e) != 0 {
        eprintln!("bench_file: {} GPU reads failed", u64::from_le_bytes(e));
        failed = true;
    }

    // ---- random 4 KiB preads of the page-cached file: GPU threads, then host io_uring.
    let page = k::RANDOM_READ as usize;
    let pages = (cfg.size / page) as u64;
    let reads = cfg.rand_threads as u64 * cfg.rand_reads;
    let mut slots = DevBuf::new(&g, cfg.rand_threads as usize * page);
    let mut rand_lat = DevBuf::new(&g, reads as usize * 8);
    let (mut gpu_iops, mut gpu_ns) = (Vec::new(), Vec::new());
    // The same reads into the host buffer (direct: no staging copy), where it is large
    // enough: what the protocol costs without the GPU's copy out of the arena.
    let direct = host.len() >= cfg.rand_threads as usize * page;
    let (mut direct_iops, mut direct_ns) = (Vec::new(), Vec::new());
    let (mut uring_iops, mut uring_ns) = (Vec::new(), Vec::new());
    let mut uring_error = None;
    let mut want = vec![0u8; page];
    let mut got = vec![0u8; page];
    for rep in 0..cfg.reps {
        let (s, l) = (slots.addr(), rand_lat.addr());
        let secs = launch(
            &rt,
            &g,
            "pread_random",
            cfg.rand_threads,
            [fd, s, pages, cfg.rand_reads, l],
        );
        gpu_iops.push(reads as f64 / secs);
        let lat = download_u64(&rand_lat, reads as usize);
        let bad = lat.iter().filter(|&&v| v == u64::MAX).count();
        gpu_ns.extend(lat.iter().copied().filter(|&v| v != u64::MAX));
        // Each thread's slot holds its last read: the file at the page it drew.
        let last = cfg.rand_reads - 1;
        let mut wrong = 0;
        for t in 0..cfg.rand_threads as u64 {
            if lat[(t * cfg.rand_reads + last) as usize] == u64::MAX {
                continue;
            }
            slots.download(t as usize * page, &mut got);
            pattern(k::random_page(t, last, pages) as usize * page, &mut want);
            wrong += usize::from(got != want);
        }
        if bad + wrong > 0 {
            eprintln!("bench_file: random pread: {bad} GPU reads failed, {wrong} last reads wrong");
            failed = true;
        }
        if direct {
            let secs = launch(
                &rt,
                &g,
                "pread_random",
                cfg.rand_threads,
                [fd, host.device_ptr(), pages, cfg.rand_reads, l],
            );
            direct_iops.push(reads as f64 / secs);
            let lat = download_u64(&rand_lat, reads as usize);
            let bad = lat.iter().filter(|&&v| v == u64::MAX).count();
            direct_ns.extend(lat.iter().copied().filter(|&v| v != u64::MAX));
            let hs = host.as_slice();
            let mut wrong = 0;
            for t in 0..cfg.rand_threads as u64 {
                if lat[(t * cfg.rand_reads + last) as usize] == u64::MAX {
                    continue;
                }
                pattern(k::random_page(t, last, pages) as usize * page, &mut want);
                wrong += usize::from(hs[t as usize * page..(t as usize + 1) * page] != want[..]);
            }
            if bad + wrong > 0 {
                eprintln!(
                    "bench_file: random pread into the host buffer: {bad} GPU reads failed, {wrong} last reads wrong"
                );
                failed = true;
            }
        }
        match host_random(&file, pages, cfg.rings, cfg.rand_threads, reads) {
            Ok(run) => {
                if run.failed + run.wrong > 0 {
                    eprintln!(
                        "bench_file: host io_uring random pread: {} reads failed, {} wrong",
                        run.failed, run.wrong
                    );
                    failed = true;
                }
                uring_iops.push(reads as f64 / run.secs);
                uring_ns.extend(run.lat_ns);
            }
            Err(e) => {
                eprintln!("bench_file: host io_uring: {e}");
                uring_error = Some(e);
                failed = true;
                break;
            }
        }
        eprintln!(
            "random pread rep {rep}: gpuio {:.0} IOPS, host io_uring {:.0} IOPS",
            gpu_iops[rep], uring_iops[rep]
        );
    }
    // The same reads once more, in phases (a diagnostic; the kernel holds what it took
    // outside the wait, so it runs only with independent scheduling).
    let lockstep = g
        .module
        .as_ref()
        .and_then(|m| m.scheduling())
        .is_some_and(|s| s == gpuio::Scheduling::Lockstep);
    let mut phases: [Vec<u64>; k::RANDOM_PHASES] = Default::default();
    let mut reaping = [0u64; k::RANDOM_REAP];
    let mut phases_secs = 0.0;
    let mut parts = Vec::new();
    if !lockstep && std::env::var_os("GPUIO_BENCH_PARTS").is_some() {
        // Diagnostic (GPUIO_BENCH_PARTS): the same reads through the runtime's parts,
        // untimed, with the runtime's wait and with the phases kernel's.
        for (mode, what) in [(0u64, "Context::wait"), (1, "the phases kernel's wait")] {
            let secs = launch(
                &rt,
                &g,
                "pread_random_parts",
                cfg.rand_threads,
                [fd, slots.addr(), pages, cfg.rand_reads, mode],
            );
            parts.push((what, secs));
        }
    }
    if !lockstep {
        let mut out = DevBuf::new(&g, reads as usize * k::RANDOM_ROW * 8);
        let o = out.addr();
        phases_secs = launch(
            &rt,
            &g,
            "pread_random_phases",
            cfg.rand_threads,
            [fd, slots.addr(), pages, cfg.rand_reads, o],
        );
        let v = download_u64(&out, reads as usize * k::RANDOM_ROW);
        let bad = v.chunks(k::RANDOM_ROW).filter(|r| r[0] == u64::MAX).count();
        if bad > 0 {
            eprintln!("bench_file: random pread in phases: {bad} GPU reads failed");
            failed = true;
        }
        for row in v.chunks(k::RANDOM_ROW).filter(|r| r[0] != u64::MAX) {
            for (p, x) in phases.iter_mut().zip(row) {
                p.push(*x);
            }
            for (sum, x) in reaping.iter_mut().zip(&row[k::RANDOM_PHASES..]) {
                *sum += x;
            }
        }
        for p in &mut phases {
            p.sort_unstable();
        }
    }
    drop((slots, rand_lat));

    // ---- pwrite from device memory (holding the pattern, from the checked pread).
    let out_path = cfg.dir.join(format!("gpuio-bench-out-{}", std::process::id()));
    let (mut gpu_w, mut host_w, mut host_w_n) = (Vec::new(), Vec::new(), Vec::new());
    // What the file system alone takes: the host writing from host memory, no device copy.
    let (mut fs_w, mut fs_w_n, mut fs_failed) = (Vec::new(), Vec::new(), false);
    {
        let mut at = 0;
        let mut buf = vec![0u8; 16 << 20];
        while at < cfg.size {
            let n = buf.len().min(cfg.size - at);
            pattern(at, &mut buf[..n]);
            dev.upload(at, &buf[..n]);
            at += n;
        }
    }
    for rep in 0..cfg.reps {
        let out = rw(&out_path);
        let (a, e2) = (dev.addr(), errs.addr());
        gpu_w.push(gbps(
            cfg.size,
            launch(
                &rt,
                &g,
                "pwrite_bulk",
                cfg.threads,
                [out.as_raw_fd() as u64, a, cfg.size as u64, cfg.chunk as u64, e2],
            ),
        ));
        if rep == 0 {
            check(
                "pwrite from device memory",
                &|at, buf| out.read_exact_at(buf, at as u64).expect("read back"),
                &mut failed,
            );
        }
        drop(out);
        let out = File::create(&out_path).expect("create");
        host_w.push(gbps(
            cfg.size,
            host_pipeline(&out, &mut dev, &mut pins1, cfg.size, true),
        ));
        drop(out);
        let out = rw(&out_path);
        host_w_n.push(gbps(
            cfg.size,
            host_pipeline(&out, &mut dev, &mut pins_n, cfg.size, true),
        ));
        if rep == 0 {
            check(
                &format!("host x{} pwrite from device memory", cfg.host_threads),
                &|at, buf| out.read_exact_at(buf, at as u64).expect("read back"),
                &mut failed,
            );
        }
        drop(out);
        // Not beside the file system alone's file: the next rep makes it again.
        let _ = std::fs::remove_file(&out_path);
        for (rates, threads) in [(&mut fs_w, 1), (&mut fs_w_n, cfg.host_threads)] {
            if fs_failed {
                break;
            }
            // Hot: each thread reuses one buffer, the most any writer gets there.
            match write_fresh(&cfg.dir, cfg.size as u64, threads, cfg.block, Source::Hot) {
                Ok(rate) => rates.push(rate),
                Err(e) => {
                    eprintln!(
                        "bench_file: the file system alone (host pwrite into {}): {e}",
                        cfg.dir.display()
                    );
                    (failed, fs_failed) = (true, true);
                }
            }
        }
        let shown = |v: &[f64]| match v.get(rep) {
            Some(r) if !fs_failed => format!("{r:.2}"),
            _ => "failed".to_string(),
        };
        eprintln!(
            "pwrite rep {rep}: gpuio {:.2} GB/s, host x1 {:.2} GB/s, host x{} {:.2} GB/s; from host memory: x1 {}, x{} {}",
            gpu_w[rep],
            host_w[rep],
            cfg.host_threads,
            host_w_n[rep],
            shown(&fs_w),
            cfg.host_threads,
            shown(&fs_w_n)
        );
    }
    errs.download(0, &mut e);
    if u64::from_le_bytes(e) != 0 {
        eprintln!("bench_file: {} GPU transfers failed", u64::from_le_bytes(e));
        failed = true;
    }
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&path);
    let stats = rt.stats();
    drop(host);
    let (d, h) = (median(gpu_dev), median(gpu_host));
    let (p, pn) = (median(host_pipe), median(host_pipe_n));
    let (w, hw, hwn) = (median(gpu_w), median(host_w), median(host_w_n));
    // `None` when a run failed (said above).
    let fs = (!fs_failed).then(|| {
        let best = fs_w.iter().chain(&fs_w_n).fold(0.0f64, |a, &b| a.max(b));
        (median(fs_w), median(fs_w_n), best)
    });
    let xn = format!("host x{}", cfg.host_threads);
    let ratio_n = format!("gpuio / host x{}", cfg.host_threads);
    let row = |case: &str, gpu: f64, x1: f64, xn: f64| {
        vec![
            case.to_string(),
            format!("{gpu:.2}"),
            format!("{x1:.2}"),
            format!("{xn:.2}"),
            format!("{:.2}", gpu / x1),
            format!("{:.2}", gpu / xn),
        ]
    };
    println!();
    println!("## {} MiB, median of {} reps, GB/s", cfg.size >> 20, cfg.reps);
    write_table(
        &mut std::io::stdout(),
        &[
            "case",
            "gpuio (GPU threads)",
            "host x1",
            &xn,
            "gpuio / host x1",
            &ratio_n,
        ],
        vec![
            row("pread -> device memory (staged)", d, p, pn),
            row("pread -> host buffer (direct)", h, p, pn),
            row("pwrite <- device memory (staged)", w, hw, hwn),
        ],
        1,
    );
    match fs {
        Some((fw, fwn, _)) => println!(
            "the file system alone (the host's pwrite into a fresh file from a buffer each thread reuses, no device \
             copy): x1 {fw:.2} GB/s, x{} {fwn:.2} GB/s",
            cfg.host_threads
        ),
        None => println!("the file system alone: not measured (the error is above)"),
    }
    // The targets for several rings (N = 4 rings and 4 host threads).
    let backend_note = if gpu_present {
        ""
    } else {
        " [CPU backend: not the GPU's figure]"
    };
    let verdict = |ok: bool, ratio: f64| format!("{} ({ratio:.2})", if ok { "MET" } else { "NOT MET" });
    println!(
        "target (pread -> device memory >= 2.5x host x1, {} ring(s)){backend_note}: {}",
        cfg.rings,
        verdict(d >= 2.5 * p, d / p)
    );
    println!(
        "target (pread -> device memory >= 1.0x host x{}, {} ring(s)){backend_note}: {}",
        cfg.host_threads,
        cfg.rings,
        verdict(d >= pn, d / pn)
    );
    println!(
        "target (pwrite <- device memory >= 2x host x1, {} ring(s)){backend_note}: {}{}",
        cfg.rings,
        verdict(w >= 2.0 * hw, w / hw),
        match fs {
            Some((_, _, best)) if w < 2.0 * hw && 2.0 * hw > best => format!(
                "; it asks {:.2} GB/s of the file, more than the file system alone took from the host in any rep \
                 (at most {best:.2})",
                2.0 * hw
            ),
            _ => String::new(),
        }
    );
    gpu_ns.sort_unstable();
    direct_ns.sort_unstable();
    uring_ns.sort_unstable();
    println!();
    println!(
        "## random 4 KiB pread: {} threads x {} reads, host io_uring {} SQPOLL rings; median IOPS of {} reps, latency over all reads",
        cfg.rand_threads, cfg.rand_reads, cfg.rings, cfg.reps
    );
    let (gi, hi) = (
        median(gpu_iops.clone()),
        (!uring_iops.is_empty()).then(|| median(uring_iops.clone())),
    );
    let di = if direct_iops.is_empty() {
        f64::NAN
    } else {
        median(direct_iops.clone())
    };
    let or_dash = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let host_lat = |p: f64| (!uring_ns.is_empty()).then(|| quantile_us(&uring_ns, p));
    write_table(
        &mut std::io::stdout(),
        &[
            "case",
            "gpuio IOPS",
            "gpuio p50 us",
            "gpuio p99 us",
            "host io_uring IOPS",
            "host p50 us",
            "host p99 us",
            "gpuio / host",
        ],
        [
            ("device memory (staged)", gi, &gpu_ns),
            ("host buffer (direct)", di, &direct_ns),
        ]
        .into_iter()
        .filter(|(_, _, ns)| !ns.is_empty())
        .map(|(to, iops, ns)| {
            vec![
                format!("random 4 KiB pread -> {to}"),
                format!("{iops:.0}"),
                format!("{:.2}", quantile_us(ns, 0.5)),
                format!("{:.2}", quantile_us(ns, 0.99)),
                or_dash(hi, 0),
                or_dash(host_lat(0.5), 2),
                or_dash(host_lat(0.99), 2),
                or_dash(hi.map(|hi| iops / hi), 2),
            ]
        })
        .collect(),
        1,
    );
    if !phases[0].is_empty() {
        println!();
        println!("## random 4 KiB pread -> device memory, in phases (diagnostic: one run, all reads)");
        // Timed as the staged row above is (reads / the launch's wall time), for the same
        // reads made with the runtime's parts instead of `io::pread`.
        println!(
            "this run: {} reads in {:.1} ms, {:.0} IOPS",
            phases[0].len(),
            phases_secs * 1e3,
            phases[0].len() as f64 / phases_secs
        );
        let names = [
            "take an arena block and a slot",
            "Context::submit",
            "wait for the completion",
            "copy out of the block",
        ];
        write_table(
            &mut std::io::stdout(),
            &["phase", "p50 us", "p99 us", "mean us"],
            names
                .iter()
                .zip(&phases)
                .map(|(name, ns)| {
                    vec![
                        name.to_string(),
                        format!("{:.2}", quantile_us(ns, 0.5)),
                        format!("{:.2}", quantile_us(ns, 0.99)),
                        format!("{:.2}", ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1e3),
                    ]
                })
                .collect(),
            1,
        );
        print_reaping(&reaping, phases_secs, cfg.rings, reads);
    }
    for (what, secs) in &parts {
        println!(
            "the runtime's parts, {what}: {reads} reads in {:.1} ms, {:.0} IOPS",
            secs * 1e3,
            reads as f64 / secs
        );
    }
    println!(
        "target (random 4 KiB pread, gpuio IOPS >= 0.8x host io_uring with {} rings){}: {}",
        cfg.rings,
        if gpu_present {
            ""
        } else {
            " [CPU backend: not the GPU's figure]"
        },
        match (hi, &uring_error) {
            (Some(hi), _) if gi >= 0.8 * hi => format!("MET (gpuio/host {:.2})", gi / hi),
            (Some(hi), _) => format!("NOT MET (gpuio/host {:.2})", gi / hi),
            (None, Some(e)) => format!("NOT MEASURED (host io_uring: {e})"),
            (None, None) => "NOT MEASURED".into(),
        }
    );
    println!(
        "bytes staged {} / direct {}; stray completions {}",
        stats.staged_bytes, stats.direct_bytes, stats.stray_completions
    );
    let (threads, idle) = sqpoll_cpu_while_idle(Duration::from_secs(1));
    println!(
        "idle cost: the runtime's {threads} SQPOLL thread(s) ran {:.2} ms on a CPU in 1 s with no requests ({} ring(s), {:.3}% of one core)",
        idle.as_secs_f64() * 1e3,
        cfg.rings,
        idle.as_secs_f64() * 100.0
    );
    if failed {
        println!("FAILED: see stderr");
        std::process::exit(1);
    }
    println!("all GPU transfers checked: correct");
}

/// How the waits of `pread_random_phases` reaped ([`k::RANDOM_REAP`] sums over every read),
/// in a run of `secs` over `rings` rings that made `reads` reads.
fn print_reaping(sums: &[u64; k::RANDOM_REAP], secs: f64, rings: u32, reads: u64) {
    let [full, cqes, to_first, first_to_last, last_to_end, empty, empty_ns, busy, batches, dispatch_ns, looks_ns, prepare_ns, fence_ns, finish_ns] =
        *sums;
    let per = |ns: u64, n: u64| {
        if n == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", ns as f64 / n as f64 / 1e3)
        }
    };
    // The reaps that found CQEs only: the empty ones include every lost try-lock.
    let held_ns = to_first + first_to_last + last_to_end;
    println!();
    println!(
        "## the reaping in those waits (diagnostic: sums over every wait; the rounds are those \
         of the lanes that went round for the lanes waiting with them, arch::by_one_lane)"
    );
    write_table(
        &mut std::io::stdout(),
        &["what", "value"],
        vec![
            vec!["reaps that found CQEs".into(), full.to_string()],
            vec![
                "CQEs they took (per read made)".into(),
                format!("{cqes} ({:.3})", cqes as f64 / reads.max(1) as f64),
            ],
            vec![
                "CQEs per reap".into(),
                if full == 0 {
                    "-".into()
                } else {
                    format!("{:.2}", cqes as f64 / full as f64)
                },
            ],
            vec![
                "us per reap: try-lock to the first batch of CQEs in hand".into(),
                per(to_first, full),
            ],
            vec![
                "us per reap: first batch to last (dispatches, further batches)".into(),
                per(first_to_last, full),
            ],
            vec![
                "us per reap: last batch's dispatch, head stores, unlock".into(),
                per(last_to_end, full),
            ],
            vec![
                "us per CQE, whole reaps".into(),
                per(to_first + first_to_last + last_to_end, cqes),
            ],
            vec!["reaps that found none".into(), empty.to_string()],
            vec!["us per empty reap".into(), per(empty_ns, empty)],
            vec!["rounds that found the reaper busy".into(), busy.to_string()],
            vec!["batches dispatched".into(), batches.to_string()],
            vec!["us per batch in Context::dispatch".into(), per(dispatch_ns, batches)],
            vec!["us per batch: looks".into(), per(looks_ns, batches)],
            vec!["us per batch: prepare".into(), per(prepare_ns, batches)],
            vec!["us per batch: fence".into(), per(fence_ns, batches)],
            vec!["us per batch: finish".into(), per(finish_ns, batches)],
            vec![
                "reaper held by reaps that found CQEs, share of the run per ring".into(),
                format!("{:.2}", held_ns as f64 / (secs * 1e9 * rings.max(1) as f64)),
            ],
        ],
        1,
    );
}
