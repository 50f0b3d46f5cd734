//! The runtime context: everything a kernel needs to do I/O, in one block of memory the
//! host fills before launch. Kernels find it through a global (GPUs) or a thread-local
//! (the CPU backend), so they need no extra argument to print.

use crate::errno::Errno;
use crate::protocol::arena::Arena;
use crate::protocol::in_place::InPlaceLines;
use crate::protocol::pool;
use crate::protocol::request::{Requests, Ticket};
use crate::protocol::ring::Ring;
use crate::protocol::running::Running;
use crate::protocol::solo::{Solo, SoloTurn};
use crate::protocol::stream::Stream;
use crate::protocol::sync::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use crate::protocol::uapi::Sqe;

/// `"gpuio\0\0"` plus the layout version; the host writes it, the device checks it.
pub const CONTEXT_MAGIC: u64 = 0x6770_7569_6f00_0007;

/// The layout this build of the device crate gives the [`Context`]: the magic with the
/// Context's size folded in. A code object exports it as `gpuio_layout`; the host refuses a
/// code object whose layout differs from its own (one built against another gpuio), which
/// would otherwise read the context at the wrong offsets.
pub const CONTEXT_LAYOUT: u64 = CONTEXT_MAGIC ^ ((core::mem::size_of::<Context>() as u64) << 24);

/// [`CONTEXT_LAYOUT`], for the host to read from a loaded code object.
#[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static gpuio_layout: u64 = CONTEXT_LAYOUT;

/// The context the host installed for the calling thread's kernel (a device global on GPUs,
/// a thread-local on the CPU backend), or null outside a kernel.
#[inline(always)]
pub fn current() -> *const Context {
    crate::protocol::arch::installed_context().cast()
}

/// [`current`], as a reference: `None` outside a kernel.
#[inline]
pub fn installed() -> Option<&'static Context> {
    let ctx = current();
    // SAFETY: a non-null context was installed by the host and outlives every kernel that
    // runs with it.
    (!ctx.is_null()).then(|| unsafe { &*ctx })
}

/// Counts the calling thread as running in the installed context ([`Context::running`])
/// until the guard drops: what a `kernel!` entry point does, for hang reports. Outside a
/// context (a kernel launched without a gpuio runtime) it counts nothing.
#[inline(always)]
pub fn count_running() -> Option<crate::protocol::running::Entered<'static>> {
    installed().map(|ctx| ctx.running.enter())
}

/// Makes the calling host thread a "GPU thread" of a kernel on `ctx` until the guard drops
/// (the CPU backend calls this on each thread it starts; tests call it to run device code).
///
/// # Safety
/// `ctx` must point to an initialised [`Context`] that outlives the guard, and `ids.block`
/// be null or point to a `Block` that outlives it.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub unsafe fn enter(
    ctx: *const Context,
    ids: crate::protocol::arch::host::ThreadIds,
) -> crate::protocol::arch::host::EnterGuard {
    // SAFETY: the caller upholds `arch::host::enter`'s contract, which is this function's.
    unsafe { crate::protocol::arch::host::enter(ctx.cast(), ids) }
}

/// The most io_uring rings a context holds (see [`Context::rings`]). Two under loom: its
/// models build the context on a model thread's small stack, where eight rings of loom's
/// (much larger) atomics overflow it, and they use one ring.
pub const MAX_RINGS: usize = if cfg!(loom) { 2 } else { 8 };

/// Number of print streams: stdout and stderr.
pub const STREAMS: usize = 2;

/// Index of the stdout stream.
pub const STDOUT: usize = 0;

/// How often a thread waiting for a request's result also flushes the print streams a
/// completion kicked (a waiter mostly only reaps its own ring; a performance knob). Every
/// other round under loom, so that the models take both paths.
const PROGRESS_EVERY: u32 = if cfg!(loom) { 2 } else { 64 };

