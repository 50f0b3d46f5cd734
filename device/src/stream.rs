//! Print streams: a byte log in host-visible memory, filled by many threads, written out
//! by group commit.
//!
//! # Why a log and not one SQE per line
//! One SQE per line caps throughput at the SQPOLL thread's per-request cost (on an H200
//! writing 32-byte lines to a tmpfs file: about 1.5 M lines/s with one SQE per line, 176 M
//! with one SQE per block of 256 lines). Here lines are appended to a log; whoever flushes
//! submits one write for everything that is complete, so a burst of lines costs a handful
//! of SQEs.
//!
//! # Positions
//! A stream counts bytes with 64-bit logical positions that never wrap in practice.
//! Position `p` lives at `buf[p % cap]`. Three counters move forward:
//!
//! ```text
//!   released <= flushed <= reserved
//!   |-- being written by the kernel --|-- written by threads, or being written --|
//! ```
//! - `reserved`: producers take `[s, s + len)` with one `fetch_add` (a warp: one for all
//!   its lanes' lines).
//! - a producer may write position `p` once `p < released + cap` (backpressure: invariant
//!   6; nothing is dropped, the producer waits and helps).
//! - a producer that wrote its record *commits* it: it adds the record's bytes to the
//!   commit counter of each chunk the record touches, and to `committed`.
//! - the flusher takes whole chunks whose counter says every byte is written, and the
//!   rest when `committed == reserved` (every reserved byte written). What it takes, it
//!   submits as one write (a *flight*).
//! - when a flight's CQE arrives the reaper zeroes the counters of the chunks it finishes
//!   and moves `released` over it, in flight order. Only then can producers reuse those bytes
//!   (invariant 3: never when the SQ head moves; the kernel may have punted the write to
//!   io-wq and read it later).
//!
//! # Why chunk counters
//! The flusher is one thread at a time, so whatever it does per byte bounds the stream's
//! throughput. It reads one counter per chunk (up to 16 KiB), and the reaper writes one,
//! so a 512 MB burst costs them about 32,000 accesses each, where state per byte would
//! cost them a scan and a clear of every byte.
//!
//! Counters are indexed by logical chunk (`position / chunk`) modulo twice the chunks of
//! the log, so the chunks of two consecutive passes over the log have separate counters.
//! A counter counts the bytes committed into its chunk, and is zeroed when the chunk's
//! last byte is released. Its next user is the chunk two passes later, whose bytes
//! producers may write only once `released` is more than a whole log past this chunk's
//! start, so past its end. The
//! flusher takes a chunk whole only if it ends below `released + cap` (as it read it), so
//! the zeroing for the chunk's previous user happened-before its look: a full counter
//! means every byte of *this* chunk is written.
//!
//! # Order and wholeness (invariant 5)
//! A record (a line, or a warp's lines) is one contiguous range, so it is never torn by
//! another record. Writes reach the file in position order:
//! - **positional** streams (regular files not opened with `O_APPEND`) write each flight
//!   at `base + position` with its own offset; many flights may be in flight, and their
//!   completion order does not matter.
//! - **serial** streams (pipes, terminals, `O_APPEND` files) write at the current file
//!   position, one flight at a time (`max_flights == 1`); a short write (a pipe that took
//!   only part) is resubmitted from where it stopped before anything newer.
//!
//! # Errors (invariant 7)
//! A failed write is counted with its errno and the bytes and lines it lost; the host's
//! `synchronize` reports them. The stream carries on with newer lines.
//!
//! The invariants cited here are listed, numbered, in `docs/PROTOCOL.md`.

use crate::combine::Combiner;
use crate::errno::Errno;
use crate::ring::Ring;
use crate::sync::{copy_to_cells, fence, read_cells, AtomicI32, AtomicU32, AtomicU64, Ordering, Padded, SharedCell};
use crate::uapi::{Sqe, IORING_OP_WRITE, IOSQE_FIXED_FILE, OFF_CURRENT_POSITION};
use crate::user_data;
use crate::wait::until;

/// Largest single write: Linux caps one write at `0x7ffff000` bytes.
pub const MAX_WRITE: u64 = 1 << 30;

/// Largest chunk: the log is split into chunks of `min(cap / 4, CHUNK_MAX)` bytes, each
/// with a commit counter.
pub const CHUNK_MAX: u64 = 16 * 1024;

