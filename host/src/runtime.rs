//! The runtime: one io_uring (or its host-thread fallback), one shared arena holding the
//! device [`Context`], a waker, and a backend that runs kernels.

use std::os::fd::RawFd;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gpuio_device::arch::host::{enter, ThreadIds};
use gpuio_device::arena::{Arena, MAX_REGIONS};
use gpuio_device::context::{CONTEXT_LAYOUT, CONTEXT_MAGIC, STREAMS};
use gpuio_device::pool::Pool;
use gpuio_device::request::Requests;
use gpuio_device::ring::Ring;
use gpuio_device::stream::{chunk_count, Flight, Stream};
use gpuio_device::sync::{AtomicI32, AtomicU32, AtomicU64, Ordering, SharedCell};
use gpuio_device::uapi::{Cqe, Sqe, IORING_SQ_CQ_OVERFLOW};
use gpuio_device::Context;

use crate::backend::{self, Backend, Opened};
use crate::cuda::{self, Arg, CuDevicePtr, Cuda};
use crate::error::{
    Error, HangReport, OutputErrors, PrintErrors, Refused, Result, RingWords, StreamPositions, Tickets, Waiting,
};
use crate::hsa::{self, Hsa};
use crate::memory::{round_up, Mapping};
use crate::sandbox::{self, Sandbox};
use crate::scheduling::Scheduling;
use crate::submission::{self, Queue, Submission};
use crate::uring::{UringConfig, MAX_CQ_ENTRIES};
use crate::waker::Waker;
use crate::watchdog::{self, HangPolicy, Pacing};

/// The largest log per stream: 1 TiB.
const MAX_LOG_BYTES: usize = 1 << 40;

/// Builds a [`Runtime`].
///
/// ```
/// use gpuio_host::{Backend, Runtime};
/// let rt = Runtime::builder().backend(Backend::Cpu).sq_entries(64).log_bytes(1 << 16).build()?;
/// rt.launch(1, 4, || gpuio_device::println!("thread {}", gpuio_device::thread_idx()))?;
/// rt.synchronize()?;
/// # Ok::<(), gpuio_host::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    backend: Option<Backend>,
    sq_entries: u32,
    cq_entries: Option<u32>,
    log_bytes: Option<usize>,
    max_flights: u32,
    stdout_fd: RawFd,
    stderr_fd: RawFd,
    sq_thread_idle_ms: u32,
    gpu_stack_bytes: usize,
    sandbox: Sandbox,
    fixed_files: bool,
    submission: Option<Submission>,
    simulate_uring_errno: Option<i32>,
    arena_bytes: usize,
    arena_block_bytes: usize,
    lockstep: Option<bool>,
    /// `Some`: set with [`Builder::hang_timeout`]; `None`: `GPUIO_HANG_TIMEOUT`, else none.
    hang_timeout: Option<Option<Duration>>,
    /// Tests: when the default (no timeout) warns: first, then every.
    hang_warnings: Option<(Duration, Duration)>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            backend: None,
            sq_entries: 256,
            cq_entries: None,
            log_bytes: None,
            max_flights: 16,
            stdout_fd: 1,
            stderr_fd: 2,
            sq_thread_idle_ms: 50,
            gpu_stack_bytes: 8 << 10,
            sandbox: Sandbox::default(),
            fixed_files: true,
            submission: None,
            simulate_uring_errno: None,
            arena_bytes: 16 << 20,
            arena_block_bytes: 64 << 10,
            lockstep: None,
            hang_timeout: None,
            hang_warnings: None,
        }
    }
}

impl Builder {
    /// Forces a backend (otherwise `GPUIO_BACKEND`, otherwise the first available).
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = Some(b);
        self
    }
    /// SQ entries (a power of two up to 32768, the kernel's limit; default 256).
    pub fn sq_entries(mut self, n: u32) -> Self {
        self.sq_entries = n;
        self
    }
    /// CQ entries (a power of two >= SQ entries, up to 65536; default twice the SQ).
    pub fn cq_entries(mut self, n: u32) -> Self {
        self.cq_entries = Some(n);
        self
    }
    /// Bytes of log per print stream (a power of two from 64 to 2^40; default 4 MiB on the CPU
    /// backend, 64 MiB on GPUs, where far more threads print at once). Lines of any
    /// length fit: longer ones go out in pieces, still whole and in order.
    pub fn log_bytes(mut self, n: usize) -> Self {
        self.log_bytes = Some(n);
        self
    }
    /// Writes in flight per regular-file stream (a power of two up to 65536; default 16).
    pub fn max_flights(mut self, n: u32) -> Self {
        self.max_flights = n;
        self
    }
    /// Where `print!`/`println!` go (default 1).
    pub fn stdout_fd(mut self, fd: RawFd) -> Self {
        self.stdout_fd = fd;
        self
    }
    /// Where `eprint!`/`eprintln!` go (default 2).
    pub fn stderr_fd(mut self, fd: RawFd) -> Self {
        self.stderr_fd = fd;
        self
    }
    /// Milliseconds SQPOLL spins without work before it sleeps (default 50).
    pub fn sq_thread_idle_ms(mut self, ms: u32) -> Self {
        self.sq_thread_idle_ms = ms;
        self
    }

    /// Per-thread stack for GPU kernels (default 8 KiB; `core::fmt` needs more than
    /// CUDA's 1 KiB default). On HSA it is the private segment of kernels that use a
    /// dynamic stack (at least what their metadata asks for).
    pub fn gpu_stack_bytes(mut self, n: usize) -> Self {
        self.gpu_stack_bytes = n;
        self
    }

    /// Which io_uring requests the ring accepts (default [`Sandbox::PrintOnly`], what
    /// printing needs). The kernel refuses anything else with `EACCES`, without executing
    /// it, and [`Runtime::synchronize`] reports such refusals ([`Error::Refused`]). Where
    /// the kernel cannot restrict rings, the runtime still works, says so once on stderr,
    /// and [`Runtime::stats`] reports `Sandbox::Off`. See [`crate::sandbox`].
    pub fn sandbox(mut self, policy: Sandbox) -> Self {
        self.sandbox = policy;
        self
    }

    /// Registers stdout and stderr with the ring (`IORING_REGISTER_FILES`) and has print
    /// writes name them by index (`IOSQE_FIXED_FILE`); [`Sandbox::PrintOnly`] then refuses
    /// writes to any other file (default: on). Device prints go to the files the fds
    /// referred to at `build`: a later `dup2` onto them does not redirect them.
    pub fn fixed_files(mut self, on: bool) -> Self {
        self.fixed_files = on;
        self
    }

    /// Who consumes the ring (otherwise `GPUIO_URING`, otherwise [`Submission::Auto`]):
    /// the kernel's SQPOLL thread, or a host thread with ordinary syscalls where io_uring
    /// is unavailable (see [`crate::submission`]).
    pub fn submission(mut self, s: Submission) -> Self {
        self.submission = Some(s);
        self
    }

    /// Bytes of host-visible staging memory for device file I/O from device memory
    /// (a power of two, at least one block, up to 2^36; default 16 MiB). Transfers of any size
    /// go through it, in pieces of one block; it bounds how many bytes are in flight at once.
    pub fn arena_bytes(mut self, n: usize) -> Self {
        self.arena_bytes = n;
        self
    }

    /// Bytes per arena block, the largest piece of a staged transfer (a power of two from
    /// 4096, which a path must fit in, to 1 GiB; default 64 KiB).
    pub fn arena_block_bytes(mut self, n: usize) -> Self {
        self.arena_block_bytes = n;
        self
    }

    /// Asks for [`Scheduling::Lockstep`] on CUDA (otherwise `GPUIO_LOCKSTEP=1`, otherwise
    /// off): [`Runtime::load_matching`] then picks PTX built for a target before sm_70,
    /// which the GPU runs with the lanes of each warp in lockstep, as AMD GPUs run
    /// wavefronts; [`Runtime::load_module`] refuses PTX built for sm_70 or newer. It tests
    /// AMD's scheduling on NVIDIA hardware (see [`crate::scheduling`]). No effect on the
    /// CPU backend, whose threads are independent, nor on AMD GPUs, which are in lockstep
    /// anyway.
    pub fn lockstep(mut self, on: bool) -> Self {
        self.lockstep = Some(on);
        self
    }

    /// How long [`Runtime::synchronize`] (and so the runtime's drop) waits while nothing
    /// moves before it gives up with [`Error::Hang`], which names what is outstanding.
    /// `None`: it never gives up. Without this call, `GPUIO_HANG_TIMEOUT` decides (seconds,
    /// such as `2` or `0.5`; `0` or `off`: none); without either, there is none.
    ///
    /// "Moves" is anything the runtime can observe: the ring's heads and tails, on the CPU
    /// backend also each stream's positions, the SQ tickets and the number of kernel
    /// threads still running, and a GPU kernel finishing. So a kernel that computes for
    /// longer than the timeout without any I/O counts as hung too: pick a timeout longer
    /// than your kernels' longest silence. After `Error::Hang` the kernels may still run;
    /// the runtime stays as it was, and a later `synchronize` waits for them again.
    ///
    /// Without a timeout, a synchronize that sees nothing move for 30 s says so in one line
    /// on stderr, with the same report, then again every 5 minutes while nothing moves
    /// (`GPUIO_QUIET` silences these warnings, not errors): a hang is never silent.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use gpuio_host::{Backend, Error, Runtime};
    ///
    /// let rt = Runtime::builder()
    ///     .backend(Backend::Cpu)
    ///     .hang_timeout(Some(Duration::from_millis(200)))
    ///     .build()?;
    /// let go = Arc::new(AtomicBool::new(false));
    /// let g = go.clone();
    /// rt.launch(1, 2, move || {
    ///     while !g.load(Ordering::Acquire) {
    ///         std::thread::sleep(Duration::from_millis(1));
    ///     }
    /// })?;
    /// match rt.synchronize() {
    ///     Err(Error::Hang(report)) => assert_eq!(report.running_threads, 2, "{report}"),
    ///     other => panic!("expected a hang: {other:?}"),
    /// }
    /// go.store(true, Ordering::Release);
    /// rt.synchronize()?; // the threads finish now
    /// # Ok::<(), gpuio_host::Error>(())
    /// ```
    pub fn hang_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.hang_timeout = Some(timeout);
        self
    }

    /// Tests: when synchronize warns without a hang timeout (default: after 30 s, then
    /// every 5 minutes).
    #[doc(hidden)]
    pub fn hang_warnings(mut self, first: Duration, every: Duration) -> Self {
        self.hang_warnings = Some((first, every));
        self
    }

    /// Tests: makes io_uring setup fail with `errno`, as if the kernel had said so.
    #[doc(hidden)]
    pub fn simulate_uring_setup_error(mut self, errno: i32) -> Self {
        self.simulate_uring_errno = Some(errno);
        self
    }

    /// Creates the runtime.
    pub fn build(self) -> Result<Runtime> {
        let lockstep = match self.lockstep {
            Some(on) => on,
            None => Scheduling::lockstep_from_env()?.unwrap_or(false),
        };
        let hang_timeout = match self.hang_timeout {
            Some(Some(t)) if t.is_zero() => {
                return Err(Error::Config(
                    "hang_timeout must be longer than zero (None: never give up)".into(),
                ))
            }
            Some(t) => t,
            None => watchdog::timeout_from_env()?,
        };
        let mut hang = HangPolicy::new(hang_timeout);
        if let Some((first, every)) = self.hang_warnings {
            (hang.warn_first, hang.warn_every) = (first, every);
        }
        let (opened, notice) = backend::open(self.backend)?;
        let log_bytes = match (&opened, self.log_bytes) {
            (_, Some(n)) => n,
            (Opened::Cpu, None) => 4 << 20,
            (Opened::Cuda(_) | Opened::Hsa(_), None) => 64 << 20,
        };
        // (The upper bounds keep the sizes computed from these from overflowing, and
        // absurd values from mapping and populating gigabytes.)
        if !log_bytes.is_power_of_two() || !(64..=MAX_LOG_BYTES).contains(&log_bytes) {
            return Err(Error::Config(format!(
                "log_bytes must be a power of two from 64 to 2^40, not {log_bytes}"
            )));
        }
        if !self.max_flights.is_power_of_two() || self.max_flights > MAX_CQ_ENTRIES {
            return Err(Error::Config(format!(
                "max_flights must be a power of two up to {MAX_CQ_ENTRIES} (no more writes can be \
                 in flight than the largest CQ holds), not {}",
                self.max_flights
            )));
        }
        let block = self.arena_block_bytes;
        if !block.is_power_of_two() || !(4096..=1 << 30).contains(&block) {
            return Err(Error::Config(format!(
                "arena_block_bytes must be a power of two from 4096 to 2^30, not {block}"
            )));
        }
        if !self.arena_bytes.is_power_of_two() || !(block..=1 << 36).contains(&self.arena_bytes) {
            return Err(Error::Config(format!(
                "arena_bytes must be a power of two from arena_block_bytes ({block}) to 2^36, not {}",
                self.arena_bytes
            )));
        }
        let cq_entries = self.cq_entries.unwrap_or(self.sq_entries.saturating_mul(2));
        let (mut queue, queue_notice) = submission::open(
            UringConfig {
                sq_entries: self.sq_entries,
                cq_entries,
                sq_thread_idle_ms: self.sq_thread_idle_ms,
                start_disabled: self.sandbox != Sandbox::Off,
            },
            self.submission,
            self.simulate_uring_errno,
        )?;
        // Files, restrictions, then enable: before anything can submit. A host-thread ring
        // takes the same fixed files; restrictions mean nothing to it (it runs only the
        // operations it implements, each on the device's behalf).
        let fds = [self.stdout_fd, self.stderr_fd];
        let sandbox = match &mut queue {
            Queue::Uring(uring) => sandbox::configure(uring, self.sandbox, self.fixed_files, fds)?,
            Queue::Host(host) => {
                if self.fixed_files {
                    host.register_files(&sandbox::file_slots(fds));
                }
                sandbox::Setup {
                    policy: Sandbox::Off,
                    fixed_files: self.fixed_files,
                    notices: Vec::new(),
                }
            }
        };
        if std::env::var_os("GPUIO_QUIET").is_none() {
            for n in &sandbox.notices {
                eprintln!("{n}");
            }
        }
        let (backend, device) = match opened {
            Opened::Cpu => (Backend::Cpu, None),
            Opened::Cuda(c) => {
                c.set_stack_size(self.gpu_stack_bytes)?;
                (Backend::Cuda, Some(Device::Cuda(c)))
            }
            Opened::Hsa(h) => {
                h.set_stack_size(self.gpu_stack_bytes);
                (Backend::Hsa, Some(Device::Hsa(h)))
            }
        };
        let shared = Arc::new(Shared::new(
            queue,
            &self,
            log_bytes,
            device.clone(),
            sandbox.fixed_files,
        )?);
        let waker = Waker::start(shared.clone()).map_err(|e| Error::Os {
            what: "starting the waker thread",
            source: e,
        })?;
        if std::env::var_os("GPUIO_QUIET").is_none() {
            for n in [notice, queue_notice].into_iter().flatten() {
                eprintln!("{n}");
            }
        }
        let gpu = device.map(|device| Gpu {
            device,
            drain: Mutex::new(None),
            launched: AtomicBool::new(false),
            drained: AtomicBool::new(true),
            fault: Mutex::new(None),
            #[cfg(feature = "hip")]
            hip: std::sync::OnceLock::new(),
        });
        Ok(Runtime {
            shared,
            waker,
            backend,
            kernels: Mutex::new(Kernels::default()),
            exits: Arc::new(Exits::default()),
            failures: Mutex::new(Vec::new()),
            hang,
            gpu,
            settled: Mutex::new([0; STREAMS]),
            sandbox: sandbox.policy,
            fixed_files: sandbox.fixed_files,
            lockstep,
        })
    }
}