/// The result with which the host's io_uring sandbox refuses a request without executing
/// it (a forbidden opcode or SQE flag): `-EACCES`.
pub(super) const SANDBOX_REFUSAL: i32 = -Errno::EACCES.0;

/// The shared runtime state (see the module docs).
#[repr(C)]
pub struct Context {
    /// [`CONTEXT_MAGIC`].
    pub magic: u64,
    /// The io_uring rings, each consumed by its own SQPOLL thread; `rings[..ring_count]`
    /// are live, the rest are never touched. Ring 0 carries the print streams' writes (one
    /// ring keeps a stream's flights in their order of submission); each device request
    /// goes to its block's ring ([`Context::request_ring`]).
    pub rings: [Ring; MAX_RINGS],
    /// Live rings: 1 to [`MAX_RINGS`].
    pub ring_count: u32,
    /// stdout, stderr.
    pub streams: [Stream; STREAMS],
    /// The stream `eprint!` uses: 1, or 0 when stdout and stderr are the same file (so
    /// that the two never interleave inside a line or overwrite each other).
    pub stderr_stream: u32,
    /// CQEs whose `user_data` matched nothing and that succeeded (a bug if ever non-zero).
    pub stray_completions: AtomicU32,
    /// Requests the kernel failed that the host's `synchronize` reports (the sandbox's
    /// refusals among them).
    pub refusals: Refusals,
    /// Completion slots of device file I/O requests.
    pub requests: Requests,
    /// Host-visible staging memory for device file I/O, and the direct regions.
    pub arena: Arena,
    /// The opcodes the host's sandbox lets through, bit `op` for `IORING_OP_*` `op` below
    /// 64 (`u64::MAX`: every opcode, no sandbox). Set by the host before any kernel; read
    /// with `Relaxed` loads (the launch orders the host's store before the kernel's loads).
    pub allowed_ops: AtomicU64,
    /// The solo ring: a lone request's round trip with none of the shared rings' steps,
    /// for one thread at a time ([`Solo::take`]).
    pub solo: Solo,
    /// Threads of `kernel!` kernels started and not yet returned, by block: what a hang
    /// report names on a GPU.
    pub running: Running,
    /// Threads formatting a long line in place now: a print their `Display` makes then is
    /// skipped, having gone out in the line's first pass.
    pub in_place: InPlaceLines,
}

/// The requests the kernel failed that the host reports ([`Context::refusals`]): one value,
/// counted in three ways because what is known of a failed request differs with who sees
/// it. Every count is `Relaxed` (its writers: reapers, solo ring holders, callers): the host
/// reads them after a drain (whose end orders them) and resets them between kernels.
#[repr(C)]
pub struct Refusals {
    /// Failed requests that no stream or device call made (a failed CQE that matched no
    /// completion slot): under the host's io_uring sandbox, a forbidden opcode or SQE flag
    /// comes back as `-EACCES` without being executed.
    pub unclaimed: AtomicU32,
    /// The errno of the latest of [`Refusals::unclaimed`].
    pub errno: AtomicI32,
    /// Device requests that came back `-EACCES`: the sandbox's refusals or a plain
    /// permission error. Under the print-only sandbox every file request comes back so,
    /// refused without being executed.
    pub denied: AtomicU32,
    /// Requests made through [`Context::call`] whose opcode the sandbox forbids and that
    /// came back `-EACCES`: the sandbox's refusals under any policy (a plain permission
    /// error comes back only from an opcode the policy allows). Under the print-only
    /// sandbox they are among [`Refusals::denied`].
    pub forbidden: AtomicU32,
}

impl Refusals {
    /// None counted.
    pub fn new() -> Refusals {
        Refusals {
            unclaimed: AtomicU32::new(0),
            errno: AtomicI32::new(0),
            denied: AtomicU32::new(0),
            forbidden: AtomicU32::new(0),
        }
    }
}

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals::new()
    }
}

