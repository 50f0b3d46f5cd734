//! [`Builder`]: a runtime's settings, checked and put together by [`Builder::build`].

use std::os::fd::RawFd;
use std::time::Duration;

use crate::backend::Backend;
use crate::consumer::submission::Submission;
use crate::error::Result;
use crate::runtime::Runtime;
use crate::sandbox::Sandbox;

mod assemble;
mod rescue;
mod resolve;

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
    /// with [`Error::Config`](crate::Error::Config)).
    pub fn cpu_stack_bytes(mut self, n: usize) -> Self {
        self.cpu_stack_bytes = n;
        self
    }

    /// Which io_uring requests the ring accepts (default [`Sandbox::PrintOnly`], what
    /// printing needs). The kernel refuses anything else with `EACCES`, without executing
    /// it, and [`Runtime::synchronize`] reports such refusals
    /// ([`Error::Refused`](crate::Error::Refused)). Where the kernel cannot restrict rings,
    /// the runtime still works, says so once on stderr, and [`Runtime::stats`] reports
    /// `Sandbox::Off`. See [`crate::sandbox`].
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

    /// Asks for [`Scheduling::Lockstep`](crate::Scheduling::Lockstep) on CUDA (otherwise `GPUIO_LOCKSTEP=1`, otherwise
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
    /// moves before it gives up with [`Error::Hang`](crate::Error::Hang), which names what is
    /// outstanding.
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