/// Bytes per chunk for a log of `cap` bytes (a power of two of at least 64).
pub const fn chunk_bytes(cap: u64) -> u64 {
    let c = cap / 4;
    if c < CHUNK_MAX {
        c
    } else {
        CHUNK_MAX
    }
}

/// Commit counters a log of `cap` bytes needs: one per chunk, for two passes.
pub const fn chunk_count(cap: u64) -> usize {
    2 * (cap / chunk_bytes(cap)) as usize
}

/// A thread waiting for log space helps every this many rounds (a performance knob;
/// under loom every round, so that models need no idle rounds).
const HELP_EVERY: u32 = if cfg!(loom) { 1 } else { 8 };

/// How often a waiting lane other than its group's leader helps: rarely, since its leader
/// helps for the group (but not never: every waiter keeps the stream live on its own).
const LANE_HELP_EVERY: u32 = if cfg!(loom) { 1 } else { 256 };

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
}

impl Flight {
    /// An unused flight.
    pub fn new() -> Self {
        Flight {
            start: AtomicU64::new(0),
            cursor: AtomicU64::new(0),
            end: AtomicU64::new(0),
            state: AtomicU32::new(FREE),
            seq: AtomicU32::new(0),
        }
    }
}

impl Default for Flight {
    fn default() -> Self {
        Self::new()
    }
}

/// Failed writes of one stream, for the host's report. Written only by the reaper.
#[repr(C)]
pub struct WriteErrors {
    /// Write requests that failed (a short write resubmitted is not a failure).
    pub failed_writes: AtomicU32,
    /// The errno of the latest failure.
    pub last_errno: AtomicI32,
    /// Bytes that were not written.
    pub lost_bytes: AtomicU64,
    /// Line ends (`\n`) among them.
    pub lost_lines: AtomicU64,
}

impl WriteErrors {
    fn new() -> Self {
        WriteErrors {
            failed_writes: AtomicU32::new(0),
            last_errno: AtomicI32::new(0),
            lost_bytes: AtomicU64::new(0),
            lost_lines: AtomicU64::new(0),
        }
    }
}

/// One output stream (see the module docs).
#[repr(C)]
pub struct Stream {
    /// File descriptor written to (what reports name, and what the host seeks).
    pub fd: i32,
    /// `fd`'s index in the ring's registered files, or -1. When set, write SQEs carry
    /// this index with `IOSQE_FIXED_FILE` instead of `fd` (the host's io_uring sandbox
    /// may refuse anything else). -1 from [`Stream::new`]; the host sets it.
    pub fixed_file: i32,
    /// 1: positional (explicit offsets, many flights); 0: serial.
    pub positional: u32,
    /// Positional streams: file offset of position 0. Set by the host between kernels.
    pub base: AtomicU64,
    /// The log bytes (`cap` of them), where the producers and the flusher see them.
    pub buf: *const SharedCell<u8>,
    /// The address of `buf[0]` that goes into write SQEs: where the kernel sees the log.
    /// `buf` itself (set by [`Stream::new`]), except where a GPU maps host memory at
    /// another address than the host's (HSA on discrete GPUs); the host then sets it.
    pub io_base: u64,
    /// Log size in bytes: a power of two, at least 64.
    pub cap: u64,
    /// Commit counters: bytes committed into a chunk (see the module docs).
    /// `chunk_count(cap)` words, zeroed.
    pub chunks: *const AtomicU32,
    /// Bytes per chunk: `chunk_bytes(cap)`.
    pub chunk: u64,
    /// `max_flights` flights.
    pub flights: *const Flight,
    /// Flights in flight at most: a power of two; 1 for serial streams.
    pub max_flights: u32,
    /// This stream's index in the context (goes into `user_data`).
    pub index: u32,
    /// Bytes handed to producers.
    pub reserved: Padded<AtomicU64>,
    /// Bytes committed (written) by producers.
    pub committed: Padded<AtomicU64>,
    /// Bytes whose writes completed; producers may use positions below `released + cap`.
    pub released: Padded<AtomicU64>,
    /// Bytes handed to flights. Written only by the flusher.
    pub flushed: AtomicU64,
    /// Next flight to start. Written only by the flusher.
    pub flight_head: AtomicU32,
    /// Oldest flight not yet released. Written only by the reaper.
    pub flight_tail: AtomicU32,
    /// Serialises flushing.
    pub flusher: Combiner,
    /// Set by the reaper when a flight landed: a flush may now make progress.
    pub kick: AtomicU32,
    /// Failed writes.
    pub errors: WriteErrors,
}