/// The GPU a runtime runs kernels on.
#[derive(Clone)]
pub(crate) enum Device {
    Cuda(Arc<Cuda>),
    Hsa(Arc<Hsa>),
}

impl Device {
    /// Makes host memory GPU-visible; returns the address the GPU sees it at.
    ///
    /// # Safety
    /// The range stays mapped until `unmap_host`.
    pub(crate) unsafe fn map_host(&self, ptr: *mut u8, len: usize) -> Result<*mut u8> {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                // CUDA: unified addressing, checked in `register`.
                Device::Cuda(c) => c.register(ptr, len).map(|_| ptr),
                Device::Hsa(h) => h.lock(ptr, len),
            }
        }
    }

    /// # Safety
    /// `ptr` was mapped with `map_host`, and no kernel that may touch it runs.
    pub(crate) unsafe fn unmap_host(&self, ptr: *mut u8) {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                Device::Cuda(c) => c.unregister(ptr),
                Device::Hsa(h) => h.unlock(ptr),
            }
        }
    }

    fn alloc_zeroed(&self, len: usize) -> Result<u64> {
        match self {
            Device::Cuda(c) => c.alloc_zeroed(len),
            Device::Hsa(h) => h.alloc_zeroed(len),
        }
    }

    fn free(&self, d: u64) {
        match self {
            Device::Cuda(c) => c.free(d),
            Device::Hsa(h) => h.free(d),
        }
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        match self {
            Device::Cuda(c) => c.copy_to_device(dst, src),
            Device::Hsa(h) => h.copy_to_device(dst, src),
        }
    }

    fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        match self {
            Device::Cuda(c) => c.copy_from_device(dst, src),
            Device::Hsa(h) => h.copy_from_device(dst, src),
        }
    }

    /// Waits for every kernel (and copy) on the GPU: `wait` runs the watchdog's loop with
    /// the "done?" question it is given (`cuStreamQuery` on CUDA's null stream, the
    /// completion signal on HSA); then errors surface as [`Error::Kernel`]. On
    /// [`Error::Hang`] nothing is released that a running kernel may use.
    fn synchronize_with(&self, wait: impl FnOnce(&mut dyn FnMut() -> Result<bool>) -> Result<()>) -> Result<()> {
        match self {
            Device::Cuda(c) => {
                wait(&mut || c.idle())?;
                // Returns at once for gpuio's launches (all on the null stream, now idle);
                // it also waits for work the host put on streams of its own.
                c.synchronize()
            }
            Device::Hsa(h) => h.synchronize_with(|| wait(&mut || h.idle())),
        }
    }

    fn name(&self) -> &str {
        match self {
            Device::Cuda(c) => c.device_name(),
            Device::Hsa(h) => h.device_name(),
        }
    }
}

/// Where the protocol state (the [`Context`], ready flags, chunk counters, flights) lives.
enum State {
    /// CPU backend: host memory, shared by the kernel threads and the host's drain.
    Host(Mapping),
    /// GPU backends: device memory, touched only by GPU code. (On PCIe GPUs, GPU atomics on
    /// host memory are slow and not atomic against the CPU's.) The host reads and writes
    /// it with copies, only while no kernel runs; `image` is the host-side copy.
    Device {
        device: Device,
        dptr: CuDevicePtr,
        image: Mutex<Mapping>,
        /// Reads the context while kernels run (CUDA), for hang reports: made on first
        /// use; `Some(None)` once that failed.
        peek: Mutex<Option<Option<cuda::Peek>>>,
    },
}

/// Memory and ring shared with the device, the waker and kernel threads.
pub(crate) struct Shared {
    /// Closed (io_uring) or stopped (the fallback thread) before the memory below goes:
    /// its consumer stops reading it.
    pub(crate) queue: Queue,
    /// The print logs: host memory the kernel reads (GPU-registered on GPU backends).
    logs: Mapping,
    /// The file-I/O arena: host memory the kernel reads and writes (GPU-registered too).
    arena: Mapping,
    state: State,
    /// Which of the context's host-visible region entries are in use.
    pub(crate) regions: Mutex<[bool; MAX_REGIONS]>,
    /// Host buffers dropped while kernels might still use them: freed with the runtime.
    pub(crate) retired: Mutex<Vec<(Mapping, bool)>>,
    /// The output fds that the kernels write with `pwrite` at their own positions (regular
    /// files): after a kernel fault, when the context can no longer be read, they are moved
    /// to their end so that the host's own writes do not land on the kernels' lines.
    pub(crate) positional_fds: Vec<RawFd>,
}

