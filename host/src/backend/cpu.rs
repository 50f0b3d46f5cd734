//! The CPU backend: host threads run device closures, one thread per device thread, each
//! with its own ids and the runtime's context current (`gpuio_device::protocol::arch::host`).

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gpuio_device::protocol::arch::host::{install_doorbell, install_performer, Block, Doorbell, ThreadIds};
use gpuio_device::protocol::context::{enter, Context};

use crate::error::{Error, Result};
use crate::launch::{Dim3, LaunchConfig};
use crate::watchdog::Pacing;

/// How synchronize's waits pace themselves (see [`Pacing`]).
///
/// CPU kernel threads: the last one's exit ends the pause at once (a condition variable),
/// so the wait neither spins nor yields; it wakes every 10 ms only to look for progress.
pub(crate) const THREADS_PACING: Pacing = Pacing {
    spins: 0,
    yields: 0,
    first_pause: Duration::from_millis(10),
    max_pause: Duration::from_millis(10),
};

type KernelThread = JoinHandle<std::result::Result<(), String>>;

/// CPU-backend launches not yet synchronized.
#[derive(Default)]
struct PendingLaunches {
    /// Their threads, not yet joined.
    threads: Vec<KernelThread>,
    /// `launch` calls not yet synchronized (each activated the waker once). Counted down
    /// only once their drain has completed: until then kernels or their I/O may use host
    /// buffers (`kernels_pending`).
    launches: usize,
}

/// Which CPU-backend kernel threads are running, and a signal when none is: what the
/// watchdog's wait for them waits on, and what a hang report names.
#[derive(Default)]
pub(crate) struct Exits {
    /// Running threads by `(block, thread)`, with how many of each (two launches may run
    /// the same ids at once).
    running: Mutex<BTreeMap<(u32, u32), usize>>,
    none: Condvar,
}

impl Exits {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(u32, u32), usize>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn running(&self) -> usize {
        self.lock().values().sum()
    }

    /// The first `n` running threads as `(block, thread)`, in order.
    pub(crate) fn running_ids(&self, n: usize) -> Vec<(u32, u32)> {
        self.lock().keys().take(n).copied().collect()
    }

    /// Waits up to `max` for the last thread to exit.
    pub(crate) fn wait(&self, max: Duration) {
        let running = self.lock();
        let _ = self.none.wait_timeout_while(running, max, |r| !r.is_empty());
    }
}

/// Makes a kernel thread leave its block's barrier when it is done, also when it unwinds.
struct LeaveBlock<'a>(&'a Block);

impl Drop for LeaveBlock<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// The context a CPU launch's threads run with: its address, and what holds it (the
/// runtime's shared memory), kept by each thread until it is done.
#[derive(Clone)]
pub(crate) struct KernelContext {
    context: *const Context,
    _holder: Arc<dyn std::any::Any + Send + Sync>,
    /// What each kernel thread rings after it publishes SQEs (rings without SQPOLL).
    doorbell: Option<Doorbell>,
    /// What each kernel thread performs with, where the rings are performed inline
    /// (`arch::host::install_performer`).
    performer: Option<Doorbell>,
}

// SAFETY: `context` points into memory `_holder` keeps alive; a `Context` is `Sync` (its
// fields are atomics and cells the protocol hands between threads), so its address may go
// to another thread.
unsafe impl Send for KernelContext {}

impl KernelContext {
    /// The context at `context`, in memory that `holder` keeps alive; each kernel thread
    /// gets `doorbell` (`arch::host::install_doorbell`) and is made a performer with
    /// `performer`, if any (`arch::host::install_performer`).
    ///
    /// # Safety
    /// `context` points to an initialised [`Context`] that lives as long as `holder`.
    pub(crate) unsafe fn new(
        context: *const Context,
        holder: Arc<dyn std::any::Any + Send + Sync>,
        doorbell: Option<Doorbell>,
        performer: Option<Doorbell>,
    ) -> KernelContext {
        KernelContext {
            context,
            _holder: holder,
            doorbell,
            performer,
        }
    }

