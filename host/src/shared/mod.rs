//! The memory the host shares with the kernels: the rings' SQEs and words, the print
//! logs, the file-I/O arena, and the protocol state (the device [`Context`], ready flags,
//! completion slots, chunk counters, flights), in host memory on the CPU backend and in
//! device memory on a GPU; its layout, and the host's reads and writes of the context.
//!
//! [`Shared`] holds it and is what the runtime uses; `layout` says where each part lives
//! and maps or places the memory, `parts` makes the device [`Context`] over it.

use std::os::fd::RawFd;
use std::sync::Mutex;
use std::time::Duration;

use gpuio_device::protocol::arch::host::Doorbell;
use gpuio_device::protocol::arena::MAX_REGIONS;
use gpuio_device::protocol::context::Context;
use gpuio_device::protocol::context::STREAMS;
use gpuio_device::protocol::solo::SOLO_STAGE;
use gpuio_device::protocol::stream::Stream;
use gpuio_device::protocol::sync::{AtomicU32, AtomicU64, Ordering};

use crate::backend::cuda::Peek;
use crate::backend::Device;
use crate::consumer::restrictions::{Memory, Setup};
use crate::consumer::submission::Queue;
use crate::consumer::waker::Look;
use crate::error::Result;
use crate::memory::Mapping;

mod layout;
mod parts;

use layout::{map_memory, place_state, Layout};
use parts::{output_mode, Parts};

/// What [`Shared::new`] needs of the runtime's settings.
pub(crate) struct SharedConfig {
    /// Bytes of each print stream's log (stdout, stderr).
    pub(crate) log_bytes: [usize; STREAMS],
    /// Writes in flight per positional stream.
    pub(crate) max_flights: u32,
    /// The file-I/O arena's size and block size.
    pub(crate) arena_bytes: usize,
    pub(crate) arena_block_bytes: usize,
    /// stdout, stderr.
    pub(crate) fds: [RawFd; 2],
    /// The solo ring's holder waits on each CQE's `res`, not on the CQ tail.
    pub(crate) solo_waits_on_results: bool,
}

/// Where the protocol state (the [`Context`], ready flags, chunk counters, flights) lives.
pub(crate) enum State {
    /// CPU backend: host memory, shared by the kernel threads and the host's drain.
    Host(Mapping),
    /// GPU backends: device memory, touched only by GPU code. (On PCIe GPUs, GPU atomics on
    /// host memory are slow and not atomic against the CPU's.) The host reads and writes
    /// it with copies, only while no kernel runs; `image` is the host-side copy.
    Device {
        device: Device,
        dptr: u64,
        image: Mutex<Mapping>,
        /// Reads the context while kernels run (CUDA), for hang reports: made on first
        /// use; `Some(None)` once that failed.
        peek: Mutex<Option<Option<Peek>>>,
    },
}

/// Memory and rings shared with the device, the waker and kernel threads.
pub(crate) struct Shared {
    /// The rings, in the context's order (ring 0 carries the prints). Closed (io_uring) or
    /// stopped (the fallback threads) before the memory below goes: their consumers stop
    /// reading it.
    pub(crate) queues: Vec<Queue>,
    /// The solo ring (`gpuio_device::protocol::solo`), if the runtime has one, and its staging
    /// buffer; closed with the rings, before the memory below goes.
    pub(crate) solo: Option<(Queue, Mapping)>,
    /// The print logs: host memory the kernel reads (GPU-registered on GPU backends).
    logs: Mapping,
    /// The file-I/O arena: host memory the kernel reads and writes (GPU-registered too).
    arena: Mapping,
    pub(crate) state: State,
    /// Which of the context's host-visible region entries are in use.
    pub(crate) regions: Mutex<[bool; MAX_REGIONS]>,
    /// Host buffers dropped while kernels might still use them: freed with the runtime.
    pub(crate) retired: Mutex<Vec<(Mapping, bool)>>,
    /// Typed launches' string and slice arguments, kept until a synchronize finds no kernel
    /// running (`Runtime::release_staged`), else freed with the runtime; each mapped for
    /// the GPU if the flag says so.
    pub(crate) staged: Mutex<Vec<(Mapping, bool)>>,
    /// The output fds that the kernels write with `pwrite` at their own positions (regular
    /// files): after a kernel fault, when the context can no longer be read, they are moved
    /// to their end so that the host's own writes do not land on the kernels' lines.
    pub(crate) positional_fds: Vec<RawFd>,
    /// CPU backend: print streams the waker rescued (`builder/rescue.rs`), for `Stats::rescues`.
    pub(crate) rescues: std::sync::atomic::AtomicU64,
    /// Rings that no thread of their own consumes (the CPU backend's: io_uring without
    /// SQPOLL, or performed inline, its default): what a thread that published SQEs rings
    /// (`arch::ring_doorbell`), which unparks the waker. On io_uring only the waker enters
    /// those rings. Inline, kernel threads perform their own requests instead of ringing
    /// (they are performers), so the doorbell is what the program's threads (a drain,
    /// `Runtime::host_thread`), which never perform, ring, and a kernel thread as it ends:
    /// the waker then performs for them. Set once the waker runs; unset with SQPOLL or the
    /// fallback.
    pub(crate) doorbell: std::sync::OnceLock<Doorbell>,
}