// SAFETY: a Context's fields are atomics and the rings, streams, requests and arena, each of
// which is `Sync` (see theirs); its plain fields (`magic`, `ring_count`, `stderr_stream`) are written only
// by the host before any kernel sees the context. So shared references from many threads are
// sound.
unsafe impl Sync for Context {}
// SAFETY: a Context owns nothing thread-bound: its parts are `Send` (see theirs), and the
// memory their pointers name is valid independently of any thread.
unsafe impl Send for Context {}

impl Context {
    /// The stream `print!` (`stderr == false`) or `eprint!` writes to.
    #[inline]
    pub fn stream(&self, stderr: bool) -> &Stream {
        &self.streams[self.stream_index(stderr)]
    }

    /// The index in `streams` of the stream `print!` (`stderr == false`) or `eprint!`
    /// writes to.
    #[inline]
    pub fn stream_index(&self, stderr: bool) -> usize {
        const { assert!(STDOUT == 0 && STREAMS == 2) }; // what the mask below relies on
                                                        // Without a branch: compiled whole (one program), ptxas (CUDA 13.0, driver 580) left
                                                        // the stdout arm's 0 out of the register it gave the index, so a `println!` wrote
                                                        // through a stream past the context's (docs/PROTOCOL.md, "Compilers").
        (self.stderr_stream & stderr as u32) as usize % STREAMS
    }

    /// The live rings (`rings[..ring_count]`).
    #[inline]
    pub fn rings(&self) -> &[Ring] {
        &self.rings[..self.ring_count.clamp(1, MAX_RINGS as u32) as usize]
    }

    /// The ring the print streams write through: ring 0.
    #[inline]
    pub fn print_ring(&self) -> &Ring {
        &self.rings[0]
    }

    /// The ring the calling thread's requests go to: its block's, `block_rank() % ring_count`.
    /// Every lane of a warp or wavefront is in one block, so lanes that wait for one
    /// another's requests (the lockstep rule, `arch/mod.rs`) reap the same ring.
    #[inline]
    pub fn request_ring(&self) -> &Ring {
        let n = self.ring_count.clamp(1, MAX_RINGS as u32);
        // The mask changes nothing (the index is below `n <= MAX_RINGS`, a power of two);
        // it lets the compiler drop the bounds check.
        &self.rings[(crate::protocol::arch::block_rank() % n as u64) as usize & (MAX_RINGS - 1)]
    }

    /// Where the print streams' writes go and how their completions come back: the print
    /// ring, and its reaper ([`Context::reap_ring`] on it, which routes each completion to
    /// the flight or request it finishes). A stream's flush, and a producer waiting for log
    /// space, take the two as values ([`Stream::flush`], [`Stream::fill`],
    /// [`Stream::write_part`]): the stream needs nothing else of the context.
    ///
    /// Every caller gets the same closure type, so the flusher (`Stream::flush_work`) and
    /// `Stream::fill`, generic over it, have one copy each in a code object.
    ///
    /// The reap itself is called out of line (`Context::reap_print_ring`). Inlined, it was
    /// most of their PTX (the flusher's copies alone a third of the example kernels'
    /// module, which the driver compiles at a module's first load: 1.6-1.8x the JIT
    /// time); and a print reaps only when every flight is out or it waits for log space,
    /// never on its fast path, so the call costs a print nothing there. (On AMD, compiled
    /// ahead of time, what it saves is code size alone; it was not measured there.)
    #[inline] // on the print path (see `Stream::write_part`)
    pub fn print_out(&self) -> (&Ring, impl FnMut() + Copy + '_) {
        let ring = self.print_ring();
        (ring, move || {
            self.reap_print_ring(ring);
        })
    }

    /// [`Context::reap_ring`] on the print ring, out of line: [`Context::print_out`]'s
    /// reaper, one copy in a code object however many waits call it.
    #[inline(never)]
    fn reap_print_ring(&self, ring: &Ring) {
        self.reap_ring(ring);
    }

    /// Flushes `stream`, or asks whoever is flushing it to go on ([`Stream::flush`], with
    /// [`Context::print_out`]).
    #[inline] // on the print path (see `Stream::write_part`)
    pub fn flush(&self, stream: &Stream) {
        let (ring, reap) = self.print_out();
        stream.flush(ring, reap);
    }

