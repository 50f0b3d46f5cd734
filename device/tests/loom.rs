//! Exhaustive interleaving checks (loom) of the lock-free parts: the combiner, the ring's
//! reservation / in-order publication / CQ credits, and a print stream's fill / flush /
//! recycling, each against a model of the kernel's side of io_uring.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p gpuio-device --release --test loom`
//! (`.ci/run` does). The preemption bound defaults to 1 (`LOOM_MAX_PREEMPTIONS` raises it):
//! at 1 these models already catch a Relaxed ready flag (an SQE published before it is
//! written) and a log reused before its write completed; at 2 they run for many minutes. Loom reports any access to a `SharedCell` (SQE slots, payload bytes)
//! that is not ordered by a happens-before edge, and any assertion that fails in some
//! interleaving.
#![cfg(loom)]

use gpuio_device::combine::Combiner;
use gpuio_device::context::{Context, CONTEXT_MAGIC};
use gpuio_device::group::SingleLane;
use gpuio_device::print::emit;
use gpuio_device::ring::Ring;
use gpuio_device::stream::{chunk_count, Flight, Stream};
use gpuio_device::sync::{read_cells, AtomicI32, AtomicU32, Ordering, SharedCell};
use gpuio_device::uapi::{Cqe, Sqe, IORING_OP_WRITE, OFF_CURRENT_POSITION};
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

/// A context with a 64-byte log for stdout, over a test-owned kernel model.
struct World {
    kernel: KernelRings,
    bufs: Vec<Vec<SharedCell<u8>>>,
    chunks: Vec<Vec<AtomicU32>>,
    flights: Vec<Vec<Flight>>,
    ctx: Option<Context>,
}

fn world(max_flights: u32, positional: bool) -> Arc<World> {
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
    });
    Arc::new(w)
}

/// Runs two printers and a kernel that writes (partially, on its first write) into a
/// model file, then checks the file holds both records, each whole.
fn stream_model(max_flights: u32, positional: bool) {
    model(move || {
        let w = world(max_flights, positional);
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
