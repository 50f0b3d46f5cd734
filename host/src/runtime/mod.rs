//! The runtime: one io_uring (or its host-thread fallback), one shared arena holding the
//! device [`Context`], a waker, and a backend that runs kernels. [`Builder`](crate::Builder)
//! makes one; [`module`] loads GPU code objects into it; [`synchronize`]
//! waits for kernels and drains their I/O.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuio_device::protocol::context::Context;
use gpuio_device::protocol::context::STREAMS;
use gpuio_device::protocol::sync::Ordering;

use crate::backend::cpu::{Cpu, KernelContext};
use crate::backend::gpu::LoadedModule;
use crate::backend::{Backend, Device};
use crate::consumer::submission::Submission;
use crate::consumer::waker::Waker;
use crate::error::{Error, Result};
use crate::launch::LaunchConfig;
use crate::sandbox::Sandbox;
use crate::shared::Shared;
use crate::watchdog::HangPolicy;
use gpuio_device::protocol::arch::host::{install_doorbell, HookGuard};

#[cfg(feature = "cudarc")]
mod from_cudarc;
pub mod module;
mod observe;
pub(crate) mod print_files;
pub mod synchronize;

/// Counters for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// SQEs submitted so far, on every ring.
    pub sqes: u32,
    /// io_uring rings (each with its own SQPOLL thread where they have one,
    /// [`Stats::sqpoll`]; see [`crate::Builder::rings`]).
    pub rings: u32,
    /// SQ entries of each ring (see [`crate::Builder::sq_entries`]).
    pub sq_entries: u32,
    /// Whether the io_uring rings are polled by SQPOLL threads ([`crate::Builder::sqpoll`]):
    /// on a GPU, yes; on the CPU backend, only where asked for (by default its kernel
    /// threads perform the requests, [`Submission::Inline`]; on its io_uring rings without
    /// SQPOLL the waker submits); with the host-thread fallback, no.
    pub sqpoll: bool,
    /// Times a look of the waker woke SQPOLL, submitted for a ring without it, or unparked
    /// the host-thread fallback. Not counted: what the waker submits for its own rescues
    /// of CPU-backend print streams (their doorbell submits at once, inside the look).
    /// Always 0 on rings performed inline ([`Submission::Inline`]): there is no consumer to
    /// wake, and what a look performs is not counted.
    pub wakeups: u64,
    /// Times the waker looked at the ring: every 50 µs while I/O flows (and on rings
    /// without SQPOLL when a thread's doorbell wakes it, and without a pause for 20 µs
    /// after it submits), backing off to every 1 ms while kernels run without I/O, every
    /// 100 ms while none runs. On rings performed inline ([`Submission::Inline`]) every
    /// 10 ms while kernels run, and when a doorbell (a kernel thread's end, a program
    /// thread's request) wakes it.
    pub waker_looks: u64,
    /// Whether the waker, and the io-wq workers io_uring made from it, run at real-time
    /// priority now (`SCHED_FIFO` 1): only where [`crate::Builder::real_time_waker`] asked
    /// for it (default off), on the CPU backend's io_uring rings without SQPOLL (never on
    /// rings performed inline, its default, where the waker is off the data path), since
    /// the latest launch that crowded the cores and until one that fits them, where the
    /// kernel allows it (`CAP_SYS_NICE`, or an `RLIMIT_RTPRIO` of 1 or more), so that a
    /// printed line's write waits for no computing kernel thread's turn. Without it a line
    /// may wait tens of milliseconds for those threads' turns (docs/PROTOCOL.md, invariant
    /// 12). Never on a GPU.
    pub real_time_waker: bool,
    /// CPU backend: times the waker sent a print stream's bytes that kernel threads left
    /// unsent for a millisecond (a flush there never waits for a write to land; the next
    /// print's flush or the waker sends what it left); 0 on a GPU.
    pub rescues: u64,
    /// Completions that matched no request in flight and succeeded: a protocol bug if
    /// ever non-zero.
    pub stray_completions: u32,
    /// Requests the kernel refused or failed that no print made, not yet reported by
    /// [`Runtime::synchronize`] (see [`Error::Refused`]).
    pub refused_requests: u32,
    /// The sandbox in force: the one asked for (a sandbox that cannot be enforced is an
    /// error at build, never a silent `Off`), on io_uring, the host-thread fallback and
    /// rings performed inline alike.
    pub sandbox: Sandbox,
    /// Whether prints write to registered files (`IOSQE_FIXED_FILE`): never under
    /// [`Sandbox::FileIo`], whose rings hold no file (see there).
    pub fixed_files: bool,
    /// Whether prints write from the print logs registered as the ring's buffers
    /// (`IORING_OP_WRITE_FIXED`), so that under a sandbox the kernel refuses a device write
    /// from any other address. Off under [`Sandbox::Off`], and where the locked-memory limit
    /// refused the registration (said on stderr at build).
    pub fixed_logs: bool,
    /// Whether device file transfers are `IORING_OP_READ_FIXED`/`WRITE_FIXED` naming
    /// gpuio's memory (the arena, the solo ring's buffer, the host buffers), registered as
    /// every ring's buffers, so that the kernel refuses a transfer's buffer at any other
    /// address. [`Sandbox::FileIo`] only, where the locked-memory limit allowed the
    /// registration (said on stderr at build). It confines buffers, not files or paths:
    /// see [`Sandbox::FileIo`] for what a kernel can still reach.
    pub fixed_transfers: bool,
    /// Bytes device file I/O moved through the arena (buffers in device memory).
    pub staged_bytes: u64,
    /// Bytes device file I/O moved directly to or from host buffers.
    pub direct_bytes: u64,
    /// Whether the runtime has a solo ring ([`crate::Builder::solo`]).
    pub solo: bool,
    /// Requests that went through the solo ring (not counted in `sqes`).
    pub solo_requests: u64,
    /// Whether the solo ring's holder waits on each CQE's result rather than on the CQ
    /// tail: one load across PCIe less per request, on x86-64 hosts.
    pub solo_waits_on_results: bool,
}