/// Where each part lives: offsets into the state region and into the logs.
struct Layout {
    ready: usize,
    /// Completion slots: states, tags, results (`cq_entries` each).
    request_words: [usize; 3],
    /// Arena block states.
    block_states: usize,
    flights: [usize; STREAMS],
    chunks: [usize; STREAMS],
    state_len: usize,
    bufs: [usize; STREAMS],
    logs_len: usize,
}

impl Layout {
    fn new(sq_entries: u32, cq_entries: u32, log_bytes: usize, max_flights: u32, blocks: usize) -> Layout {
        let mut at = round_up(size_of::<Context>(), 128);
        let ready = at;
        at = round_up(at + sq_entries as usize * 4, 128);
        let mut request_words = [0; 3];
        for w in &mut request_words {
            *w = at;
            at = round_up(at + cq_entries as usize * 4, 128);
        }
        let block_states = at;
        at = round_up(at + blocks * 4, 128);
        let (mut flights, mut chunks) = ([0; STREAMS], [0; STREAMS]);
        for i in 0..STREAMS {
            flights[i] = at;
            at = round_up(at + max_flights as usize * size_of::<Flight>(), 128);
            chunks[i] = at;
            at = round_up(at + chunk_count(log_bytes as u64) * 4, 128);
        }
        let state_len = round_up(at, 4096);
        let bufs = std::array::from_fn(|i| i * log_bytes);
        Layout {
            ready,
            request_words,
            block_states,
            flights,
            chunks,
            state_len,
            bufs,
            logs_len: STREAMS * log_bytes,
        }
    }
}

/// How a print stream writes to its file descriptor.
fn output_mode(fd: RawFd) -> (bool, u64) {
    // SAFETY: fstat/fcntl/lseek on an fd we do not own only query it.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return (false, 0);
        }
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || fl & libc::O_APPEND != 0 {
            return (false, 0);
        }
        let pos = libc::lseek(fd, 0, libc::SEEK_CUR);
        if pos < 0 {
            return (false, 0);
        }
        (true, pos as u64)
    }
}

/// Whether two fds are the same open file (so stdout and stderr must share one stream).
fn same_file(a: RawFd, b: RawFd) -> bool {
    // SAFETY: fstat only queries.
    unsafe {
        let mut sa: libc::stat = std::mem::zeroed();
        let mut sb: libc::stat = std::mem::zeroed();
        libc::fstat(a, &mut sa) == 0 && libc::fstat(b, &mut sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino
    }
}

impl Shared {
    /// `fixed_files`: stdout and stderr are the ring's registered files 0 and 1.
    fn new(queue: Queue, cfg: &Builder, log_bytes: usize, device: Option<Device>, fixed_files: bool) -> Result<Shared> {
        let p = *queue.params();
        let (ring_sqes, ring_words) = (queue.sqes(), queue.rings());
        let blocks = cfg.arena_bytes / cfg.arena_block_bytes;
        let layout = Layout::new(p.sq_entries, p.cq_entries, log_bytes, cfg.max_flights, blocks);
        let os = |what| move |e| Error::Os { what, source: e };
        let logs = Mapping::new(layout.logs_len).map_err(os("mmap of the print logs"))?;
        let arena = Mapping::new(cfg.arena_bytes).map_err(os("mmap of the file-I/O arena"))?;
        // The state region's address as the agents that run the protocol see it, the host
        // memory the Context is first written to, and the addresses at which those agents
        // see the SQEs, the ring words and the logs (the host's, except where the GPU maps
        // host memory elsewhere: HSA on discrete GPUs without the SVM API).
        let (state, state_base, image_ptr, [sqes, rings, logs_view, arena_view]) = match device {
            None => {
                let m = Mapping::new(layout.state_len).map_err(os("mmap of the protocol state"))?;
                let base = m.as_ptr();
                let views = [ring_sqes.as_ptr(), ring_words.as_ptr(), logs.as_ptr(), arena.as_ptr()];
                (State::Host(m), base, base, views)
            }
            Some(device) => {
                let views = map_all(&device, [ring_sqes, ring_words, &logs, &arena])?;
                let unmap_all = || {
                    // SAFETY: mapped just above; no kernel has run yet.
                    unsafe {
                        for m in [ring_sqes, ring_words, &logs, &arena] {
                            device.unmap_host(m.as_ptr());
                        }
                    }
                };
                let dptr = device.alloc_zeroed(layout.state_len).inspect_err(|_| unmap_all())?;
                let image = Mapping::new(size_of::<Context>()).map_err(|e| {
                    unmap_all();
                    device.free(dptr);
                    Error::Os {
                        what: "mmap of the context image",
                        source: e,
                    }
                })?;
                let ptr = image.as_ptr();
                (
                    State::Device {
                        device,
                        dptr,
                        image: Mutex::new(image),
                        peek: Mutex::new(None),
                    },
                    dptr as *mut u8,
                    ptr,
                    views,
                )
            }
        };
        let fds = [cfg.stdout_fd, cfg.stderr_fd];
        // SAFETY: every pointer below points into `queue`'s, `logs`' or the state region's
        // memory, at the kernel's offsets or at our layout's, which those regions cover;
        // all of it lives as long as `Shared`, which outlives every kernel and the waker.
        // The state region is zeroed: the initial state of ready flags, chunk counters and flights.
        // The Context is written once here, before any agent can see it.
        unsafe {
            // The ring words, where the protocol's agents see them.
            let w = |off: u32| {
                let host = queue.ring_word(off) as *const u8;
                rings.add(host.offset_from(ring_words.as_ptr()) as usize) as *const AtomicU32
            };
            let ring = Ring::new(
                w(p.sq_off.head),
                w(p.sq_off.tail),
                w(p.sq_off.flags),
                sqes as *const SharedCell<Sqe>,
                w(p.cq_off.head),
                w(p.cq_off.tail),
                rings.add(p.cq_off.cqes as usize) as *const SharedCell<Cqe>,
                state_base.add(layout.ready) as *const AtomicU32,
                p.sq_entries,
                p.cq_entries,
            );
            let streams: [Stream; STREAMS] = std::array::from_fn(|i| {
                let (positional, pos) = output_mode(fds[i]);
                let mut s = Stream::new(
                    i as u32,
                    fds[i],
                    positional,
                    pos,
                    logs_view.add(layout.bufs[i]) as *const SharedCell<u8>,
                    log_bytes as u64,
                    state_base.add(layout.chunks[i]) as *const AtomicU32,
                    state_base.add(layout.flights[i]) as *const Flight,
                    if positional { cfg.max_flights } else { 1 },
                );
                // The kernel reads the log at the host's address.
                s.io_base = logs.as_ptr().add(layout.bufs[i]) as u64;
                if fixed_files {
                    s.fixed_file = i as i32;
                }
                s
            });
            let word = |i: usize| state_base.add(layout.request_words[i]);
            let requests = Requests::new(
                word(0) as *const AtomicU32,
                word(1) as *const AtomicU32,
                word(2) as *const AtomicI32,
                p.cq_entries,
            );
            let arena = Arena::new(
                arena_view as *const SharedCell<u8>,
                // The kernel reads and writes the arena at the host's address.
                arena.as_ptr() as u64,
                cfg.arena_block_bytes as u64,
                Pool::new(state_base.add(layout.block_states) as *const AtomicU32, blocks as u32),
            );
            let ctx = Context {
                magic: CONTEXT_MAGIC,
                ring,
                streams,
                stderr_stream: if same_file(fds[0], fds[1]) { 0 } else { 1 },
                stray_completions: AtomicU32::new(0),
                refused_requests: AtomicU32::new(0),
                refused_errno: AtomicI32::new(0),
                requests,
                arena,
                denied_requests: AtomicU32::new(0),
            };
            std::ptr::write(image_ptr as *mut Context, ctx);
        }
        let shared = Shared {
            queue,
            logs,
            arena,
            state,
            regions: Mutex::new([false; MAX_REGIONS]),
            retired: Mutex::new(Vec::new()),
            positional_fds: fds.iter().copied().filter(|&fd| output_mode(fd).0).collect(),
        };
        if let State::Device {
            device, dptr, image, ..
        } = &shared.state
        {
            let image = image.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the image holds the Context just written.
            let bytes = unsafe { std::slice::from_raw_parts(image.as_ptr(), size_of::<Context>()) };
            // On failure, dropping `shared` unmaps and frees.
            device.copy_to_device(*dptr, bytes)?;
        }
        Ok(shared)
    }

    /// The context, for the CPU backend (None when it lives on a GPU).
    pub(crate) fn host_context(&self) -> Option<&Context> {
        match &self.state {
            // SAFETY: written in `new`, lives as long as `self`.
            State::Host(m) => Some(unsafe { &*(m.as_ptr() as *const Context) }),
            State::Device { .. } => None,
        }
    }

    /// Runs `f` on the context, or on a fresh copy of it when it lives on a GPU.
    /// Only while no kernel runs.
    fn with_context<R>(&self, f: impl FnOnce(&Context) -> R) -> Result<R> {
        match &self.state {
            State::Host(_) => Ok(f(self.host_context().expect("host state"))),
            State::Device {
                device, dptr, image, ..
            } => {
                let image = image.lock().unwrap_or_else(|e| e.into_inner());
                // SAFETY: the image mapping is size_of::<Context>() bytes (at least).
                let bytes = unsafe { std::slice::from_raw_parts_mut(image.as_ptr(), size_of::<Context>()) };
                device.copy_from_device(bytes, *dptr)?;
                // SAFETY: a byte copy of a valid Context (plain data and atomics).
                Ok(f(unsafe { &*(image.as_ptr() as *const Context) }))
            }
        }
    }

    /// Runs `f` on the context as it is now, also while kernels run: on the CPU backend the
    /// context itself; on CUDA a copy read without waiting for the kernels (at most 200 ms
    /// for the copy); `None` where it cannot be read (HSA, or the copy failed or was slow).
    /// For diagnostics only: a copy may catch words mid-update.
    fn peek_context<R>(&self, f: impl FnOnce(&Context) -> R) -> Option<R> {
        match &self.state {
            State::Host(_) => self.host_context().map(f),
            State::Device {
                device: Device::Cuda(c),
                dptr,
                peek,
                ..
            } => {
                let mut peek = peek.lock().unwrap_or_else(|e| e.into_inner());
                let peek = peek.get_or_insert_with(|| cuda::Peek::new(c, size_of::<Context>()).ok());
                let bytes = peek
                    .as_mut()?
                    .read(*dptr, size_of::<Context>(), Duration::from_millis(200))
                    .ok()??;
                // SAFETY: a byte copy of a Context (plain data and atomics) in a page-aligned
                // buffer, which stays put while the lock is held.
                Some(f(unsafe { &*(bytes.as_ptr() as *const Context) }))
            }
            State::Device { .. } => None,
        }
    }

    /// Stores `v` into the field `field` selects. Only while no kernel runs.
    pub(crate) fn store<A: AtomicWord>(&self, field: impl Fn(&Context) -> &A, v: A::Value) -> Result<()> {
        match &self.state {
            State::Host(_) => {
                field(self.host_context().expect("host state")).set(v);
                Ok(())
            }
            State::Device {
                device, dptr, image, ..
            } => {
                let image = image.lock().unwrap_or_else(|e| e.into_inner());
                // SAFETY: the image holds a Context (written in `new`, refreshed by copies).
                let ctx = unsafe { &*(image.as_ptr() as *const Context) };
                let offset = field(ctx) as *const A as usize - image.as_ptr() as usize;
                field(ctx).set(v);
                device.copy_to_device(*dptr + offset as u64, A::bytes(v).as_ref())
            }
        }
    }

    /// Streams that print to distinct files.
    fn live_streams(ctx: &Context) -> impl Iterator<Item = &Stream> {
        ctx.streams
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i == 0 || ctx.stderr_stream as usize == *i)
            .map(|(_, s)| s)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let State::Device { peek, .. } = &self.state {
            // Before the memory it reads goes.
            drop(peek.lock().unwrap_or_else(|e| e.into_inner()).take());
        }
        if let State::Device { device, dptr, .. } = &self.state {
            // SAFETY: mapped in `new`; no kernel runs any more (the runtime synchronized
            // before dropping its last reference).
            unsafe {
                device.unmap_host(self.logs.as_ptr());
                device.unmap_host(self.arena.as_ptr());
                device.unmap_host(self.queue.rings().as_ptr());
                device.unmap_host(self.queue.sqes().as_ptr());
            }
            device.free(*dptr);
            for (m, mapped) in self.retired.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                if *mapped {
                    // SAFETY: mapped by `Runtime::host_buffer`; no kernel runs any more.
                    unsafe { device.unmap_host(m.as_ptr()) };
                }
            }
        }
    }
}

