//! The way out of a print log: the flusher turns the complete bytes of a [`Stream`] into
//! *flights* (one write SQE each), and the reaper completes them and releases their bytes
//! to the producers, in flight order (the module docs of [`crate::protocol::stream`] give the whole
//! protocol; the invariants it cites are listed in `docs/PROTOCOL.md`).

use super::{Stream, APPEND_WHOLE_LINES, MAX_WRITE, PREFIX_LOOKS};

/// How far back from a flight's end the flusher looks for a line's end, for a stream
/// appending by whole lines: a bounded cost per flush (on a GPU, reads of host memory).
const NEWLINE_SCAN: u64 = 4096;
use crate::errno::Errno;
use crate::protocol::ring::Ring;
use crate::protocol::sync::{fence, read_cells, AtomicU32, AtomicU64, Ordering};
use crate::protocol::uapi::{
    Sqe, IORING_OP_WRITE, IORING_OP_WRITE_FIXED, IOSQE_FIXED_FILE, IOSQE_IO_DRAIN, OFF_CURRENT_POSITION, RWF_APPEND,
};
use crate::protocol::wait::until;
use crate::user_data;

/// Flight states.
const FREE: u32 = 0;
const IN_FLIGHT: u32 = 1;
const RESUBMIT: u32 = 2;
const DONE: u32 = 3;

/// One write in flight: `[start, end)`, of which `[cursor, end)` is still to be written.
#[repr(C)]
pub struct Flight {
    /// The first log position of the write.
    pub start: AtomicU64,
    /// Where the unwritten part starts (moves on after a short write).
    pub cursor: AtomicU64,
    /// The log position after the write's last byte.
    pub end: AtomicU64,
    /// Free, in flight, to be resubmitted (after a short write) or done.
    pub state: AtomicU32,
    /// The sequence number it was started with (completions are checked against it).
    pub seq: AtomicU32,
    /// Completions in a row that came back `EINTR` (bounded: see `MAX_INTERRUPTED`).
    pub interrupted: AtomicU32,
}

/// How many `EINTR` completions in a row one flight may have before its rest is counted
/// lost. io_uring fails a write that blocked in an io-wq worker with `EINTR` when the worker
/// is signalled (a terminal or pipe write waiting for room, interrupted by task work or
/// cancellation): it cannot restart it as a syscall would, so the submitter must. Nothing
/// was written, so the same range goes out again; the bound only keeps a file that fails
/// this way forever from holding the stream.
pub(crate) const MAX_INTERRUPTED: u32 = 1000;

impl Flight {
    /// An unused flight.
    pub fn new() -> Self {
        Flight {
            start: AtomicU64::new(0),
            cursor: AtomicU64::new(0),
            end: AtomicU64::new(0),
            state: AtomicU32::new(FREE),
            seq: AtomicU32::new(0),
            interrupted: AtomicU32::new(0),
        }
    }
}

impl Default for Flight {
    fn default() -> Self {
        Self::new()
    }
}

impl Stream {
    // ---------------------------------------------------------------- the flusher

    /// Flushes this stream, or asks whoever is flushing it to go on: submits writes for
    /// what is complete to `ring`. `reap` consumes completions (the context's reaper); it
    /// is called while all flights are out and while a submission waits for a credit.
    ///
    /// Never called from inside a flush: a flush that waited on another flush's
    /// submission could wait on itself (tickets are taken in order).
    #[inline] // on the print path (see `Stream::write_part`)
    pub fn flush(&self, ring: &Ring, mut reap: impl FnMut()) {
        // The flush submits unrung (`Ring::submit_unrung`); the flusher rings once it has
        // released the stream. A flush left to the holder is rung by the holder.
        if self.flusher.run(|| self.flush_work(ring, &mut reap)) {
            crate::protocol::arch::ring_doorbell_for_lines();
        }
    }

