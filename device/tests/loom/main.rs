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

use gpuio_device::io;
use gpuio_device::protocol::arch::host::ThreadIds;
use gpuio_device::protocol::arena::Arena;
use gpuio_device::protocol::combine::{Combiner, Left};
use gpuio_device::protocol::context::enter;
use gpuio_device::protocol::context::{Context, CONTEXT_MAGIC};
use gpuio_device::protocol::group::SingleLane;
use gpuio_device::protocol::pool::{Pool, FREE};
use gpuio_device::protocol::print::emit;
use gpuio_device::protocol::request::Requests;
use gpuio_device::protocol::ring::Ring;
use gpuio_device::protocol::solo::Solo;
use gpuio_device::protocol::stream::{chunk_count, Flight, Stream};
use gpuio_device::protocol::sync::{copy_to_cells, fence, read_cells, AtomicI32, AtomicU32, Ordering, SharedCell};
use gpuio_device::protocol::uapi::{Cqe, Sqe, IORING_OP_READ, IORING_OP_WRITE, OFF_CURRENT_POSITION};
use loom::sync::atomic::AtomicBool;
use loom::sync::{Arc, Mutex};
use loom::thread;

mod kernel;
mod world;
use kernel::{InlineKernel, KernelRings};
use world::{enter_world, model_file, serve_transfer, world, World, FD};

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(1, f)
}