/// Maps the regions for the GPU, in order; on failure unmaps those already mapped.
fn map_all<const N: usize>(device: &Device, regions: [&Mapping; N]) -> Result<[*mut u8; N]> {
    let mut views = [std::ptr::null_mut(); N];
    for (i, m) in regions.iter().enumerate() {
        // SAFETY: the mappings live in `Shared`, whose Drop unmaps them for the GPU first.
        match unsafe { device.map_host(m.as_ptr(), m.len()) } {
            Ok(v) => views[i] = v,
            Err(e) => {
                for done in &regions[..i] {
                    // SAFETY: mapped in this loop; no kernel has run yet.
                    unsafe { device.unmap_host(done.as_ptr()) };
                }
                return Err(e);
            }
        }
    }
    Ok(views)
}

/// An atomic field of the context that the host may set between kernels.
pub(crate) trait AtomicWord {
    type Value: Copy;
    fn set(&self, v: Self::Value);
    fn bytes(v: Self::Value) -> impl AsRef<[u8]>;
}

impl AtomicWord for AtomicU64 {
    type Value = u64;
    fn set(&self, v: u64) {
        self.store(v, Ordering::Release)
    }
    fn bytes(v: u64) -> impl AsRef<[u8]> {
        v.to_ne_bytes()
    }
}

impl AtomicWord for AtomicU32 {
    type Value = u32;
    fn set(&self, v: u32) {
        self.store(v, Ordering::Release)
    }
    fn bytes(v: u32) -> impl AsRef<[u8]> {
        v.to_ne_bytes()
    }
}

/// Counters for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// SQEs submitted so far.
    pub sqes: u32,
    /// Times the waker woke SQPOLL (or unparked the host-thread fallback).
    pub wakeups: u64,
    /// Completions that matched no request in flight and succeeded: a protocol bug if
    /// ever non-zero.
    pub stray_completions: u32,
    /// Requests the kernel refused or failed that no print made, not yet reported by
    /// [`Runtime::synchronize`] (see [`Error::Refused`]).
    pub refused_requests: u32,
    /// The io_uring sandbox in force: the one asked for, or `Off` where the kernel could
    /// not restrict the ring.
    pub sandbox: Sandbox,
    /// Whether prints write to registered files (`IOSQE_FIXED_FILE`).
    pub fixed_files: bool,
    /// Bytes device file I/O moved through the arena (buffers in device memory).
    pub staged_bytes: u64,
    /// Bytes device file I/O moved directly to or from host buffers.
    pub direct_bytes: u64,
}

type KernelThread = JoinHandle<std::result::Result<(), String>>;

/// CPU-backend launches not yet synchronized.
#[derive(Default)]
struct Kernels {
    /// Their threads, not yet joined.
    threads: Vec<KernelThread>,
    /// `launch` calls not yet synchronized (each activated the waker once). Counted down
    /// only once their drain has completed: until then kernels or their I/O may use host
    /// buffers (`kernels_pending`).
    launches: usize,
}

/// How many CPU-backend kernel threads are running, and a signal when none is: what the
/// watchdog's wait for them waits on.
#[derive(Default)]
struct Exits {
    running: Mutex<usize>,
    none: Condvar,
}

impl Exits {
    fn running(&self) -> usize {
        *self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits up to `max` for the last thread to exit.
    fn wait(&self, max: Duration) {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.none.wait_timeout_while(running, max, |n| *n != 0);
    }
}

/// Counts a kernel thread as running until it drops (also when the thread unwinds, or is
/// never spawned).
struct Running(Arc<Exits>);

impl Running {
    fn new(exits: &Arc<Exits>) -> Running {
        *exits.running.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Running(exits.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut n = self.0.running.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        if *n == 0 {
            self.0.none.notify_all();
        }
    }
}

/// How synchronize's waits pace themselves (see [`Pacing`]).
///
/// CPU kernel threads: the last one's exit ends the pause at once (a condition variable),
/// so the wait neither spins nor yields; it wakes every 10 ms only to look for progress.
const THREADS_PACING: Pacing = Pacing {
    spins: 0,
    yields: 0,
    first_pause: Duration::from_millis(10),
    max_pause: Duration::from_millis(10),
};
/// The host's drain: as the device's own backoff (`gpuio_device::sync::Backoff`), which
/// `Context::drain` uses: completions usually arrive within microseconds, so it yields for
/// a long while, then dozes 50 µs at a time.
const DRAIN_PACING: Pacing = Pacing {
    spins: 8,
    yields: 4096,
    first_pause: Duration::from_micros(1),
    max_pause: Duration::from_micros(50),
};
/// A GPU: a few µs of polling the driver, then sleeps growing to 1 ms while a long
/// kernel runs.
const GPU_PACING: Pacing = Pacing {
    spins: 16,
    yields: 16,
    first_pause: Duration::from_micros(1),
    max_pause: Duration::from_millis(1),
};

/// The GPU side of a runtime.
struct Gpu {
    device: Device,
    /// A module whose `gpuio_drain` kernel drains the context.
    drain: Mutex<Option<Arc<Loaded>>>,
    /// Kernels launched and not yet synchronized (set: the waker was activated once).
    launched: AtomicBool,
    /// The drain kernel has been launched after every kernel launched so far: a
    /// synchronize that gave up after launching it waits for it next time, without a
    /// second one.
    drained: AtomicBool,
    /// Why a kernel failed, once one did: the context is lost then (on CUDA every later
    /// call fails with the same sticky error), so the runtime refuses all further work.
    fault: Mutex<Option<String>>,
    /// The HIP device of the modules attached with [`Runtime::attach_hip_module`]: the
    /// runtime's GPU agent, seen through HIP, whose launches synchronize waits for too.
    #[cfg(feature = "hip")]
    hip: std::sync::OnceLock<crate::hip::Device>,
}

impl Gpu {
    /// Refuses work once a kernel has faulted, saying so.
    fn usable(&self) -> Result<()> {
        match &*self.fault.lock().unwrap_or_else(|e| e.into_inner()) {
            None => Ok(()),
            Some(fault) => Err(Error::Kernel(format!(
                "the GPU context is unusable after an earlier kernel fault ({fault}): this runtime \
                 runs nothing more"
            ))),
        }
    }