    /// What a thread waiting for log space does: reap, then flush ([`Stream::help`], with
    /// [`Context::print_out`]).
    pub fn help(&self, stream: &Stream) {
        let (ring, reap) = self.print_out();
        stream.help(ring, reap);
    }

    /// What a thread waiting for a request's result does between rounds (`rounds` counts
    /// the rounds this lane went for): reap its block's ring, or, while another thread reaps
    /// it, stand aside (`arch::yield_to_siblings`); and every `PROGRESS_EVERY` rounds reap
    /// every ring and flush the print streams a completion kicked. `mine` is the request it waits for (the
    /// oldest, if several): when its own reap of its ring takes that request's CQE, it
    /// returns the result, having given the slot back (`Requests::give_back_mine`).
    ///
    /// Of the lanes of a warp that wait together, one goes round for all of them
    /// (`arch::by_one_lane`; its reap completes their requests too), and the others wait
    /// for it without issuing: their polling would take issue slots from a sibling's reap. The price: a lane whose request completed
    /// waits out the round in progress (a reap of up to a few hundred CQEs, or every 64th
    /// round a reap of every ring and a flush) before it looks again.
    ///
    /// Always inlined: a waiter calls it every round, mostly to find the reaper busy. Left
    /// to LLVM it went out of line once it also held the waiter's own reap, which made
    /// random small reads no faster, and mostly a little slower.
    ///
    /// Crate-private: a caller that dropped a returned result would lose it with the slot
    /// already given back.
    #[inline(always)]
    pub(crate) fn waiting(&self, rounds: &mut u32, mine: Option<Ticket>) -> Option<i32> {
        crate::protocol::arch::by_one_lane(|| self.waiting_round(rounds, mine))
    }

    /// A round of [`Context::waiting`], on the lane that goes round for the lanes waiting
    /// with it.
    #[inline(always)]
    fn waiting_round(&self, rounds: &mut u32, mine: Option<Ticket>) -> Option<i32> {
        *rounds = rounds.wrapping_add(1);
        let ring = self.request_ring();
        if rounds.is_multiple_of(PROGRESS_EVERY) {
            self.progress();
        } else if !ring.reaper.busy() {
            return match mine {
                Some(mine) => self.reap_ring_for(ring, mine),
                None => {
                    self.reap_ring(ring);
                    None
                }
            };
        } else {
            // Nothing to do until that reap ends; polling would slow it where the reaper
            // shares this thread's warp (`arch::yield_to_siblings`).
            crate::protocol::arch::yield_to_siblings();
        }
        None
    }

    /// Waits for `ticket`'s completion (`Requests::wait`, reaping for everyone through
    /// `Context::waiting`); returns the CQE's result and gives the slot back.
    #[inline]
    pub fn wait(&self, ticket: Ticket) -> i32 {
        let mut rounds = 0u32;
        self.requests.wait(ticket, || self.waiting(&mut rounds, Some(ticket)))
    }

    /// An arena block and a completion slot, both or neither (what [`Context::with_taken`]
    /// takes for a staged request).
    pub fn try_take_block_and_slot(&self) -> Option<(u32, Ticket)> {
        let block = self.arena.pool.try_take()?;
        match self.requests.try_take() {
            Some(ticket) => Some((block, ticket)),
            None => {
                self.arena.pool.give_back(block);
                None
            }
        }
    }

    /// [`pool::with_taken`], reaping every ring while it waits for slots or blocks (their
    /// holders' requests may be on any ring).
    #[inline]
    pub fn with_taken<T, R>(&self, try_take: impl FnMut() -> Option<T>, work: impl FnMut(T) -> R) -> R {
        pool::with_taken(try_take, work, || {
            self.reap();
        })
    }

