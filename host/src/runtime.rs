//! The runtime: one io_uring, one shared arena holding the device [`Context`], a waker,
//! and a backend that runs kernels.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use gpuio_device::arch::host::{enter, ThreadIds};
use gpuio_device::context::{CONTEXT_MAGIC, STREAMS};
use gpuio_device::ring::Ring;
use gpuio_device::stream::{Flight, Stream};
use gpuio_device::sync::{AtomicU32, AtomicU64, Ordering, SharedCell};
use gpuio_device::uapi::{Cqe, Sqe};
use gpuio_device::Context;

use crate::backend::{self, Backend};
use crate::error::{Error, OutputErrors, PrintErrors, Result};
use crate::memory::{round_up, Mapping};
use crate::uring::{Uring, UringConfig};
use crate::waker::{self, Waker};

/// Builds a [`Runtime`].
///
/// ```
/// let rt = gpuio_host::Runtime::builder().sq_entries(64).log_bytes(1 << 16).build()?;
/// rt.launch(1, 4, || gpuio_device::println!("thread {}", gpuio_device::thread_idx()))?;
/// rt.synchronize()?;
/// # Ok::<(), gpuio_host::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    backend: Option<Backend>,
    sq_entries: u32,
    cq_entries: Option<u32>,
    log_bytes: usize,
    max_flights: u32,
    stdout_fd: RawFd,
    stderr_fd: RawFd,
    sq_thread_idle_ms: u32,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            backend: None,
            sq_entries: 256,
            cq_entries: None,
            log_bytes: 4 << 20,
            max_flights: 16,
            stdout_fd: 1,
            stderr_fd: 2,
            sq_thread_idle_ms: 50,
        }
    }
}

impl Builder {
    /// Forces a backend (otherwise `GPUIO_BACKEND`, otherwise the first available).
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = Some(b);
        self
    }
    /// SQ entries (a power of two; default 256).
    pub fn sq_entries(mut self, n: u32) -> Self {
        self.sq_entries = n;
        self
    }
    /// CQ entries (a power of two >= SQ entries; default twice the SQ).
    pub fn cq_entries(mut self, n: u32) -> Self {
        self.cq_entries = Some(n);
        self
    }
    /// Bytes of log per print stream (a power of two >= 64; default 4 MiB). Lines of any
    /// length fit: longer ones go out in pieces, still whole and in order.
    pub fn log_bytes(mut self, n: usize) -> Self {
        self.log_bytes = n;
        self
    }
    /// Writes in flight per regular-file stream (a power of two; default 16).
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

    /// Creates the runtime.
    pub fn build(self) -> Result<Runtime> {
        let (backend, notice) = backend::select(self.backend)?;
        if !self.log_bytes.is_power_of_two() || self.log_bytes < 64 {
            return Err(Error::Config(format!(
                "log_bytes must be a power of two >= 64, not {}",
                self.log_bytes
            )));
        }
        if !self.max_flights.is_power_of_two() {
            return Err(Error::Config(format!(
                "max_flights must be a power of two, not {}",
                self.max_flights
            )));
        }
        let cq_entries = self.cq_entries.unwrap_or(self.sq_entries.saturating_mul(2));
        let uring = Uring::new(UringConfig {
            sq_entries: self.sq_entries,
            cq_entries,
            sq_thread_idle_ms: self.sq_thread_idle_ms,
        })?;
        let shared = Arc::new(Shared::new(uring, &self)?);
        let waker = Waker::start(shared.clone()).map_err(|e| Error::Os {
            what: "starting the waker thread",
            source: e,
        })?;
        if let Some(n) = notice {
            if std::env::var_os("GPUIO_QUIET").is_none() {
                eprintln!("{n}");
            }
        }
        Ok(Runtime {
            shared,
            waker,
            backend,
            kernels: Mutex::new(Vec::new()),
        })
    }
}

/// Memory and ring shared with the device, the waker and kernel threads.
pub(crate) struct Shared {
    /// Dropped first: closing the ring stops SQPOLL before the memory goes.
    pub(crate) uring: Uring,
    arena: Mapping,
}

/// Where each part of the arena lives.
struct Layout {
    ready: usize,
    streams: [(usize, usize, usize); STREAMS], // flights, bits, buf
    total: usize,
}

