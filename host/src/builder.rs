//! [`Builder`]: a runtime's settings, checked and put together by [`Builder::build`].

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) use gpuio_device::protocol::context::MAX_RINGS;
use gpuio_device::protocol::context::STREAMS;

use crate::backend::cpu::Cpu;
use crate::backend::{self, Backend, Device};
use crate::consumer::affinity;
use crate::consumer::submission::{self, Queue, Submission};
use crate::consumer::uring::{UringConfig, MAX_CQ_ENTRIES};
use crate::consumer::waker::Waker;
use crate::consumer::{io_threads, landlock, restrictions};
use crate::error::{Error, Result};
use crate::rescue::Rescue;
use crate::resolve::{or_env, Resolved};
use crate::runtime::{Gpu, Runtime};
use crate::sandbox::Sandbox;
use crate::scheduling::Scheduling;
use crate::settings;
use crate::shared::{Shared, SharedConfig};
use crate::watchdog::HangPolicy;
use gpuio_device::protocol::arch::host::Doorbell;

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
    /// `None`: 1,024 on a GPU, 256 on the CPU backend.
    sq_entries: Option<u32>,
    cq_entries: Option<u32>,
    log_bytes: Option<usize>,
    stderr_log_bytes: Option<usize>,
    /// `None`: 16 on a GPU, 1 on the CPU backend.
    max_flights: Option<u32>,
    stdout_fd: RawFd,
    stderr_fd: RawFd,
    sq_thread_idle_ms: u32,
    gpu_stack_bytes: usize,
    cpu_stack_bytes: usize,
    file_root: Option<std::path::PathBuf>,
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
    /// `None`: `GPUIO_RINGS`, else chosen from the machine (`affinity::default_rings`).
    rings: Option<u32>,
    sqpoll_cpus: Option<Vec<u32>>,
    /// `None`: `GPUIO_GPU`, else the first GPU.
    gpu: Option<u32>,
    /// `None`: `GPUIO_SOLO`, else on.
    solo: Option<bool>,
    /// `None`: `GPUIO_SQPOLL`, else on on a GPU, or where `sqpoll_cpus` names CPUs; off
    /// on the CPU backend.
    sqpoll: Option<bool>,
    /// `None`: `GPUIO_REAL_TIME_WAKER`, else on.
    real_time_waker: Option<bool>,
    /// Tests and benchmarks: the solo ring's holder waits on the CQ tail even where it could
    /// wait on the result.
    solo_on_tail: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            backend: None,
            sq_entries: None,
            cq_entries: None,
            log_bytes: None,
            stderr_log_bytes: None,
            max_flights: None,
            stdout_fd: 1,
            stderr_fd: 2,
            sq_thread_idle_ms: 50,
            gpu_stack_bytes: 8 << 10,
            cpu_stack_bytes: crate::backend::cpu::DEFAULT_STACK_BYTES,
            file_root: None,
            sandbox: Sandbox::default(),
            fixed_files: true,
            submission: None,
            simulate_uring_errno: None,
            arena_bytes: 16 << 20,
            arena_block_bytes: 64 << 10,
            lockstep: None,
            hang_timeout: None,
            hang_warnings: None,
            rings: None,
            sqpoll_cpus: None,
            gpu: None,
            solo: None,
            sqpoll: None,
            real_time_waker: None,
            solo_on_tail: false,
        }
    }
}

/// The waker: on each look it rescues print streams on the CPU backend (`rescue.rs`), then
/// wakes a sleeping ring consumer with work waiting, or, on rings without SQPOLL, submits
/// what waits (so a rescue's SQEs go out in the same look). On those rings the waker is
/// the only thread that enters them, and its own doorbell submits at once.
fn start_waker(shared: &Arc<Shared>, real_time: bool) -> Result<Waker> {
    let (consumer, mut rescue) = (shared.clone(), Rescue::default());
    let entered = shared.entered();
    let bell = entered.then(|| {
        let shared = shared.clone();
        Arc::new(move || {
            shared.wake_if_needed();
        }) as Doorbell
    });
    Waker::start(
        move || {
            rescue.look(&consumer);
            consumer.wake_if_needed()
        },
        bell,
        real_time,
        shared.inline(),
    )
    .map_err(|e| Error::Os {
        what: "starting the waker thread",
        source: e,
    })
}