    pub(crate) fn faulted(&self) -> bool {
        self.fault.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

/// A gpuio runtime: creates the ring, runs kernels, drains their I/O.
pub struct Runtime {
    /// Dropped after synchronize and the waker (see `Drop`).
    shared: Arc<Shared>,
    waker: Waker,
    backend: Backend,
    kernels: Mutex<Kernels>,
    /// Running CPU kernel threads.
    exits: Arc<Exits>,
    /// Failures of joined kernel threads that a synchronize could not report yet (it gave
    /// up in the drain after joining them).
    failures: Mutex<Vec<String>>,
    /// When synchronize gives up or warns.
    hang: HangPolicy,
    gpu: Option<Gpu>,
    /// Each stream's `reserved` when its fd's offset was last settled.
    settled: Mutex<[u64; STREAMS]>,
    /// The io_uring sandbox in force.
    sandbox: Sandbox,
    /// Whether prints write to registered files.
    fixed_files: bool,
    /// Whether lockstep scheduling was asked for (CUDA: which PTX to load).
    lockstep: bool,
}

/// A code object loaded on one of the GPU backends.
enum Loaded {
    Cuda(cuda::Module),
    Hsa(hsa::Executable),
    /// A module the host program loaded with HIP (on the HSA backend's GPU).
    #[cfg(feature = "hip")]
    Hip(crate::hip::Module),
}

impl Loaded {
    fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        match self {
            Loaded::Cuda(m) => m.launch(name, grid, block, args),
            Loaded::Hsa(e) => e.launch(name, grid, block, args),
            #[cfg(feature = "hip")]
            Loaded::Hip(m) => m.launch(name, grid, block, args),
        }
    }

    fn global(&self, name: &str) -> Result<(u64, usize)> {
        match self {
            Loaded::Cuda(m) => m.global(name),
            Loaded::Hsa(e) => e.global(name),
            #[cfg(feature = "hip")]
            Loaded::Hip(m) => m.global(name),
        }
    }

    /// Copies from a global of the module (through HIP for a HIP module, whose device
    /// memory HIP owns; through the runtime's device otherwise).
    fn copy_from_global(&self, device: &Device, dst: &mut [u8], src: u64) -> Result<()> {
        match self {
            #[cfg(feature = "hip")]
            Loaded::Hip(m) => m.copy_from_device(dst, src),
            _ => device.copy_from_device(dst, src),
        }
    }

    /// Copies to a global of the module, as [`Loaded::copy_from_global`].
    fn copy_to_global(&self, device: &Device, dst: u64, src: &[u8]) -> Result<()> {
        match self {
            #[cfg(feature = "hip")]
            Loaded::Hip(m) => m.copy_to_device(dst, src),
            _ => device.copy_to_device(dst, src),
        }
    }
}

/// A GPU code object loaded into a runtime, with its context global set: a PTX module on
/// CUDA, an HSA executable on AMD GPUs.
pub struct GpuModule<'rt> {
    rt: &'rt Runtime,
    module: Arc<Loaded>,
    scheduling: Option<Scheduling>,
}

impl GpuModule<'_> {
    /// Launches kernel `name` on `grid` blocks of `block` threads (asynchronous;
    /// [`Runtime::synchronize`] waits). `args` must match the kernel's parameters (on HSA
    /// they are checked against the code object's metadata).
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        let gpu = self.rt.gpu.as_ref().expect("a GpuModule exists only on a GPU runtime");
        gpu.usable()?;
        if !gpu.launched.load(Ordering::Acquire) {
            self.rt.rebase_positions()?;
        }
        self.module.launch(name, grid, block, args)?;
        // Before `launched`: a synchronize that claims this launch drains it.
        gpu.drained.store(false, Ordering::Release);
        if !gpu.launched.swap(true, Ordering::AcqRel) {
            self.rt.waker.activate();
        }
        Ok(())
    }

    /// How the GPU runs the lanes of a warp for this module's kernels: lockstep on AMD GPUs
    /// and for PTX built before sm_70, independently otherwise; `None` for a CUDA module
    /// attached with [`Runtime::attach_cuda_module`], whose PTX target is not known here.
    pub fn scheduling(&self) -> Option<Scheduling> {
        self.scheduling
    }

    /// On CUDA, how long the driver spent compiling the module's PTX when it was loaded, in
    /// milliseconds (close to 0 when the driver's JIT cache had it).
    pub fn jit_ms(&self) -> Option<f32> {
        match &*self.module {
            Loaded::Cuda(m) => m.jit_ms(),
            Loaded::Hsa(_) => None,
            #[cfg(feature = "hip")]
            Loaded::Hip(_) => None,
        }
    }

    /// The device address and size of a global variable of the module.
    pub fn global(&self, name: &str) -> Result<(CuDevicePtr, usize)> {
        self.module.global(name)
    }

    /// The CUDA driver (for copies to and from the module's globals, say), on CUDA.
    pub fn cuda(&self) -> Option<&Arc<Cuda>> {
        match &self.rt.gpu.as_ref()?.device {
            Device::Cuda(c) => Some(c),
            Device::Hsa(_) => None,
        }
    }

    /// The HSA runtime (for copies to and from the module's globals, say), on HSA.
    pub fn hsa(&self) -> Option<&Arc<Hsa>> {
        match &self.rt.gpu.as_ref()?.device {
            Device::Hsa(h) => Some(h),
            Device::Cuda(_) => None,
        }
    }
}

impl Runtime {
    /// A runtime with default settings (backend from `GPUIO_BACKEND` or detected).
    pub fn new() -> Result<Runtime> {
        Builder::default().build()
    }

    /// A builder for custom settings.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The backend kernels run on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Who consumes the ring: [`Submission::IoUring`] (SQPOLL) or
    /// [`Submission::HostThread`] (the fallback).
    pub fn submission(&self) -> Submission {
        self.shared.queue.submission()
    }

    /// The GPU's name, on a GPU backend.
    pub fn device_name(&self) -> Option<&str> {
        self.gpu.as_ref().map(|g| g.device.name())
    }

    /// The GPU's processor, which picks the code object to load: `gfx90a` (the HSA
    /// agent's name) on AMD GPUs. `None` on CUDA (PTX is compiled for the GPU by the
    /// driver) and on the CPU.
    pub fn gpu_arch(&self) -> Option<&str> {
        match &self.gpu.as_ref()?.device {
            Device::Hsa(h) => Some(h.agent_name()),
            Device::Cuda(_) => None,
        }
    }

    /// The device context, on the CPU backend (for host code that drives the protocol
    /// itself, like tests). `None` on GPU backends, where it lives in device memory.
    pub fn context(&self) -> Option<&Context> {
        self.shared.host_context()
    }

    /// Counters (read while no kernel runs; zero if they cannot be read).
    pub fn stats(&self) -> Stats {
        let (sqes, stray_completions, refused_requests, staged_bytes, direct_bytes) = self
            .shared
            .with_context(|c| {
                (
                    c.ring.submitted(),
                    c.stray_completions.load(Ordering::Relaxed),
                    c.refused_requests.load(Ordering::Relaxed),
                    c.arena.staged_bytes.load(Ordering::Relaxed),
                    c.arena.direct_bytes.load(Ordering::Relaxed),
                )
            })
            .unwrap_or((0, 0, 0, 0, 0));
        Stats {
            sqes,
            wakeups: self.waker.wakeups(),
            stray_completions,
            refused_requests,
            sandbox: self.sandbox,
            fixed_files: self.fixed_files,
            staged_bytes,
            direct_bytes,
        }
    }