/// The GPU side of a runtime.
pub(crate) struct Gpu {
    pub(crate) device: Device,
    /// A module whose `gpuio_drain` kernel drains the context.
    pub(crate) drain: Mutex<Option<Arc<dyn LoadedModule>>>,
    /// Kernels launched and not yet synchronized (set: the waker was activated once).
    pub(crate) launched: AtomicBool,
    /// Synchronizes waiting for the launches they claimed (from before the claim, which
    /// clears `launched`, until the wait ends): those kernels still count as pending.
    pub(crate) waiting: std::sync::atomic::AtomicUsize,
    /// The host program launched kernels itself (`prepare_external_launch`), maybe on
    /// streams of its own, since the last synchronize that waited them out: on CUDA the
    /// next one waits for every stream of the context, not only gpuio's.
    pub(crate) external: AtomicBool,
    /// The streams gpuio's own launches went on besides the null stream
    /// (`Kernels::launch_on`) since the last synchronize that waited them out: every
    /// synchronize waits for them, `synchronize_streams` too whatever it names, since their
    /// launch memory and `Output`s are released only once they end.
    pub(crate) own_streams: Mutex<Vec<OwnStream>>,
    /// The drain kernel has been launched after every kernel launched so far: a
    /// synchronize that gave up after launching it waits for it next time, without a
    /// second one.
    pub(crate) drained: AtomicBool,
    /// Why a kernel failed, once one did: the context is lost then (on CUDA every later
    /// call fails with the same sticky error), so the runtime refuses all further work.
    pub(crate) fault: Mutex<Option<String>>,
    /// The HIP device of the modules attached with [`Runtime::attach_hip_module`]: the
    /// runtime's GPU agent, seen through HIP, whose launches synchronize waits for too.
    #[cfg(feature = "hip")]
    pub(crate) hip: std::sync::OnceLock<crate::backend::hip::HipDevice>,
}

/// A stream gpuio launched on, by its address, and what keeps it alive until a synchronize
/// waited it out (the caller's `Arc<CudaStream>`): a stream destroyed meanwhile would be
/// asked about by its dead handle.
pub(crate) type OwnStream = (usize, Arc<dyn std::any::Any + Send + Sync>);

impl Gpu {
    /// The runtime's GPU, opened: nothing launched, loaded or faulted yet.
    pub(crate) fn new(device: Device) -> Gpu {
        Gpu {
            device,
            drain: Mutex::new(None),
            launched: AtomicBool::new(false),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            external: AtomicBool::new(false),
            own_streams: Mutex::new(Vec::new()),
            drained: AtomicBool::new(true),
            fault: Mutex::new(None),
            #[cfg(feature = "hip")]
            hip: std::sync::OnceLock::new(),
        }
    }

