//! Exhaustive interleaving checks (loom) of the lock-free parts: the combiner, the ring's
//! reservation / in-order publication / CQ credits, and a print stream's fill / flush /
//! recycling, each against a model of the kernel's side of io_uring. File I/O requests
//! too: completion slots route each result to its own waiter whoever reaps and in whatever
//! order the kernel completes (`request_results_reach_their_own_waiters*`), and staged
//! `pread`/`pwrite` pieces hand the arena's one block between the kernel and two threads
//! (`staged_read_and_write_share_one_block`).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p gpuio-device --release --test loom`
//! (`.ci/run` does). The preemption bound defaults to 1 (`LOOM_MAX_PREEMPTIONS` raises it):
//! at 1 these models already catch a Relaxed ready flag (an SQE published before it is
//! written) and a log reused before its write completed; at 2 they run for many minutes. Loom reports any access to a `SharedCell` (SQE slots, payload bytes)
//! that is not ordered by a happens-before edge, and any assertion that fails in some
//! interleaving.
#![cfg(loom)]

use gpuio_device::arch::host::{enter, ThreadIds};
use gpuio_device::arena::Arena;
use gpuio_device::combine::Combiner;
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
    model(|| {
        // Two SQ and two CQ slots, two submitters with two SQEs each: slots are reused,
        // submitters wait for the kernel to consume and for someone to reap, and one
        // submitter's publisher can publish the other's SQE.
        let k = Arc::new(KernelRings::new(2, 2));
        let ring = Arc::new(k.ring());
        let reaped = Arc::new(Mutex::new(Vec::new()));
        let submitters: Vec<_> = (0..2u64)
            .map(|id| {
                let (ring, reaped) = (ring.clone(), reaped.clone());
                thread::spawn(move || {
                    for n in 0..2 {
                        let sqe = Sqe {
                            opcode: IORING_OP_WRITE,
                            user_data: 100 + 10 * id + n,
                            ..Sqe::default()
                        };
                        ring.submit(&sqe, || {
                            ring.reap(|c| reaped.lock().unwrap().push(c.user_data));
                        });
                    }
                })
            })
            .collect();
        let consumed = Arc::new(Mutex::new(Vec::new()));
        let kernel = {
            let (k, consumed) = (k.clone(), consumed.clone());
            thread::spawn(move || {
                let mut n = 0;
                while n < 4 {
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
        let mut c = consumed.lock().unwrap().clone();
        c.sort();
        assert_eq!(c, [100, 101, 110, 111], "each SQE consumed exactly once, whole");
        let mut r = reaped.lock().unwrap().clone();
        r.sort();
        assert_eq!(r, [100, 101, 110, 111], "each completion reaped exactly once");
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

/// Two threads each make one request with `Requests::call` (the path of `open`, `close`,
/// `fsync`) and wait for it, while the kernel model completes each with its SQE's `len`,
/// which differs between the two: a result routed to the wrong slot, or read before its
/// `DONE` was acquired (a stale zero), fails the waiter's assertion. Whoever waits reaps,
/// so a result is often routed by the other thread. Afterwards every slot is free again
/// and no completion went astray.
fn requests_model(slots: u32, reversed: bool) {
    model(move || {
        let w = world(1, false, slots, 1);
        let waiters: Vec<_> = [3u32, 5]
            .into_iter()
            .map(|len| {
                let w = w.clone();
                thread::spawn(move || {
                    let ctx = w.ctx.as_ref().unwrap();
                    let sqe = Sqe {
                        opcode: IORING_OP_WRITE,
                        fd: 1,
                        len,
                        ..Sqe::default()
                    };
                    let res = ctx.requests.call(ctx, sqe);
                    assert_eq!(res, len as i32, "a waiter got a result that is not its own");
                })
            })
            .collect();
        // The model's main thread is the kernel (a thread fewer to interleave).
        if reversed {
            // Takes both SQEs before completing either, then completes the later one
            // first (io_uring completes requests in any order).
            let mut sqes = Vec::new();
            while sqes.len() < 2 {
                match w.kernel.consume() {
                    Some(sqe) => sqes.push(sqe),
                    None => thread::yield_now(),
                }
            }
            for sqe in sqes.iter().rev() {
                w.kernel.post(sqe.user_data, sqe.len as i32);
            }
        } else {
            w.kernel.serve(2, |sqe| sqe.len as i32);
        }
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

/// One completion slot: the second thread waits for the first to give it back (reaping,
/// which is what frees it), and its tag is the next one. The kernel completes in order.
#[test]
fn request_results_reach_their_own_waiters() {
    requests_model(1, false);
}

/// Two slots, both requests in flight at once, the later one completed first.
#[test]
fn request_results_reach_their_own_waiters_out_of_order() {
    requests_model(2, true);
}

/// The file descriptor the transfer models use (the kernel model ignores it).
const FD: i32 = 7;

/// The kernel's side of a READ or WRITE on `file`: the SQE's `addr` points at arena cells
/// (the model's arena is where the kernel sees it); a read fills them from the file, a
/// write copies them into it. Completes the whole length.
fn serve_transfer(w: &World, file: &Mutex<Vec<u8>>, sqe: &Sqe) -> i32 {
    let cell = core::mem::size_of::<SharedCell<u8>>() as u64;
    let offset = sqe.addr - w.arena.as_ptr() as u64;
    assert_eq!(offset % cell, 0, "addr is not a cell");
    let (first, len, at) = ((offset / cell) as usize, sqe.len as usize, sqe.off as usize);
    assert!(first + len <= w.arena.len(), "addr..addr+len is outside the arena");
    let cells = &w.arena[first..first + len];
    let mut f = file.lock().unwrap();
    // SAFETY: loom checks these accesses against the device threads' copies into and out
    // of the block, and against the block's next holder.
    match sqe.opcode {
        IORING_OP_READ => unsafe { copy_to_cells(cells.as_ptr(), &f[at..at + len]) },
        IORING_OP_WRITE => {
            let mut i = at;
            unsafe {
                read_cells(cells.as_ptr(), len, |b| {
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
/// Loom's threads are coroutines on the test's OS thread, so they share std's thread-locals:
/// the model's main thread enters first, and every guard then restores that same context,
/// in whatever order the threads drop them.
fn enter_world(w: &World, thread_idx: u32) -> impl Drop {
    // SAFETY: the context lives in `w`, which the caller keeps alive past the guard.
    unsafe {
        enter(
            w.ctx.as_ref().unwrap(),
            ThreadIds {
                thread_idx,
                block_idx: 0,
                block_dim: 3,
                grid_dim: 1,
            },
        )
    }
}

/// Runs a staged `pread` of 3 bytes at offset 0 (and, with `writer`, a staged `pwrite` of
/// 3 bytes at offset 8 on a second thread) through an arena of one block, against a kernel
/// model that serves both from a model file, then checks the bytes and that everything
/// was given back.
///
/// Loom checks the hand-offs of the block's cells: the kernel's bytes happen-before the
/// reader's copy out of the block (kernel -> CQ tail -> reaper -> `DONE` -> waiter, across
/// threads when the other thread reaped); the writer's copy into the block happens-before
/// the kernel's read (through the SQE's publication); and the block's next holder touches
/// it only after the kernel is done with the previous request (the block comes back after
/// the completion, not when the SQ head moves).
fn transfer_model(writer: bool) {
    model(move || {
        let w = world(1, false, 1, 1);
        let _entered = enter_world(&w, 0);
        let reader = {
            let w = w.clone();
            thread::spawn(move || {
                let _entered = enter_world(&w, 1);
                let mut buf = [0u8; 3];
                assert_eq!(io::pread(FD, &mut buf, 0), Ok(3));
                assert_eq!(&buf, b"abc", "the read did not see the kernel's bytes");
            })
        };
        let writer = writer.then(|| {
            let w = w.clone();
            thread::spawn(move || {
                let _entered = enter_world(&w, 2);
                assert_eq!(io::pwrite(FD, b"xyz", 8), Ok(3));
            })
        });
        // The model's main thread is the kernel, serving a model file.
        let file = Mutex::new(b"abc\0\0\0\0\0\0\0\0\0".to_vec());
        w.kernel
            .serve(1 + writer.is_some() as usize, |sqe| serve_transfer(&w, &file, sqe));
        reader.join().unwrap();
        let wrote = writer.map(|t| t.join().unwrap()).is_some();
        if wrote {
            assert_eq!(
                &file.lock().unwrap()[8..11],
                b"xyz",
                "the kernel did not see the written bytes"
            );
        }
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
        assert_eq!(
            ctx.arena.staged_bytes.load(Ordering::Relaxed),
            if wrote { 6 } else { 3 }
        );
        assert_eq!(ctx.stray_completions.load(Ordering::Relaxed), 0);
    });
}

#[test]
fn staged_read_sees_the_kernels_bytes() {
    transfer_model(false);
}

/// The reader and a writer contend for the arena's one block (and the one completion
/// slot): one waits, reaping, until the other's request completed.
#[test]
fn staged_read_and_write_share_one_block() {
    transfer_model(true);
}