    /// Submits `sqe` to the calling thread's ring ([`Context::request_ring`]), reaping that
    /// ring while it waits for room ([`Ring::submit`]); returns its SQ ticket. Whatever the
    /// SQE points at must be fully written before the call.
    pub fn submit(&self, sqe: &Sqe) -> u32 {
        let ring = self.request_ring();
        ring.submit(sqe, &mut || {
            self.reap_ring(ring);
        })
    }

    /// Submits `sqe` for `ticket` (its `user_data` replaced by the ticket's) and waits for
    /// its result.
    pub fn submit_and_wait(&self, ticket: Ticket, mut sqe: Sqe) -> i32 {
        sqe.user_data = ticket.user_data();
        self.submit(&sqe);
        self.wait(ticket)
    }

    /// Runs `sqe` and returns its result: on the solo ring if no other thread holds it
    /// ([`Context::call_solo`]), else taking a completion slot (waiting for one) and
    /// submitting to the calling thread's ring.
    #[inline(never)] // one copy in a code object
    pub fn call(&self, sqe: Sqe) -> i32 {
        let res = match self.solo.take() {
            Some(mut turn) => self.call_solo(&mut turn, sqe),
            None => self.with_taken(|| self.requests.try_take(), |ticket| self.submit_and_wait(ticket, sqe)),
        };
        if res == SANDBOX_REFUSAL && !self.sandbox_allows(sqe.opcode) {
            // Relaxed: a count the host reads after a drain.
            self.refusals.forbidden.fetch_add(1, Ordering::Relaxed);
        }
        res
    }

    /// Whether the host's sandbox lets requests of `opcode` through ([`Context::allowed_ops`]).
    #[inline]
    pub fn sandbox_allows(&self, opcode: u8) -> bool {
        let ops = self.allowed_ops.load(Ordering::Relaxed);
        ops == u64::MAX || (opcode < 64 && ops & (1 << opcode) != 0)
    }

    /// [`SoloTurn::call`] on a turn of this context's solo ring ([`Solo::take`] on
    /// [`Context::solo`]), counting the sandbox's refusals as the shared rings' dispatch
    /// does ([`Refusals::denied`]).
    #[inline]
    pub fn call_solo(&self, turn: &mut SoloTurn<'_>, sqe: Sqe) -> i32 {
        let res = turn.call(sqe);
        if res == SANDBOX_REFUSAL {
            // Relaxed, system scope (the protocol's atomics' default): a count the host reads
            // after a drain, ordering nothing.
            self.refusals.denied.fetch_add(1, Ordering::Relaxed);
        }
        res
    }

    /// Reaps every ring, and flushes every stream a completion kicked.
    pub fn progress(&self) {
        self.reap();
        for s in &self.streams {
            // A relaxed load first, and the AcqRel swap (pairing with the reaper's release of
            // the kick) only when there is a kick to take. The swap is a system-scope RMW on
            // host memory, and every waiter comes here every PROGRESS_EVERY rounds: swapping
            // unconditionally cost staged random small reads about a third of their
            // throughput.
            if s.kick.load(Ordering::Relaxed) != 0 && s.kick.swap(0, Ordering::AcqRel) != 0 {
                self.flush(s);
            }
        }
    }

    /// Runs the protocol until every stream is written out and every request completed.
    /// `waiting` runs between rounds (the host wakes SQPOLL there; a GPU cannot).
    ///
    /// Only while no kernel prints into this context: the host's drain on the CPU
    /// backend, the `gpuio_drain` kernel on GPUs.
    pub fn drain(&self, mut waiting: impl FnMut()) {
        let mut backoff = crate::protocol::sync::Backoff::new();
        loop {
            self.progress();
            for s in &self.streams {
                self.flush(s);
            }
            if self.idle() {
                return;
            }
            waiting();
            backoff.snooze();
        }
    }

    /// Whether everything submitted has completed and every stream is written out.
    pub fn idle(&self) -> bool {
        self.streams.iter().all(|s| s.idle()) && self.rings().iter().all(Ring::idle)
    }
}