/// Runs `make` (which creates rings) on a new thread where the rings' threads must inherit
/// something from their maker, here otherwise: confined to `root` by Landlock (a thread's
/// confinement is for good), and, if `short_slice` (the CPU backend), with the short
/// scheduler slice, which SQPOLL, the io-wq workers it starts and the fallback's threads
/// then have from their first instant (set afterwards by thread id, it would race SQPOLL's
/// first run, before which the kernel names the ring's maker as its thread;
/// consumer/io_threads.rs). Best effort for the slice: where the kernel refuses it, `make` runs
/// all the same.
fn on_the_ring_thread<T: Send>(
    root: Option<&std::path::Path>,
    short_slice: bool,
    make: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    if root.is_none() && !short_slice {
        return make();
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("gpuio-rings".into())
            .spawn_scoped(s, || {
                if short_slice {
                    let _ = io_threads::shorten(0);
                }
                if let Some(root) = root {
                    landlock::confine_this_thread(root)?;
                }
                make()
            })
            .map_err(|e| Error::Os {
                what: "starting the thread that creates the rings",
                source: e,
            })?
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

impl Builder {
    /// Runs kernels on GPU `index` of the backend (numbered from 0 as its driver lists
    /// them; CUDA honours `CUDA_VISIBLE_DEVICES`), otherwise `GPUIO_GPU`, otherwise the
    /// first. A process drives several GPUs with a runtime for each: every runtime has its
    /// own rings, SQPOLL threads, logs and arena, and loads its own modules. A GPU named
    /// here that cannot be opened is an error (`build` never falls back to the CPU for it),
    /// as is naming one together with [`Backend::Cpu`].
    ///
    /// ```no_run
    /// # fn main() -> gpuio_host::Result<()> {
    /// use gpuio_host::Runtime;
    /// let gpus = gpuio_host::cuda::Cuda::device_count().unwrap_or(0);
    /// let runtimes = (0..gpus)
    ///     .map(|i| Runtime::builder().gpu(i).build())
    ///     .collect::<gpuio_host::Result<Vec<Runtime>>>()?;
    /// # Ok(()) }
    /// ```
    pub fn gpu(mut self, index: u32) -> Self {
        self.gpu = Some(index);
        self
    }

    /// Forces a backend (otherwise `GPUIO_BACKEND`, otherwise the first available).
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = Some(b);
        self
    }
    /// SQ entries of each ring (a power of two up to 32768, the kernel's limit; default
    /// 1,024 on a GPU, 256 on the CPU backend). A ring's requests in flight, and so a GPU's
    /// random reads in flight, are bounded by its CQ (twice the SQ): thousands of threads
    /// making small reads over small rings spend most of their time waiting for a
    /// completion slot. What an entry costs: 64 bytes of SQE and 32 of CQEs.
    pub fn sq_entries(mut self, n: u32) -> Self {
        self.sq_entries = Some(n);
        self
    }
    /// CQ entries (a power of two >= SQ entries, up to 65536; default twice the SQ).
    pub fn cq_entries(mut self, n: u32) -> Self {
        self.cq_entries = Some(n);
        self
    }
    /// Bytes of log per print stream, stdout's and stderr's (a power of two from 64 to 2^40).
    /// By default 4 MiB each on the CPU backend; on GPUs, where far more threads print at
    /// once, 32 MiB for stdout and 8 MiB for stderr (see [`Builder::stderr_log_bytes`]):
    /// enough for a GPU printing at full speed (a larger log was no faster), at half the
    /// setup of 64 MiB. Lines of any length fit: longer ones go out in pieces, still whole
    /// and in order. A larger log lets more lines be in flight at once; what it costs is
    /// memory and setup: its pages are allocated, zeroed and registered with the GPU driver
    /// when the runtime is built (a fraction of a millisecond per MiB).
    pub fn log_bytes(mut self, n: usize) -> Self {
        self.log_bytes = Some(n);
        self
    }
    /// Bytes of stderr's log alone (a power of two from 64 to 2^40), overriding
    /// [`Builder::log_bytes`] for it. Without either, stderr's log on GPUs is 8 MiB, a
    /// quarter of stdout's: `eprintln!` is for diagnostics, and the smaller log keeps the
    /// runtime's setup short. A kernel that writes most of its output to stderr should
    /// give it stdout's size.
    pub fn stderr_log_bytes(mut self, n: usize) -> Self {
        self.stderr_log_bytes = Some(n);
        self
    }
    /// Writes in flight per regular-file stream (a power of two up to 65536; default 16 on a
    /// GPU, 1 on the CPU backend).
    ///
    /// More flights let a GPU's bursts of lines go out without waiting for each write to
    /// land. On the CPU backend one is the default: a stream's writes run one after another
    /// in the kernel (an appending write waits for the one before it, `IOSQE_IO_DRAIN`),
    /// each needing io_uring's threads to get a core, so with more kernel threads
    /// computing than there are cores a line queued behind several writes waits for each;
    /// with one, the lines committed while a write is out all go in the next. What one
    /// flight costs there: nothing measurable in print throughput (`bench_print` did not
    /// tell 1, 4 and 16 apart); what more cost: a line's delay (`bench_liveness`).
    pub fn max_flights(mut self, n: u32) -> Self {
        self.max_flights = Some(n);
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
    /// Milliseconds SQPOLL spins without work before it sleeps (default 50; nothing where
    /// the rings have no SQPOLL, [`Builder::sqpoll`]).
    pub fn sq_thread_idle_ms(mut self, ms: u32) -> Self {
        self.sq_thread_idle_ms = ms;
        self
    }

    /// How many io_uring rings the runtime spreads device requests over (1 to 8; otherwise
    /// `GPUIO_RINGS`; otherwise one per CPU of [`Builder::sqpoll_cpus`] where those are
    /// named; otherwise, on a GPU, one per four free physical cores near it, 1 to 4, and 1
    /// on the CPU backend). Each ring has its own SQPOLL thread (on the CPU backend's rings
    /// without SQPOLL, the waker submits to all of them, and a request that can be done at
    /// once is done inside its submission, one at a time), which does the
    /// copies between the page cache and the buffers itself: with one ring, one kernel
    /// thread carries all file I/O, at about one host thread's rate. An extra ring's
    /// thread spins a core only while its ring has work and for
    /// [`sq_thread_idle_ms`](Builder::sq_thread_idle_ms) after. A block's requests go to ring `block_rank() % rings` (`block_idx` in 1-D); all
    /// prints go through ring 0, so every guarantee of print order holds as with one.
    /// With several rings the SQPOLL threads are bound to CPUs near the GPU, one per core
    /// (see [`Builder::sqpoll_cpus`]).
    ///
    /// ```
    /// use gpuio_host::{Backend, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).rings(2).build()?;
    /// assert_eq!(rt.stats().rings, 2);
    /// # Ok::<(), gpuio_host::Error>(())
    /// ```
    pub fn rings(mut self, n: u32) -> Self {
        self.rings = Some(n);
        self
    }

    /// Gives the runtime a solo ring (default: on; otherwise `GPUIO_SOLO=0` or `off` turns
    /// it off): a small ring of its own, served by ring 0's SQPOLL thread, that a GPU thread
    /// takes whole for one request's round trip when no other thread holds it
    /// (`gpuio_device::protocol::solo`). A lone thread's `pwrite` and `pread` (staged ones of up to
    /// 4 KiB, direct ones of up to 1 GiB), `open`, `close`, `fsync` and `fdatasync` then skip
    /// the shared rings' steps, so its round trip is about a quarter of theirs (on x86-64
    /// hosts the thread waits on the CQE's result itself, elsewhere on the CQ tail, a PCIe
    /// round trip more; BENCHMARKS.md has the figures). Threads that find it
    /// held go through the shared rings as before. By default a solo ring that cannot be
    /// made (the kernel refuses it) is done without, with a notice on stderr; asked for here
    /// or by `GPUIO_SOLO=1`, that is an error.
    ///
    /// ```
    /// use gpuio_host::{Backend, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).solo(false).build()?;
    /// assert!(!rt.stats().solo);
    /// # Ok::<(), gpuio_host::Error>(())
    /// ```
    pub fn solo(mut self, on: bool) -> Self {
        self.solo = Some(on);
        self
    }

    /// Makes the io_uring rings with SQPOLL, a kernel thread polling each ring's SQ
    /// (otherwise `GPUIO_SQPOLL`; default: on on a GPU, off on the CPU backend unless
    /// [`sqpoll_cpus`](Builder::sqpoll_cpus) names CPUs for the SQPOLL threads).
    ///
    /// A GPU cannot make a syscall, so its rings need SQPOLL: off is an error there. On the
    /// CPU backend, unasked, the kernel threads perform the requests themselves
    /// ([`Submission::Inline`]), which has no SQPOLL thread: on (here or by
    /// `GPUIO_SQPOLL=1`) makes its rings io_uring's instead (as [`Submission::Auto`]), and
    /// on with [`Submission::Inline`] asked for is an error. On the CPU backend's io_uring
    /// rings (with a file root, or `GPUIO_URING=auto` or `on`) the default is off: nothing
    /// polls, and the runtime's waker thread submits what kernel threads publish
    /// (`io_uring_enter`), woken by each publishing thread. On a CPU with more busy threads
    /// than cores that is the more prompt consumer: SQPOLL polls for its whole fair share
    /// of a core and then waits for the scheduler's next tick (milliseconds), while a
    /// thread that slept until there was work runs soon after it is woken. On runs the CPU
    /// backend as a GPU runs, SQPOLL's sleeps and wake-ups included; the test suite runs
    /// both. It does not apply to the host-thread fallback ([`Submission::HostThread`]);
    /// off with CPUs named for SQPOLL is an error.
    ///
    /// ```
    /// use gpuio_host::{Backend, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).sqpoll(true).build()?;
    /// // (Where io_uring is unavailable, the host-thread fallback serves the rings.)
    /// assert!(rt.stats().sqpoll || rt.submission() == gpuio_host::Submission::HostThread);
    /// # Ok::<(), gpuio_host::Error>(())
    /// ```
    pub fn sqpoll(mut self, on: bool) -> Self {
        self.sqpoll = Some(on);
        self
    }

    /// Lets the waker of io_uring rings without SQPOLL (the CPU backend's io_uring rings,
    /// where it submits: with a file root, or `GPUIO_URING=auto` or `on`) run at real-time
    /// priority, `SCHED_FIFO` 1, while launches have more threads than cores (with those
    /// still running), where the kernel allows it: with `CAP_SYS_NICE` (root; not a
    /// container's root by default) or an `RLIMIT_RTPRIO` of 1 or more. Otherwise
    /// `GPUIO_REAL_TIME_WAKER`; **default off**: gpuio takes no real-time thread it was not
    /// asked for. The io-wq workers that serve its rings' requests run so too.
    /// A notice says so, once, when it first takes effect; a launch that fits the cores
    /// puts them back under the fair scheduler.
    /// [`Stats::real_time_waker`](crate::Stats::real_time_waker) says whether it is in force.
    /// On rings performed inline ([`Submission::Inline`], the CPU backend's default) it has
    /// no effect: the kernel threads perform their own requests, and the waker is off the
    /// data path.
    ///
    /// Why one would: a printed line's write is a hand-off between these threads, and where
    /// the kernel's threads outnumber the cores each hand-off waits for one. Under the fair
    /// scheduler it may wait tens of milliseconds (docs/PROTOCOL.md, invariant 12); a
    /// real-time thread gets the core as soon as it wakes.
    /// What it costs everyone else: these threads preempt any thread of the fair scheduler,
    /// of this process or another, on their core each time they wake, and the io-wq
    /// workers hold it while they copy each request's bytes (docs/USAGE.md says what that
    /// costs a neighbouring process). The waker never polls at real-time
    /// priority: it parks between its looks. Nothing changes on a GPU, whose rings have
    /// SQPOLL.
    ///
    /// ```
    /// use gpuio_host::{Backend, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// assert!(!rt.stats().real_time_waker); // the default: never real-time
    /// # Ok::<(), gpuio_host::Error>(())
    /// ```
    pub fn real_time_waker(mut self, on: bool) -> Self {
        self.real_time_waker = Some(on);
        self
    }

    /// Binds ring `i`'s SQPOLL thread to CPU `cpus[i]` (`IORING_SETUP_SQ_AFF`); one CPU
    /// per ring (with no ring count given, the list sets it). Otherwise `GPUIO_SQPOLL_CPUS` (a list such as `2-5`), otherwise: one ring,
    /// and rings on the CPU backend, unbound; several on a GPU on CPUs near it, one per
    /// physical core, from the end of that list, when that leaves a core free (else
    /// unbound). [`Runtime::sqpoll_cpus`] says what was chosen. On the CPU backend, whose
    /// rings have no SQPOLL by default, naming CPUs turns it on ([`Builder::sqpoll`]).
    pub fn sqpoll_cpus(mut self, cpus: &[u32]) -> Self {
        self.sqpoll_cpus = Some(cpus.to_vec());
        self
    }

    /// Per-thread stack for GPU kernels (default 8 KiB; `core::fmt` needs more than
    /// CUDA's 1 KiB default). On CUDA it is the primary context's stack limit, which the
    /// process's other CUDA users share: where one set a larger limit, that one stays. On
    /// HSA it is the private segment of kernels that use a dynamic stack (at least what
    /// their metadata asks for).
    pub fn gpu_stack_bytes(mut self, n: usize) -> Self {
        self.gpu_stack_bytes = n;
        self
    }

    /// Stack of each CPU-backend kernel thread (default 256 KiB; at least 16 KiB). Each
    /// GPU thread of a CPU launch is an OS thread: a launch of `n` threads reserves `n`
    /// such stacks of address space (touched only as deep as the kernel goes) and about 4n
    /// memory mappings, which `vm.max_map_count` bounds (a launch beyond it is refused
    /// with [`Error::Config`]).
    pub fn cpu_stack_bytes(mut self, n: usize) -> Self {
        self.cpu_stack_bytes = n;
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

    /// Confines [`Sandbox::FileIo`]'s file access to the directory `root`: every file a
    /// kernel opens, creates or removes by path must lie beneath it (the kernel fails any
    /// other with `EACCES`, `..` and symlinks included). Enforced by the Linux kernel with
    /// Landlock (5.13+) in the credentials the rings' requests run with, on io_uring and the
    /// fallback alike; the program's own threads are not restricted. It confines paths only:
    /// device code may still read, write and close any descriptor the process holds, open
    /// files outside the root among them. Relative device paths still resolve against the
    /// process's working directory. Only with `Sandbox::FileIo`; without Landlock, `build`
    /// fails saying so.
    ///
    /// What Landlock does not check, and so the root does not confine on io_uring:
    /// - an `O_PATH` open: it succeeds on any path, so a kernel learns whether any path
    ///   exists (`ENOENT`) and what it is (`O_DIRECTORY`: `ENOTDIR`); the descriptor reads
    ///   and writes nothing, and a path opened beneath it is checked as any other;
    /// - a hard link: a link inside the root is a path beneath it, so a link that someone
    ///   else placed there reaches its inode outside (a kernel cannot make one: `FileIo`
    ///   has no `LINKAT`);
    /// - mode bits: a kernel may create a file with `S_ISUID` or `S_ISGID`, so, in a
    ///   process run as root, a set-user-ID-root file inside the root.
    ///
    /// The host-thread fallback's thread refuses the first and the third with `EACCES`
    /// (a permission error that the caller gets, as Landlock's, not counted as a sandbox
    /// refusal); hard links reach outside there too.
    ///
    /// ```no_run
    /// use gpuio_host::{Backend, Runtime, Sandbox};
    /// let rt = Runtime::builder()
    ///     .backend(Backend::Cpu)
    ///     .sandbox(Sandbox::FileIo)
    ///     .file_root("/tmp/kernel-files")
    ///     .build()?;
    /// # Ok::<(), gpuio_host::Error>(())
    /// ```
    pub fn file_root(mut self, root: impl Into<std::path::PathBuf>) -> Self {
        self.file_root = Some(root.into());
        self
    }

    /// Registers stdout and stderr with the ring (`IORING_REGISTER_FILES`) and has print
    /// writes name them by index (`IOSQE_FIXED_FILE`); [`Sandbox::PrintOnly`] then refuses
    /// writes to any other file (default: on). Device prints go to the files the fds
    /// referred to at `build`: a later `dup2` onto them does not redirect them. Not under
    /// [`Sandbox::FileIo`], whose rings register no file, so that no device `OPENAT` or
    /// `CLOSE` can replace or empty the slots (see there): its prints name the raw fds.
    pub fn fixed_files(mut self, on: bool) -> Self {
        self.fixed_files = on;
        self
    }

    /// Who consumes the ring (otherwise `GPUIO_URING`, otherwise on the CPU backend
    /// [`Submission::Inline`] unless a file root or SQPOLL (or CPUs for it) is asked for, and
    /// [`Submission::Auto`] on a GPU): the kernel's SQPOLL thread, a host thread with
    /// ordinary syscalls where io_uring is unavailable, or the CPU backend's kernel threads
    /// themselves (see [`Submission`](crate::Submission)).
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
    /// AMD's scheduling on NVIDIA hardware (see [`Scheduling`](crate::Scheduling)). No effect on the
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
    /// "Moves" is anything the runtime can observe: the rings' heads and tails, on the CPU
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
    ///     Err(Error::Hang(report)) => assert_eq!(report.running.count, 2, "{report}"),
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

    /// Tests and benchmarks: the solo ring's holder waits on the CQ tail, as it does on hosts
    /// other than x86-64, rather than on each CQE's `res` (`Solo::waiting_on_results`).
    #[doc(hidden)]
    pub fn solo_waits_on_tail(mut self, on: bool) -> Self {
        self.solo_on_tail = on;
        self
    }

    /// Creates the runtime: the settings checked, the backend opened, the rings opened, the
    /// shared memory laid out under the sandbox, the waker started.
    pub fn build(self) -> Result<Runtime> {
        self.check()?;
        let settings = self.resolve()?;
        let hang = self.hang_policy(settings.hang_timeout);
        let (device, backend_notice) = backend::open(settings.backend, settings.gpu)?;
        let log_bytes = self.log_sizes(device.is_some())?;
        let rings = self.open_rings(device.as_ref(), &settings)?;
        let backend = match &device {
            None => Backend::Cpu,
            Some(device) => {
                device.set_stack_size(self.gpu_stack_bytes)?;
                device.backend()
            }
        };
        let (shared, sandbox) = self.share(rings.queues, rings.solo, log_bytes, device.clone())?;
        let shared = Arc::new(shared);
        for n in &sandbox.notices {
            say_once(n);
        }
        // On rings without SQPOLL (the CPU backend's) the waker submits, and its requests
        // (and the io-wq workers it starts) run with its credentials: it is made where the
        // rings were, with the short slice and confined to the file root, if any; where
        // asked for, a launch that crowds the cores makes it and those workers real-time
        // until one that fits them (consumer/realtime.rs). Else it only wakes consumers; on
        // the CPU backend (SQPOLL asked for) it gets the slice by its id.
        let entered = shared.entered();
        let waker = if entered {
            on_the_ring_thread(self.file_root.as_deref(), true, || {
                start_waker(&shared, settings.real_time_waker)
            })?
        } else {
            start_waker(&shared, false)?
        };
        if device.is_none() && !entered {
            if let Some(tid) = waker.thread_id {
                // Best effort, as for the rings' consumers (consumer/io_threads.rs).
                let _ = io_threads::shorten(tid);
            }
        }
        if entered {
            let _ = shared.doorbell.set(waker.doorbell().expect("the waker runs"));
        }
        for n in backend_notice.iter().chain(&rings.notices) {
            say_once(n);
        }
        Ok(Runtime {
            shared,
            waker,
            backend,
            cpu: Cpu::new(self.cpu_stack_bytes),
            hang,
            gpu: device.map(Gpu::new),
            settled: Mutex::new([0; STREAMS]),
            sandbox: sandbox.policy,
            fixed_files: sandbox.fixed_files,
            fixed_logs: sandbox.fixed_logs,
            fixed_transfers: sandbox.fixed_transfers,
            lockstep: settings.lockstep,
            jit: settings.jit,
            sqpoll_cpus: rings.sqpoll_cpus,
            _sqpoll_claim: rings.sqpoll_claim,
            print_files: crate::print_files::PrintFiles::claim(&[self.stdout_fd, self.stderr_fd]),
        })
    }

    /// The settings that need no backend: each in range, and consistent with the others.
    fn check(&self) -> Result<()> {
        if self.file_root.is_some() && self.sandbox != Sandbox::FileIo {
            return Err(Error::Config(format!(
                "file_root confines Sandbox::FileIo, but the sandbox is {:?}: add .sandbox(Sandbox::FileIo)",
                self.sandbox
            )));
        }
        if self.cpu_stack_bytes < crate::backend::cpu::MIN_STACK_BYTES {
            return Err(Error::Config(format!(
                "cpu_stack_bytes must be at least {} (16 KiB), not {}",
                crate::backend::cpu::MIN_STACK_BYTES,
                self.cpu_stack_bytes
            )));
        }
        if let Some(n) = self.max_flights.filter(|&n| !n.is_power_of_two() || n > MAX_CQ_ENTRIES) {
            return Err(Error::Config(format!(
                "max_flights must be a power of two up to {MAX_CQ_ENTRIES} (no more writes can be \
                 in flight than the largest CQ holds), not {n}"
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
        Ok(())
    }

    /// When `synchronize` warns and gives up: the builder's, else `GPUIO_HANG_TIMEOUT`.
    fn hang_policy(&self, timeout: Option<Duration>) -> HangPolicy {
        let mut hang = HangPolicy::new(timeout);
        if let Some((first, every)) = self.hang_warnings {
            (hang.warn_first, hang.warn_every) = (first, every);
        }
        hang
    }

    /// Each setting that has a variable: the builder's value, else the environment's
    /// (`resolve.rs`).
    fn resolve(&self) -> Result<Resolved> {
        let hang_timeout = match self.hang_timeout {
            Some(Some(t)) if t.is_zero() => {
                return Err(Error::Config(
                    "hang_timeout must be longer than zero (None: never give up)".into(),
                ))
            }
            Some(t) => t,
            None => crate::watchdog::timeout_from_env()?,
        };
        Ok(Resolved {
            backend: or_env(self.backend, Backend::from_env)?,
            gpu: or_env(self.gpu, || settings::number("GPUIO_GPU"))?,
            lockstep: or_env(self.lockstep, Scheduling::lockstep_from_env)?.unwrap_or(false),
            submission: or_env(self.submission, Submission::from_env)?,
            rings: or_env(self.rings, || settings::number("GPUIO_RINGS"))?,
            solo: or_env(self.solo, || settings::switch("GPUIO_SOLO"))?,
            sqpoll: or_env(self.sqpoll, || settings::switch("GPUIO_SQPOLL"))?,
            real_time_waker: or_env(self.real_time_waker, || settings::switch("GPUIO_REAL_TIME_WAKER"))?
                .unwrap_or(false),
            sqpoll_cpus: or_env(self.sqpoll_cpus.clone(), || {
                settings::parsed("GPUIO_SQPOLL_CPUS", affinity::parse_cpu_list)
            })?,
            hang_timeout,
            jit: crate::backend::cuda::Jit::from_env()?,
        })
    }

    /// stdout's and stderr's log sizes: the builder's, else the backend's defaults (larger
    /// on a GPU, whose threads print more at once), checked.
    fn log_sizes(&self, gpu: bool) -> Result<[usize; STREAMS]> {
        let stdout = self.log_bytes.unwrap_or(if gpu { 32 << 20 } else { 4 << 20 });
        let stderr = self
            .stderr_log_bytes
            .or(self.log_bytes)
            .unwrap_or(if gpu { 8 << 20 } else { 4 << 20 });
        // (The upper bounds keep the sizes computed from these from overflowing, and
        // absurd values from mapping and populating gigabytes.)
        for (what, n) in [("log_bytes", stdout), ("stderr_log_bytes", stderr)] {
            if !n.is_power_of_two() || !(64..=MAX_LOG_BYTES).contains(&n) {
                return Err(Error::Config(format!(
                    "{what} must be a power of two from 64 to 2^40, not {n}"
                )));
            }
        }
        Ok([stdout, stderr])
    }

    /// The rings: how many (the builder's, else `GPUIO_RINGS`, else from the machine), their SQPOLL
    /// threads' CPUs, io_uring's or the fallback's, and the solo ring; each made on a thread
    /// confined to the file root, if any (landlock.rs). Disabled under a sandbox, which
    /// `share` sets up.
    fn open_rings(&self, device: Option<&Device>, settings: &Resolved) -> Result<OpenRings> {
        let pci_bus_id = device.and_then(|d| d.pci_bus_id());
        let asked = settings.rings;
        let in_range = |n: usize| (1..=MAX_RINGS).contains(&n);
        if let Some(n) = asked.filter(|&n| !in_range(n as usize)) {
            return Err(Error::Config(format!("rings must be 1 to {MAX_RINGS}, not {n}")));
        }
        // The count asked for, else one per CPU named, else one from the machine's cores.
        let (mut sqpoll_cpus, named, mut sqpoll_claim) = affinity::choose(
            asked.map(|n| n as usize),
            settings.sqpoll_cpus.as_deref(),
            device.is_some(),
            pci_bus_id,
        )?;
        let rings = sqpoll_cpus.len();
        if !in_range(rings) {
            return Err(Error::Config(format!(
                "sqpoll_cpus names {rings} CPUs, and with no ring count given that is one ring \
                 each: name 1 to {MAX_RINGS}"
            )));
        }
        // A GPU's default SQ, or less where only the CQ was given (the CQ holds at least
        // as many entries as the SQ).
        let default_sq = if device.is_some() { 1024 } else { 256 };
        let sq_entries = self
            .sq_entries
            .unwrap_or_else(|| self.cq_entries.map_or(default_sq, |cq| cq.min(default_sq)));
        // SQPOLL: on a GPU; on the CPU backend where asked for, or where the program named
        // CPUs for SQPOLL threads.
        let sqpoll = settings.sqpoll.unwrap_or(device.is_some() || named);
        let root = self.file_root.as_deref();
        // Unasked: inline on the CPU backend, where nothing asks for a thread that submits
        // (one confined to a file root, or SQPOLL, or CPUs named for SQPOLL threads); else
        // io_uring where available.
        let submission = settings
            .submission
            .unwrap_or(if device.is_none() && root.is_none() && !sqpoll && !named {
                Submission::Inline
            } else {
                Submission::Auto
            });
        if submission == Submission::Inline {
            if device.is_some() {
                return Err(Error::Config(
                    "Submission::Inline (GPUIO_URING=inline) needs the CPU backend: a GPU's threads \
                     make no syscalls; use auto, on or off"
                        .into(),
                ));
            }
            if root.is_some() {
                return Err(Error::Config(
                    "Submission::Inline (GPUIO_URING=inline) cannot confine requests to a file root: \
                     the kernel threads that perform them run your code too; use auto (io_uring, \
                     submitted by a confined thread) or off"
                        .into(),
                ));
            }
            if settings.sqpoll == Some(true) || named {
                return Err(Error::Config(
                    "Submission::Inline (GPUIO_URING=inline) has no SQPOLL thread: turn sqpoll off \
                     (and name no sqpoll_cpus), or use auto or on"
                        .into(),
                ));
            }
        }
        let by_a_thread = matches!(submission, Submission::HostThread | Submission::Inline);
        if !sqpoll && named && !by_a_thread {
            return Err(Error::Config(
                "sqpoll_cpus (or GPUIO_SQPOLL_CPUS) binds SQPOLL threads, but sqpoll is off \
                 (Builder::sqpoll(false), else GPUIO_SQPOLL=0): turn it on, or name no CPUs"
                    .into(),
            ));
        }
        if device.is_some() && !sqpoll && !by_a_thread {
            return Err(Error::Config(
                "sqpoll is off (Builder::sqpoll(false), else GPUIO_SQPOLL=0), but a GPU cannot \
                 enter a ring (it makes no syscalls): its rings need SQPOLL; turn it on (or unset \
                 GPUIO_SQPOLL), use the CPU backend, or serve the rings from a host thread \
                 (GPUIO_URING=off)"
                    .into(),
            ));
        }
        let cfg = UringConfig {
            sq_entries,
            cq_entries: self.cq_entries.unwrap_or(sq_entries.saturating_mul(2)),
            sq_thread_idle_ms: self.sq_thread_idle_ms,
            sq_thread_cpu: None,
            start_disabled: self.sandbox != Sandbox::Off,
            sqpoll,
        };
        let simulate = self.simulate_uring_errno;
        let short = device.is_none();
        let open = |cpus: &[Option<u32>]| {
            on_the_ring_thread(root, short, || submission::open_rings(cfg, cpus, submission, simulate))
        };
        let (queues, queue_notice) = match open(&sqpoll_cpus) {
            // A CPU chosen here that the kernel refuses: unbound instead (affinity.rs).
            Err(Error::Config(why)) if !named && why.contains("refused to bind SQPOLL") => {
                sqpoll_cpus = vec![None; rings];
                sqpoll_claim = Default::default();
                open(&sqpoll_cpus)?
            }
            other => other?,
        };
        // The solo ring: asked for (or refused) by the builder or `GPUIO_SOLO`, else on where
        // it can be made. One that cannot be made by default is done without, saying why.
        let mut solo_notice = None;
        let open_solo = || on_the_ring_thread(root, short, || submission::open_solo(&queues[0], cfg));
        let solo = match settings.solo {
            Some(false) => None,
            Some(true) => Some(open_solo()?),
            None => open_solo()
                .inspect_err(|e| {
                    solo_notice = Some(format!(
                        "gpuio: no solo ring ({e}); a lone thread's requests go through the shared rings"
                    ))
                })
                .ok(),
        };
        if root.is_some() {
            // The fallback's threads also refuse what Landlock does not check (landlock.rs).
            for q in queues.iter().chain(&solo) {
                if let Queue::Host(h) = q {
                    h.confine_to_root();
                }
            }
        }
        if matches!(queues[0], Queue::Host(_)) || !sqpoll {
            // The fallback's threads are not bound (`HostRing` ignores `sq_thread_cpu`), and
            // a ring without SQPOLL has no thread to bind.
            sqpoll_cpus = vec![None; rings];
            sqpoll_claim = Default::default();
        }
        Ok(OpenRings {
            queues,
            solo,
            notices: [queue_notice, solo_notice].into_iter().flatten().collect(),
            sqpoll_cpus,
            sqpoll_claim,
        })
    }

    /// The shared memory over the rings, and the sandbox: files, buffers, restrictions,
    /// then enable, before anything can submit (inside `Shared::new`, once the memory
    /// exists). The host-thread fallback takes the same registrations and restrictions as
    /// io_uring, and enforces them itself.
    fn share(
        &self,
        queues: Vec<Queue>,
        solo: Option<Queue>,
        log_bytes: [usize; STREAMS],
        device: Option<Device>,
    ) -> Result<(Shared, restrictions::Setup)> {
        let fds = [self.stdout_fd, self.stderr_fd];
        let (want, fixed_files) = (self.sandbox, self.fixed_files);
        let configure = move |mut queues: Vec<&mut Queue>, memory: &restrictions::Memory| {
            restrictions::configure_all(&mut queues, want, fixed_files, fds, memory)
        };
        let config = SharedConfig {
            log_bytes,
            max_flights: self.max_flights.unwrap_or(if device.is_none() { 1 } else { 16 }),
            arena_bytes: self.arena_bytes,
            arena_block_bytes: self.arena_block_bytes,
            fds,
            // Only x86-64's stores are seen in order by every agent (`Solo::waiting_on_results`).
            solo_waits_on_results: cfg!(target_arch = "x86_64") && !self.solo_on_tail,
        };
        Shared::new(queues, solo, &config, device, configure)
    }
}

/// What `Builder::open_rings` opened.
struct OpenRings {
    queues: Vec<Queue>,
    solo: Option<Queue>,
    /// Why a ring is not what it could have been (the fallback, no solo ring).
    notices: Vec<String>,
    sqpoll_cpus: Vec<Option<u32>>,
    sqpoll_claim: affinity::Claim,
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
}

/// A build notice, once per process (see `notice.rs`).
fn say_once(notice: &str) {
    crate::notice::say_once(crate::notice::Level::Info, notice);
}
