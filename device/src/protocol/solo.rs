//! The solo ring: a small io_uring of its own that one thread at a time takes whole for a
//! request's round trip, with none of the shared rings' steps.
//!
//! A request through the shared rings ([`crate::protocol::ring`], [`crate::protocol::request`]) takes a
//! completion slot and an arena block, a ticket, a ready flag, the publisher's lock, the
//! reaper's lock, a dispatch and the slot's and block's returns: about twenty dependent
//! system-scope operations, each a fence or an atomic or a load across PCIe on a GPU: a
//! lone thread's small `pwrite` took about four times as long that way as on a ring of its
//! own with none of those steps (BENCHMARKS.md). Most requests
//! that a lone thread makes, and a thread of a kernel whose threads rarely do I/O at once,
//! are that case; so each context has one more ring, served by ring 0's SQPOLL thread (the
//! host attaches it there), that a thread takes when no other thread holds it.
//!
//! # A round trip ([`Solo::take`], then the [`SoloTurn`] it returns)
//! 1. **Take** the ring. One word, `state`, holds the requests made on it so far, `n`, and
//!    whether a thread holds it: `2n`, or `2n + 1` while held. A thread that reads `2n`
//!    (Relaxed) moves it to `2n + 1` (a compare-and-swap, Acquire, GPU scope on NVIDIA
//!    sm_70+, system scope elsewhere: only the GPU's threads hand the ring to one another,
//!    so the lock need not be seen beyond the GPU); one that finds it held, or loses the race, goes through the shared rings:
//!    nobody ever waits for the solo ring. (A `fetch_or(1)` alone would save the look, one
//!    load of a round trip of twenty; loom cannot check a spin beside a failed
//!    read-modify-write, so the look stays.) Where lanes run in lockstep (the lockstep rule, `arch/mod.rs`), only a
//!    lane alone at its call tries: lanes that call together go through the shared rings,
//!    where each submits before any waits, since one's request may need a sibling's.
//! 2. The SQ tail and the CQ head are both `n` (modulo 2^32): one request at a time. The
//!    count comes with the lock, so the holder reads no other word for it.
//! 3. **Write** the payload into the staging buffer and SQE `n` into slot `n & mask` with
//!    plain stores. Both are ours alone: SQE `n - 1`'s CQE came back before the previous
//!    holder let go, and the kernel consumes an SQE (and is done with the staging buffer)
//!    before it posts its CQE. Where the holder waits on the result (below), it first marks
//!    CQE `n`'s `res` [`UNANSWERED`] (Relaxed, system scope).
//! 4. **Publish**: the SQ tail `n + 1` (Release, system scope): the payload and the SQE
//!    happen-before the kernel's `smp_load_acquire` of the tail.
//! 5. **Wait** until the CQ tail is past `n` (Acquire, system scope: pairs with the kernel's
//!    `smp_store_release`; the CQE, and a read's bytes in the staging buffer, happen-before
//!    our loads of them), or until CQE `n`'s `res` is no longer [`UNANSWERED`] (below). The
//!    wait depends on the kernel alone (and on the host's waker while SQPOLL sleeps, as
//!    every request does).
//! 6. **Read** the CQE (where the holder waited on the tail), and copy a read's bytes out of
//!    the staging buffer.
//! 7. **Let go**: the CQ head `n + 1` (Relaxed, system scope), one release fence (GPU
//!    scope), then `state = 2(n + 1)` (Relaxed, GPU scope). The next holder's acquire reads
//!    that store, so the fence orders before its take our loads of the CQE and of the buffer
//!    (it overwrites the buffer only after them) and our store of the head (its own store
//!    of the head comes later in the head's order: the kernel never sees the head move
//!    back). GPU scope suffices: both holders are threads of this GPU, and what the kernel
//!    must see of ours it sees through the next holder's release of the SQ tail at system
//!    scope, which follows our fence in causality order (PTX orders causality across the
//!    scopes of the synchronizations it is built from). The head needs no release of its
//!    own: the kernel sees the slot it frees as free early, but refills it only with the CQE
//!    of request `n + cq_entries`, whose SQE the lock orders after our fence, and so after
//!    our load of the slot. Dropping the turn lets go; a turn dropped before its request
//!    (steps 2 to 6) leaves `state` at `2n` and the head as it was, behind the same fence,
//!    which then orders its stores to the buffer before the next holder's use of it.
//!
//! # Waiting on the result
//! Waiting on the CQ tail costs a load across PCIe more than the request needs: the tail's,
//! then the CQE's. On an x86-64 host the holder instead marks `res` [`UNANSWERED`] before it
//! publishes the SQE and waits until `res` holds anything else (Acquire, system scope): a
//! value no request returns, so the one it sees is the kernel's. What that relies on:
//! - **x86-TSO**: every store is seen by every agent in the order it was made (the kernel's
//!   copy of a read's bytes, then `res`, then the CQ tail), no store passes an earlier load
//!   (the kernel's loads of the SQE and of a write's payload are done before `res` is seen,
//!   so the next holder may overwrite them), and stores are causally ordered across CPUs (a
//!   read's bytes written by an io-wq worker on another CPU, seen by the CPU that stores
//!   `res`, are seen before `res`). A device's loads across PCIe snoop the CPUs' caches and
//!   see the same order. Elsewhere only the CQ tail's `smp_store_release` orders these, so
//!   the host asks for this mode on x86-64 only.
//! - **The kernel's io_uring as it is**, which its ABI does not promise: a single-shot
//!   request (read, write, open, close, fsync) gets exactly one 16-byte CQE, written once,
//!   `res` after `user_data`, in slot `cached tail & mask` (no `IORING_SETUP_CQE32`, no
//!   multishot requests, nothing posted into this ring by another).
//!
//! The mark comes after the kernel's last store to the slot (request `n - cq_entries`'s CQE,
//! which that holder loaded before the lock came to us) and before the kernel's next (it
//! reads our SQE after the tail's release), so the holder sees its own mark only until the
//! kernel answers. The host chooses: [`Solo::waiting_on_results`].
//!
//! So a round trip costs the floor's steps (the tail's release, the CQ tail's acquires, the
//! CQE's load), less the CQE's load where the holder waits on the result, plus a look, one
//! compare-and-swap and one fence at GPU scope. The CQ cannot overflow: one CQE at a time,
//! and the kernel's view of the head lags ours by at most that one.

