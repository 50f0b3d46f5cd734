//! Exhaustive interleaving checks (loom) of the lock-free parts: the combiner (and its
//! uncontended fast path, which catches a missing store-buffering fence), the ring's
//! reservation / in-order publication / CQ credits, and a print stream's fill / flush /
//! recycling, each against a model of the kernel's side of io_uring. File I/O too: the
//! completion slots route each result to its own waiter whoever reaps, through a reused
//! slot and in whatever order the kernel completes (`request_results_reach_their_own_waiters*`),
//! and staged `pread`/`pwrite` pieces hand an arena block's bytes between the kernel and a
//! waiter (`staged_read_sees_the_kernels_bytes`) and the block between two threads
//! (`staged_read_and_write_share_one_block`).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p gpuio-device --release --test loom`
//! (`.ci/run` does). The preemption bound defaults to 1 (`LOOM_MAX_PREEMPTIONS` raises it):
//! at 1 these models already catch a Relaxed ready flag (an SQE published before it is
//! written), a log reused before its write completed, a Relaxed `DONE` or a slot freed
//! before its result was read (a waiter gets a stale or foreign result), and an arena block
//! given back before its request completed or without Release; at 2 they run for many
//! minutes. Loom reports any access to a `SharedCell` (SQE slots, payload bytes, arena
//! blocks) that is not ordered by a happens-before edge, and any assertion that fails in
//! some interleaving.
#![cfg(loom)]

use gpuio_device::arch::host::ThreadIds;
use gpuio_device::arena::Arena;
use gpuio_device::combine::Combiner;
use gpuio_device::context::enter;
use gpuio_device::context::{Context, CONTEXT_MAGIC};
use gpuio_device::group::SingleLane;
use gpuio_device::io;
use gpuio_device::pool::{Pool, FREE};
use gpuio_device::print::emit;
use gpuio_device::request::Requests;
use gpuio_device::ring::Ring;
use gpuio_device::stream::{chunk_count, Flight, Stream};
use gpuio_device::sync::{copy_to_cells, read_cells, AtomicI32, AtomicU32, Ordering, SharedCell};
use gpuio_device::uapi::{Cqe, Sqe, IORING_OP_READ, IORING_OP_WRITE, OFF_CURRENT_POSITION};
use loom::sync::atomic::AtomicBool;
use loom::sync::{Arc, Mutex};
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("LOOM_MAX_PREEMPTIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1),
    );
    // Spin-waits (with yields) are part of the protocol; allow long executions.
    b.max_branches = 100_000;
    b.check(f);
}

#[test]
fn combiner_never_strands_a_request() {
    model(|| {
        let c = Arc::new(Combiner::new());
        let produced = Arc::new(AtomicU32::new(0));
        let consumed = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (c, produced, consumed) = (c.clone(), produced.clone(), consumed.clone());
                thread::spawn(move || {
                    produced.fetch_add(1, Ordering::Relaxed);
                    c.run(|| consumed.store(produced.load(Ordering::Relaxed), Ordering::Relaxed));
                })
            })
            .collect();
        produced.fetch_add(1, Ordering::Relaxed);
        c.run(|| consumed.store(produced.load(Ordering::Relaxed), Ordering::Relaxed));
        for t in threads {
            t.join().unwrap();
        }
        // Whoever ran last saw every request: none was left for a run that never came.
        assert_eq!(consumed.load(Ordering::Relaxed), 3);
    });
}

#[test]
fn combiner_fast_path_never_strands_a_request() {
    // The same with `run_fast` (the publisher's entry): two threads take the fast path when
    // they find the lock free, the main thread makes a request the slow way.
    model(|| {
        let c = Arc::new(Combiner::new());
        let produced = Arc::new(AtomicU32::new(0));
        let consumed = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (c, produced, consumed) = (c.clone(), produced.clone(), consumed.clone());
                thread::spawn(move || {
                    produced.fetch_add(1, Ordering::Relaxed);
                    c.run_fast(|| consumed.store(produced.load(Ordering::Relaxed), Ordering::Relaxed));
                })
            })
            .collect();
        produced.fetch_add(1, Ordering::Relaxed);
        c.run(|| consumed.store(produced.load(Ordering::Relaxed), Ordering::Relaxed));
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(consumed.load(Ordering::Relaxed), 3);
    });
}

