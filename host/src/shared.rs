//! The memory the host shares with the kernels: the rings' SQEs and words, the print
//! logs, the file-I/O arena, and the protocol state (the device [`Context`], ready flags,
//! completion slots, chunk counters, flights), in host memory on the CPU backend and in
//! device memory on a GPU; its layout, and the host's reads and writes of the context.

use std::os::fd::RawFd;
use std::sync::Mutex;
use std::time::Duration;

use gpuio_device::protocol::arch::host::Doorbell;
use gpuio_device::protocol::arena::{Arena, MAX_REGIONS};
use gpuio_device::protocol::context::{Context, Refusals};
use gpuio_device::protocol::context::{CONTEXT_MAGIC, MAX_RINGS, STREAMS};
use gpuio_device::protocol::pool::Pool;
use gpuio_device::protocol::request::Requests;
use gpuio_device::protocol::ring::Ring;
use gpuio_device::protocol::running::Running;
use gpuio_device::protocol::solo::{Solo, SOLO_STAGE};
use gpuio_device::protocol::stream::{chunk_count, Flight, Stream};
use gpuio_device::protocol::sync::{AtomicI32, AtomicU32, AtomicU64, Ordering, SharedCell};
use gpuio_device::protocol::uapi::{Cqe, Sqe};

use crate::backend::cuda::Peek;
use crate::backend::Device;
use crate::consumer::restrictions::{Memory, Setup};
use crate::consumer::submission::Queue;
use crate::consumer::waker::Look;
use crate::error::{Error, Result};
use crate::memory::{round_up, Mapping};

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
    /// CPU backend: print streams the waker rescued (`rescue.rs`), for `Stats::rescues`.
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

/// Where each part lives: offsets into the state region and into the logs.
struct Layout {
    /// Each ring's ready flags.
    ready: Vec<usize>,
    /// Completion slots: states, tags, results (`slots` each).
    request_words: [usize; 3],
    /// Arena block states.
    block_states: usize,
    flights: [usize; STREAMS],
    chunks: [usize; STREAMS],
    /// The streams' stages.
    stages: [usize; STREAMS],
    state_len: usize,
    bufs: [usize; STREAMS],
    logs_len: usize,
}

impl Layout {
    /// The layout for `queues` (1 to `MAX_RINGS` rings of one geometry) and `cfg`.
    fn for_rings(queues: &[Queue], cfg: &SharedConfig) -> Layout {
        assert!((1..=MAX_RINGS).contains(&queues.len()), "1 to {MAX_RINGS} rings");
        let p = *queues[0].params();
        // One configuration made them all: the layout and the slot count assume it.
        assert!(queues
            .iter()
            .all(|q| (q.params().sq_entries, q.params().cq_entries) == (p.sq_entries, p.cq_entries)));
        Layout::new(
            queues.len(),
            p.sq_entries,
            completion_slots(queues),
            cfg.log_bytes,
            cfg.max_flights,
            cfg.arena_bytes / cfg.arena_block_bytes,
        )
    }