use crate::protocol::group::Group;
use crate::protocol::ring::load_cqe;
use crate::protocol::sync::{device_fence, AtomicI32, AtomicU32, DeviceAtomicU64, Ordering, Padded, SharedCell};
use crate::protocol::uapi::{Cqe, Sqe};
use crate::protocol::wait::until;

/// Bytes of the solo ring's staging buffer: the most a staged `pread` or `pwrite` may move
/// to take it (a page: a 4 KiB random read, a path for `open`, a line).
pub const SOLO_STAGE: u32 = 4096;

/// What the holder marks a CQE's `res` with before it publishes its request, where it waits
/// on the result (see the module docs): no request returns it (a result is a count of at
/// most 2^31 - 4096 bytes, a file descriptor, or `-errno` of at least -4095).
pub const UNANSWERED: i32 = i32::MIN;

/// The solo ring (see the module docs): where the kernel's words and the staging buffer
/// are ([`SoloLayout`]), and the lock. `layout.entries == 0` means there is none (every
/// [`Solo::take`] returns `None`).
#[repr(C)]
pub struct Solo {
    /// Where everything is: fixed while the ring is used.
    pub layout: SoloLayout,
    /// Twice the requests made on the ring (their count is its SQ tail and CQ head), plus 1
    /// while a thread holds it. Written by takers (the compare-and-swap) and the holder.
    pub state: Padded<DeviceAtomicU64>,
}