/// The kernel's side of one io_uring, in memory a test owns.
struct KernelRings {
    sq_head: AtomicU32,
    sq_tail: AtomicU32,
    sq_flags: AtomicU32,
    cq_head: AtomicU32,
    cq_tail: AtomicU32,
    sqes: Vec<SharedCell<Sqe>>,
    cqes: Vec<SharedCell<Cqe>>,
    ready: Vec<AtomicU32>,
}

impl KernelRings {
    fn new(sq: u32, cq: u32) -> Self {
        KernelRings {
            sq_head: AtomicU32::new(0),
            sq_tail: AtomicU32::new(0),
            sq_flags: AtomicU32::new(0),
            cq_head: AtomicU32::new(0),
            cq_tail: AtomicU32::new(0),
            sqes: (0..sq).map(|_| SharedCell::new(Sqe::default())).collect(),
            cqes: (0..cq).map(|_| SharedCell::new(Cqe::default())).collect(),
            ready: (0..sq).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn ring(&self) -> Ring {
        // SAFETY: every pointer points into `self`, which the test keeps alive (in an Arc)
        // for as long as the ring is used.
        unsafe {
            Ring::new(
                &self.sq_head,
                &self.sq_tail,
                &self.sq_flags,
                self.sqes.as_ptr(),
                &self.cq_head,
                &self.cq_tail,
                self.cqes.as_ptr(),
                self.ready.as_ptr(),
                self.sqes.len() as u32,
                self.cqes.len() as u32,
            )
        }
    }

    /// Consumes one SQE if there is one, as SQPOLL does, and completes it with
    /// `complete(sqe)`. Returns whether it did.
    fn step(&self, complete: impl FnOnce(&Sqe) -> i32) -> bool {
        let head = self.sq_head.load(Ordering::Relaxed);
        // smp_load_acquire of the tail.
        if self.sq_tail.load(Ordering::Acquire) == head {
            return false;
        }
        let mask = self.sqes.len() as u32 - 1;
        // SAFETY: loom checks this read is ordered after the submitter's write.
        let sqe = unsafe { self.sqes[(head & mask) as usize].read() };
        // Invariant 4: the CQ must have room for this request's completion.
        let cq_tail = self.cq_tail.load(Ordering::Relaxed);
        let in_cq = cq_tail.wrapping_sub(self.cq_head.load(Ordering::Acquire));
        assert!(in_cq < self.cqes.len() as u32, "CQ would overflow");
        let res = complete(&sqe);
        // smp_store_release of the head: the SQE is consumed.
        self.sq_head.store(head.wrapping_add(1), Ordering::Release);
        let cmask = self.cqes.len() as u32 - 1;
        // SAFETY: the reaper reads this slot only after our release of the tail.
        unsafe {
            self.cqes[(cq_tail & cmask) as usize].write(Cqe {
                user_data: sqe.user_data,
                res,
                flags: 0,
            })
        };
        self.cq_tail.store(cq_tail.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumes one SQE if there is one, without completing it: the kernel may complete
    /// requests in any order, later, with [`KernelRings::post`].
    fn consume(&self) -> Option<Sqe> {
        let head = self.sq_head.load(Ordering::Relaxed);
        if self.sq_tail.load(Ordering::Acquire) == head {
            return None;
        }
        let mask = self.sqes.len() as u32 - 1;
        // SAFETY: as in `step`.
        let sqe = unsafe { self.sqes[(head & mask) as usize].read() };
        self.sq_head.store(head.wrapping_add(1), Ordering::Release);
        Some(sqe)
    }

    /// Posts the completion of an SQE that [`KernelRings::consume`] took.
    fn post(&self, user_data: u64, res: i32) {
        let cq_tail = self.cq_tail.load(Ordering::Relaxed);
        let in_cq = cq_tail.wrapping_sub(self.cq_head.load(Ordering::Acquire));
        assert!(in_cq < self.cqes.len() as u32, "CQ would overflow");
        let cmask = self.cqes.len() as u32 - 1;
        // SAFETY: as in `step`.
        unsafe {
            self.cqes[(cq_tail & cmask) as usize].write(Cqe {
                user_data,
                res,
                flags: 0,
            })
        };
        self.cq_tail.store(cq_tail.wrapping_add(1), Ordering::Release);
    }

    /// Consumes and completes `n` SQEs, one at a time in the order it finds them, yielding
    /// while there is none.
    fn serve(&self, n: usize, mut complete: impl FnMut(&Sqe) -> i32) {
        let mut done = 0;
        while done < n {
            if self.step(&mut complete) {
                done += 1;
            } else {
                thread::yield_now();
            }
        }
    }
}

#[test]
fn ring_publishes_in_order_and_never_overruns_sq_or_cq() {
    // One SQ and one CQ slot, two submitters with one SQE each: the second SQE reuses the
    // first's slot, so it waits for the kernel to consume it and for someone to reap its
    // completion (a credit); either submitter's publisher may publish the other's SQE.
    ring_model(1, 1, [1, 1]);
}

#[test]
fn ring_with_two_slots_and_three_sqes() {
    // Two slots, one submitter with two SQEs and one with one: publication in ticket order
    // across submitters, with slot reuse. (Two SQEs each made this model run for most of
    // an hour once the publisher got its uncontended fast path.)
    ring_model(2, 2, [2, 1]);
}

/// Submitters (`counts[i]` SQEs from submitter `i`) and a kernel thread on an SQ of `sq`
/// and a CQ of `cq` entries: every SQE is consumed once, whole, and reaped once.
fn ring_model(sq: u32, cq: u32, counts: [u64; 2]) {
    model(move || {
        let k = Arc::new(KernelRings::new(sq, cq));
        let ring = Arc::new(k.ring());
        let reaped = Arc::new(Mutex::new(Vec::new()));
        let submitters: Vec<_> = (0..2u64)
            .map(|id| {
                let (ring, reaped) = (ring.clone(), reaped.clone());
                thread::spawn(move || {
                    for n in 0..counts[id as usize] {
                        let sqe = Sqe {
                            opcode: IORING_OP_WRITE,
                            user_data: 100 + 10 * id + n,
                            ..Sqe::default()
                        };
                        ring.submit(&sqe, &mut || {
                            ring.reap(|c| reaped.lock().unwrap().push(c.user_data));
                        });
                    }
                })
            })
            .collect();
        let total = counts[0] + counts[1];
        let consumed = Arc::new(Mutex::new(Vec::new()));
        let kernel = {
            let (k, consumed) = (k.clone(), consumed.clone());
            thread::spawn(move || {
                let mut n = 0;
                while n < total {
                    if k.step(|sqe| {
                        consumed.lock().unwrap().push(sqe.user_data);
                        0
                    }) {
                        n += 1;
                    } else {
                        thread::yield_now();
                    }
                }
            })
        };
        for t in submitters {
            t.join().unwrap();
        }
        kernel.join().unwrap();
        while !ring.idle() {
            ring.reap(|c| reaped.lock().unwrap().push(c.user_data));
            thread::yield_now();
        }
        let want: Vec<u64> = (0..2u64)
            .flat_map(|id| (0..counts[id as usize]).map(move |n| 100 + 10 * id + n))
            .collect();
        let mut c = consumed.lock().unwrap().clone();
        c.sort();
        assert_eq!(c, want, "each SQE consumed exactly once, whole");
        let mut r = reaped.lock().unwrap().clone();
        r.sort();
        assert_eq!(r, want, "each completion reaped exactly once");
    });
}

/// Bytes per arena block in the models (the host insists on 4096; the protocol does not).
const BLOCK: u64 = 8;

/// A context with a 64-byte log for stdout, `slots` completion slots and an arena of
/// `blocks` blocks, over a test-owned kernel model.
struct World {
    kernel: KernelRings,
    bufs: Vec<Vec<SharedCell<u8>>>,
    chunks: Vec<Vec<AtomicU32>>,
    flights: Vec<Vec<Flight>>,
    /// Completion slots: states, tags, results.
    slot_states: Vec<AtomicU32>,
    slot_tags: Vec<AtomicU32>,
    slot_results: Vec<AtomicI32>,
    /// The arena's bytes, and its blocks' states.
    arena: Vec<SharedCell<u8>>,
    block_states: Vec<AtomicU32>,
    ctx: Option<Context>,
}

fn world(max_flights: u32, positional: bool, slots: u32, blocks: u32) -> Arc<World> {
    let cap = 64;
    let mut w = World {
        kernel: KernelRings::new(2, 2),
        bufs: (0..2).map(|_| (0..cap).map(|_| SharedCell::new(0)).collect()).collect(),
        chunks: (0..2)
            .map(|_| (0..chunk_count(cap as u64)).map(|_| AtomicU32::new(0)).collect())
            .collect(),
        flights: (0..2)
            .map(|_| (0..max_flights).map(|_| Flight::new()).collect())
            .collect(),
        slot_states: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        slot_tags: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        slot_results: (0..slots).map(|_| AtomicI32::new(0)).collect(),
        arena: (0..blocks as u64 * BLOCK).map(|_| SharedCell::new(0)).collect(),
        block_states: (0..blocks).map(|_| AtomicU32::new(0)).collect(),
        ctx: None,
    };
    // SAFETY: the pointers point into `w`'s vectors, whose heap storage does not move
    // when `w` moves into the Arc; `w` outlives every use of the context.
    let streams = [0, 1].map(|i| unsafe {
        Stream::new(
            i as u32,
            1 + i as i32,
            positional,
            0,
            w.bufs[i].as_ptr(),
            cap as u64,
            w.chunks[i].as_ptr(),
            w.flights[i].as_ptr(),
            max_flights,
        )
    });
    w.ctx = Some(Context {
        magic: CONTEXT_MAGIC,
        ring: w.kernel.ring(),
        streams,
        stderr_stream: 1,
        stray_completions: AtomicU32::new(0),
        refused_requests: AtomicU32::new(0),
        refused_errno: AtomicI32::new(0),
        // SAFETY: as above; the vectors hold `slots` and `blocks` zeroed words and
        // `blocks * BLOCK` cells. The kernel sees the arena where the device does, so an
        // SQE's `addr` is a pointer to the cells.
        requests: unsafe {
            Requests::new(
                w.slot_states.as_ptr(),
                w.slot_tags.as_ptr(),
                w.slot_results.as_ptr(),
                slots,
            )
        },
        arena: unsafe {
            Arena::new(
                w.arena.as_ptr(),
                w.arena.as_ptr() as u64,
                BLOCK,
                Pool::new(w.block_states.as_ptr(), blocks),
            )
        },
        denied_requests: AtomicU32::new(0),
    });
    Arc::new(w)
}

/// Runs two printers and a kernel that writes (partially, on its first write) into a
/// model file, then checks the file holds both records, each whole.
fn stream_model(max_flights: u32, positional: bool) {
    model(move || {
        let w = world(max_flights, positional, 1, 1);
        let file = Arc::new(Mutex::new(vec![0u8; 0]));
        let stop = Arc::new(AtomicBool::new(false));
        let kernel = {
            let (w, file, stop) = (w.clone(), file.clone(), stop.clone());
            thread::spawn(move || {
                let mut first = true;
                while !stop.load(Ordering::Acquire) {
                    let stepped = w.kernel.step(|sqe| {
                        assert_eq!(sqe.opcode, IORING_OP_WRITE);
                        // The first write is short, as a pipe may make it: the rest must
                        // be resubmitted before anything newer.
                        let len = if first { (sqe.len / 2).max(1) } else { sqe.len } as usize;
                        first = false;
                        let mut bytes = Vec::new();
                        // SAFETY: loom checks these reads against the printers' writes and
                        // against reuse of the log before this completion.
                        unsafe { read_cells(sqe.addr as *const SharedCell<u8>, len, |b| bytes.extend_from_slice(b)) };
                        let mut f = file.lock().unwrap();
                        let at = if sqe.off == OFF_CURRENT_POSITION {
                            f.len()
                        } else {
                            sqe.off as usize
                        };
                        if f.len() < at + len {
                            f.resize(at + len, 0);
                        }
                        f[at..at + len].copy_from_slice(&bytes);
                        len as i32
                    });
                    if !stepped {
                        thread::yield_now();
                    }
                }
            })
        };
        // Two records of 40 bytes through a 64-byte log: the second needs the first's
        // bytes released, which needs its write completed.
        let printers: Vec<_> = [b'a', b'b']
            .into_iter()
            .map(|c| {
                let w = w.clone();
                thread::spawn(move || {
                    let ctx = w.ctx.as_ref().unwrap();
                    let line = [c; 39];
                    let s = std::str::from_utf8(&line).unwrap();
                    emit(&SingleLane, ctx, ctx.stream(false), true, format_args!("{s}"));
                })
            })
            .collect();
        for p in printers {
            p.join().unwrap();
        }
        let ctx = w.ctx.as_ref().unwrap();
        while !ctx.idle() {
            ctx.progress();
            ctx.flush(ctx.stream(false));
            thread::yield_now();
        }
        stop.store(true, Ordering::Release);
        kernel.join().unwrap();
        let f = file.lock().unwrap().clone();
        let text = String::from_utf8(f).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort();
        assert_eq!(lines, ["a".repeat(39), "b".repeat(39)], "both lines, whole: {text:?}");
        assert_eq!(ctx.stream(false).errors.failed_writes.load(Ordering::Relaxed), 0);
    });
}

#[test]
fn serial_stream_recycles_only_after_completion_and_resubmits_short_writes() {
    stream_model(1, false);
}

#[test]
fn positional_stream_with_two_flights() {
    stream_model(2, true);
}

/// The kernel model played by the device threads themselves: after its submission, a thread
/// runs the kernel (under a lock: the kernel is one SQPOLL thread) until every SQE
/// submitted so far was consumed, then waits for its own result like any device thread.
///
/// Why not a kernel thread: with one, two device threads spinning in their waits give loom
/// far more interleavings than a test can afford (over 15 minutes for one request on each
/// of two threads, at preemption bound 1); this way a model takes seconds. What it gives
/// up: the kernel's work for a thread's own request is ordered before that thread's later
/// steps by program order, and the lock orders one thread's kernel run before the next
/// one's. So the models that use it check what passes *between device threads* outside
/// the kernel: a result routed by whichever thread reaps (through the slot's `DONE`), a
/// slot or a block given back by one and taken by the other (through the pool). The edge
/// from a kernel thread to a waiter is checked by `staged_read_sees_the_kernels_bytes`,
/// which has one.
struct InlineKernel {
    /// SQEs consumed and not yet completed, and how many were consumed in all.
    held: Mutex<(Vec<Sqe>, u32)>,
    /// Completes SQEs in batches of this many, the latest first (1: each as it is found).
    /// A model submits a multiple of it, or the last SQEs would never complete.
    batch: usize,
}

impl InlineKernel {
    fn new(batch: usize) -> Self {
        InlineKernel {
            held: Mutex::new((Vec::new(), 0)),
            batch,
        }
    }

    /// Runs the kernel until `total` SQEs were consumed in all, yielding between runs (for
    /// a request that another thread submits late, inside its wait).
    fn serve_until(&self, w: &World, total: u32, mut complete: impl FnMut(&Sqe) -> i32) {
        loop {
            self.run(w, &mut complete);
            if self.held.lock().unwrap().1 >= total {
                return;
            }
            thread::yield_now();
        }
    }

    /// Runs the kernel until every SQE submitted before the call was consumed (one a
    /// submitter published late is waited for, yielding).
    fn run(&self, w: &World, mut complete: impl FnMut(&Sqe) -> i32) {
        let target = w.ctx.as_ref().unwrap().ring.submitted();
        loop {
            {
                let mut held = self.held.lock().unwrap();
                let (sqes, consumed) = &mut *held;
                while let Some(sqe) = w.kernel.consume() {
                    sqes.push(sqe);
                    *consumed += 1;
                    if sqes.len() == self.batch {
                        for sqe in sqes.drain(..).rev() {
                            w.kernel.post(sqe.user_data, complete(&sqe));
                        }
                    }
                }
                if *consumed >= target {
                    return;
                }
            }
            thread::yield_now();
        }
    }
}

/// Two threads each make two requests, one after the other (take a slot, submit, wait:
/// `Context::call`'s steps, with the kernel model run in between, in the round of
/// `Context::with_taken` that took the slot), whose results are their
/// SQEs' `len`s, all different: a result routed to the wrong slot, left over from the
/// slot's previous request, or read before its `DONE` was acquired (a stale value), fails
/// the waiter's assertion. Whoever waits reaps, so a result is often routed by the other
/// thread. Afterwards every slot is free and no completion went astray.
fn requests_model(slots: u32, batch: usize) {
    model(move || {
        let w = world(1, false, slots, 1);
        let kernel = Arc::new(InlineKernel::new(batch));
        let waiters: Vec<_> = [[3u32, 4], [5, 6]]
            .into_iter()
            .map(|lens| {
                let (w, kernel) = (w.clone(), kernel.clone());
                thread::spawn(move || {
                    let ctx = w.ctx.as_ref().unwrap();
                    for len in lens {
                        // As `Context::call` does: the request is made and waited for in the
                        // round that took the slot (the lockstep rule).
                        ctx.with_taken(
                            || ctx.requests.try_take(),
                            |ticket| {
                                let sqe = Sqe {
                                    opcode: IORING_OP_WRITE,
                                    fd: 1,
                                    len,
                                    user_data: ticket.user_data(),
                                    ..Sqe::default()
                                };
                                ctx.ring.submit(&sqe, &mut || {
                                    ctx.reap();
                                });
                                kernel.run(&w, |sqe| sqe.len as i32);
                                let res = ctx.wait(ticket);
                                assert_eq!(res, len as i32, "a waiter got a result that is not its own");
                            },
                        );
                    }
                })
            })
            .collect();
        for t in waiters {
            t.join().unwrap();
        }
        let ctx = w.ctx.as_ref().unwrap();
        assert!(ctx.ring.idle());
        for i in 0..slots {
            assert_eq!(
                ctx.requests.pool.state(i).load(Ordering::Relaxed),
                FREE,
                "slot {i} still taken"
            );
        }
        assert_eq!(ctx.stray_completions.load(Ordering::Relaxed), 0);
        assert_eq!(ctx.refused_requests.load(Ordering::Relaxed), 0);
    });
}

/// One completion slot: each request waits for the previous one's waiter to give it back
/// (reaping, which is what frees it) and takes it with the next tag. Completions in order.
#[test]
fn request_results_reach_their_own_waiters() {
    requests_model(1, 1);
}

/// Two slots, two requests in flight at once; the kernel completes them in pairs, the
/// later one first.
#[test]
fn request_results_reach_their_own_waiters_out_of_order() {
    requests_model(2, 2);
}

/// The file descriptor of the transfer models (the kernel model ignores it).
const FD: i32 = 7;

/// The kernel's side of a READ or WRITE on `file`: the SQE's `addr` points at arena cells
/// (the model's arena is where the kernel sees it); a read fills them from the file, a
/// write copies them into it. Transfers the whole length.
fn serve_transfer(w: &World, file: &Mutex<Vec<u8>>, sqe: &Sqe) -> i32 {
    // Under loom a cell is bigger than a byte; `Arena::io_addr` counts cells' bytes.
    let cell = core::mem::size_of::<SharedCell<u8>>() as u64;
    let offset = sqe.addr - w.arena.as_ptr() as u64;
    assert_eq!(offset % cell, 0, "addr is not a cell's");
    let (first, len, at) = ((offset / cell) as usize, sqe.len as usize, sqe.off as usize);
    assert!(first + len <= w.arena.len(), "addr..addr+len is outside the arena");
    let cells = w.arena[first..first + len].as_ptr();
    let mut f = file.lock().unwrap();
    match sqe.opcode {
        // SAFETY: loom checks these accesses against the device threads' copies into and
        // out of the block, and against the block's next holder.
        IORING_OP_READ => unsafe { copy_to_cells(cells, &f[at..at + len]) },
        IORING_OP_WRITE => {
            let mut i = at;
            // SAFETY: as above.
            unsafe {
                read_cells(cells, len, |b| {
                    f[i..i + b.len()].copy_from_slice(b);
                    i += b.len();
                })
            };
        }
        op => panic!("unexpected opcode {op}"),
    }
    len as i32
}

/// Makes the calling loom thread a "GPU thread" of `w`'s context, as the CPU backend does,
/// so that the `io` functions find the context.
///
/// Loom's threads are coroutines on the test's OS thread, so they share std's
/// thread-locals: the model's main thread enters first, and every guard then restores that
/// same context, in whatever order the threads drop them.
fn enter_world(w: &World, thread_idx: u32) -> impl Drop {
    let ids = ThreadIds {
        thread_idx,
        block_idx: 0,
        block_dim: 3,
        grid_dim: 1,
    };
    // SAFETY: the context lives in `w`, which the caller keeps alive past the guard.
    unsafe { enter(w.ctx.as_ref().unwrap(), ids) }
}

/// The model file of the transfer models.
fn model_file() -> Mutex<Vec<u8>> {
    Mutex::new(b"0123456789abcdef".to_vec())
}

/// A staged `pread` of 12 bytes through an arena of one 8-byte block: two pieces, the
/// second waiting for the first's block. The model's main thread is the kernel, then (as
/// the host's drain or another GPU thread would) reaps once, so the reader's completion is
/// routed by it or by the reader itself.
///
/// Loom checks the hand-offs of the block's cells: the kernel's bytes happen-before the
/// reader's copy out of the block (kernel, CQ tail, reaper, `DONE`, waiter), and the
/// reader's copy out of the first piece happens-before the kernel writes the second into
/// the same block (the block comes back after the completion, and goes out again with the
/// next SQE's publication).
#[test]
fn staged_read_sees_the_kernels_bytes() {
    model(|| {
        let w = world(1, false, 1, 1);
        let _entered = enter_world(&w, 0);
        let reader = {
            let w = w.clone();
            thread::spawn(move || {
                let _entered = enter_world(&w, 1);
                let mut buf = [0u8; 12];
                assert_eq!(io::pread(FD, &mut buf, 2), Ok(12));
                assert_eq!(&buf, b"23456789abcd", "the read did not see the kernel's bytes");
            })
        };
        let file = model_file();
        w.kernel.serve(2, |sqe| serve_transfer(&w, &file, sqe));
        let ctx = w.ctx.as_ref().unwrap();
        ctx.reap();
        reader.join().unwrap();
        assert!(ctx.ring.idle());
        assert_eq!(
            ctx.requests.pool.state(0).load(Ordering::Relaxed),
            FREE,
            "slot still taken"
        );
        assert_eq!(
            ctx.arena.pool.state(0).load(Ordering::Relaxed),
            FREE,
            "block still taken"
        );
        assert_eq!(ctx.arena.staged_bytes.load(Ordering::Relaxed), 12);
        assert_eq!(ctx.stray_completions.load(Ordering::Relaxed), 0);
    });
}

/// A staged `pread` and a staged `pwrite` on two threads, through an arena of one block
/// and one completion slot: the second to come finds the block taken (its `*_async` call
/// does not wait for it) and takes it in its `wait`, reaping, once the first's request
/// completed and its block came back. Loom checks that the block's next holder touches the
/// cells only after the kernel and the previous holder are done with them (the pool's
/// give-back and take), and that whichever thread reaps routes each result to its waiter.
/// The kernel is [`InlineKernel`], run by each thread between its `*_async` call (which
/// submits if the block is free) and its `wait`, and after its `wait` until both requests
/// were served (the second may be submitted inside the other thread's `wait`).
#[test]
fn staged_read_and_write_share_one_block() {
    model(|| {
        let w = world(1, false, 1, 1);
        let _entered = enter_world(&w, 0);
        let kernel = Arc::new(InlineKernel::new(1));
        let file = Arc::new(model_file());
        let reader = {
            let (w, kernel, file) = (w.clone(), kernel.clone(), file.clone());
            thread::spawn(move || {
                let _entered = enter_world(&w, 1);
                let mut buf = [0u8; 3];
                // SAFETY: waited for below.
                let pending = unsafe { io::pread_async(FD, &mut buf, 0) };
                kernel.run(&w, |sqe| serve_transfer(&w, &file, sqe));
                assert_eq!(pending.wait(), Ok(3));
                assert_eq!(&buf, b"012", "the read did not see the kernel's bytes");
                kernel.serve_until(&w, 2, |sqe| serve_transfer(&w, &file, sqe));
            })
        };
        let writer = {
            let (w, kernel, file) = (w.clone(), kernel.clone(), file.clone());
            thread::spawn(move || {
                let _entered = enter_world(&w, 2);
                // SAFETY: waited for below.
                let pending = unsafe { io::pwrite_async(FD, b"xyz", 8) };
                kernel.run(&w, |sqe| serve_transfer(&w, &file, sqe));
                assert_eq!(pending.wait(), Ok(3));
                kernel.serve_until(&w, 2, |sqe| serve_transfer(&w, &file, sqe));
            })
        };
        reader.join().unwrap();
        writer.join().unwrap();
        assert_eq!(
            &file.lock().unwrap()[..],
            b"01234567xyzbcdef",
            "the kernel did not see the written bytes"
        );
        let ctx = w.ctx.as_ref().unwrap();
        assert!(ctx.ring.idle());
        assert_eq!(
            ctx.requests.pool.state(0).load(Ordering::Relaxed),
            FREE,
            "slot still taken"
        );
        assert_eq!(
            ctx.arena.pool.state(0).load(Ordering::Relaxed),
            FREE,
            "block still taken"
        );
        assert_eq!(ctx.arena.staged_bytes.load(Ordering::Relaxed), 6);
        assert_eq!(ctx.stray_completions.load(Ordering::Relaxed), 0);
    });
}