    /// The context's address (a method: a closure that calls it takes the whole value,
    /// holder included, where naming the field would take the address alone).
    fn context(&self) -> *const Context {
        self.context
    }
}

/// The index of rank `r` in a shape `dim` (x varies fastest): `Dim3::rank_in`'s inverse.
fn unrank(r: u32, dim: Dim3) -> Dim3 {
    Dim3::new(r % dim.x, r / dim.x % dim.y, r / dim.x / dim.y)
}

/// How much lower than the launching thread's the priority of a launch's threads is, when
/// they outnumber the cores.
///
/// io_uring's own threads (the SQPOLL thread and its io-wq workers) carry every line and
/// transfer, and run at the priority of the thread that made the rings. When more kernel
/// threads compute than there are cores, the scheduler shares the cores among all of them
/// alike, and each hand-off of a line (SQPOLL taking an SQE, a worker writing it, the next
/// flight after it) waited about one round of every thread: on 2 cores with 62 threads
/// spinning, lines took 0.4-2.1 s to reach their file; at +10 they took 0.07-0.37 s
/// (`bench_liveness`). The cost: such a launch's threads get a smaller share of the CPU
/// beside other work of the same session, where a GPU's threads would not compete at all.
/// A launch with no more threads than cores keeps its priority: io_uring's threads find a
/// core anyway. Nice gives those threads a share, not a prompt turn; the host's I/O
/// threads also get a short scheduler slice for that (`consumer/io_threads.rs`). Nice +19
/// (about 1/7 of +10's weight) made lines no sooner there.
const OVERSUBSCRIBED_NICE: i32 = 10;

/// The nice value for the threads of a launch of `threads` threads: `None` (unchanged)
/// unless they outnumber the `cores`.
fn oversubscribed_nice(threads: u64, cores: u64) -> Option<i32> {
    if threads <= cores {
        return None;
    }
    // getpriority returns -1 both as a nice value and on error: errno tells them apart,
    // and PRIO_PROCESS with id 0 (this thread) cannot fail.
    // SAFETY: getpriority reads this thread's nice value and touches no memory.
    let now = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    Some((now + OVERSUBSCRIBED_NICE).min(19))
}

/// The cores this process may run on.
fn cores() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// Refuses more dynamic shared memory per block than the CPU backend gives.
fn check_shared_mem(bytes: u32) -> Result<()> {
    if bytes > LaunchConfig::CPU_SHARED_MEM_MAX {
        return Err(Error::Config(format!(
            "a CPU launch with {bytes} bytes of dynamic shared memory per block: the CPU backend \
             gives at most {} (LaunchConfig::CPU_SHARED_MEM_MAX, what an H100 gives a block): ask for less",
            LaunchConfig::CPU_SHARED_MEM_MAX
        )));
    }
    Ok(())
}