/// Where the solo ring's kernel words, SQEs, CQEs and staging buffer are, and their sizes:
/// written before the ring is used and only read after, so a holder loads them all before
/// it takes the ring (after the take's acquire each load would wait for the GPU's L2, one
/// after the other).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SoloLayout {
    /// Kernel: SQ tail (we store it).
    pub sq_tail: *const AtomicU32,
    /// Kernel: CQ head (we store it).
    pub cq_head: *const AtomicU32,
    /// Kernel: CQ tail.
    pub cq_tail: *const AtomicU32,
    /// Kernel: the SQE array (`entries` slots).
    pub sqes: *const SharedCell<Sqe>,
    /// Kernel: the CQE array (`cq_entries` slots, 16-byte aligned).
    pub cqes: *const SharedCell<Cqe>,
    /// SQ size: a power of two, or 0 for no solo ring.
    pub entries: u32,
    /// CQ size: a power of two, at least `entries`.
    pub cq_entries: u32,
    /// The staging buffer ([`SOLO_STAGE`] bytes).
    pub stage: *const SharedCell<u8>,
    /// `stage` as the kernel sees it.
    pub stage_io: u64,
    /// Kernel: CQE slot 0's `res`, where the holder waits on the result; else null.
    pub results: *const AtomicI32,
    /// Bytes from one slot's `res` to the next one's (a CQE's size in the kernel's ring).
    pub result_stride: u32,
}