    /// Refuses work once a kernel has faulted, saying so.
    pub(crate) fn usable(&self) -> Result<()> {
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
    pub(crate) shared: Arc<Shared>,
    pub(crate) waker: Waker,
    pub(crate) backend: Backend,
    /// The CPU backend's launches.
    pub(crate) cpu: Cpu,
    /// When synchronize gives up or warns.
    pub(crate) hang: HangPolicy,
    pub(crate) gpu: Option<Gpu>,
    /// Each stream's `reserved` when its fd's offset was last settled.
    pub(crate) settled: Mutex<[u64; STREAMS]>,
    /// The io_uring sandbox in force.
    pub(crate) sandbox: Sandbox,
    /// Whether prints write to registered files.
    pub(crate) fixed_files: bool,
    /// Whether prints write from registered logs.
    pub(crate) fixed_logs: bool,
    /// Whether device transfers name registered buffers (the host buffers must be too).
    pub(crate) fixed_transfers: bool,
    /// Whether lockstep scheduling was asked for (CUDA: which PTX to load).
    pub(crate) lockstep: bool,
    /// How CUDA compiles the PTX it loads (`GPUIO_JIT`, read at build).
    pub(crate) jit: crate::backend::cuda::Jit,
    /// The CPU each ring's SQPOLL thread is bound to (`None`: unbound).
    pub(crate) sqpoll_cpus: Vec<Option<u32>>,
    /// The regular files this runtime prints to, held against the process's other runtimes.
    pub(crate) print_files: crate::runtime::print_files::PrintFiles,
    /// Keeps `sqpoll_cpus`' cores from the process's other runtimes while this one lives.
    pub(crate) _sqpoll_claim: crate::consumer::affinity::Claim,
}

impl Runtime {
    /// The backend kernels run on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Who consumes the rings: [`Submission::IoUring`] (SQPOLL, or on the CPU backend
    /// without it the waker's submissions: [`Stats::sqpoll`]), [`Submission::HostThread`]
    /// (the fallback) or [`Submission::Inline`] (the CPU backend's kernel threads
    /// themselves, its default).
    pub fn submission(&self) -> Submission {
        self.shared.queues[0].submission()
    }

    /// The CPU each ring's SQPOLL thread was bound to, in ring order; `None`: unbound (see
    /// [`crate::Builder::sqpoll_cpus`]; the host-thread fallback's threads are never bound).
    pub fn sqpoll_cpus(&self) -> &[Option<u32>] {
        &self.sqpoll_cpus
    }

    /// The GPU's name, on a GPU backend.
    pub fn device_name(&self) -> Option<&str> {
        self.gpu.as_ref().map(|g| g.device.name())
    }

    /// The GPU's PCI address, `domain:bus:device.function` as sysfs writes it (lower
    /// case), where the backend says: which of several GPUs this runtime drives.
    pub fn pci_bus_id(&self) -> Option<&str> {
        self.gpu.as_ref().and_then(|g| g.device.pci_bus_id())
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

    /// Makes the calling thread, until the guard drops, one that runs device code on the
    /// context ([`Runtime::context`]) as a kernel thread does: the waker looks as while
    /// kernels run, and on the CPU backend's rings without SQPOLL (inline, the default, or
    /// io_uring entered by the waker) each submission of the thread rings the waker's
    /// doorbell, and the waker performs or submits it: this thread, one of the program's,
    /// never performs a request itself. Without it, such a thread's requests there wait for
    /// the waker's look while no kernel runs (every 100 ms).
    ///
    /// ```
    /// use gpuio_host::{Backend, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let ctx = rt.context().expect("the CPU backend's context is host memory");
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         let _driving = rt.host_thread();
    ///         let stream = ctx.stream(false);
    ///         let g = gpuio_device::protocol::group::SingleLane;
    ///         gpuio_device::protocol::print::emit(&g, ctx, stream, true, format_args!("from a host thread"));
    ///     });
    /// });
    /// rt.synchronize()?;
    /// # Ok::<(), gpuio_host::Error>(())
    /// ```
    pub fn host_thread(&self) -> HostThread<'_> {
        self.waker.activate();
        HostThread {
            rt: self,
            _bell: install_doorbell(self.shared.doorbell.get().cloned()),
        }
    }