    /// Loads a PTX module (CUDA backend) and points its `gpuio_context` at this runtime.
    /// On the HSA backend, load an ELF code object with [`Runtime::load_code_object`] or
    /// [`Runtime::load_matching`] instead.
    pub fn load_module(&self, ptx: &str) -> Result<GpuModule<'_>> {
        self.load_code_object(ptx.as_bytes())
    }

    /// Loads a code object for this runtime's GPU and points its `gpuio_context` at this
    /// runtime: PTX text on CUDA, an AMDGPU ELF code object (`.hsaco`) for the GPU's
    /// processor on HSA.
    pub fn load_code_object(&self, image: &[u8]) -> Result<GpuModule<'_>> {
        let gpu = self.gpu.as_ref().ok_or_else(|| Error::BackendUnavailable {
            backend: "cuda or hsa",
            reason: format!("this runtime runs on the {} backend", self.backend.name()),
        })?;
        gpu.usable()?;
        let (module, scheduling) = match &gpu.device {
            Device::Cuda(c) => {
                let ptx = std::str::from_utf8(image.strip_suffix(&[0]).unwrap_or(image))
                    .map_err(|_| Error::Config("the CUDA backend loads PTX text, and this is not text".into()))?;
                // A module built against another layout is refused before the driver
                // compiles it (which can take tens of seconds); `install` checks the
                // loaded global too.
                if let Some(layout) = ptx_layout(ptx) {
                    check_layout(layout)?;
                }
                let scheduling = Scheduling::of_ptx(ptx);
                if self.lockstep && scheduling != Some(Scheduling::Lockstep) {
                    return Err(Error::Config(format!(
                        "lockstep scheduling was asked for (Builder::lockstep or GPUIO_LOCKSTEP=1), but \
                         this PTX targets {}: build the kernels for sm_60 too (gpuio-linker --arch sm_60) \
                         and load them with load_matching",
                        ptx.lines()
                            .find_map(|l| l.trim().strip_prefix(".target"))
                            .map_or("no .target", str::trim)
                    )));
                }
                // PTX for a target before sm_70 is compiled as one whole program, always:
                // compiled separately and linked by the driver, the sm_60 build ran with
                // independent thread scheduling on the H100 (the suite's lockstep probe: 256
                // of 256 lanes took a lock that lockstep lanes cannot), which would make the
                // lockstep build test nothing.
                let jit = match scheduling {
                    Some(Scheduling::Lockstep) => cuda::Jit::Whole,
                    _ => cuda::Jit::from_env()?,
                };
                (Loaded::Cuda(cuda::Module::load_with(c, ptx, jit)?), scheduling)
            }
            Device::Hsa(h) => (
                Loaded::Hsa(hsa::Executable::load(h, image)?),
                Some(Scheduling::Lockstep),
            ),
        };
        self.install(gpu, module, scheduling)
    }

    /// Loads, among code objects built for several GPUs (`(processor, bytes)`, like the
    /// tables `gpuio`'s build script generates), the one for this runtime's GPU: on HSA the
    /// one whose processor is the agent's (`gfx90a`); on CUDA the first PTX for sm_70 or
    /// newer (`sm_90`), or, when lockstep scheduling was asked for ([`Builder::lockstep`]),
    /// the first for a target before sm_70 (`sm_60`), or else the first PTX there is.
    /// Where none fits, [`Error::NoCodeObject`] names the GPU and what there was.
    pub fn load_matching(&self, objects: &[(&str, &[u8])]) -> Result<GpuModule<'_>> {
        let gpu = self.gpu.as_ref().ok_or_else(|| Error::BackendUnavailable {
            backend: "cuda or hsa",
            reason: format!("this runtime runs on the {} backend", self.backend.name()),
        })?;
        let found = match &gpu.device {
            Device::Hsa(h) => {
                let want = crate::code_object::processor_of_isa(h.agent_name());
                objects.iter().find(|(arch, _)| *arch == want)
            }
            Device::Cuda(_) => {
                let want = if self.lockstep {
                    Scheduling::Lockstep
                } else {
                    Scheduling::Independent
                };
                let ptx = || objects.iter().filter(|(arch, _)| arch.starts_with("sm_"));
                ptx()
                    .find(|(arch, _)| Scheduling::of_sm(arch) == Some(want))
                    .or_else(|| ptx().next().filter(|_| !self.lockstep))
            }
        };
        match found {
            Some((_, image)) => self.load_code_object(image),
            None => Err(Error::NoCodeObject {
                gpu: match &gpu.device {
                    Device::Hsa(h) => format!("{} ({})", h.agent_name(), h.isa()),
                    Device::Cuda(c) if self.lockstep => format!(
                        "{} (CUDA, lockstep scheduling asked for: wants PTX for a target before sm_70, e.g. sm_60)",
                        c.device_name()
                    ),
                    Device::Cuda(c) => format!("{} (CUDA: wants PTX, sm_NN)", c.device_name()),
                },
                available: objects.iter().map(|(arch, _)| arch.to_string()).collect(),
            }),
        }
    }

    /// Takes in an HSA executable that the host program loaded and froze itself for this
    /// runtime's agent ([`Hsa::agent`]): points its `gpuio_context` at this runtime and
    /// returns a module to launch its kernels with (explicit arguments in order, naturally
    /// aligned: an attached executable's metadata is not read). The executable is not
    /// destroyed when the module drops.
    ///
    /// # Safety
    /// `executable` is a frozen executable of this process's HSA runtime, loaded for this
    /// runtime's agent, and stays alive while the returned module and this runtime are.
    pub unsafe fn attach_hsa_executable(&self, executable: hsa::Handle) -> Result<GpuModule<'_>> {
        let (gpu, h) = self.hsa_gpu("")?;
        // SAFETY: the caller's contract.
        let exe = unsafe { hsa::Executable::attach(h, executable) };
        self.install(gpu, Loaded::Hsa(exe), Some(Scheduling::Lockstep))
    }

    /// The GPU and its HSA runtime, for attaching code objects the host loaded itself; on
    /// another backend, `BackendUnavailable` whose reason is `why` followed by the backend
    /// this runtime runs on.
    fn hsa_gpu(&self, why: &str) -> Result<(&Gpu, &Arc<Hsa>)> {
        match self.gpu.as_ref() {
            Some(
                gpu @ Gpu {
                    device: Device::Hsa(h), ..
                },
            ) => Ok((gpu, h)),
            _ => Err(Error::BackendUnavailable {
                backend: "hsa",
                reason: format!("{why}this runtime runs on the {} backend", self.backend.name()),
            }),
        }
    }

    /// Attaches a CUDA module that the caller loaded itself (the C API's
    /// `gpuio_attach_cuda_module`): points its `gpuio_context` at this runtime, as
    /// [`Runtime::load_module`] does for the modules it loads. The module is not unloaded
    /// when the returned handle drops. Kernels of it that the caller launches itself need
    /// [`Runtime::prepare_external_launch`] first.
    ///
    /// # Safety
    /// `cu_module` is a `CUmodule` loaded in device 0's primary context (the one this
    /// runtime uses), and stays loaded until this runtime is dropped.
    pub unsafe fn attach_cuda_module(&self, cu_module: *mut std::ffi::c_void) -> Result<GpuModule<'_>> {
        let Some(
            gpu @ Gpu {
                device: Device::Cuda(c),
                ..
            },
        ) = self.gpu.as_ref()
        else {
            return Err(Error::BackendUnavailable {
                backend: "cuda",
                reason: format!("this runtime runs on the {} backend", self.backend.name()),
            });
        };
        // SAFETY: the caller's contract.
        let module = unsafe { cuda::Module::borrow_raw(c, cu_module) };
        self.install(gpu, Loaded::Cuda(module), None)
    }

    /// Attaches a module that the host program loaded itself with HIP (`hipModuleLoadData`
    /// on HIP device `hip_device`; the C API's `gpuio_attach_hip_module`): points its
    /// `gpuio_context` at this runtime, as [`Runtime::attach_cuda_module`] does on CUDA.
    /// The runtime runs on the HSA backend (HIP runs on the same HSA runtime, so the shared
    /// memory is visible to HIP's kernels), and `hip_device` must be its GPU agent (checked
    /// by PCI location). Kernels of the module that the host launches itself need
    /// [`Runtime::prepare_external_launch`] first; [`Runtime::synchronize`] then waits for
    /// the device's HIP work too (its null stream, then `hipDeviceSynchronize`) and drains.
    /// [`GpuModule::launch`] launches on HIP's null stream; HIP reads each parameter's size
    /// from the code object, so the arguments must match the kernel's parameters.
    ///
    /// Only in builds with the `hip` feature (it links `libamdhip64`).
    ///
    /// # Safety
    /// `hip_module` is a `hipModule_t` loaded on `hip_device`, stays loaded until this
    /// runtime is dropped, and its kernels are launched with the arguments they take.
    #[cfg(feature = "hip")]
    pub unsafe fn attach_hip_module(
        &self,
        hip_module: *mut std::ffi::c_void,
        hip_device: i32,
    ) -> Result<GpuModule<'_>> {
        let (gpu, h) =
            self.hsa_gpu("a HIP module is attached to a runtime on the HSA backend (the same GPU, through ROCr); ")?;
        if hip_module.is_null() {
            return Err(Error::Config("the HIP module is null".into()));
        }
        let device = crate::hip::Device::open(hip_device, h.pci_location())?;
        let _ = gpu.hip.set(device.clone());
        // SAFETY: the caller's contract.
        let module = unsafe { crate::hip::Module::borrow_raw(hip_module, device) };
        self.install(gpu, Loaded::Hip(module), Some(Scheduling::Lockstep))
    }

    /// Tells the runtime that the caller is about to launch, itself, a kernel of a module
    /// attached with [`Runtime::attach_cuda_module`] or [`Runtime::attach_hsa_executable`]:
    /// SQPOLL is kept awake while it runs, and the next [`Runtime::synchronize`] waits for it
    /// and drains its prints.
    pub fn prepare_external_launch(&self) -> Result<()> {
        let gpu = self.gpu.as_ref().ok_or_else(|| Error::BackendUnavailable {
            backend: "cuda or hsa",
            reason: format!("this runtime runs on the {} backend", self.backend.name()),
        })?;
        gpu.usable()?;
        if !gpu.launched.load(Ordering::Acquire) {
            self.rebase_positions()?;
        }
        // Before `launched`: a synchronize that claims this launch drains it.
        gpu.drained.store(false, Ordering::Release);
        if !gpu.launched.swap(true, Ordering::AcqRel) {
            self.waker.activate();
        }
        Ok(())
    }

    /// Points a loaded module's `gpuio_context` at this runtime's context, and keeps the
    /// first module as the one whose `gpuio_drain` kernel synchronize launches.
    fn install(&self, gpu: &Gpu, module: Loaded, scheduling: Option<Scheduling>) -> Result<GpuModule<'_>> {
        gpu.usable()?;
        let State::Device { dptr, .. } = &self.shared.state else {
            unreachable!("GPU runtimes keep state on the device")
        };
        // A code object built against another version of the device crate would read the
        // context at the wrong offsets: refuse it.
        let (layout_at, size) = module.global("gpuio_layout").map_err(|e| {
            Error::Config(format!(
                "the code object has no `gpuio_layout` ({e}): it was not built with gpuio's device \
                 crate, or with a version older than this runtime"
            ))
        })?;
        let mut layout = [0u8; 8];
        if size != 8 {
            return Err(Error::Config(format!("gpuio_layout is {size} bytes, expected 8")));
        }
        module.copy_from_global(&gpu.device, &mut layout, layout_at)?;
        check_layout(u64::from_ne_bytes(layout))?;
        match &module {
            Loaded::Hsa(e) => e.install_context(*dptr)?,
            m => {
                let (global, size) = m.global("gpuio_context")?;
                if size != 8 {
                    return Err(Error::Config(format!(
                        "gpuio_context is {size} bytes, expected a pointer"
                    )));
                }
                m.copy_to_global(&gpu.device, global, &dptr.to_ne_bytes())?;
            }
        }
        let module = Arc::new(module);
        let mut drain = gpu.drain.lock().unwrap_or_else(|e| e.into_inner());
        if drain.is_none() {
            // Every module that links gpuio-device exports the drain kernel; check early.
            match &*module {
                Loaded::Cuda(m) => {
                    m.function("gpuio_drain")?;
                }
                Loaded::Hsa(e) => e.check_kernel("gpuio_drain")?,
                #[cfg(feature = "hip")]
                Loaded::Hip(m) => m.check_kernel("gpuio_drain")?,
            }
            *drain = Some(module.clone());
        }
        Ok(GpuModule {
            rt: self,
            module,
            scheduling,
        })
    }

    /// Launches `kernel` on `grid * block` threads (CPU backend: one host thread each,
    /// with its own ids). Returns at once; [`Runtime::synchronize`] waits.
    pub fn launch<F>(&self, grid: u32, block: u32, kernel: F) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        if self.backend != Backend::Cpu {
            return Err(Error::BackendUnavailable {
                backend: self.backend.name(),
                reason: "closures run only on the CPU backend; load a module and launch it".into(),
            });
        }
        let n = grid as u64 * block as u64;
        if n == 0 || n > 1 << 16 {
            return Err(Error::Config(format!(
                "the CPU backend runs 1..=65536 threads, not {grid} x {block}"
            )));
        }
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if kernels.launches == 0 {
            self.rebase_positions()?;
        }
        kernels.launches += 1;
        self.waker.activate();
        report_kernel_panics();
        let kernel = Arc::new(kernel);
        for i in 0..n as u32 {
            let ids = ThreadIds {
                thread_idx: i % block,
                block_idx: i / block,
                block_dim: block,
                grid_dim: grid,
            };
            let (shared, kernel) = (self.shared.clone(), kernel.clone());
            let running = Running::new(&self.exits);
            let spawned = std::thread::Builder::new().stack_size(256 << 10).spawn(move || {
                // Dropped last: the thread counts as running until the kernel is done.
                let _running = running;
                let ctx = shared.host_context().expect("CPU backend");
                // SAFETY: `shared` (and so the context) outlives this thread: we hold an Arc.
                let _in_kernel = unsafe { enter(ctx, ids) };
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| kernel())).map_err(|p| {
                    let msg = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned());
                    format!("thread {i} panicked: {}", msg.unwrap_or_else(|| "(no message)".into()))
                })
            });
            match spawned {
                Ok(h) => kernels.threads.push(h),
                Err(e) => {
                    drop(kernels);
                    let _ = self.synchronize();
                    return Err(Error::Os {
                        what: "spawning a kernel thread",
                        source: e,
                    });
                }
            }
        }
        Ok(())
    }

    /// Waits until every kernel finished and every request they submitted completed
    /// (invariant 8), then reports failed kernels, requests the kernel refused
    /// ([`Error::Refused`]), and failed fire-and-forget prints since the last report
    /// (invariant 7), in that order; what is not reported now is at the next call.
    ///
    /// No silent hang (invariant 11): if nothing moves for the hang timeout
    /// ([`Builder::hang_timeout`]), it returns [`Error::Hang`], naming what is outstanding;
    /// the kernels stay launched, and the next call waits for them again. Without a
    /// timeout it waits for as long as it takes, saying so on stderr after 30 s.
    pub fn synchronize(&self) -> Result<()> {
        if let Some(gpu) = &self.gpu {
            gpu.usable()?;
        }
        let mut failures = self.join_kernel_threads()?;
        if let Some(ctx) = self.shared.host_context() {
            if let Err(e) = self.drain_host(ctx) {
                // Joined: the synchronize that completes the drain reports them.
                self.keep_failures(failures);
                return Err(e);
            }
        }
        self.finish_cpu_launches();
        if let Some(gpu) = &self.gpu {
            // Claim the launches so far; a launch from now on activates the waker anew.
            if gpu.launched.swap(false, Ordering::AcqRel) {
                match self.synchronize_gpu(gpu) {
                    Ok(()) => self.waker.deactivate(),
                    Err(e @ Error::Hang(_)) => {
                        // Still launched. If a launch meanwhile found `launched` clear, it
                        // activated the waker again: once is enough.
                        if gpu.launched.swap(true, Ordering::AcqRel) {
                            self.waker.deactivate();
                        }
                        return Err(e);
                    }
                    Err(e) => {
                        self.settle_after_fault();
                        self.waker.deactivate();
                        let why = match &e {
                            Error::Kernel(why) => why.clone(),
                            e => e.to_string(),
                        };
                        *gpu.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                        return Err(e);
                    }
                }
            }
        }
        let sq_flags = self.ring_words()[2];
        if sq_flags & IORING_SQ_CQ_OVERFLOW != 0 {
            return Err(Error::CqOverflow { sq_flags });
        }
        self.settle_positions()?;
        if !failures.is_empty() {
            let n = failures.len();
            failures.truncate(4);
            return Err(Error::Kernel(format!("{n} thread(s) failed: {}", failures.join("; "))));
        }
        if let Some(refused) = self.take_refused()? {
            return Err(Error::Refused(refused));
        }
        let errors = self.take_print_errors()?;
        if errors.outputs.is_empty() {
            Ok(())
        } else {
            Err(Error::Print(errors))
        }
    }

    /// CPU backend: waits for the kernel threads launched so far and joins them; returns
    /// their failures, after those a synchronize that gave up could not report. On
    /// [`Error::Hang`] the threads stay launched.
    fn join_kernel_threads(&self) -> Result<Vec<String>> {
        let threads = std::mem::take(&mut self.kernels.lock().unwrap_or_else(|e| e.into_inner()).threads);
        let mut failures = std::mem::take(&mut *self.failures.lock().unwrap_or_else(|e| e.into_inner()));
        if threads.is_empty() {
            return Ok(failures);
        }
        // Threads of a launch racing with this call count too: this waits for them as
        // well, and the next synchronize joins them.
        let waited = self.wait(
            THREADS_PACING,
            || Ok(self.exits.running() == 0),
            |max| self.exits.wait(max),
            Waiting::KernelThreads,
        );
        if let Err(e) = waited {
            let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
            let later = std::mem::replace(&mut kernels.threads, threads);
            kernels.threads.extend(later);
            drop(kernels);
            self.keep_failures(failures);
            return Err(e);
        }
        for t in threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(msg)) => failures.push(msg),
                Err(_) => failures.push("a kernel thread died".into()),
            }
        }
        Ok(failures)
    }

    /// Keeps kernel failures for the next synchronize, before any kept meanwhile.
    fn keep_failures(&self, mut failures: Vec<String>) {
        let mut kept = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.append(&mut kept);
        *kept = failures;
    }

    /// CPU backend: runs the protocol until every stream is written out and every request
    /// completed ([`Context::drain`], under the watchdog). Only while no kernel thread runs.
    fn drain_host(&self, ctx: &Context) -> Result<()> {
        self.wait(
            DRAIN_PACING,
            || {
                ctx.progress();
                for s in &ctx.streams {
                    ctx.flush(s);
                }
                if ctx.idle() {
                    return Ok(true);
                }
                self.shared.queue.wake_if_needed();
                Ok(false)
            },
            std::thread::sleep,
            Waiting::Drain,
        )
    }

    /// CPU backend, after a completed drain: unless a launch racing with this synchronize
    /// left threads to join, every launch so far is synchronized, and the waker may rest
    /// (once per launch, as each activated it).
    fn finish_cpu_launches(&self) {
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        // Launches racing with this synchronize left threads to join: they stay counted.
        let done = if kernels.threads.is_empty() {
            std::mem::take(&mut kernels.launches)
        } else {
            0
        };
        drop(kernels);
        for _ in 0..done {
            self.waker.deactivate();
        }
    }

    /// GPU backends: waits for the kernels, launches the drain kernel (unless one was
    /// launched after the latest kernel already), and waits for it.
    fn synchronize_gpu(&self, gpu: &Gpu) -> Result<()> {
        let phase = if gpu.drained.load(Ordering::Acquire) {
            Waiting::GpuDrain
        } else {
            Waiting::GpuKernels
        };
        self.wait_gpu(gpu, phase)?;
        if !gpu.drained.swap(true, Ordering::AcqRel) {
            let drain = gpu.drain.lock().unwrap_or_else(|e| e.into_inner());
            let m = drain.as_ref().expect("a kernel was launched, so a module is loaded");
            m.launch("gpuio_drain", 1, 1, &[])?;
            drop(drain);
            self.wait_gpu(gpu, Waiting::GpuDrain)?;
        }
        Ok(())
    }

    fn wait_gpu(&self, gpu: &Gpu, waiting: Waiting) -> Result<()> {
        gpu.device
            .synchronize_with(|idle| self.wait(GPU_PACING, idle, std::thread::sleep, waiting))?;
        // The host's HIP launches run on HIP's queues, which the HSA backend's signal does
        // not count.
        #[cfg(feature = "hip")]
        if let Some(hip) = gpu.hip.get() {
            hip.synchronize_with(|idle| self.wait(GPU_PACING, idle, std::thread::sleep, waiting))?;
        }
        Ok(())
    }

    /// After a kernel fault: lets the requests the kernels submitted before it complete, so
    /// that what they wrote (a panic's report among it) is out before the fault is
    /// reported, and nothing uses the shared memory once the runtime frees it. Published
    /// SQEs are consumed and completed by the kernel whatever happened to the GPU; each
    /// gives one CQE, so the ring is settled when the CQ's tail has caught up with the
    /// SQ's. Bounded: a request that does not complete in time (a write to a full pipe)
    /// is left, as before. Then the regular files the kernels wrote at their own positions
    /// have their offsets moved to the end (see `Shared::positional_fds`).
    fn settle_after_fault(&self) {
        const SETTLE: Duration = Duration::from_secs(2);
        let start = std::time::Instant::now();
        while start.elapsed() < SETTLE {
            let [sq_head, sq_tail, _, _, cq_tail] = self.ring_words();
            if sq_head == sq_tail && cq_tail == sq_tail {
                break;
            }
            self.shared.queue.wake_if_needed();
            std::thread::sleep(Duration::from_micros(50));
        }
        // The kernels' positional writes ended at most at each file's end; the context that
        // knows exactly where is in device memory, out of reach now.
        for &fd in &self.shared.positional_fds {
            // SAFETY: lseek on an output fd moves only its offset.
            unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        }
    }

    /// The watchdog's wait ([`watchdog::wait`]) with this runtime's policy and observations.
    fn wait(
        &self,
        pacing: Pacing,
        done: impl FnMut() -> Result<bool>,
        pause: impl FnMut(Duration),
        waiting: Waiting,
    ) -> Result<()> {
        watchdog::wait(
            &self.hang,
            pacing,
            done,
            pause,
            || self.observe(waiting, false),
            |r| HangReport {
                stalled: r.stalled,
                ..self.observe(waiting, true)
            },
        )
    }

    /// What the runtime can observe now, for the watchdog: the ring's words; on the CPU
    /// backend also the SQ tickets, the streams' positions and the running kernel threads
    /// (all in host memory; on GPUs the context is in device memory, which the host
    /// cannot read while a kernel runs).
    fn observe(&self, waiting_for: Waiting, detailed: bool) -> HangReport {
        let [sq_head, sq_tail, sq_flags, cq_head, cq_tail] = self.ring_words();
        // The context is read every round on the CPU backend, where that is cheap; on a GPU
        // only for a report (it takes a copy from device memory).
        let cheap = matches!(self.shared.state, State::Host(_));
        let (tickets, streams) = (detailed || cheap)
            .then(|| {
                self.shared.peek_context(|c| {
                    let tickets = Tickets {
                        taken: c.ring.tickets.load(Ordering::Acquire),
                        published: c.ring.published.load(Ordering::Acquire),
                        reaped: c.ring.reaped.load(Ordering::Acquire),
                    };
                    let streams = Shared::live_streams(c)
                        .map(|s| StreamPositions {
                            fd: s.fd,
                            reserved: s.reserved.load(Ordering::Acquire),
                            committed: s.committed.load(Ordering::Acquire),
                            flushed: s.flushed.load(Ordering::Acquire),
                            released: s.released.load(Ordering::Acquire),
                        })
                        .collect();
                    (Some(tickets), streams)
                })
            })
            .flatten()
            .unwrap_or_default();
        HangReport {
            waiting_for,
            stalled: Duration::ZERO,
            ring: RingWords {
                sq_head,
                sq_tail,
                sq_flags,
                cq_head,
                cq_tail,
            },
            tickets,
            streams,
            running_threads: self.exits.running(),
        }
    }

    /// The hang timeout in force: set with [`Builder::hang_timeout`], else from
    /// `GPUIO_HANG_TIMEOUT`; `None`: synchronize never gives up.
    pub fn hang_timeout(&self) -> Option<Duration> {
        self.hang.timeout
    }

    /// Positional streams: make position 0 the fd's current offset (the host may have
    /// written to the file between kernels). Only while no kernel runs.
    fn rebase_positions(&self) -> Result<()> {
        let bases = self.shared.with_context(|ctx| {
            Shared::live_streams(ctx)
                .filter(|s| s.positional != 0 && s.idle())
                .filter_map(|s| {
                    // SAFETY: lseek only queries the offset of the fd.
                    let pos = unsafe { libc::lseek(s.fd, 0, libc::SEEK_CUR) };
                    (pos >= 0).then(|| {
                        (
                            s.index as usize,
                            (pos as u64).wrapping_sub(s.reserved.load(Ordering::Acquire)),
                        )
                    })
                })
                .collect::<Vec<_>>()
        })?;
        for (i, base) in bases {
            self.shared.store(|c| &c.streams[i].base, base)?;
        }
        Ok(())
    }

    /// Positional streams that printed since the last settle: leave the fd's offset after
    /// the last byte printed, as if the lines had been written with write(2). A stream that
    /// printed nothing leaves the offset alone: the fd may share its offset with others
    /// (`> log 2>&1`), which the host may have moved meanwhile.
    fn settle_positions(&self) -> Result<()> {
        let mut settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.with_context(|ctx| {
            for s in Shared::live_streams(ctx).filter(|s| s.positional != 0) {
                let reserved = s.reserved.load(Ordering::Acquire);
                let last = &mut settled[s.index as usize];
                if reserved == *last {
                    continue;
                }
                *last = reserved;
                let end = s.base.load(Ordering::Acquire).wrapping_add(reserved);
                // SAFETY: lseek on the stream's fd moves only its offset.
                unsafe { libc::lseek(s.fd, end as libc::off_t, libc::SEEK_SET) };
            }
        })
    }

    /// Diagnostics: the ring's words as the kernel keeps them, read now from host memory
    /// (safe at any time): `[sq_head, sq_tail, sq_flags, cq_head, cq_tail]`.
    #[doc(hidden)]
    pub fn ring_words(&self) -> [u32; 5] {
        let q = &self.shared.queue;
        let p = *q.params();
        [
            p.sq_off.head,
            p.sq_off.tail,
            p.sq_off.flags,
            p.cq_off.head,
            p.cq_off.tail,
        ]
        .map(|off| {
            // SAFETY: a ring word inside the queue's mapping, which lives as long as `self`;
            // a volatile read of a word others write is what the kernel's side allows.
            unsafe { std::ptr::read_volatile(q.ring_word(off)) }
        })
    }

    /// The shared memory and ring (for [`crate::host_buffer`]).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The GPU, if kernels run on one.
    pub(crate) fn device(&self) -> Option<&Device> {
        self.gpu.as_ref().map(|g| &g.device)
    }

    /// Whether kernels were launched and not yet synchronized (also after a synchronize
    /// that gave up: they, or their I/O, may still run).
    pub(crate) fn kernels_pending(&self) -> bool {
        let k = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        k.launches > 0 || !k.threads.is_empty() || self.gpu.as_ref().is_some_and(|g| g.launched.load(Ordering::Acquire))
    }

    /// Requests refused since the last report (and resets their count): requests no stream
    /// or device call made, and, under [`Sandbox::PrintOnly`], device file-I/O requests
    /// (the kernel refuses every one of them; the device caller got `EACCES` too).
    fn take_refused(&self) -> Result<Option<Refused>> {
        let (mut requests, mut errno, denied) = self.shared.with_context(|ctx| {
            (
                ctx.refused_requests.load(Ordering::Acquire),
                ctx.refused_errno.load(Ordering::Acquire),
                ctx.denied_requests.load(Ordering::Acquire),
            )
        })?;
        if denied != 0 {
            self.shared.store(|c| &c.denied_requests, 0)?;
            if self.sandbox == Sandbox::PrintOnly {
                requests += denied;
                errno = libc::EACCES;
            }
        }
        if requests == 0 {
            return Ok(None);
        }
        self.shared.store(|c| &c.refused_requests, 0)?;
        Ok(Some(Refused {
            requests,
            errno,
            sandbox: self.sandbox,
            fixed_files: self.fixed_files,
        }))
    }

    fn take_print_errors(&self) -> Result<PrintErrors> {
        let failed = self.shared.with_context(|ctx| {
            Shared::live_streams(ctx)
                .filter(|s| s.errors.failed_writes.load(Ordering::Acquire) > 0)
                .map(|s| {
                    let e = &s.errors;
                    let o = OutputErrors {
                        fd: s.fd,
                        failed_writes: e.failed_writes.load(Ordering::Acquire),
                        errno: e.last_errno.load(Ordering::Acquire),
                        lost_bytes: e.lost_bytes.load(Ordering::Acquire),
                        lost_lines: e.lost_lines.load(Ordering::Acquire),
                    };
                    (s.index as usize, o)
                })
                .collect::<Vec<_>>()
        })?;
        for &(i, _) in &failed {
            self.shared.store(|c| &c.streams[i].errors.failed_writes, 0)?;
            self.shared.store(|c| &c.streams[i].errors.lost_bytes, 0)?;
            self.shared.store(|c| &c.streams[i].errors.lost_lines, 0)?;
        }
        Ok(PrintErrors {
            outputs: failed.into_iter().map(|(_, o)| o).collect(),
        })
    }
}