impl Layout {
    fn new(sq_entries: u32, log_bytes: usize, max_flights: u32) -> Layout {
        let mut at = round_up(size_of::<Context>(), 128);
        let ready = at;
        at = round_up(at + sq_entries as usize * 4, 128);
        let mut streams = [(0, 0, 0); STREAMS];
        for s in &mut streams {
            let flights = at;
            at = round_up(at + max_flights as usize * size_of::<Flight>(), 128);
            let bits = at;
            at = round_up(at + log_bytes / 8, 4096);
            let buf = at;
            at = round_up(at + log_bytes, 4096);
            *s = (flights, bits, buf);
        }
        Layout {
            ready,
            streams,
            total: at,
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
    fn new(uring: Uring, cfg: &Builder) -> Result<Shared> {
        let p = uring.params;
        let layout = Layout::new(p.sq_entries, cfg.log_bytes, cfg.max_flights);
        let arena = Mapping::new(layout.total).map_err(|e| Error::Os {
            what: "mmap of the arena",
            source: e,
        })?;
        let base = arena.as_ptr();
        let fds = [cfg.stdout_fd, cfg.stderr_fd];
        // SAFETY: every pointer below points into `uring`'s or `arena`'s mappings at the
        // kernel's offsets or at our layout's, which the mappings cover; all of it lives as
        // long as `Shared`, which outlives every kernel and the waker (they hold an Arc).
        // The arena is zeroed, which is the initial state of the ready flags, bits and
        // flights; the Context is written once here, before anyone else can see it.
        unsafe {
            let w = |off: u32| uring.ring_word(off) as *const AtomicU32;
            let ring = Ring::new(
                w(p.sq_off.head),
                w(p.sq_off.tail),
                w(p.sq_off.flags),
                uring.sqes.as_ptr() as *const SharedCell<Sqe>,
                w(p.cq_off.head),
                w(p.cq_off.tail),
                uring.rings.as_ptr().add(p.cq_off.cqes as usize) as *const SharedCell<Cqe>,
                base.add(layout.ready) as *const AtomicU32,
                p.sq_entries,
                p.cq_entries,
            );
            let streams: [Stream; STREAMS] = std::array::from_fn(|i| {
                let (flights, bits, buf) = layout.streams[i];
                let (positional, pos) = output_mode(fds[i]);
                Stream::new(
                    i as u32,
                    fds[i],
                    positional,
                    pos,
                    base.add(buf) as *const SharedCell<u8>,
                    cfg.log_bytes as u64,
                    base.add(bits) as *const AtomicU64,
                    base.add(flights) as *const Flight,
                    if positional { cfg.max_flights } else { 1 },
                )
            });
            let ctx = Context {
                magic: CONTEXT_MAGIC,
                ring,
                streams,
                stderr_stream: if same_file(fds[0], fds[1]) { 0 } else { 1 },
                stray_completions: AtomicU32::new(0),
            };
            std::ptr::write(base as *mut Context, ctx);
        }
        Ok(Shared { uring, arena })
    }

    /// The device context at the start of the arena.
    pub(crate) fn context(&self) -> &Context {
        // SAFETY: written in `new`, lives as long as `self`.
        unsafe { &*(self.arena.as_ptr() as *const Context) }
    }

    /// Streams that print to distinct files.
    fn live_streams(&self) -> impl Iterator<Item = &Stream> {
        let ctx = self.context();
        ctx.streams
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i == 0 || ctx.stderr_stream as usize == *i)
            .map(|(_, s)| s)
    }
}

/// Counters for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// SQEs submitted so far.
    pub sqes: u32,
    /// Times the waker woke SQPOLL.
    pub wakeups: u64,
}

type KernelThread = JoinHandle<std::result::Result<(), String>>;

/// A gpuio runtime: creates the ring, runs kernels, drains their I/O.
pub struct Runtime {
    /// Dropped after synchronize and the waker (see `Drop`).
    shared: Arc<Shared>,
    waker: Waker,
    backend: Backend,
    kernels: Mutex<Vec<KernelThread>>,
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