impl Solo {
    /// A solo ring over kernel memory at the given addresses, its counters at zero as the
    /// kernel's are on a new ring.
    ///
    /// # Safety
    /// Every pointer stays valid, and is accessed only through this protocol, while the ring
    /// is used: `sqes` holds `entries` SQEs, `cqes` (16-byte aligned) `cq_entries` CQEs, and
    /// `stage` [`SOLO_STAGE`] bytes, which the kernel sees at `stage_io`. `entries` and
    /// `cq_entries` are powers of two with `cq_entries >= entries >= 1`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn new(
        sq_tail: *const AtomicU32,
        cq_head: *const AtomicU32,
        cq_tail: *const AtomicU32,
        sqes: *const SharedCell<Sqe>,
        cqes: *const SharedCell<Cqe>,
        entries: u32,
        cq_entries: u32,
        stage: *const SharedCell<u8>,
        stage_io: u64,
    ) -> Solo {
        debug_assert!(entries.is_power_of_two() && cq_entries.is_power_of_two() && cq_entries >= entries);
        Solo {
            layout: SoloLayout {
                sq_tail,
                cq_head,
                cq_tail,
                sqes,
                cqes,
                entries,
                cq_entries,
                stage,
                stage_io,
                results: core::ptr::null(),
                result_stride: 0,
            },
            state: Padded(DeviceAtomicU64::new(0)),
        }
    }

    /// This ring, its holder waiting on each CQE's `res` rather than on the CQ tail (see
    /// the module docs): one load across PCIe less per request on a GPU.
    ///
    /// # Safety
    /// `results + i * stride` (bytes) is CQE slot `i`'s `res` for every `i < cq_entries`,
    /// valid while the ring is used; the host is x86-64 (its stores are seen in the order
    /// they were made, after its earlier loads, causally across CPUs, by every agent that
    /// loads them: its other threads, and a device's reads across PCIe); and the ring's
    /// kernel answers each request with one CQE written once, `res` last (see "Waiting on
    /// the result" in the module docs).
    pub unsafe fn waiting_on_results(self, results: *const AtomicI32, stride: u32) -> Solo {
        Solo {
            layout: SoloLayout {
                results,
                result_stride: stride,
                ..self.layout
            },
            ..self
        }
    }

    /// No solo ring: requests go through the shared rings.
    pub fn unused() -> Solo {
        Solo {
            layout: SoloLayout {
                sq_tail: core::ptr::null(),
                cq_head: core::ptr::null(),
                cq_tail: core::ptr::null(),
                sqes: core::ptr::null(),
                cqes: core::ptr::null(),
                entries: 0,
                cq_entries: 0,
                stage: core::ptr::null(),
                stage_io: 0,
                results: core::ptr::null(),
                result_stride: 0,
            },
            state: Padded(DeviceAtomicU64::new(0)),
        }
    }

    /// Takes the ring for one request's round trip, if there is one and no other thread
    /// holds it (and, where lanes run in lockstep, this lane calls alone); otherwise
    /// returns `None` at once, having done nothing: the caller goes through the shared
    /// rings. The holder stages a write's payload in [`SoloTurn::stage`], makes its one
    /// [`SoloTurn::call`], copies a read's bytes out of the stage, and lets go by dropping
    /// the turn, all in one straight run of code: between the take and the drop it must
    /// not wait for anything but the kernel, and where lanes run in lockstep the take's
    /// "this lane alone" holds only until the lanes meet again. A turn kept (`mem::forget`)
    /// holds the ring for the context's life: every later take goes through the shared
    /// rings, and the host reads the ring as held by a kernel that faulted.
    #[inline(always)]
    pub fn take(&self) -> Option<SoloTurn<'_>> {
        // Everything but the lock's word, loaded before the take (see `SoloLayout`).
        let at = self.layout;
        if at.entries == 0 {
            return None;
        }
        // Where lanes run in lockstep, only a lane alone at this call: lanes that call
        // together may need one another's requests (one opens a FIFO's read end, a sibling
        // its write end), and a sibling masked off while this lane waits for its CQE could
        // not submit. Through the shared rings, every lane submits before any waits. (With
        // independent scheduling the group is the lane alone, and this compiles away.) The
        // group is formed in the caller's code (this is inlined); where that is a shared
        // function (`Context::call`), lanes of its different call sites run it at different
        // times where they run in lockstep, so those that meet here called together.
        if crate::protocol::arch::WaitGroup::default().exclusive_sum(1).1 != 1 {
            return None;
        }
        let state = self.lock()?;
        Some(SoloTurn {
            solo: self,
            at,
            state,
            called: false,
        })
    }

    /// Runs one request on the solo ring if there is one and no other thread holds it;
    /// otherwise returns `None` at once, having done nothing: a turn ([`Solo::take`]) lent
    /// to two closures, for the loom models and host tests that drive the ring by hand.
    /// Device code holds the turn itself.
    ///
    /// `prepare` gets the staging buffer ([`SOLO_STAGE`] cells, and their address as the
    /// kernel sees it), writes a write's payload there if any, and returns the SQE (its
    /// `user_data` is replaced). `finish` gets the buffer and the CQE's result, after the
    /// request completed: a read copies its bytes out there. Both run while this thread
    /// holds the ring, and must not wait for anything but the kernel.
    pub fn try_call(
        &self,
        prepare: impl FnOnce(*const SharedCell<u8>, u64) -> Sqe,
        finish: impl FnOnce(*const SharedCell<u8>, i32),
    ) -> Option<i32> {
        self.try_call_helping(prepare, finish, || {})
    }

    /// [`Solo::try_call`], calling `help` between looks at the CQ tail while it waits: for
    /// models in which the waiting thread plays the kernel (device code has nothing to help
    /// with: only the kernel moves the tail).
    #[inline(always)]
    pub fn try_call_helping(
        &self,
        prepare: impl FnOnce(*const SharedCell<u8>, u64) -> Sqe,
        finish: impl FnOnce(*const SharedCell<u8>, i32),
        help: impl FnMut(),
    ) -> Option<i32> {
        let mut turn = self.take()?;
        let sqe = prepare(turn.stage(), turn.stage_io());
        let res = turn.call_helping(sqe, help);
        finish(turn.stage(), res);
        Some(res)
    }

    /// Step 1 of a round trip: takes the ring if no other thread holds it; returns the
    /// lock's word as it was (the requests made so far, twice).
    #[inline(never)] // the lock's GPU-scope steps in one function, which tests/ptx_atomics reads
    fn lock(&self) -> Option<u64> {
        // A relaxed look first (GPU scope, as every access to the word: only the GPU's
        // threads hand the ring on): a thread that finds the ring held leaves without a
        // read-modify-write, and the one that finds it free learns the count from it.
        // Acquire, GPU scope: the previous holder's round trip (its loads of the CQE and the
        // buffer, its store of the CQ head) happens-before ours; the compare-and-swap
        // succeeds only if no one took the ring since the look, so the count is the last
        // holder's. A failed one (Relaxed, GPU scope) orders nothing: we leave.
        let state = self.state.load(Ordering::Relaxed);
        if state & 1 != 0
            || self
                .state
                .compare_exchange(state, state | 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        Some(state)
    }

    /// Steps 5 and 6: waits for request `n`'s answer, on its marked `result` where there is
    /// one, else on the CQ tail, calling `help` between looks; returns its `res`.
    #[inline(always)]
    fn answer(at: &SoloLayout, n: u32, result: Option<&AtomicI32>, help: impl FnMut()) -> i32 {
        match result {
            // Acquire, system scope: what the kernel stored before its answer (a read's bytes)
            // is seen after it (`waiting_on_results`' contract).
            Some(result) => {
                let res = until(
                    || {
                        let res = result.load(Ordering::Acquire);
                        (res != UNANSWERED).then_some(res)
                    },
                    help,
                );
                // The kernel wrote the CQE's `user_data` before its `res` (a load across PCIe
                // more on a GPU: debug builds only).
                #[cfg(debug_assertions)]
                {
                    // SAFETY: as for `read_cqe` below: the answer's acquire ordered the CQE.
                    let cqe = unsafe { at.read_cqe(n) };
                    debug_assert_eq!(cqe.user_data, n as u64, "the solo ring's CQE is not its request's");
                }
                res
            }
            None => {
                // SAFETY: `Solo::new`'s contract keeps the kernel's words valid while the ring
                // is used.
                let cq_tail = unsafe { &*at.cq_tail };
                // Acquire, system scope: pairs with the kernel's release of the CQ tail.
                until(|| (cq_tail.load(Ordering::Acquire) != n).then_some(()), help);
                // SAFETY: the kernel published CQE `n` (the acquire above) and rewrites the
                // slot only after the head moves past it (step 7).
                let cqe = unsafe { at.read_cqe(n) };
                debug_assert_eq!(cqe.user_data, n as u64, "the solo ring's CQE is not its request's");
                cqe.res
            }
        }
    }

    /// Step 7: lets go of the ring taken when the lock's word was `state`, after the turn's
    /// request if it `called`.
    #[inline(never)] // the lock's GPU-scope steps in one function, which tests/ptx_atomics reads
    fn let_go(&self, at: &SoloLayout, state: u64, called: bool) {
        let n = (state >> 1) as u32;
        // The CQ head (Relaxed, system scope) before the fence, so that the fence orders it
        // before the next holder's store of it (the kernel's head never moves back); the
        // fence (Release, GPU scope) orders it and our loads of the CQE and the buffer (or,
        // for a turn that made no request, our stores to the buffer) before the relaxed
        // store of the word (GPU scope), which the next holder acquires (see the module
        // docs). A turn without a request leaves the count as it was.
        if called {
            // SAFETY: `Solo::new`'s contract keeps the kernel's words valid while the ring
            // is used.
            unsafe { &*at.cq_head }.store(n.wrapping_add(1), Ordering::Relaxed);
        }
        device_fence(Ordering::Release);
        self.state
            .store(if called { state + 2 } else { state }, Ordering::Relaxed);
    }

    /// Whether a thread holds the ring now (a kernel that ended holding it faulted).
    pub fn held(&self) -> bool {
        // Relaxed: a look for reports; nothing is read on the strength of it.
        self.state.load(Ordering::Relaxed) & 1 != 0
    }

    /// Whether the holder waits on each CQE's `res` ([`Solo::waiting_on_results`]).
    pub fn waits_on_results(&self) -> bool {
        !self.layout.results.is_null()
    }

    /// Requests made on the ring so far (for statistics).
    pub fn requests(&self) -> u64 {
        // Relaxed: a count for reports.
        self.state.load(Ordering::Relaxed) >> 1
    }
}