/// [`model`] with `preemptions` as the default preemption bound (`LOOM_MAX_PREEMPTIONS`
/// overrides it).
fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("LOOM_MAX_PREEMPTIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(preemptions),
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

/// A holder of a try-lock that wrote nothing (a reap that found no CQE) releases it with a
/// relaxed read-modify-write, no fence on a GPU; one that wrote releases it with a release
/// store (`Left::Writes`), or with a relaxed store after its own release fence
/// (`Left::Fenced`, a reap that took CQEs). A later holder must still see what an earlier
/// holder wrote: loom reports the cell's read if it is not ordered after the write (as when
/// the writer, too, releases with the relaxed RMW, or says `Fenced` without the fence).
/// Loom does not tell that RMW from a relaxed store here, though only the RMW continues the
/// writer's release sequence: that part rests on the argument in `Left::Nothing`.
fn try_run_model(writer_left: Left) {
    model(move || {
        let c = Arc::new(Combiner::new());
        let cell = Arc::new(SharedCell::new(0u32));
        let written = Arc::new(AtomicU32::new(0));
        let until_ran = |c: &Combiner, work: &mut dyn FnMut() -> Left| {
            while !c.try_run(&mut *work) {
                thread::yield_now();
            }
        };
        let writer = {
            let (c, cell, written) = (c.clone(), cell.clone(), written.clone());
            thread::spawn(move || {
                until_ran(&c, &mut || {
                    // SAFETY: inside the lock (the claim under test).
                    unsafe { cell.write(1) };
                    written.store(1, Ordering::Relaxed);
                    if writer_left == Left::Fenced {
                        fence(Ordering::Release);
                    }
                    writer_left
                })
            })
        };
        let looker = {
            let c = c.clone();
            thread::spawn(move || until_ran(&c, &mut || Left::Nothing))
        };
        until_ran(&c, &mut || {
            if written.load(Ordering::Relaxed) == 1 {
                // SAFETY: inside the lock (the claim under test).
                assert_eq!(unsafe { cell.read() }, 1);
            }
            Left::Nothing
        });
        writer.join().unwrap();
        looker.join().unwrap();
    });
}

#[test]
fn try_run_orders_holders_across_one_that_only_looked() {
    try_run_model(Left::Writes);
}

#[test]
fn try_run_orders_holders_after_a_fenced_release() {
    try_run_model(Left::Fenced);
}

/// Three agents reap one ring while the kernel posts two CQEs; some reaps find nothing.
/// Each dispatch must happen-before the next (loom reports the cell they all update
/// otherwise), and each CQE is reaped exactly once.
#[test]
fn reapers_are_ordered_across_one_that_found_nothing() {
    fn reap(ring: &Ring, taken: &SharedCell<u32>) -> bool {
        ring.reap(|cs| {
            // SAFETY: only the holder of the reaper lock touches it (the claim under test).
            unsafe { taken.write(taken.read() + cs.len() as u32) };
            false
        })
    }
    model(|| {
        let k = Arc::new(KernelRings::new(2, 2));
        let ring = Arc::new(k.ring());
        let taken = Arc::new(SharedCell::new(0u32));
        let reapers: Vec<_> = (0..2)
            .map(|_| {
                let (ring, taken) = (ring.clone(), taken.clone());
                thread::spawn(move || {
                    reap(&ring, &taken);
                    reap(&ring, &taken);
                })
            })
            .collect();
        k.post(1, 0);
        k.post(2, 0);
        for t in reapers {
            t.join().unwrap();
        }
        while ring.reaped.load(Ordering::Relaxed) != 2 {
            reap(&ring, &taken);
        }
        // SAFETY: every reaper has finished (joined, or this thread).
        assert_eq!(unsafe { taken.read() }, 2, "a CQE reaped twice, or never");
        assert_eq!(k.cq_head.load(Ordering::Relaxed), 2);
    });
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
                            ring.reap(|cs| {
                                reaped.lock().unwrap().extend(cs.iter().map(|c| c.user_data));
                                false
                            });
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
            ring.reap(|cs| {
                reaped.lock().unwrap().extend(cs.iter().map(|c| c.user_data));
                false
            });
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

/// How the kernel model completes a stream's first write.
#[derive(Clone, Copy, PartialEq)]
enum FirstWrite {
    /// Half of it written, as a pipe may: the rest must be resubmitted before anything newer.
    Short,
    /// Nothing written, `-EINTR`, as io_uring answers when the io-wq worker a blocking
    /// terminal write waits in is signalled: the whole write must go out again.
    Interrupted,
}

/// Runs a printer per character of `printers` and a kernel that writes (short or not at all
/// the first time: `first`) into a model file, then checks the file holds every record,
/// each whole. With `unaided`, the file must come to hold them with no device thread's help
/// once the printers returned (invariant 12): only the kernel model runs until it does.
fn stream_model(
    max_flights: u32,
    positional: bool,
    unaided: bool,
    first: FirstWrite,
    printers: &'static [u8],
    preemptions: usize,
) {
    model_bounded(preemptions, move || {
        let w = world(max_flights, positional, 1, 1);
        let file = Arc::new(Mutex::new(vec![0u8; 0]));
        let stop = Arc::new(AtomicBool::new(false));
        let kernel = {
            let (w, file, stop) = (w.clone(), file.clone(), stop.clone());
            thread::spawn(move || {
                let mut is_first = true;
                while !stop.load(Ordering::Acquire) {
                    let stepped = w.kernel.step(|sqe| {
                        assert_eq!(sqe.opcode, IORING_OP_WRITE);
                        let this_first = std::mem::take(&mut is_first);
                        if this_first && first == FirstWrite::Interrupted {
                            return -4; // EINTR: nothing written
                        }
                        let len = if this_first { (sqe.len / 2).max(1) } else { sqe.len } as usize;
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
        // Records of 40 bytes through a 64-byte log: a second one needs the first's bytes
        // released, which needs its write completed.
        let threads: Vec<_> = printers
            .iter()
            .map(|&c| {
                let w = w.clone();
                thread::spawn(move || {
                    let ctx = w.ctx.as_ref().unwrap();
                    let line = [c; 39];
                    let s = std::str::from_utf8(&line).unwrap();
                    emit(&SingleLane, ctx, ctx.stream(false), true, format_args!("{s}"));
                })
            })
            .collect();
        for p in threads {
            p.join().unwrap();
        }
        if unaided {
            // Nobody reaps or flushes: what the printers' flushes submitted is all there is.
            while file.lock().unwrap().iter().filter(|&&c| c == b'\n').count() < printers.len() {
                thread::yield_now();
            }
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
        let want: Vec<String> = printers.iter().map(|&c| (c as char).to_string().repeat(39)).collect();
        assert_eq!(lines, want, "every line, whole: {text:?}");
        assert_eq!(ctx.stream(false).errors.failed_writes.load(Ordering::Relaxed), 0);
    });
}

/// Two serial records through a 64-byte log, the first write short.
///
/// Preemption bound 0: since a flusher with no other print in progress waits for its flight
/// to land (invariant 12), two printers, the kernel model and the main thread all spin at
/// once, and with bound 1 the model ran for over 17 minutes without finishing. Bound 0 still
/// switches threads at every yield of those spins and explores what each load may read.
#[test]
fn serial_stream_recycles_only_after_completion_and_resubmits_short_writes() {
    stream_model(1, false, false, FirstWrite::Short, b"ab", 0);
}

/// A line whose print returned reaches the file while nobody but the kernel runs
/// (invariant 12): the model's first write is short, and the printer's flush, with no
/// other print in progress, sees its flight through and resubmits the rest itself, instead
/// of leaving it to a later flush. (One printer: with two, the model took over 17 minutes.)
#[test]
fn serial_stream_writes_returned_lines_unaided() {
    stream_model(1, false, true, FirstWrite::Short, b"a", 1);
}

/// A write that came back `EINTR` goes out again, whole, with nobody but the kernel
/// running once the print returned: a terminal's lines are not lost to a signalled io-wq
/// worker.
#[test]
fn serial_stream_resubmits_an_interrupted_write_unaided() {
    stream_model(1, false, true, FirstWrite::Interrupted, b"a", 1);
}

#[test]
fn positional_stream_with_two_flights() {
    stream_model(2, true, false, FirstWrite::Short, b"ab", 1);
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
                                ctx.submit(&sqe);
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
        assert!(ctx.idle());
        for i in 0..slots {
            assert_eq!(
                ctx.requests.pool.state(i).load(Ordering::Relaxed),
                FREE,
                "slot {i} still taken"
            );
        }
        assert_eq!(ctx.stray_completions.load(Ordering::Relaxed), 0);
        assert_eq!(ctx.refusals.unclaimed.load(Ordering::Relaxed), 0);
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
        assert!(ctx.idle());
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
        assert!(ctx.idle());
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

/// The kernel's side and the staging buffer of a solo ring in the models, in memory that
/// stays put (an `Arc`'s) while a [`Solo`] points into it.
struct SoloParts {
    kernel: KernelRings,
    stage: Vec<SharedCell<u8>>,
}

/// A solo ring of one SQE and two CQEs over a kernel model (so that three requests reuse
/// the SQE slot twice and a CQE slot once), with a buffer of four bytes; its holder waits on
/// each CQE's `res` if `on_results`, else on the CQ tail.
fn solo_world(on_results: bool) -> (Arc<SoloParts>, Arc<Solo>) {
    let parts = Arc::new(SoloParts {
        kernel: KernelRings::new(1, 2),
        stage: (0..4).map(|_| SharedCell::new(0)).collect(),
    });
    let k = &parts.kernel;
    // SAFETY: the pointers point into the Arc's contents, which never move and which the
    // models keep alive (they hold `parts`) for as long as they use the ring. The kernel
    // sees the buffer where the device does (its cells' address).
    let solo = unsafe {
        Solo::new(
            &k.sq_tail,
            &k.cq_head,
            &k.cq_tail,
            k.sqes.as_ptr(),
            k.cqes.as_ptr(),
            1,
            2,
            parts.stage.as_ptr(),
            parts.stage.as_ptr() as u64,
        )
    };
    let solo = if on_results {
        let stride = core::mem::size_of::<AtomicI32>() as u32;
        // SAFETY: slot `i`'s result word is `results[i]`, one atomic on from the last, in
        // the Arc's contents (above); the model's kernel stores it with Release after the
        // CQE, as an x86 host is seen to.
        unsafe { solo.waiting_on_results(k.results.as_ptr(), stride) }
    } else {
        solo
    };
    (parts, Arc::new(solo))
}

/// The solo ring taken in turn: a writer (twice) and a reader each retry until they hold it (a
/// model's shortcut: device code goes to the shared rings instead), and both play the
/// kernel, the holder while it waits for its completion and the other between its tries
/// (one at a time, under a lock: the kernel is one SQPOLL thread), as [`InlineKernel`]
/// does, which keeps the model small. Loom checks the hand-offs
/// of the buffer and of the SQE and CQE slots: the writer's payload happens-before the
/// kernel's copy of it (the SQ tail), the kernel's bytes happen-before the reader's copy
/// (the CQ tail), each holder's last use of the buffer happens-before the next holder's
/// first (the release fence and the lock's word), and the second request finds the count
/// and the kernel's ring where the first left them. The holder waits on the CQ tail here,
/// and on each CQE's `res` in the next model.
#[test]
fn solo_ring_hands_its_buffer_from_holder_to_kernel_to_holder() {
    solo_ring_hands_its_buffer(false);
}

/// As above, the holder waiting on each CQE's `res` (`Solo::waiting_on_results`): the
/// kernel's bytes happen-before the reader's copy through that word alone, and a holder
/// never takes its own mark, or the previous request's answer in a reused slot, for its
/// answer.
#[test]
fn solo_ring_hands_its_buffer_waiting_on_results() {
    solo_ring_hands_its_buffer(true);
}

fn solo_ring_hands_its_buffer(on_results: bool) {
    model(move || {
        let (parts, solo) = solo_world(on_results);
        let file = Arc::new(Mutex::new(b"0123456789".to_vec()));
        // The kernel: one step at a time, under the lock.
        let kernel = {
            let (parts, file) = (parts.clone(), file.clone());
            let sqpoll = Arc::new(Mutex::new(()));
            move || {
                let _one = sqpoll.lock().unwrap();
                // A cell's address back to its index (under loom a cell is bigger than a byte).
                let cell = core::mem::size_of::<SharedCell<u8>>() as u64;
                parts.kernel.step(|sqe| {
                    let first = ((sqe.addr - parts.stage.as_ptr() as u64) / cell) as usize;
                    let (len, at) = (sqe.len as usize, sqe.off as usize);
                    let cells = parts.stage[first..first + len].as_ptr();
                    let mut f = file.lock().unwrap();
                    match sqe.opcode {
                        // SAFETY: loom checks these accesses against the holders' own.
                        IORING_OP_READ => unsafe { copy_to_cells(cells, &f[at..at + len]) },
                        _ => {
                            let mut i = at;
                            // SAFETY: as above.
                            unsafe {
                                read_cells(cells, len, |b| {
                                    f[i..i + b.len()].copy_from_slice(b);
                                    i += b.len();
                                })
                            };
                        }
                    }
                    len as i32
                });
            }
        };
        let writer = {
            let (solo, kernel) = (solo.clone(), kernel.clone());
            thread::spawn(move || {
                // Two writes, one after the other: "xy" at 8, then "z" at 9.
                for (bytes, off) in [(&b"xy"[..], 8), (&b"z"[..], 9)] {
                    loop {
                        let res = solo.try_call_helping(
                            |stage, addr| {
                                // SAFETY: we hold the ring, so the buffer is ours.
                                unsafe { copy_to_cells(stage, bytes) };
                                Sqe {
                                    opcode: IORING_OP_WRITE,
                                    fd: FD,
                                    off,
                                    addr,
                                    len: bytes.len() as u32,
                                    ..Sqe::default()
                                }
                            },
                            |_, _| {},
                            &kernel,
                        );
                        match res {
                            Some(res) => break assert_eq!(res, bytes.len() as i32),
                            None => {
                                kernel();
                                thread::yield_now()
                            }
                        }
                    }
                }
            })
        };
        loop {
            let res = solo.try_call_helping(
                |_, addr| Sqe {
                    opcode: IORING_OP_READ,
                    fd: FD,
                    off: 1,
                    addr,
                    len: 3,
                    ..Sqe::default()
                },
                |stage, res| {
                    assert_eq!(res, 3);
                    let mut got = Vec::new();
                    // SAFETY: we hold the ring, and the kernel's read completed.
                    unsafe { read_cells(stage, 3, |b| got.extend_from_slice(b)) };
                    assert_eq!(got, b"123", "the read did not see the kernel's bytes");
                },
                &kernel,
            );
            match res {
                Some(res) => break assert_eq!(res, 3),
                None => {
                    kernel();
                    thread::yield_now()
                }
            }
        }
        writer.join().unwrap();
        assert_eq!(&file.lock().unwrap()[..], b"01234567xz");
        assert_eq!(solo.requests(), 3);
        assert!(!solo.held());
        assert_eq!(parts.kernel.cq_tail.load(Ordering::Relaxed), 3);
        assert_eq!(parts.kernel.cq_head.load(Ordering::Relaxed), 3);
    });
}