impl Shared {
    /// Whether its rings were made without SQPOLL: the waker submits to them
    /// ([`Queue::entered`]).
    pub(crate) fn entered(&self) -> bool {
        self.queues.iter().any(Queue::entered)
    }

    /// Whether its rings are performed inline ([`Submission::Inline`](crate::Submission)).
    pub(crate) fn inline(&self) -> bool {
        self.queues[0].inline()
    }

    /// What a CPU launch's kernel threads perform with (`arch::host::install_performer`)
    /// where the rings are performed inline: every ring's waiting requests, the solo
    /// ring's included. `None` on other rings.
    pub(crate) fn performer(self: &std::sync::Arc<Self>) -> Option<Doorbell> {
        let shared = self.clone();
        self.inline().then(|| {
            std::sync::Arc::new(move || {
                let solo = shared.solo.as_ref().map(|(q, _)| q);
                for q in shared.queues.iter().chain(solo) {
                    q.perform();
                }
            }) as Doorbell
        })
    }

    /// Makes sure waiting SQEs get consumed, from a thread other than the waker (the
    /// host's drain): rings the doorbell where there is one (rings without SQPOLL are
    /// entered by the waker alone: it runs confined where the sandbox confines requests,
    /// `builder/assemble.rs`), else wakes sleeping consumers ([`Shared::wake_if_needed`]).
    pub(crate) fn nudge(&self) {
        match self.doorbell.get() {
            Some(bell) => {
                // Only when SQEs wait: an unpark each drain round would keep the waker
                // looking without a pause.
                let solo = self.solo.as_ref().map(|(q, _)| q);
                if self.queues.iter().chain(solo).any(Queue::sq_waiting) {
                    bell()
                }
            }
            None => {
                self.wake_if_needed();
            }
        }
    }

    /// Wakes each ring's consumer that sleeps while SQEs wait ([`Queue::wake_if_needed`]),
    /// and says what the looks saw together: the sum of the SQ tails (it moves whenever
    /// one moves: tails only grow), SQEs waiting on any ring, any consumer woken.
    pub(crate) fn wake_if_needed(&self) -> Look {
        let solo = self.solo.as_ref().map(|(q, _)| q);
        self.queues.iter().chain(solo).fold(Look::default(), |all, q| {
            let look = q.wake_if_needed();
            Look {
                tail: all.tail.wrapping_add(look.tail),
                waiting: all.waiting || look.waiting,
                woke: all.woke || look.woke,
            }
        })
    }

    /// Sets registered buffer `slot` of every ring, the solo ring's included, to `buf`
    /// ((0, 0) empties it): `IORING_REGISTER_BUFFERS_UPDATE`, which `FileIo`'s restrictions
    /// allow. Every ring is asked, even after one refused (so that emptying a slot empties
    /// it wherever it can); the first refusal is returned.
    pub(crate) fn update_buffers(&self, slot: u32, buf: (u64, u64)) -> std::io::Result<()> {
        let solo = self.solo.as_ref().map(|(q, _)| q);
        let mut first = Ok(());
        for q in self.queues.iter().chain(solo) {
            if let (Err(e), Ok(())) = (q.update_buffers(slot, &[buf]), &first) {
                first = Err(e);
            }
        }
        first
    }