    /// Submits writes for what is complete. Called only through `flusher.run`.
    ///
    /// It leaves nothing for nobody: when every flight is out, it returns only if a print is
    /// in progress (`printing`), whose commit will flush again; with none, it reaps until a
    /// flight lands (`wait_for_flight`) and goes on. So once the last print's flush returns,
    /// every committed byte is in a submitted write, or will be by a flusher that is
    /// running, and a serial stream's last flight has been seen through (its rest
    /// resubmitted if it came back short): a line whose print returned needs nothing from
    /// any thread that is not printing to reach its fd (invariant 12). While prints keep
    /// coming, flushes return at once as they always did (a flusher that waited whenever
    /// its flights were out cost about a quarter of the print throughput). Before, a
    /// flush that found every flight out always left the bytes to whoever reaped the
    /// landing flight and took its kick (a producer waiting for room, a request's waiter,
    /// or the drain after the last kernel): while every other thread computed, nobody did.
    ///
    /// On the CPU backend (`arch::flusher_sees_flights_through`) it never waits for a flight:
    /// it returns, and the bytes go with the next flush, or the host's waker sends them once
    /// they sat unmoved for a millisecond (gpuio-host's `rescue`). A flusher waiting there
    /// could be preempted by the OS and hold every later line for a scheduler round, and a
    /// thread printing alone waited for each of its writes.
    #[inline(never)] // one copy in a code object; the combiner's lock around it is inlined
    fn flush_work(&self, ring: &Ring, reap: &mut impl FnMut()) {
        // Remainders of short writes first: they come before anything newer.
        self.resubmit_short(ring, reap);
        let append = self.append.load(Ordering::Relaxed);
        // Read once: the loop's atomics would have the compiler load the field anew each
        // round (seen in the PTX).
        let max_flights = self.max_flights;
        loop {
            let head = self.flight_head.load(Ordering::Relaxed);
            // Acquire: pairs with the reaper's release of the tail; the slot is free.
            if head.wrapping_sub(self.flight_tail.load(Ordering::Acquire)) >= max_flights {
                // Every flight is out. Collect completions (reaping never submits, so this
                // cannot wait on ourselves) and look again. If every flight is still out,
                // leave what is ready to the flush that follows the commit of a print in
                // progress; with none in progress nobody may flush again, so wait for a
                // flight to land (`wait_for_flight`): then send what is ready, and a serial
                // stream's last flight, which may come back short (a pipe takes part of a
                // write), has its rest resubmitted here. (These looks come before the
                // complete prefix's: on a GPU its acquire fence is a PCIe round trip, and a
                // stream with one flight finds it out at most flushes.)
                reap();
                if head.wrapping_sub(self.flight_tail.load(Ordering::Acquire)) >= max_flights {
                    if self.printing() || !crate::protocol::arch::flusher_sees_flights_through() {
                        return;
                    }
                    self.wait_for_flight(ring, reap, head);
                }
                continue;
            }
            let start = self.flushed.load(Ordering::Relaxed);
            // Acquire: the counters of released bytes were decremented before `released`
            // moved.
            let window = self.released.load(Ordering::Acquire) + self.cap;
            let ready = self.complete_prefix(start, window);
            if ready == start {
                // Nothing complete is left unsubmitted: the commit that completes more
                // flushes again.
                return;
            }
            let wrap = (start | (self.cap - 1)) + 1;
            let mut end = ready.min(wrap).min(start + MAX_WRITE);
            if append == APPEND_WHOLE_LINES && end == ready {
                // The complete prefix may end inside a record (at a chunk's end), and another
                // runtime's write could land between its halves. End the flight after its
                // last whole line instead. With no line end in it, wait for the record to be
                // committed (its commit flushes again), unless a producer may be waiting for
                // room that only this flight would free: then take it all. (Looking back at
                // most NEWLINE_SCAN bytes: a longer line is taken as it is.)
                let reserved = self.reserved.load(Ordering::Relaxed);
                if ready != reserved {
                    match self.after_last_newline(start, end) {
                        Ok(Some(p)) => end = p,
                        Ok(None) if reserved <= window => return,
                        Ok(None) | Err(()) => {}
                    }
                }
            }
            let f = self.flight(head);
            f.start.store(start, Ordering::Relaxed);
            f.cursor.store(start, Ordering::Relaxed);
            f.end.store(end, Ordering::Relaxed);
            f.seq.store(head, Ordering::Relaxed);
            f.interrupted.store(0, Ordering::Relaxed);
            // Release: the flight's fields happen-before the reaper's use of them (also
            // ordered through the SQE's publication and the kernel's CQE).
            f.state.store(IN_FLIGHT, Ordering::Release);
            self.flushed.store(end, Ordering::Release);
            self.flight_head.store(head.wrapping_add(1), Ordering::Release);
            self.submit_flight(ring, reap, head);
        }
    }

    /// Whether a print is in progress: bytes reserved and not yet committed. Its producer
    /// commits them and then flushes, so a flush that finds all flights out may leave the
    /// bytes it cannot send yet to that one.
    ///
    /// Relaxed loads: a stale answer only ever hands the bytes to a flush that is sure to
    /// come. Every commit is followed by a flush request, and the combiner runs a flush
    /// after each request that synchronises with it: the commits this flusher's requests
    /// carry happen-before these loads, so `committed` counts at least those; a commit it
    /// does not see comes with a request that runs the flush again. (On a GPU an acquire
    /// load at system scope costs about a fence, on the flusher's serialised path.)
    fn printing(&self) -> bool {
        let reserved = self.reserved.load(Ordering::Relaxed);
        self.committed.load(Ordering::Relaxed) != reserved
    }