    /// The device context (for host code that drives the protocol itself, like tests).
    pub fn context(&self) -> &Context {
        self.shared.context()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        Stats {
            sqes: self.context().ring.submitted(),
            wakeups: self.waker.wakeups(),
        }
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
                reason: "closures run only on the CPU backend".into(),
            });
        }
        let n = grid as u64 * block as u64;
        if n == 0 || n > 1 << 16 {
            return Err(Error::Config(format!(
                "the CPU backend runs 1..=65536 threads, not {grid} x {block}"
            )));
        }
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if kernels.is_empty() {
            self.rebase_positions();
        }
        self.waker.activate();
        let kernel = Arc::new(kernel);
        for i in 0..n as u32 {
            let ids = ThreadIds {
                thread_idx: i % block,
                block_idx: i / block,
                block_dim: block,
                grid_dim: grid,
            };
            let (shared, kernel) = (self.shared.clone(), kernel.clone());
            let spawned = std::thread::Builder::new().stack_size(256 << 10).spawn(move || {
                // SAFETY: `shared` (and so the context) outlives this thread: we hold an Arc.
                let _in_kernel = unsafe { enter(shared.context(), ids) };
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| kernel())).map_err(|p| {
                    let msg = p
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned());
                    format!("thread {i} panicked: {}", msg.unwrap_or_else(|| "(no message)".into()))
                })
            });
            match spawned {
                Ok(h) => kernels.push(h),
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
    /// (invariant 8), then reports failed kernels, and failed fire-and-forget prints
    /// since the last report (invariant 7).
    pub fn synchronize(&self) -> Result<()> {
        let threads: Vec<KernelThread> = std::mem::take(&mut *self.kernels.lock().unwrap_or_else(|e| e.into_inner()));
        let had_kernels = !threads.is_empty();
        let mut failures = Vec::new();
        for t in threads {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(msg)) => failures.push(msg),
                Err(_) => failures.push("a kernel thread died".into()),
            }
        }
        self.drain();
        if had_kernels {
            self.waker.deactivate();
        }
        self.settle_positions();
        if !failures.is_empty() {
            let n = failures.len();
            failures.truncate(4);
            return Err(Error::Kernel(format!("{n} thread(s) failed: {}", failures.join("; "))));
        }
        let errors = self.take_print_errors();
        if errors.outputs.is_empty() {
            Ok(())
        } else {
            Err(Error::Print(errors))
        }
    }

    /// Runs the protocol from the host until nothing is pending.
    fn drain(&self) {
        let ctx = self.context();
        let mut spins = 0u32;
        loop {
            ctx.progress();
            for s in &ctx.streams {
                ctx.flush(s);
            }
            if ctx.idle() {
                return;
            }
            waker::wake_if_needed(&self.shared);
            spins += 1;
            if spins < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
    }

    /// Positional streams: make position 0 the fd's current offset (the host may have
    /// written to the file between kernels). Only while no kernel runs.
    fn rebase_positions(&self) {
        for s in self.shared.live_streams() {
            if s.positional != 0 && s.idle() {
                // SAFETY: lseek only queries the offset of the fd.
                let pos = unsafe { libc::lseek(s.fd, 0, libc::SEEK_CUR) };
                if pos >= 0 {
                    let reserved = s.reserved.load(Ordering::Acquire);
                    s.base.store((pos as u64).wrapping_sub(reserved), Ordering::Release);
                }
            }
        }
    }

    /// Positional streams: leave the fd's offset after the last byte printed, as if the
    /// lines had been written with write(2).
    fn settle_positions(&self) {
        for s in self.shared.live_streams() {
            if s.positional != 0 {
                let end = s
                    .base
                    .load(Ordering::Acquire)
                    .wrapping_add(s.reserved.load(Ordering::Acquire));
                // SAFETY: lseek on the stream's fd moves only its offset.
                unsafe { libc::lseek(s.fd, end as libc::off_t, libc::SEEK_SET) };
            }
        }
    }

    fn take_print_errors(&self) -> PrintErrors {
        let mut outputs = Vec::new();
        for s in self.shared.live_streams() {
            let e = &s.errors;
            let failed = e.failed_writes.swap(0, Ordering::AcqRel);
            if failed > 0 {
                outputs.push(OutputErrors {
                    fd: s.fd,
                    failed_writes: failed,
                    errno: e.last_errno.load(Ordering::Acquire),
                    lost_bytes: e.lost_bytes.swap(0, Ordering::AcqRel),
                    lost_lines: e.lost_lines.swap(0, Ordering::AcqRel),
                });
            }
        }
        PrintErrors { outputs }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Err(e) = self.synchronize() {
            eprintln!("gpuio: at runtime drop: {e}");
        }
    }
}