/// What kernel thread `i` runs: at `nice` (if any), inside the kernel's context with `ids`,
/// `kernel` itself; its panic's message, if it panicked.
fn kernel_thread(
    i: u32,
    ctx: &KernelContext,
    ids: ThreadIds,
    block: Arc<Block>,
    nice: Option<i32>,
    running: RunningGuard,
    kernel: &(dyn Fn() + Send + Sync),
) -> std::result::Result<(), String> {
    // Dropped last: the thread counts as running until the kernel is done.
    let _running = running;
    // `ids.block` points into it: kept until the thread is done, which then leaves its
    // barrier (returned or panicked: the others no longer wait for it).
    let _leave = LeaveBlock(&block);
    if let Some(nice) = nice {
        // SAFETY: setpriority with PRIO_PROCESS and this thread's own id changes only this
        // thread's nice value; a refusal leaves it as it was.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) };
    }
    // SAFETY: the context outlives this thread: `ctx` keeps what holds it.
    let _in_kernel = unsafe { enter(ctx.context(), ids) };
    let _bell = install_doorbell(ctx.doorbell.clone());
    if ctx.performer.is_some() {
        // A performer makes the program's I/O syscalls itself. Those that would raise a
        // signal in the thread that made them then end as through io_uring instead: a
        // write to a pipe whose reader is gone returns EPIPE (not SIGPIPE, which kills a
        // program that did not ignore it), a write past RLIMIT_FSIZE EFBIG (not SIGXFSZ,
        // which kills it); a background job's terminal I/O does not stop it: with SIGTTOU
        // blocked its write to a TOSTOP terminal succeeds, as through io-wq, and only a
        // read, SIGTTIN's, fails with EIO. Only those: faults in the kernel's own code still
        // signal as usual.
        // Only this thread's mask, and the thread is ours: it ends with the launch.
        // SAFETY: changes only this thread's signal mask.
        unsafe {
            let mut io: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut io);
            for sig in [libc::SIGPIPE, libc::SIGXFSZ, libc::SIGTTIN, libc::SIGTTOU] {
                libc::sigaddset(&mut io, sig);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &io, std::ptr::null_mut());
        }
    }
    let _performer = install_performer(ctx.performer.clone());
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(kernel)).map_err(|p| {
        // A body that returned `Err` (`kernel!`): its report names the thread and the error.
        if let Some(failed) = p.downcast_ref::<gpuio_device::protocol::arch::host::KernelFailed>() {
            return failed.0.clone();
        }
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned());
        format!("thread {i} panicked: {}", msg.unwrap_or_else(|| "(no message)".into()))
    });
    // A performer leaves its last lines' write for its next wait, and it will not wait
    // again: the waker performs it now (its doorbell), rather than at its next look, up to
    // 10 ms later. Not this thread: a write to a pipe nobody reads would keep it from
    // ending, and a kernel that returned from ending (its launch then reported running).
    if ctx.performer.is_some() {
        if let Some(bell) = &ctx.doorbell {
            bell();
        }
    }
    ran
}

/// Counts a kernel thread as running until it drops (also when the thread unwinds, or is
/// never spawned).
struct RunningGuard(Arc<Exits>, (u32, u32));

impl RunningGuard {
    fn new(exits: &Arc<Exits>, id: (u32, u32)) -> RunningGuard {
        *exits.lock().entry(id).or_insert(0) += 1;
        RunningGuard(exits.clone(), id)
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let mut running = self.0.lock();
        if let Some(n) = running.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.1);
            }
        }
        if running.is_empty() {
            self.0.none.notify_all();
        }
    }
}

/// A kernel thread's stack unless the builder says otherwise: `core::fmt` and the print
/// path need a few KiB; user kernels may recurse.
pub(crate) const DEFAULT_STACK_BYTES: usize = 256 << 10;
/// The least stack a kernel thread is given.
pub(crate) const MIN_STACK_BYTES: usize = 16 << 10;
/// Memory mappings each thread costs: its stack and guard page, and the alternate signal
/// stack and guard page std sets up for it (4.15 per thread measured on Linux 6.18).
const MAPS_PER_THREAD: u64 = 5;
/// Mappings left to the rest of the process (allocator arenas, libraries, the runtime's
/// own memory) beyond a launch's threads.
const MAPS_SPARE: u64 = 2048;

/// The process's memory mappings: `vm.max_map_count`, and how many it has now.
struct Mappings {
    max: u64,
    used: u64,
}

impl Mappings {
    /// `None` where the limits cannot be read.
    fn now() -> Option<Mappings> {
        let read = |path| std::fs::read_to_string(path).ok();
        Some(Mappings {
            max: read("/proc/sys/vm/max_map_count").and_then(|s| s.trim().parse::<u64>().ok())?,
            used: read("/proc/self/maps").map(|s| s.lines().count() as u64)?,
        })
    }