/// A thread's turn on the solo ring ([`Solo::take`]): the staging buffer and one request
/// are its own until it drops the turn, which lets the ring go (step 7).
///
/// One [`SoloTurn::call`] a turn: a second would reuse the first's SQE slot and count, and
/// answer with the first request's result (where the holder waits on the CQ tail) or wait
/// for ever (where it waits on `res`); it is checked only in debug builds. The turn must
/// not unwind out of its call while the request is in flight (device code cannot unwind;
/// the loom models' `help` must not panic): its drop would let the ring go under the
/// kernel.
#[must_use = "dropping the turn lets the ring go"]
pub struct SoloTurn<'a> {
    solo: &'a Solo,
    /// The layout, loaded before the take.
    at: SoloLayout,
    /// The lock's word as the take found it: twice the requests made before ours.
    state: u64,
    /// Whether the turn's one request was made.
    called: bool,
}

impl SoloTurn<'_> {
    /// The staging buffer ([`SOLO_STAGE`] cells): a write's payload goes here before
    /// [`SoloTurn::call`], a read's bytes are here after it.
    #[inline(always)]
    pub fn stage(&self) -> *const SharedCell<u8> {
        self.at.stage
    }

    /// The staging buffer's address as the kernel sees it (for the SQE's `addr`).
    #[inline(always)]
    pub fn stage_io(&self) -> u64 {
        self.at.stage_io
    }

    /// Runs `sqe` (its `user_data` replaced) and returns its CQE's result: steps 2 to 6 of
    /// a round trip. Once per turn.
    #[inline(never)] // out of line: a waiting loop need not sit in every caller's body
    pub fn call(&mut self, sqe: Sqe) -> i32 {
        self.call_helping(sqe, || {})
    }

    /// [`SoloTurn::call`], calling `help` between looks ([`Solo::try_call_helping`]).
    #[inline(always)]
    fn call_helping(&mut self, mut sqe: Sqe, help: impl FnMut()) -> i32 {
        debug_assert!(!self.called, "one request per turn on the solo ring");
        self.called = true;
        let at = &self.at;
        // 2. The SQ tail and the CQ head, modulo 2^32 as the kernel counts them.
        let n = (self.state >> 1) as u32;
        // 3. Write: the buffer and the SQ slot are ours (see the module docs). The mark first,
        // where the holder waits on the result. SAFETY: `waiting_on_results`' contract (a
        // non-null `results` is the CQ's).
        let result = unsafe { at.result(n) };
        if let Some(result) = result {
            // Relaxed, system scope: the tail's release below orders it before the kernel's
            // answer (see "Waiting on the result").
            result.store(UNANSWERED, Ordering::Relaxed);
        }
        sqe.user_data = n as u64;
        // SAFETY: the slot is ours (above); the SQE array holds `entries` slots, a power of
        // two, and the index is masked.
        unsafe { (*at.sqes.add((n & (at.entries - 1)) as usize)).write(sqe) };
        // 4. Publish. Release, system scope: the payload, the SQE and the mark happen-before
        // the kernel's acquire of the tail.
        // SAFETY: `Solo::new`'s contract keeps the kernel's words valid while the ring is used.
        unsafe { &*at.sq_tail }.store(n.wrapping_add(1), Ordering::Release);
        crate::protocol::arch::ring_doorbell();
        // 5. Wait, and 6. read.
        Solo::answer(at, n, result, help)
    }
}