    /// Resubmits the unwritten rest of every flight a short write left (`RESUBMIT`), oldest
    /// first.
    fn resubmit_short(&self, ring: &Ring, reap: &mut impl FnMut()) {
        let head = self.flight_head.load(Ordering::Relaxed);
        let mut seq = self.flight_tail.load(Ordering::Acquire);
        while seq != head {
            // Acquire: pairs with the reaper's release of RESUBMIT (and the new cursor).
            if self.flight(seq).state.load(Ordering::Acquire) == RESUBMIT {
                self.flight(seq).state.store(IN_FLIGHT, Ordering::Relaxed);
                self.submit_flight(ring, reap, seq);
            }
            seq = seq.wrapping_add(1);
        }
    }

    /// Waits until the oldest of the flights out (`head` is the next to start) has landed
    /// and freed its slot, reaping meanwhile, and resubmitting what short writes leave (a
    /// flight cut short stays out until its rest is written). Called only by the flusher.
    ///
    /// It waits only for the kernel and for reaping (anyone's, its own included), so it is
    /// safe under the lockstep rule (`arch/mod.rs`): no lane waits for the flusher's slot.
    /// A write that never completes (a pipe nobody reads) holds the flusher here, as a full
    /// pipe holds std's `println!`; the host's hang watchdog names it.
    fn wait_for_flight(&self, ring: &Ring, reap: &mut impl FnMut(), head: u32) {
        let max_flights = self.max_flights;
        until(
            || {
                reap();
                self.resubmit_short(ring, reap);
                // Acquire: pairs with the reaper's release of the tail; the slot is free.
                (head.wrapping_sub(self.flight_tail.load(Ordering::Acquire)) < max_flights).then_some(())
            },
            || {},
        )
    }

    /// The position just after the last newline in `[from, to)`, looking back at most
    /// [`NEWLINE_SCAN`] bytes from `to`: `Ok(Some)` if there is one, `Ok(None)` if the
    /// whole range was looked at without finding one, `Err(())` if the range is longer and
    /// its last [`NEWLINE_SCAN`] bytes hold none (a line that long may be split). The range
    /// is committed (`complete_prefix`'s acquire) and does not wrap.
    fn after_last_newline(&self, from: u64, to: u64) -> Result<Option<u64>, ()> {
        let floor = to.saturating_sub(NEWLINE_SCAN).max(from);
        let mut hi = to;
        while hi > floor {
            let lo = hi.saturating_sub(64).max(floor);
            let (mut at, mut last) = (lo, None);
            // SAFETY: the cells of `[lo, hi)` lie inside the log (the range does not wrap) and
            // are committed: no producer writes them until the flight that carries them
            // completes and releases them.
            unsafe {
                read_cells(self.cell(lo), (hi - lo) as usize, |b| {
                    for (i, &c) in b.iter().enumerate() {
                        if c == b'\n' {
                            last = Some(at + i as u64 + 1);
                        }
                    }
                    at += b.len() as u64;
                })
            };
            if last.is_some() {
                return Ok(last);
            }
            hi = lo;
        }
        if floor > from {
            Err(())
        } else {
            Ok(None)
        }
    }