/// Refuses a code object whose `gpuio_layout` is not this build's: one built against
/// another version of the device crate would read the context at the wrong offsets.
fn check_layout(layout: u64) -> Result<()> {
    if layout == CONTEXT_LAYOUT {
        return Ok(());
    }
    Err(Error::Config(format!(
        "the code object was built with another version of gpuio's device crate (context \
         layout {layout:#x}, this runtime's {CONTEXT_LAYOUT:#x}): rebuild it against this gpuio"
    )))
}

/// The value of `gpuio_layout` as the PTX text initializes it
/// (`.global .align 8 .b8 gpuio_layout[8] = {b0, ..., b7};`, little-endian bytes), if it
/// does so.
fn ptx_layout(ptx: &str) -> Option<u64> {
    let line = ptx.lines().find(|l| l.contains(" gpuio_layout[8] = {"))?;
    let inner = line.split_once('{')?.1.split_once('}')?.0;
    let bytes: Vec<u8> = inner.split(',').map(|b| b.trim().parse().ok()).collect::<Option<_>>()?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Makes a panicking kernel thread of the CPU backend print what a GPU's panic handler
/// prints (`gpuio_device::panic_handler!`): `kernel thread T (block B, thread I) panicked at
/// FILE:LINE:COL: MESSAGE`, on the runtime's stderr stream, in place of std's report.
/// Installed once per process, in front of the hook that was there, which still reports
/// every other thread's panics (and a kernel thread's panic inside a print, whose stream is
/// in the middle of a line then).
fn report_kernel_panics() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if gpuio_device::arch::context().is_null() || gpuio_device::arch::host::in_print() {
                previous(info)
            } else {
                let message = info.payload_as_str().unwrap_or("Box<dyn Any>");
                gpuio_device::entry::report_panic(info.location(), &message)
            }
        }));
    });
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // A kernel fault was reported already; the refusal would only repeat it.
        let reported = self.gpu.as_ref().is_some_and(Gpu::faulted);
        match self.synchronize() {
            Ok(()) => {}
            Err(Error::Hang(report)) => {
                // A kernel, or a request it submitted, may still use the shared memory, the
                // ring, the GPU's registrations of them and the drain kernel's module:
                // leak them rather than free them under it. (Kernel threads of the CPU
                // backend hold the Shared too; requests in flight in the kernel do not.)
                eprintln!(
                    "gpuio: at runtime drop: synchronize gave up (hang timeout): {report}; the \
                     runtime's memory, ring and GPU mappings are leaked, not freed, because the \
                     kernels or their I/O may still use them"
                );
                std::mem::forget(Arc::clone(&self.shared));
                std::mem::forget(self.gpu.take());
            }
            Err(e) => {
                if !reported {
                    eprintln!("gpuio: at runtime drop: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cq_overflow_flag_is_an_error() {
        // The host-thread fallback's SQ flags word is ours (the kernel's is not ours to set).
        let rt = Runtime::builder()
            .backend(Backend::Cpu)
            .submission(Submission::HostThread)
            .build()
            .unwrap();
        rt.launch(1, 1, || {}).unwrap();
        let flags = rt.shared.queue.ring_word(rt.shared.queue.params().sq_off.flags);
        // SAFETY: a ring word in the queue's mapping; the fallback thread never writes it.
        unsafe { std::ptr::write_volatile(flags, IORING_SQ_CQ_OVERFLOW) };
        match rt.synchronize() {
            Err(
                e @ Error::CqOverflow {
                    sq_flags: IORING_SQ_CQ_OVERFLOW,
                },
            ) => {
                assert!(e.to_string().contains("IORING_SQ_CQ_OVERFLOW"), "{e}")
            }
            other => panic!("expected a CQ overflow, got {other:?}"),
        }
        let report = rt.observe(Waiting::Drain, true);
        assert!(report.ring.cq_overflow());
        assert!(report.to_string().contains("CQ_OVERFLOW"), "{report}");
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(flags, 0) };
        rt.synchronize().unwrap();
    }

    #[test]
    fn the_layout_is_read_from_ptx_text() {
        let b = CONTEXT_LAYOUT.to_le_bytes().map(|x| x.to_string()).join(", ");
        let ptx = format!(".version 7.8\n.visible .global .align 8 .b8 gpuio_layout[8] = {{{b}}};\n");
        assert_eq!(ptx_layout(&ptx), Some(CONTEXT_LAYOUT));
        assert!(check_layout(CONTEXT_LAYOUT).is_ok());
        let other = ptx
            .replacen("= {", "= {1, ", 1)
            .replacen(&format!(", {}}}", CONTEXT_LAYOUT >> 56), "}", 1);
        let layout = ptx_layout(&other).expect("still 8 bytes");
        assert_ne!(layout, CONTEXT_LAYOUT);
        assert!(check_layout(layout)
            .unwrap_err()
            .to_string()
            .contains("another version"));
        assert_eq!(ptx_layout(".target sm_90\n"), None);
        assert_eq!(ptx_layout(".global .align 8 .b8 gpuio_layout[8] = {1, 2};"), None);
    }
}