impl Drop for SoloTurn<'_> {
    /// 7. Lets go of the ring.
    #[inline(always)]
    fn drop(&mut self) {
        self.solo.let_go(&self.at, self.state, self.called);
    }
}

impl SoloLayout {
    /// CQE `h`'s `res`, where the holder waits on results.
    ///
    /// # Safety
    /// A non-null `results` meets [`Solo::waiting_on_results`]' contract.
    #[inline(always)]
    unsafe fn result(&self, h: u32) -> Option<&AtomicI32> {
        let slot = (h & (self.cq_entries - 1)) as usize;
        // SAFETY: the caller's contract: slot `slot < cq_entries` lies `slot * stride` bytes on.
        (!self.results.is_null()).then(|| unsafe { &*self.results.byte_add(slot * self.result_stride as usize) })
    }

    /// Reads CQE `h` ([`load_cqe`]).
    ///
    /// # Safety
    /// The kernel published CQE `h` (the caller acquired the CQ tail past it), and the
    /// caller has not moved the head past it.
    unsafe fn read_cqe(&self, h: u32) -> Cqe {
        // SAFETY: the caller's contract; the CQE array is 16-byte aligned (`Solo::new`).
        unsafe { load_cqe(self.cqes.wrapping_add((h & (self.cq_entries - 1)) as usize)) }
    }
}

// SAFETY: a Solo's fields are atomics and pointers to memory shared by design with the
// kernel (`Solo::new`'s contract keeps it valid); the SQE slots and the staging buffer are
// accessed only by the lock's holder (and by the kernel for its request). So shared
// references from many threads are sound.
unsafe impl Sync for Solo {}
// SAFETY: a Solo owns nothing thread-bound: moving it moves only the pointers, whose
// validity `Solo::new`'s contract ties to the memory, not to a thread.
unsafe impl Send for Solo {}