    /// How far from `from` (and below `window`) the log is written without a gap.
    ///
    /// Called by the flusher, whose walk over the chunks no other thread shares: a burst's
    /// lines are out only once it has looked at each chunk.
    #[inline(never)] // tests/ptx_atomics/ finds it by name
    fn complete_prefix(&self, from: u64, window: u64) -> u64 {
        let limit = self.reserved.load(Ordering::Relaxed).min(window);
        let mut p = from;
        // Whole chunks, one counter each, [`PREFIX_LOOKS`] at a time: a round issues all its
        // loads before it compares any, so their latencies overlap. (One at a time, each
        // waited for before the next, a GPU flusher walked about 12 GB/s of log, 1.3 us a
        // 16 KiB chunk, and a burst of lines waited for it.) A round loads its counters
        // whether or not their chunks are wanted (a branch around each load would keep the
        // compiler from moving the loads together) and uses only those of chunks that end
        // below `limit`: such a chunk ends below `window`, so its counter's previous user
        // was zeroed before we read `released` (see the module docs). The fields are read
        // once, into locals: the loop's atomic loads would have them read anew each time.
        let (counters, chunk) = (self.counters(), self.chunk);
        let shift = counters.shift;
        loop {
            let k = p >> shift;
            let whole = ((limit >> shift).saturating_sub(k)).min(PREFIX_LOOKS as u64) as u32;
            if whole == 0 {
                break;
            }
            let counts: [u32; PREFIX_LOOKS] =
                core::array::from_fn(|i| counters.at(k + i as u64).load(Ordering::Relaxed));
            let mut full_bits = 0u32;
            for (i, &c) in counts.iter().enumerate() {
                full_bits |= u32::from(u64::from(c) == chunk) << i;
            }
            let full = full_bits.trailing_ones().min(whole);
            if full > 0 {
                p = (k + u64::from(full)) << shift;
            }
            if full < whole {
                break;
            }
        }
        if p < limit {
            // A partial chunk: take the rest if every reserved byte is committed. Acquire
            // orders the load of `reserved` after it; every record counted in `committed`
            // was reserved before it was committed, so lies below that `reserved`. Counted
            // records are disjoint, so equal totals mean that all of `[0, reserved)` is
            // written.
            let committed = self.committed.load(Ordering::Acquire);
            let reserved = self.reserved.load(Ordering::Relaxed);
            if committed == reserved {
                p = reserved.min(window).max(p);
            }
        }
        // Acquire fence: pairs with the release fence in each `commit` whose counter adds
        // we read, so the bytes of `[from, p)` happen-before our submission (and, through
        // the ring's system-scope publication, the kernel's read).
        fence(Ordering::Acquire);
        p
    }

    /// Submits the unwritten part of flight `seq`.
    fn submit_flight(&self, ring: &Ring, reap: &mut impl FnMut(), seq: u32) {
        let f = self.flight(seq);
        let cursor = f.cursor.load(Ordering::Relaxed);
        let end = f.end.load(Ordering::Relaxed);
        // A registered file is named by its index (and the flag that says so). Chosen by
        // value, before the branches below: written as a branch, LLVM copied it into both
        // arms of the `append` test, and ptxas compiling the module as one whole program
        // (CUDA 13.0, and the JIT of driver 580) left the copy out of the appending arm, whose
        // SQE then took the fd and flags registers of whatever ran before: a write without
        // IOSQE_FIXED_FILE, refused (docs/PROTOCOL.md, "Compilers").
        let fixed = self.fixed_file >= 0;
        let fd = core::hint::select_unpredictable(fixed, self.fixed_file, self.fd);
        let mut flags = core::hint::select_unpredictable(fixed, IOSQE_FIXED_FILE, 0);
        // Appending: the kernel puts the write at the file's end and leaves the fd's offset
        // alone (an explicit offset, which `RWF_APPEND` overrides), so that two runtimes'
        // writes do not race on it; the host moves it to the end after the kernels.
        let (off, rw_flags) = if self.append.load(Ordering::Relaxed) != 0 {
            (0, RWF_APPEND)
        } else if self.positional != 0 {
            (self.base.load(Ordering::Relaxed).wrapping_add(cursor), 0)
        } else {
            (OFF_CURRENT_POSITION, 0)
        };
        // An appending flight lands where the file ends when the kernel writes it, so the
        // kernel must write a stream's flights in log order. While an earlier flight of the
        // stream is outstanding, this one waits for every earlier request of the ring (the
        // ring takes SQEs in order, and flights are submitted in log order); alone, it
        // needs no wait, and holds up nobody else's requests. Acquire: pairs with the
        // reaper's release of the tail.
        if rw_flags == RWF_APPEND && self.flight_tail.load(Ordering::Acquire) != seq {
            flags |= IOSQE_IO_DRAIN;
        }
        // A registered log is named by its index too: the kernel then refuses any address
        // outside it.
        let (opcode, buf_index) = if self.fixed_log >= 0 {
            (IORING_OP_WRITE_FIXED, self.fixed_log as u16)
        } else {
            (IORING_OP_WRITE, 0)
        };
        let sqe = Sqe {
            opcode,
            flags,
            fd,
            buf_index,
            off,
            // The cell's offset from `buf` in bytes (a cell is a byte, except under loom,
            // whose model cells are larger), moved to where the kernel sees the log.
            addr: self.io_base.wrapping_add(self.cell(cursor) as u64 - self.buf as u64),
            len: (end - cursor) as u32,
            rw_flags,
            user_data: user_data::for_stream(self.index, seq),
            ..Sqe::default()
        };
        // Help by reaping only: a flush must never start another submission from inside
        // this one (see `Stream::flush`).
        ring.submit_unrung(&sqe, &mut || {
            reap();
        });
    }