    /// About how many more threads fit under the limit, the spare left to the rest.
    fn threads_that_fit(&self) -> u64 {
        self.max.saturating_sub(self.used + MAPS_SPARE) / MAPS_PER_THREAD
    }
}

/// The most threads a CPU launch runs: [`MAX_THREADS`], or fewer where the process's memory
/// mappings left fit fewer (`vm.max_map_count`), with what bounds it, for an error's text.
pub(crate) fn thread_limit() -> (u64, String) {
    match Mappings::now().map(|m| m.threads_that_fit()) {
        Some(fits) if fits < MAX_THREADS => (
            fits,
            format!("the memory mappings left under vm.max_map_count; raising it lifts this up to {MAX_THREADS}"),
        ),
        _ => (MAX_THREADS, "an OS thread per GPU thread".into()),
    }
}

/// The most threads a CPU launch runs, whatever the machine allows.
pub(crate) const MAX_THREADS: u64 = 1 << 16;

/// Refuses a launch of `n` more threads that would run the process out of memory
/// mappings: past `vm.max_map_count`, std cannot set up a new thread's signal stack and
/// aborts the whole process. Where the limits cannot be read, lets the launch try.
fn check_map_count(n: u64) -> Result<()> {
    let Some(maps) = Mappings::now() else {
        return Ok(());
    };
    let (max, used) = (maps.max, maps.used);
    let need = n * MAPS_PER_THREAD + MAPS_SPARE;
    if used + need <= max {
        return Ok(());
    }
    let fits = maps.threads_that_fit();
    Err(Error::Config(format!(
        "a CPU launch of {n} threads needs about {need} memory mappings (an OS thread per GPU \
         thread: its stack and signal stack, each with a guard page), and this process has \
         {} of vm.max_map_count's {max} left, enough for about {fits} threads: launch fewer \
         threads (loop inside each), or raise the limit (sysctl vm.max_map_count)",
        max.saturating_sub(used)
    )))
}

/// The CPU backend's launches: their threads, those still running, and failures not yet
/// reported.
#[derive(Default)]
pub(crate) struct Cpu {
    /// Each kernel thread's stack ([`crate::Builder::cpu_stack_bytes`]).
    stack_bytes: usize,
    kernels: Mutex<PendingLaunches>,
    /// Running kernel threads.
    exits: Arc<Exits>,
    /// Failures of joined kernel threads that a synchronize could not report yet (it gave
    /// up in the drain after joining them).
    failures: Mutex<Vec<String>>,
}

impl Cpu {
    pub(crate) fn new(stack_bytes: usize) -> Cpu {
        Cpu {
            stack_bytes,
            ..Cpu::default()
        }
    }