    fn new(
        rings: usize,
        sq_entries: u32,
        slots: u32,
        log_bytes: [usize; STREAMS],
        max_flights: u32,
        blocks: usize,
    ) -> Layout {
        let mut at = round_up(size_of::<Context>(), 128);
        let ready = (0..rings)
            .map(|_| {
                let ready = at;
                at = round_up(at + sq_entries as usize * 4, 128);
                ready
            })
            .collect();
        let mut request_words = [0; 3];
        for w in &mut request_words {
            *w = at;
            at = round_up(at + slots as usize * 4, 128);
        }
        let block_states = at;
        at = round_up(at + blocks * 4, 128);
        let (mut flights, mut chunks) = ([0; STREAMS], [0; STREAMS]);
        for i in 0..STREAMS {
            flights[i] = at;
            at = round_up(at + max_flights as usize * size_of::<Flight>(), 128);
            chunks[i] = at;
            at = round_up(at + chunk_count(log_bytes[i] as u64) * 4, 128);
        }
        // The stages (`Stream::stage`), in the GPU's own memory on GPU backends. Only groups
        // of several lanes use them: on the CPU backend that is the tests' simulated warps
        // (its own groups are single threads), and the pages nobody touches cost nothing.
        // Each stage starts 128-aligned and each log at least 16-byte aligned (below): a
        // position has the same 16-byte phase in both, which the group copy needs for its
        // wide stores.
        let mut stages = [0; STREAMS];
        for (stage, bytes) in stages.iter_mut().zip(log_bytes) {
            *stage = at;
            at = round_up(at + bytes, 128);
        }
        let state_len = round_up(at, 4096);
        // Each log starts where the one before ends. The sizes are powers of two of at least
        // 64 bytes, so each log starts 16-byte aligned (the phase the stages keep, above).
        let bufs = std::array::from_fn(|i| log_bytes[..i].iter().sum());
        Layout {
            ready,
            request_words,
            block_states,
            flights,
            chunks,
            stages,
            state_len,
            bufs,
            logs_len: log_bytes.iter().sum(),
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

/// One completion slot per CQ entry of every ring (rounded to a power of two, which the
/// pool's masks need): a block's ring can fill its CQ while the others do too.
fn completion_slots(queues: &[Queue]) -> u32 {
    queues[0].params().cq_entries * (queues.len() as u32).next_power_of_two()
}

/// Maps the print logs, the file-I/O arena and, for a solo ring, its staging buffer (on
/// GPU backends the first two in huge pages: they are registered with the driver).
fn map_memory(
    layout: &Layout,
    cfg: &SharedConfig,
    gpu: bool,
    solo: bool,
) -> Result<(Mapping, Mapping, Option<Mapping>)> {
    let os = |what| move |e| Error::Os { what, source: e };
    let map = if gpu { Mapping::huge } else { Mapping::new };
    let logs = map(layout.logs_len).map_err(os("mmap of the print logs"))?;
    let arena = map(cfg.arena_bytes).map_err(os("mmap of the file-I/O arena"))?;
    let stage = match solo {
        true => Some(Mapping::new(SOLO_STAGE as usize).map_err(os("mmap of the solo ring's staging buffer"))?),
        false => None,
    };
    Ok((logs, arena, stage))
}

/// Where the protocol state was placed ([`place_state`]).
struct Placed {
    state: State,
    /// The state region's address as the agents that run the protocol see it.
    base: *mut u8,
    /// The host memory the Context is first written to.
    image: *mut u8,
    /// Where those agents see each region (the host's address, except where the GPU maps
    /// host memory elsewhere: HSA on discrete GPUs without the SVM API).
    views: Vec<*mut u8>,
}

/// Places the protocol state: in host memory on the CPU backend; on a GPU in zeroed device
/// memory, with a host image of the context, after mapping `regions` for the GPU.
fn place_state(device: Option<Device>, layout: &Layout, regions: &[&Mapping]) -> Result<Placed> {
    let os = |what| move |e| Error::Os { what, source: e };
    let Some(device) = device else {
        // Lazy: the stages at its end are touched only by the tests' simulated warps.
        let m = Mapping::lazy(layout.state_len).map_err(os("mmap of the protocol state"))?;
        let base = m.as_ptr();
        let views = regions.iter().map(|m| m.as_ptr()).collect();
        return Ok(Placed {
            state: State::Host(m),
            base,
            image: base,
            views,
        });
    };
    let views = map_all(&device, regions)?;
    let unmap_all = || {
        // SAFETY: mapped just above; no kernel has run yet.
        unsafe {
            for m in regions {
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
    let image_ptr = image.as_ptr();
    Ok(Placed {
        state: State::Device {
            device,
            dptr,
            image: Mutex::new(image),
            peek: Mutex::new(None),
        },
        base: dptr as *mut u8,
        image: image_ptr,
        views,
    })
}

/// What the context is made of: the layout and settings, and where the memory lies.
///
/// Every pointer it makes points into the queues', the logs', the arena's or the state
/// region's memory, at the kernel's offsets or at the layout's, which those regions cover;
/// all of it lives as long as `Shared`, which outlives every kernel and the waker. The
/// state region is zeroed: the initial state of ready flags, chunk counters and flights.
struct Parts<'a> {
    layout: &'a Layout,
    cfg: &'a SharedConfig,
    setup: &'a Setup,
    /// The state region as the agents see it.
    base: *mut u8,
    /// Each region as the agents see it (see `Shared::new`'s order).
    views: &'a [*mut u8],
    logs: &'a Mapping,
    arena: &'a Mapping,
}

impl Parts<'_> {
    /// The state region's word at `offset`.
    fn state<T>(&self, offset: usize) -> *const T {
        self.base.wrapping_add(offset) as *const T
    }

    /// The context over `queues` and the solo ring.
    ///
    /// # Safety
    /// `self` describes live memory as its docs say, and `queues` and `solo` are those its
    /// regions were made from, in that order.
    unsafe fn context(&self, queues: &[Queue], solo: Option<&(Queue, Mapping)>) -> Context {
        let fds = self.cfg.fds;
        // SAFETY: the rings, streams, slots, arena and solo ring below are made of the memory
        // that the caller's contract vouches for.
        unsafe {
            Context {
                magic: CONTEXT_MAGIC,
                rings: std::array::from_fn(|i| match queues.get(i) {
                    Some(queue) => self.ring(i, queue),
                    None => Ring::unused(), // past `ring_count`
                }),
                ring_count: queues.len() as u32,
                streams: std::array::from_fn(|i| self.stream(i)),
                stderr_stream: if same_file(fds[0], fds[1]) { 0 } else { 1 },
                stray_completions: AtomicU32::new(0),
                refusals: Refusals::new(),
                requests: self.requests(completion_slots(queues)),
                arena: self.arena(),
                allowed_ops: AtomicU64::new(self.setup.allowed_ops()),
                solo: match solo {
                    None => Solo::unused(),
                    Some((q, stage)) => self.solo(queues.len(), q, stage),
                },
                running: Running::new(),
                in_place: gpuio_device::protocol::in_place::InPlaceLines::new(),
            }
        }
    }

    /// Ring `i`, over `queue`: its SQEs and words in views `2 + 2i` and `3 + 2i`.
    ///
    /// # Safety
    /// As [`Parts::context`].
    unsafe fn ring(&self, i: usize, queue: &Queue) -> Ring {
        let p = queue.params();
        let (sqes, words) = (self.views[2 + 2 * i], self.views[3 + 2 * i]);
        // SAFETY: `words` views `queue.rings()`; the offsets are the kernel's.
        unsafe {
            let w = |off| word_at(queue, words, off);
            Ring::new(
                w(p.sq_off.head),
                w(p.sq_off.tail),
                w(p.sq_off.flags),
                sqes as *const SharedCell<Sqe>,
                w(p.cq_off.head),
                w(p.cq_off.tail),
                words.add(p.cq_off.cqes as usize) as *const SharedCell<Cqe>,
                self.state(self.layout.ready[i]),
                p.sq_entries,
                p.cq_entries,
            )
        }
    }

    /// Print stream `i` (stdout, stderr), over its log (view 0) and its state.
    ///
    /// # Safety
    /// As [`Parts::context`].
    unsafe fn stream(&self, i: usize) -> Stream {
        let (layout, fd) = (self.layout, self.cfg.fds[i]);
        let (positional, pos) = output_mode(fd);
        // SAFETY: the log lies in the logs' view at the layout's offset; its chunk counters
        // and flights in the state region at the layout's (the caller's contract).
        let mut s = unsafe {
            Stream::new(
                i as u32,
                fd,
                positional,
                pos,
                self.views[0].add(layout.bufs[i]) as *const SharedCell<u8>,
                self.cfg.log_bytes[i] as u64,
                self.state(layout.chunks[i]),
                self.state(layout.flights[i]),
                if positional { self.cfg.max_flights } else { 1 },
            )
        };
        // The kernel reads the log at the host's address.
        s.io_base = self.logs.as_ptr() as u64 + layout.bufs[i] as u64;
        s.stage = self.state(layout.stages[i]);
        if self.setup.fixed_files {
            s.fixed_file = i as i32;
        }
        if self.setup.fixed_logs {
            // Ring 0's registered buffer `i` (`Memory::logs`).
            s.fixed_log = i as i32;
        }
        s
    }

    /// The completion slots (`slots` of them).
    ///
    /// # Safety
    /// As [`Parts::context`], and the layout has room for `slots` slots.
    unsafe fn requests(&self, slots: u32) -> Requests {
        let word = |i: usize| self.layout.request_words[i];
        // SAFETY: the slots' three words each lie in the state region at the layout's
        // offsets, `slots` long (the caller's contract).
        unsafe { Requests::new(self.state(word(0)), self.state(word(1)), self.state(word(2)), slots) }
    }

    /// The file-I/O arena (view 1) and its block states.
    ///
    /// # Safety
    /// As [`Parts::context`].
    unsafe fn arena(&self) -> Arena {
        let blocks = self.cfg.arena_bytes / self.cfg.arena_block_bytes;
        // SAFETY: the arena's view covers `arena_bytes`, and its block states lie in the
        // state region at the layout's offset, one word a block (the caller's contract).
        let mut arena = unsafe {
            Arena::new(
                self.views[1] as *const SharedCell<u8>,
                // The kernel reads and writes the arena at the host's address.
                self.arena.as_ptr() as u64,
                self.cfg.arena_block_bytes as u64,
                Pool::new(self.state(self.layout.block_states), blocks as u32),
            )
        };
        // Transfers name the buffer table (`Memory`), which every ring holds.
        arena.fixed = self.setup.fixed_transfers;
        arena
    }

    /// The solo ring `q` after `n` rings: its SQEs, words and stage in views `2 + 2n` to
    /// `4 + 2n`.
    ///
    /// # Safety
    /// As [`Parts::context`].
    unsafe fn solo(&self, n: usize, q: &Queue, stage: &Mapping) -> Solo {
        let p = q.params();
        let (sqes, words, stage_view) = (self.views[2 + 2 * n], self.views[3 + 2 * n], self.views[4 + 2 * n]);
        // SAFETY: `words` views `q.rings()`; the offsets are the kernel's.
        unsafe {
            let w = |off| word_at(q, words, off);
            let solo = Solo::new(
                w(p.sq_off.tail),
                w(p.cq_off.head),
                w(p.cq_off.tail),
                sqes as *const SharedCell<Sqe>,
                words.add(p.cq_off.cqes as usize) as *const SharedCell<Cqe>,
                p.sq_entries,
                p.cq_entries,
                stage_view as *const SharedCell<u8>,
                // The kernel reads and writes the buffer at the host's address.
                stage.as_ptr() as u64,
            );
            if self.cfg.solo_waits_on_results {
                // Slot `i`'s `res` lies `i` CQEs on from slot 0's, in the CQ that `words`
                // views; the caller asks for this on x86-64 only.
                solo.waiting_on_results(
                    words.add(p.cq_off.cqes as usize + std::mem::offset_of!(Cqe, res)) as *const AtomicI32,
                    size_of::<Cqe>() as u32,
                )
            } else {
                solo
            }
        }
    }
}

/// The ring word at the kernel's offset `off` in `queue`'s rings, where the protocol's agents
/// see it: in `words`, their view of those rings.
///
/// # Safety
/// `words` views `queue.rings()` (the same length), and `off` is one of the kernel's offsets
/// of a word in it.
unsafe fn word_at(queue: &Queue, words: *mut u8, off: u32) -> *const AtomicU32 {
    let host = queue.ring_word(off) as *const u8;
    // SAFETY: the caller's contract: the word lies inside the rings, and `words` views them.
    unsafe { words.add(host.offset_from(queue.rings().as_ptr()) as usize) as *const AtomicU32 }
}

/// Maps the regions for the GPU, in order; on failure unmaps those already mapped.
fn map_all(device: &Device, regions: &[&Mapping]) -> Result<Vec<*mut u8>> {
    let mut views = vec![std::ptr::null_mut(); regions.len()];
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