    // ---------------------------------------------------------------- the reaper

    /// A write of flight `seq` completed with `res`. Called only by the reaper.
    ///
    /// Returns `false`, changing nothing, if flight `seq` is not in flight (a completion
    /// that matches nothing: a bug, counted by the caller).
    pub(crate) fn complete(&self, seq: u32, res: i32) -> bool {
        let f = self.flight(seq);
        // Only the reaper moves a flight out of IN_FLIGHT, and the flight's slot is reused
        // only after it was released, so a genuine completion always finds it in flight
        // (with `seq` itself: the flusher wrote it before publishing the SQE).
        if f.state.load(Ordering::Relaxed) != IN_FLIGHT || f.seq.load(Ordering::Relaxed) != seq {
            return false;
        }
        let cursor = f.cursor.load(Ordering::Relaxed);
        let end = f.end.load(Ordering::Relaxed);
        let interrupted = f.interrupted.load(Ordering::Relaxed);
        if res == -Errno::EINTR.0 && interrupted < MAX_INTERRUPTED {
            // Nothing was written (see `MAX_INTERRUPTED`): the same rest goes out again.
            f.interrupted.store(interrupted + 1, Ordering::Relaxed);
            // Release: pairs with the flusher's acquire of RESUBMIT, as below.
            f.state.store(RESUBMIT, Ordering::Release);
        } else if res <= 0 {
            // A write that fails, or makes no progress, loses the rest of the flight.
            let errno = if res < 0 { -res } else { Errno::EIO.0 };
            self.lose(cursor, end, errno);
            f.state.store(DONE, Ordering::Relaxed);
        } else if (res as u64) < end - cursor {
            f.cursor.store(cursor + res as u64, Ordering::Relaxed);
            f.interrupted.store(0, Ordering::Relaxed);
            // Release: the new cursor happens-before the flusher's acquire of RESUBMIT.
            f.state.store(RESUBMIT, Ordering::Release);
        } else {
            f.state.store(DONE, Ordering::Relaxed);
        }
        // Release finished flights in order.
        loop {
            let tail = self.flight_tail.load(Ordering::Relaxed);
            if tail == self.flight_head.load(Ordering::Acquire) {
                break;
            }
            let f = self.flight(tail);
            if f.state.load(Ordering::Relaxed) != DONE {
                break;
            }
            let (s, e) = (f.start.load(Ordering::Relaxed), f.end.load(Ordering::Relaxed));
            self.clear(s, e);
            f.state.store(FREE, Ordering::Relaxed);
            // Release, system scope: the kernel's reads of `[s, e)` (acquired with the CQ
            // tail) and the decremented counters happen-before a producer's acquire of `released`
            // and its writes to `[s + cap, e + cap)`. Invariant 3.
            self.released.store(e, Ordering::Release);
            // Release: the flight slot is free for the flusher.
            self.flight_tail.store(tail.wrapping_add(1), Ordering::Release);
        }
        // Release: the released space and freed flight happen-before whoever takes the kick.
        self.kick.store(1, Ordering::Release);
        true
    }

    /// Zeroes the counters of the chunks whose last byte is in `[s, e)`: released now.
    fn clear(&self, s: u64, e: u64) {
        let (counters, chunk) = (self.counters(), self.chunk);
        let mut end = (s | (chunk - 1)) + 1;
        while end <= e {
            // Relaxed: ordered before the counter's next user (two passes later) by the
            // release of `released`, which that user's producers acquire.
            counters.of(end - 1).store(0, Ordering::Relaxed);
            end += chunk;
        }
    }

    /// Records that `[s, e)` will never be written.
    fn lose(&self, s: u64, e: u64, errno: i32) {
        let mut lines = 0u64;
        let mut p = s;
        while p < e {
            let wrap = (p | (self.cap - 1)) + 1;
            let hi = e.min(wrap);
            // SAFETY: the flight's bytes stay untouched until `released` passes them.
            unsafe {
                read_cells(self.cell(p), (hi - p) as usize, |b| {
                    lines += b.iter().filter(|&&c| c == b'\n').count() as u64
                })
            };
            p = hi;
        }
        let errs = &self.errors;
        errs.failed_writes.fetch_add(1, Ordering::Relaxed);
        errs.last_errno.store(errno, Ordering::Relaxed);
        errs.lost_bytes.fetch_add(e - s, Ordering::Relaxed);
        errs.lost_lines.fetch_add(lines, Ordering::Relaxed);
    }
}