    /// The device context, on the CPU backend (for host code that drives the protocol
    /// itself, like tests, on threads marked by [`Runtime::host_thread`]). `None` on GPU
    /// backends, where it lives in device memory.
    pub fn context(&self) -> Option<&Context> {
        self.shared.host_context()
    }

    /// Counters (read while no kernel runs; zero if they cannot be read).
    pub fn stats(&self) -> Stats {
        let (sqes, stray_completions, refused_requests, staged_bytes, direct_bytes, solo) = self
            .shared
            .with_context(|c| {
                (
                    c.rings().iter().fold(0u32, |n, r| n.wrapping_add(r.submitted())),
                    c.stray_completions.load(Ordering::Relaxed),
                    c.refusals.unclaimed.load(Ordering::Relaxed),
                    c.arena.staged_bytes.load(Ordering::Relaxed),
                    c.arena.direct_bytes.load(Ordering::Relaxed),
                    (c.solo.requests(), c.solo.waits_on_results()),
                )
            })
            .unwrap_or((0, 0, 0, 0, 0, (0, false)));
        Stats {
            sqes,
            rings: self.shared.queues.len() as u32,
            sq_entries: self.shared.queues[0].params().sq_entries,
            sqpoll: self.shared.queues[0].sqpoll(),
            wakeups: self.waker.wakeups(),
            waker_looks: self.waker.looks(),
            real_time_waker: self.waker.real_time(),
            rescues: self.shared.rescues.load(Ordering::Relaxed),
            stray_completions,
            refused_requests,
            sandbox: self.sandbox,
            fixed_files: self.fixed_files,
            fixed_logs: self.fixed_logs,
            fixed_transfers: self.fixed_transfers,
            staged_bytes,
            direct_bytes,
            solo: self.shared.solo.is_some(),
            solo_requests: solo.0,
            solo_waits_on_results: solo.1,
        }
    }

    /// Launches `kernel` on `grid * block` threads (CPU backend: one host thread each,
    /// with its own ids). Returns at once; [`Runtime::synchronize`] waits.
    pub fn launch<F>(&self, grid: u32, block: u32, kernel: F) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.launch_with(LaunchConfig::linear(grid, block), kernel)
    }