    /// Runs `kernel` on `grid * block` new threads, with the context `ctx`.
    /// `start(first, crowded)` runs first, under the launch lock (`first`: no launch is
    /// pending; `crowded`: the threads, with those of earlier launches still running,
    /// outnumber the cores; the threads run at nice +10 where they alone do);
    /// if a thread cannot be spawned, `on_spawn_failure` runs (without the lock) before the
    /// error returns.
    pub(crate) fn launch<F>(
        &self,
        ctx: &KernelContext,
        cfg: LaunchConfig,
        kernel: F,
        start: impl FnOnce(bool, bool) -> Result<()>,
        on_spawn_failure: impl FnOnce(),
    ) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        let n = cfg.threads();
        let per_block = cfg.block.count() as u32;
        check_map_count(n)?;
        check_shared_mem(cfg.shared_mem_bytes)?;
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        // Read once a launch: `available_parallelism` reads the affinity mask and cgroup
        // files.
        let cores = cores();
        let nice = oversubscribed_nice(n, cores);
        let crowded = n + self.exits.running() as u64 > cores;
        start(kernels.launches == 0, crowded)?;
        kernels.launches += 1;
        report_kernel_panics();
        let kernel = Arc::new(kernel);
        // What the threads of the block being started share (shared memory, barrier).
        let mut block: Option<Arc<Block>> = None;
        for i in 0..n as u32 {
            if i % per_block == 0 {
                block = Some(Arc::new(Block::new(per_block, cfg.shared_mem_bytes as usize)));
            }
            let this_block = block.clone().expect("made at the block's first thread");
            let ids = ThreadIds {
                thread_idx: unrank(i % per_block, cfg.block),
                block_idx: unrank(i / per_block, cfg.grid),
                block_dim: cfg.block,
                grid_dim: cfg.grid,
                block: Arc::as_ptr(&this_block),
            };
            let (ctx, kernel) = (ctx.clone(), kernel.clone());
            let running = RunningGuard::new(&self.exits, (i / per_block, i % per_block));
            let spawned = std::thread::Builder::new()
                .stack_size(self.stack_bytes)
                .spawn(move || kernel_thread(i, &ctx, ids, this_block, nice, running, &*kernel));
            match spawned {
                Ok(h) => kernels.threads.push(h),
                Err(e) => {
                    drop(kernels);
                    // Its started threads would wait at a barrier for those never started.
                    if let Some(b) = &block {
                        b.abandon();
                    }
                    on_spawn_failure();
                    return Err(Error::Os {
                        what: "spawning a kernel thread (the process's thread limits, ulimit -u \
                               and kernel.threads-max, bound a CPU launch: launch fewer threads)",
                        source: e,
                    });
                }
            }
        }
        Ok(())
    }

    /// Waits for the kernel threads launched so far (`wait` waits until `Exits::running`
    /// is 0, under the watchdog) and joins them; returns
    /// their failures, after those a synchronize that gave up could not report. On
    /// [`Error::Hang`] the threads stay launched.
    pub(crate) fn join(&self, wait: impl FnOnce(&Exits) -> Result<()>) -> Result<Vec<String>> {
        let threads = std::mem::take(&mut self.kernels.lock().unwrap_or_else(|e| e.into_inner()).threads);
        let mut failures = std::mem::take(&mut *self.failures.lock().unwrap_or_else(|e| e.into_inner()));
        if threads.is_empty() {
            return Ok(failures);
        }
        // Threads of a launch racing with this call count too: this waits for them as
        // well, and the next synchronize joins them.
        let waited = wait(&self.exits);
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
    pub(crate) fn keep_failures(&self, mut failures: Vec<String>) {
        let mut kept = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.append(&mut kept);
        *kept = failures;
    }

    /// After a completed drain: unless a launch racing with this synchronize
    /// left threads to join, every launch so far is synchronized, and the waker may rest
    /// (once per launch, as each activated it).
    pub(crate) fn finish_launches(&self, deactivate: impl Fn()) {
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        // Launches racing with this synchronize left threads to join: they stay counted.
        let done = if kernels.threads.is_empty() {
            std::mem::take(&mut kernels.launches)
        } else {
            0
        };
        drop(kernels);
        for _ in 0..done {
            deactivate();
        }
    }

    /// Whether launches are not yet synchronized (or threads not yet joined).
    pub(crate) fn pending(&self) -> bool {
        let k = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        k.launches > 0 || !k.threads.is_empty()
    }

    /// Kernel threads running now.
    pub(crate) fn running(&self) -> usize {
        self.exits.running()
    }

    /// The first `n` kernel threads running now, as `(block, thread)`.
    pub(crate) fn running_ids(&self, n: usize) -> Vec<(u32, u32)> {
        self.exits.running_ids(n)
    }
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
            if gpuio_device::protocol::context::current().is_null() || gpuio_device::protocol::arch::host::in_print() {
                previous(info)
            } else {
                let message = info.payload_as_str().unwrap_or("Box<dyn Any>");
                gpuio_device::entry::report_panic(info.location(), &message)
            }
        }));
    });
}