    /// The shared memory over `queues` (1 to `MAX_RINGS`, all of one geometry) and the
    /// solo ring, if any.
    /// `sandbox` registers the print outputs and the logs with the rings, restricts and
    /// enables them (`restrictions::configure_all`): it runs once the memory exists and before
    /// anything can submit, and what it set up comes back beside the memory.
    ///
    /// The steps: lay the state region out; map the logs, the arena and the solo ring's
    /// stage; let the sandbox register and restrict; place the state (host memory, or
    /// device memory and a host image of the context); write the context; on a GPU, copy
    /// its image to the device.
    pub(crate) fn new(
        mut queues: Vec<Queue>,
        mut solo: Option<Queue>,
        cfg: &SharedConfig,
        device: Option<Device>,
        sandbox: impl FnOnce(Vec<&mut Queue>, &Memory) -> Result<Setup>,
    ) -> Result<(Shared, Setup)> {
        let layout = Layout::for_rings(&queues, cfg);
        let (logs, arena, solo_stage) = map_memory(&layout, cfg, device.is_some(), solo.is_some())?;
        let memory = Memory {
            logs: std::array::from_fn(|i| (logs.as_ptr() as u64 + layout.bufs[i] as u64, cfg.log_bytes[i] as u64)),
            arena: (arena.as_ptr() as u64, cfg.arena_bytes as u64),
            solo_stage: solo_stage
                .as_ref()
                .map_or((0, 0), |m| (m.as_ptr() as u64, SOLO_STAGE as u64)),
        };
        let setup = sandbox(queues.iter_mut().chain(solo.as_mut()).collect(), &memory)?;
        let solo = solo.zip(solo_stage);
        // The regions the protocol's agents address, in this order: the logs, the arena,
        // then each ring's SQEs and words, then the solo ring's SQEs, words and stage.
        let mut regions = vec![&logs, &arena];
        for q in queues.iter().chain(solo.as_ref().map(|(q, _)| q)) {
            regions.extend([q.sqes(), q.rings()]);
        }
        if let Some((_, stage)) = &solo {
            regions.push(stage);
        }
        let placed = place_state(device, &layout, &regions)?;
        drop(regions);
        let parts = Parts {
            layout: &layout,
            cfg,
            setup: &setup,
            base: placed.base,
            views: &placed.views,
            logs: &logs,
            arena: &arena,
        };
        // SAFETY: `placed.image` is the host memory the Context is first written to (the
        // state region itself on the CPU backend), at least a Context long, and no agent
        // sees it before this write; `parts` describes memory that lives as long as `Shared`.
        unsafe { std::ptr::write(placed.image as *mut Context, parts.context(&queues, solo.as_ref())) };
        let shared = Shared {
            queues,
            solo,
            logs,
            arena,
            state: placed.state,
            regions: Mutex::new([false; MAX_REGIONS]),
            retired: Mutex::new(Vec::new()),
            staged: Mutex::new(Vec::new()),
            positional_fds: cfg.fds.iter().copied().filter(|&fd| output_mode(fd).0).collect(),
            rescues: Default::default(),
            doorbell: Default::default(),
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
        Ok((shared, setup))
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
    pub(crate) fn with_context<R>(&self, f: impl FnOnce(&Context) -> R) -> Result<R> {
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
    pub(crate) fn peek_context<R>(&self, f: impl FnOnce(&Context) -> R) -> Option<R> {
        match &self.state {
            State::Host(_) => self.host_context().map(f),
            State::Device {
                device: Device::Cuda(c),
                dptr,
                peek,
                ..
            } => {
                let mut peek = peek.lock().unwrap_or_else(|e| e.into_inner());
                let peek = peek.get_or_insert_with(|| Peek::new(c, size_of::<Context>()).ok());
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
    pub(crate) fn live_streams(ctx: &Context) -> impl Iterator<Item = &Stream> {
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
                for q in self.queues.iter().chain(self.solo.as_ref().map(|(q, _)| q)) {
                    device.unmap_host(q.rings().as_ptr());
                    device.unmap_host(q.sqes().as_ptr());
                }
                if let Some((_, stage)) = &self.solo {
                    device.unmap_host(stage.as_ptr());
                }
            }
            device.free(*dptr);
            let retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
            let staged = self.staged.lock().unwrap_or_else(|e| e.into_inner());
            for (m, mapped) in retired.iter().chain(staged.iter()) {
                if *mapped {
                    // SAFETY: mapped by `Runtime::host_buffer` or for a launch's arguments;
                    // no kernel runs any more.
                    unsafe { device.unmap_host(m.as_ptr()) };
                }
            }
        }
    }
}

/// An atomic field of the context that the host may set between kernels.
pub(crate) trait AtomicWord {
    /// The value the field holds.
    type Value: Copy;
    /// Stores `v` (Release: the kernels launched next, on the CPU backend, see what the
    /// host wrote before).
    fn set(&self, v: Self::Value);
    /// `v` as the bytes a copy to device memory writes.
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