    /// Launches `kernel` on the threads of `cfg`, in up to three dimensions (CPU backend:
    /// one host thread each, with its own ids, `gpuio_device::thread_idx_3d()` and
    /// friends). Returns at once; [`Runtime::synchronize`] waits.
    ///
    /// ```
    /// use gpuio_host::{Backend, LaunchConfig, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// rt.launch_with(LaunchConfig::new((2, 2), (4, 2)), || {
    ///     let (b, t) = (gpuio_device::block_idx_3d(), gpuio_device::thread_idx_3d());
    ///     gpuio_device::println!("block ({}, {}) thread ({}, {})", b.x, b.y, t.x, t.y);
    /// })?;
    /// rt.synchronize()?;
    /// # Ok::<(), gpuio_host::Error>(())
    /// ```
    pub fn launch_with<F>(&self, cfg: LaunchConfig, kernel: F) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        if self.backend != Backend::Cpu {
            return Err(Error::BackendUnavailable {
                backend: self.backend.name(),
                reason: "closures run only on the CPU backend; load a module and launch it".into(),
            });
        }
        outside_kernels("Runtime::launch")?;
        cfg.check()?;
        let n = cfg.threads();
        if n > crate::backend::cpu::MAX_THREADS {
            let (limit, why) = crate::backend::cpu::thread_limit();
            return Err(Error::Config(format!(
                "the CPU backend runs at most {limit} threads in a launch here ({why}), not {n} \
                 ({cfg:?}): launch fewer threads and loop inside each (a grid-stride loop)"
            )));
        }
        let ctx = self
            .shared
            .host_context()
            .expect("the CPU backend's context is in host memory");
        let holder: Arc<dyn std::any::Any + Send + Sync> = self.shared.clone();
        // SAFETY: the context lives in `self.shared`'s memory, which the Arc keeps alive.
        let ctx = unsafe {
            KernelContext::new(
                ctx,
                holder,
                self.shared.doorbell.get().cloned(),
                self.shared.performer(),
            )
        };
        self.cpu.launch(
            &ctx,
            cfg,
            kernel,
            |first, crowded| {
                if first {
                    self.rebase_positions()?;
                }
                // Before its threads run: the waker's first wakeup among them is prompt, or
                // leaves the cores to others as soon as they fit.
                if crowded {
                    self.waker.crowded();
                } else {
                    self.waker.fits();
                }
                self.waker.activate();
                Ok(())
            },
            || {
                let _ = self.synchronize();
            },
        )
    }

    /// The hang timeout in force: set with [`Builder::hang_timeout`](crate::Builder::hang_timeout), else from
    /// `GPUIO_HANG_TIMEOUT`; `None`: synchronize never gives up.
    pub fn hang_timeout(&self) -> Option<Duration> {
        self.hang.timeout
    }

    /// Diagnostics: ring 0's words as the kernel keeps them, read now from host memory
    /// (safe at any time): `[sq_head, sq_tail, sq_flags, cq_head, cq_tail]`.
    #[doc(hidden)]
    pub fn ring_words(&self) -> [u32; 5] {
        self.ring_words_of(0)
    }

    /// [`Runtime::ring_words`] of ring `i` (panics past the last ring).
    #[doc(hidden)]
    pub fn ring_words_of(&self, i: usize) -> [u32; 5] {
        words_of(&self.shared.queues[i])
    }

    /// [`Runtime::ring_words`] of the solo ring, if there is one.
    pub(crate) fn solo_words(&self) -> Option<[u32; 5]> {
        self.shared.solo.as_ref().map(|(q, _)| words_of(q))
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
        self.cpu.pending()
            || self.gpu.as_ref().is_some_and(|g| {
                // `waiting` first: a synchronize counts itself in before it clears
                // `launched`, so one of the two shows a claimed launch until its wait ends.
                g.waiting.load(Ordering::Acquire) > 0 || g.launched.load(Ordering::Acquire)
            })
    }
}

/// Refuses a call from inside a CPU kernel thread ([`Error::InsideKernel`]): there,
/// waiting for kernels waits for the caller itself, and a launch would be waited for by
/// a synchronize that the caller's own kernel holds up.
pub(crate) fn outside_kernels(call: &'static str) -> Result<()> {
    if gpuio_device::protocol::context::current().is_null() {
        Ok(())
    } else {
        Err(Error::InsideKernel { call })
    }
}

/// A queue's `[sq_head, sq_tail, sq_flags, cq_head, cq_tail]`, read now from host memory.
fn words_of(q: &crate::consumer::submission::Queue) -> [u32; 5] {
    let p = *q.params();
    [
        p.sq_off.head,
        p.sq_off.tail,
        p.sq_off.flags,
        p.cq_off.head,
        p.cq_off.tail,
    ]
    .map(|off| {
        // SAFETY: a ring word inside the queue's mapping, which lives as long as the runtime;
        // a volatile read of a word others write is what the kernel's side allows.
        unsafe { std::ptr::read_volatile(q.ring_word(off)) }
    })
}

/// A host thread that runs device code on the runtime's context, until dropped
/// ([`Runtime::host_thread`]).
pub struct HostThread<'a> {
    rt: &'a Runtime,
    _bell: HookGuard,
}

impl Drop for HostThread<'_> {
    fn drop(&mut self) {
        self.rt.waker.deactivate();
    }
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
                crate::notice::say(
                    crate::notice::Level::Warn,
                    &format!(
                        "gpuio: at runtime drop: synchronize gave up (hang timeout): {report}; the \
                         runtime's memory, ring and GPU mappings are leaked, not freed, because the \
                         kernels or their I/O may still use them"
                    ),
                );
                std::mem::forget(Arc::clone(&self.shared));
                std::mem::forget(self.gpu.take());
                // On rings without SQPOLL the waker is their only submitter: kernel threads
                // still running would wait for it forever, and its exit would cancel the
                // requests it submitted.
                if self.shared.entered() {
                    self.waker.leak();
                }
            }
            Err(e) => {
                if !reported {
                    crate::notice::say(crate::notice::Level::Error, &format!("gpuio: at runtime drop: {e}"));
                }
            }
        }
    }
}