impl Stream {
    /// A stream writing to `fd` from the given log memory.
    ///
    /// # Safety
    /// `buf` (`cap` bytes), `chunks` (`chunk_count(cap)` zeroed words) and `flights`
    /// (`max_flights` unused flights) stay valid while the stream is used. `cap` is a power of two of at
    /// least 64; `max_flights` is a power of two, and 1 unless `positional`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn new(
        index: u32,
        fd: i32,
        positional: bool,
        base: u64,
        buf: *const SharedCell<u8>,
        cap: u64,
        chunks: *const AtomicU32,
        flights: *const Flight,
        max_flights: u32,
    ) -> Stream {
        Stream {
            fd,
            fixed_file: -1,
            positional: positional as u32,
            base: AtomicU64::new(base),
            buf,
            io_base: buf as u64,
            cap,
            chunks,
            chunk: chunk_bytes(cap),
            flights,
            max_flights,
            index,
            reserved: Padded(AtomicU64::new(0)),
            committed: Padded(AtomicU64::new(0)),
            released: Padded(AtomicU64::new(0)),
            flushed: AtomicU64::new(0),
            flight_head: AtomicU32::new(0),
            flight_tail: AtomicU32::new(0),
            flusher: Combiner::new(),
            kick: AtomicU32::new(0),
            errors: WriteErrors::new(),
        }
    }

    fn chunk_counter(&self, pos: u64) -> &AtomicU32 {
        let n = 2 * self.cap / self.chunk;
        // SAFETY: `chunks` points to `chunk_count(cap) == n` counters (`Stream::new`), `n` a
        // power of two, and the index is masked below it; the counters are atomics.
        unsafe { &*self.chunks.add(((pos / self.chunk) & (n - 1)) as usize) }
    }
    fn flight(&self, seq: u32) -> &Flight {
        // SAFETY: `flights` points to `max_flights` flights (`Stream::new`), a power of two,
        // and the index is masked below it; a flight's fields are atomics.
        unsafe { &*self.flights.add((seq & (self.max_flights - 1)) as usize) }
    }
    fn cell(&self, pos: u64) -> *const SharedCell<u8> {
        // SAFETY: `buf` points to `cap` bytes (`Stream::new`), a power of two, and the offset
        // is masked below it, so the pointer stays inside the log.
        unsafe { self.buf.add((pos & (self.cap - 1)) as usize) }
    }

    // ---------------------------------------------------------------- producers

    /// Reserves `len` bytes; returns the first position. Relaxed, system scope: the range
    /// is ours alone; when we may write it is decided by `released` (Acquire).
    #[inline]
    pub fn reserve(&self, len: u64) -> u64 {
        self.reserved.fetch_add(len, Ordering::Relaxed)
    }

    /// Writes `bytes` at reserved position `pos` and marks them written, waiting for space
    /// piece by piece. A record longer than the log goes out in log-sized pieces, still
    /// contiguous in the output. While it waits it now and then calls `help`, which reaps
    /// and flushes this stream (`Context::fill` passes `Context::help`).
    ///
    /// Each round writes and commits every piece there is room for (the lockstep rule,
    /// `arch/mod.rs`: what a lane waited for, it uses before its wavefront looks again).
    #[inline(never)] // one copy in a code object
    pub fn fill(&self, pos: u64, bytes: &[u8], mut help: impl FnMut()) {
        let (mut pos, mut rest) = (pos, bytes);
        let mut helper = Helper::new(HELP_EVERY);
        until(
            || {
                loop {
                    let room = self.room(pos);
                    if rest.is_empty() || room == 0 {
                        break;
                    }
                    let n = rest.len().min(room as usize);
                    self.put(pos, &rest[..n]);
                    self.commit(pos, pos + n as u64);
                    pos += n as u64;
                    rest = &rest[n..];
                }
                rest.is_empty().then_some(())
            },
            || helper.round(self, &mut help),
        )
    }

    /// Writes one lane's part of a record, `bytes` (at most `cap` of them) at reserved
    /// position `pos`, in one piece once all of it may be written, and commits it.
    ///
    /// Each lane of a group writes its own line this way (see `print::emit`), in the round
    /// that finds room for it (the lockstep rule, `arch/mod.rs`). While it waits it calls
    /// `help` (reap, then flush this stream: `Context::help`); `leader` says whether often
    /// (the group's leader) or rarely (the others: thousands of helping lanes would only
    /// slow down the threads that free the space).
    #[inline(always)] // the print path: calls out of it cost 10-20% on the H100 (BENCHMARKS.md)
    pub fn write_record(&self, pos: u64, bytes: &[u8], leader: bool, mut help: impl FnMut()) {
        let len = bytes.len() as u64;
        debug_assert!(len <= self.cap);
        if len == 0 {
            return;
        }
        let mut helper = Helper::new(if leader { HELP_EVERY } else { LANE_HELP_EVERY });
        until(
            || {
                // Room for the whole range: its last byte may be written.
                if self.room(pos + len - 1) == 0 {
                    return None;
                }
                self.put(pos, bytes);
                self.commit(pos, pos + len);
                Some(())
            },
            || helper.round(self, &mut help),
        )
    }

    /// How many bytes from position `pos` may be written now (0: none yet).
    fn room(&self, pos: u64) -> u64 {
        // Acquire, system scope: pairs with the reaper's release of `released`; the
        // kernel's reads of the bytes we will overwrite, and the zeroing of their chunks'
        // counters, happen-before our writes and commits.
        let limit = self.released.load(Ordering::Acquire) + self.cap;
        limit.saturating_sub(pos)
    }

    /// Copies bytes into the log at `pos`, wrapping at the end.
    fn put(&self, pos: u64, bytes: &[u8]) {
        let first = bytes.len().min((self.cap - (pos & (self.cap - 1))) as usize);
        // SAFETY: `[pos, pos + len)` is reserved by us and below `released + cap`, so no
        // other producer, flight or kernel write touches these cells (see `room`).
        unsafe {
            copy_to_cells(self.cell(pos), &bytes[..first]);
            copy_to_cells(self.cell(0), &bytes[first..]);
        }
    }

    /// Marks `[s, e)` written. One release fence, then relaxed adds to the chunk counters
    /// and to `committed`: the bytes (this thread's, and those of lanes synchronised with
    /// it) happen-before the flusher's acquire fence after it read any of these counters
    /// (fence-to-fence synchronisation; later adds by others are read-modify-writes, so they
    /// continue the release sequence).
    #[inline(never)] // one call per warp; and tests/ptx_atomics.rs finds it by name
    pub fn commit(&self, s: u64, e: u64) {
        fence(Ordering::Release);
        let mut p = s;
        while p < e {
            let hi = e.min((p | (self.chunk - 1)) + 1);
            self.chunk_counter(p).fetch_add((hi - p) as u32, Ordering::Relaxed);
            p = hi;
        }
        self.committed.fetch_add(e - s, Ordering::Relaxed);
    }

    // ---------------------------------------------------------------- the flusher

    /// Flushes this stream, or asks whoever is flushing it to go on: submits writes for
    /// what is complete to `ring`. `reap` consumes completions (the context's reaper); it
    /// is called while all flights are out and while a submission waits for a credit.
    ///
    /// Never called from inside a flush: a flush that waited on another flush's
    /// submission could wait on itself (tickets are taken in order).
    #[inline] // on the print path (see `Stream::write_record`)
    pub fn flush(&self, ring: &Ring, mut reap: impl FnMut()) {
        self.flusher.run(|| self.flush_work(ring, &mut reap));
    }

    /// Submits writes for what is complete. Called only through `flusher.run`.
    fn flush_work(&self, ring: &Ring, reap: &mut impl FnMut()) {
        // Remainders of short writes first: they come before anything newer.
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
        loop {
            let head = self.flight_head.load(Ordering::Relaxed);
            // Acquire: pairs with the reaper's release of the tail; the slot is free.
            let tail = self.flight_tail.load(Ordering::Acquire);
            if head.wrapping_sub(tail) >= self.max_flights {
                // All flights are out: collect completions (reaping never submits, so this
                // cannot wait on ourselves), then look again.
                reap();
                if head.wrapping_sub(self.flight_tail.load(Ordering::Acquire)) >= self.max_flights {
                    return; // the reaper kicks the stream when a flight lands
                }
                continue;
            }
            let start = self.flushed.load(Ordering::Relaxed);
            // Acquire: the counters of released bytes were decremented before `released`
            // moved.
            let window = self.released.load(Ordering::Acquire) + self.cap;
            let ready = self.complete_prefix(start, window);
            if ready == start {
                return;
            }
            let wrap = (start | (self.cap - 1)) + 1;
            let end = ready.min(wrap).min(start + MAX_WRITE);
            let f = self.flight(head);
            f.start.store(start, Ordering::Relaxed);
            f.cursor.store(start, Ordering::Relaxed);
            f.end.store(end, Ordering::Relaxed);
            f.seq.store(head, Ordering::Relaxed);
            // Release: the flight's fields happen-before the reaper's use of them (also
            // ordered through the SQE's publication and the kernel's CQE).
            f.state.store(IN_FLIGHT, Ordering::Release);
            self.flushed.store(end, Ordering::Release);
            self.flight_head.store(head.wrapping_add(1), Ordering::Release);
            self.submit_flight(ring, reap, head);
        }
    }

    /// How far from `from` (and below `window`) the log is written without a gap.
    #[inline(never)] // tests/ptx_atomics.rs finds it by name
    fn complete_prefix(&self, from: u64, window: u64) -> u64 {
        let limit = self.reserved.load(Ordering::Relaxed).min(window);
        let mut p = from;
        // Whole chunks, one counter each. The chunk ends below `window`, so its counter's
        // previous user was zeroed before we read `released` (see the module docs).
        loop {
            let chunk_end = (p | (self.chunk - 1)) + 1;
            if chunk_end > limit || self.chunk_counter(p).load(Ordering::Relaxed) as u64 != self.chunk {
                break;
            }
            p = chunk_end;
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
        let off = if self.positional != 0 {
            self.base.load(Ordering::Relaxed).wrapping_add(cursor)
        } else {
            OFF_CURRENT_POSITION
        };
        // A registered file is named by its index (and the flag that says so).
        let (fd, flags) = if self.fixed_file >= 0 {
            (self.fixed_file, IOSQE_FIXED_FILE)
        } else {
            (self.fd, 0)
        };
        let sqe = Sqe {
            opcode: IORING_OP_WRITE,
            flags,
            fd,
            off,
            // The cell's offset from `buf` in bytes (a cell is a byte, except under loom,
            // whose model cells are larger), moved to where the kernel sees the log.
            addr: self.io_base.wrapping_add(self.cell(cursor) as u64 - self.buf as u64),
            len: (end - cursor) as u32,
            user_data: user_data::for_stream(self.index, seq),
            ..Sqe::default()
        };
        // Help by reaping only: a flush must never start another submission from inside
        // this one (see `Stream::flush`).
        ring.submit(&sqe, &mut || {
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
        if res <= 0 {
            // A write that fails, or makes no progress, loses the rest of the flight.
            let errno = if res < 0 { -res } else { Errno::EIO.0 };
            self.lose(cursor, end, errno);
            f.state.store(DONE, Ordering::Relaxed);
        } else if (res as u64) < end - cursor {
            f.cursor.store(cursor + res as u64, Ordering::Relaxed);
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
        let mut end = (s | (self.chunk - 1)) + 1;
        while end <= e {
            // Relaxed: ordered before the counter's next user (two passes later) by the
            // release of `released`, which that user's producers acquire.
            self.chunk_counter(end - 1).store(0, Ordering::Relaxed);
            end += self.chunk;
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

    // ---------------------------------------------------------------- state

    /// Whether every reserved byte has been written out (or reported lost).
    pub fn idle(&self) -> bool {
        let reserved = self.reserved.load(Ordering::Acquire);
        self.flushed.load(Ordering::Acquire) == reserved
            && self.released.load(Ordering::Acquire) == reserved
            && self.flight_head.load(Ordering::Acquire) == self.flight_tail.load(Ordering::Acquire)
    }
}

/// What a producer waiting for log space does between rounds: it helps the flush along
/// every `every` rounds (the first one included), and not while another agent is flushing
/// (thousands of waiting GPU threads piling onto the flusher's words would only slow it
/// down).
struct Helper {
    rounds: u32,
    every: u32,
}

impl Helper {
    fn new(every: u32) -> Helper {
        Helper { rounds: 0, every }
    }

    fn round(&mut self, stream: &Stream, help: &mut impl FnMut()) {
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds % self.every == 1 % self.every && !stream.flusher.busy() {
            help();
        }
    }
}

// SAFETY: a Stream's fields are atomics and pointers to memory shared by design
// (`Stream::new`'s contract keeps it valid): counters and flights are atomics, and a log byte
// is written only by the producer that reserved it while it is below `released + cap`, and
// read by the flusher and the kernel only once committed (the stream protocol above). So
// shared references from many threads are sound.
unsafe impl Sync for Stream {}
// SAFETY: a Stream owns nothing thread-bound: moving it moves only the pointers, whose
// validity `Stream::new`'s contract ties to the memory, not to a thread.
unsafe impl Send for Stream {}
