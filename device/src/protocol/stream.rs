//! Print streams: a byte log in host-visible memory, filled by many threads, written out
//! by group commit.
//!
//! # Why a log and not one SQE per line
//! One SQE per line caps throughput at the SQPOLL thread's per-request cost, about a
//! microsecond: a million lines a second, where one SQE per block of lines carries a
//! hundred times that. Here lines are appended to a log; whoever flushes
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
//! - **positional** streams (regular files not opened with `O_APPEND`, whose fd's offset
//!   stands inside the file, not at its end) write each flight
//!   at `base + position` with its own offset; many flights may be in flight, and their
//!   completion order does not matter.
//! - **serial** streams (pipes, terminals) write at the current file
//!   position, one flight at a time (`max_flights == 1`); a short write (a pipe that took
//!   only part) is resubmitted from where it stopped before anything newer.
//! - **appending** streams (`append` set by the host: a regular file whose end the fd's
//!   offset stood at, the usual case, or one that another runtime of the process prints to
//!   too) write each flight with `RWF_APPEND`, and with `IOSQE_IO_DRAIN` while an earlier
//!   flight of the stream is outstanding: the kernel writes flights in log order (such a
//!   flight after every earlier request of the ring completed, which holds up the ring's
//!   other requests meanwhile), and each lands whole at the file's end as it is then, after
//!   whatever another runtime wrote, so none overwrites another. (A short write's rest,
//!   resubmitted, lands after flights submitted meanwhile: short writes to regular files
//!   come only with errors such as `ENOSPC`, `EFBIG` or `RLIMIT_FSIZE`.) While another runtime prints to the file
//!   ([`APPEND_WHOLE_LINES`]), a flight ends after a line (a newline), not inside a
//!   record, so the runtimes' writes fall between lines; except where a line is longer
//!   than what is complete of the log and a producer may be waiting for room, and where a
//!   line straddles the log's end (two writes, once per pass over the log), and a line of
//!   more than 4 KiB. A runtime that was alone on the file when its kernels started goes
//!   on ending flights anywhere until its next launch.
//!
//! # Errors (invariant 7)
//! A failed write is counted with its errno and the bytes and lines it lost; the host's
//! `synchronize` reports them. The stream carries on with newer lines.
//!
//! This file holds the log and its producers; the flusher and the reaper, which write the
//! log out in flights, are in `stream/flight.rs`. The invariants cited here are listed,
//! numbered, in `docs/PROTOCOL.md`.

mod flight;

pub use flight::Flight;

use core::marker::PhantomData;

use crate::protocol::combine::Combiner;
use crate::protocol::ring::Ring;
use crate::protocol::sync::{
    copy_cells_together, copy_to_cells, fence, AtomicI32, AtomicU32, AtomicU64, Ordering, Padded, SharedCell,
};
use crate::protocol::wait::until;

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

/// Chunk counters the flusher loads at once (`Stream::complete_prefix`); under loom two,
/// so that models check a round of several loads without exploring sixteen.
const PREFIX_LOOKS: usize = if cfg!(loom) { 2 } else { 16 };
// A round's full chunks are bits of a `u32`.
const _: () = assert!(PREFIX_LOOKS <= 32);

/// Commit counters a log of `cap` bytes needs: one per chunk, for two passes.
pub const fn chunk_count(cap: u64) -> usize {
    2 * (cap / chunk_bytes(cap)) as usize
}

/// A stream's chunk counters ([`Stream::counters`]): `chunk_count(cap)` of them from
/// `base`, for chunks of `1 << shift` bytes.
#[derive(Clone, Copy)]
struct Counters<'a> {
    base: *const AtomicU32,
    shift: u32,
    mask: u64,
    stream: PhantomData<&'a Stream>,
}

impl<'a> Counters<'a> {
    /// The counter of logical chunk `k` (positions from `k << shift`). A shift, not a
    /// division: a 64-bit division is a long subroutine on a GPU.
    #[inline(always)]
    fn at(self, k: u64) -> &'a AtomicU32 {
        // SAFETY: `base` points to `mask + 1` counters (`Stream::new`: `chunk_count(cap)`, a
        // power of two), and the index is masked below that; the counters are atomics and
        // live as long as the stream borrowed for `'a`.
        unsafe { &*self.base.add((k & self.mask) as usize) }
    }

    /// The counter of the chunk that holds position `pos`.
    #[inline(always)]
    fn of(self, pos: u64) -> &'a AtomicU32 {
        self.at(pos >> self.shift)
    }
}

/// A thread waiting for log space helps every this many rounds (a performance knob;
/// under loom every round, so that models need no idle rounds).
const HELP_EVERY: u32 = if cfg!(loom) { 1 } else { 8 };

/// How often a waiting lane other than its group's leader helps: rarely, since its leader
/// helps for the group (but not never: every waiter keeps the stream live on its own).
const LANE_HELP_EVERY: u32 = if cfg!(loom) { 1 } else { 256 };

/// Failed writes of one stream, and its lines whose `Display` failed, for the host's
/// report. Written by the reaper, except `format_errors`.
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
    /// Lines whose `Display` returned `Err`: each went out cut where it failed and marked
    /// (`print::FORMAT_ERROR`). Written by the printing threads (Relaxed adds), not the
    /// reaper.
    pub format_errors: AtomicU32,
}

impl WriteErrors {
    fn new() -> Self {
        WriteErrors {
            failed_writes: AtomicU32::new(0),
            last_errno: AtomicI32::new(0),
            lost_bytes: AtomicU64::new(0),
            lost_lines: AtomicU64::new(0),
            format_errors: AtomicU32::new(0),
        }
    }
}

/// The index of the stream whose flight a CQE with this `user_data` completes, or `None`
/// for any other request's CQE: for the host's hang report, which counts the bytes that
/// completions not yet reaped say were written.
pub fn flight_stream(user_data: u64) -> Option<u32> {
    (crate::user_data::kind(user_data) == crate::user_data::KIND_STREAM).then(|| crate::user_data::index(user_data))
}

/// [`Stream::append`]: appending, and each flight ends after a line (another runtime
/// prints to the file too).
pub const APPEND_WHOLE_LINES: u32 = 2;

/// One output stream (see the module docs).
#[repr(C)]
pub struct Stream {
    /// File descriptor written to (what reports name, and what the host seeks).
    pub fd: i32,
    /// `fd`'s index in the ring's registered files, or -1. When set, write SQEs carry
    /// this index with `IOSQE_FIXED_FILE` instead of `fd` (the host's io_uring sandbox
    /// may refuse anything else). -1 from [`Stream::new`]; the host sets it.
    pub fixed_file: i32,
    /// The log's index in the ring's registered buffers, or -1. When set, write SQEs are
    /// `IORING_OP_WRITE_FIXED` from that buffer, which the kernel confines to the log's
    /// bytes (the print-only sandbox refuses plain writes). -1 from [`Stream::new`]; the
    /// host sets it.
    pub fixed_log: i32,
    /// 1: positional (explicit offsets, many flights); 0: serial. Ignored while `append`
    /// is set.
    pub positional: u32,
    /// 0: as `positional` says; 1: appending (each flight with `RWF_APPEND` and
    /// `IOSQE_IO_DRAIN`; see the module docs); [`APPEND_WHOLE_LINES`]: appending, each
    /// flight ending after a line. Set by the host between kernels; read with `Relaxed` loads (the
    /// launch orders the host's store before the kernel's loads).
    pub append: AtomicU32,
    /// Positional streams: file offset of position 0. Set by the host between kernels.
    pub base: AtomicU64,
    /// The log bytes (`cap` of them), where the producers and the flusher see them.
    pub buf: *const SharedCell<u8>,
    /// Null, or `cap` bytes of the GPU's own memory beside the log (a *stage*): where a
    /// group's lanes put their lines first, so that the group can then copy its record into
    /// the log together with wide, contiguous stores (`copy_out`). Position `p` is staged at
    /// `stage[p % cap]`, and is used only by the producer that reserved `p`, while `p` may be
    /// written (below `released + cap`), before it commits. Null from [`Stream::new`]; the
    /// host sets it.
    pub stage: *const SharedCell<u8>,
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
            fixed_log: -1,
            positional: positional as u32,
            append: AtomicU32::new(0),
            base: AtomicU64::new(base),
            buf,
            stage: core::ptr::null(),
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

    /// The chunk counters, with what finding one takes read once: in a loop, each atomic
    /// access would have the compiler read the stream's fields anew, a round trip to memory
    /// each on a GPU (the flusher and the reaper walk a flight's chunks this way).
    #[inline(always)]
    fn counters(&self) -> Counters<'_> {
        Counters {
            base: self.chunks,
            shift: self.chunk.trailing_zeros(),
            // `chunk_count(cap)`, a power of two.
            mask: ((self.cap >> self.chunk.trailing_zeros()) << 1) - 1,
            stream: PhantomData,
        }
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

    fn stage_cell(&self, pos: u64) -> *const SharedCell<u8> {
        // SAFETY: called only with a non-null `stage`, which then points to `cap` bytes (the
        // field's contract), a power of two, and the offset is masked below it.
        unsafe { self.stage.add((pos & (self.cap - 1)) as usize) }
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
    /// contiguous in the output. While it waits it now and then helps: reaps with `reap`
    /// and flushes this stream to `ring` ([`Stream::help`]; `Context::print_out` gives both).
    ///
    /// Each round writes and commits every piece there is room for (the lockstep rule,
    /// `arch/mod.rs`: what a lane waited for, it uses before its wavefront looks again).
    #[inline(never)] // one copy in a code object
    pub fn fill(&self, pos: u64, bytes: &[u8], ring: &Ring, reap: impl FnMut() + Copy) {
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
            || helper.round(self, ring, reap),
        )
    }

    /// Writes one lane's part of a record: `bytes` at reserved position `pos`, inside the
    /// record that ends at `record_end` (at most `cap - chunk` bytes after its start: a
    /// longer record may wait for room forever, `print::emit` says why), into the log,
    /// or into the stage if `staged` (the group then copies the record out: `copy_out`).
    /// The lane waits until the whole record may be written, then writes its part; it does
    /// not commit it: the group's leader commits the whole record once every lane wrote
    /// (`print::emit`).
    ///
    /// Every lane waits for the same condition (room for the record's last byte), so the
    /// lanes of a group leave their waits together in effect, and each writes its part in
    /// the round that found room (the lockstep rule, `arch/mod.rs`). While it waits it helps
    /// ([`Stream::help`] with `ring` and `reap`); `leader` says whether often (the group's
    /// leader) or rarely (the others: thousands of helping lanes would only slow down the
    /// threads that free the space).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)] // the print path: a call here costs a print a tenth or more
    pub fn write_part(
        &self,
        record_end: u64,
        pos: u64,
        bytes: &[u8],
        staged: bool,
        leader: bool,
        ring: &Ring,
        reap: impl FnMut() + Copy,
    ) {
        debug_assert!(pos + bytes.len() as u64 <= record_end);
        if bytes.is_empty() {
            return;
        }
        let mut helper = Helper::new(if leader { HELP_EVERY } else { LANE_HELP_EVERY });
        until(
            || {
                // Room for the whole record: its last byte may be written.
                if self.room(record_end - 1) == 0 {
                    return None;
                }
                if staged {
                    self.stage(pos, bytes);
                } else {
                    self.put(pos, bytes);
                }
                Some(())
            },
            || helper.round(self, ring, reap),
        )
    }

    /// What a producer waiting for log space does: reaps (`reap`: the context's reaper of
    /// `ring`, which routes each completion to the flight or request it finishes), then
    /// flushes this stream to `ring`.
    ///
    /// Never called from inside a flush: a flush that waited on another flush's
    /// submission could wait on itself (tickets are taken in order).
    #[inline]
    pub fn help(&self, ring: &Ring, mut reap: impl FnMut() + Copy) {
        reap();
        self.flush(ring, reap);
    }

    /// How many bytes from position `pos` may be written now (0: none yet).
    ///
    /// A producer waiting for room asks every round, so the look that finds none is a
    /// relaxed load: for sm_90 ptxas follows an acquire load at system scope with an
    /// invalidation of the SM's whole L1 cache (`CCTL.IVALL`), which throws away what the
    /// SM's other warps hold there. With the print path capped at 32 registers a kernel
    /// that only prints runs 64 warps an SM, most of them waiting here: polling with
    /// acquires it ran at about 0.7x the rate it runs with this relaxed look.
    fn room(&self, pos: u64) -> u64 {
        // Relaxed, system scope: only decides whether to look again; nothing is read or
        // written on the strength of it.
        if self.released.load(Ordering::Relaxed) + self.cap <= pos {
            return 0;
        }
        // Acquire, system scope: pairs with the reaper's release of `released`; the
        // kernel's reads of the bytes we will overwrite, and the zeroing of their chunks'
        // counters, happen-before our writes and commits. It reads `released` again, at
        // least as new as the relaxed look (read-read coherence), so the room only grows.
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

    /// Copies a staged part into the stage at `pos`, wrapping at the end.
    fn stage(&self, pos: u64, bytes: &[u8]) {
        let first = bytes.len().min((self.cap - (pos & (self.cap - 1))) as usize);
        // SAFETY: `[pos, pos + len)` is reserved by our group and below `released + cap`, so
        // only our group uses these stage cells now (the `stage` field's contract); `stage`
        // is non-null (callers stage only then).
        unsafe {
            copy_to_cells(self.stage_cell(pos), &bytes[..first]);
            copy_to_cells(self.stage_cell(0), &bytes[first..]);
        }
    }

    /// Copies the staged record `[s, e)` (at most `cap` bytes, reserved by the calling group,
    /// its parts all staged and the group synchronised since) into the log: the group's
    /// `n` lanes call it together, this one as lane `rank`, each store instruction of the
    /// group writing `16 * n` contiguous bytes (`copy_cells_together`).
    pub fn copy_out(&self, s: u64, e: u64, rank: u64, n: u64) {
        debug_assert!(!self.stage.is_null() && e - s <= self.cap && rank < n);
        let mut p = s;
        while p < e {
            let end = e.min((p | (self.cap - 1)) + 1);
            // SAFETY: `[p, end)` lies in one pass over the log and the stage (it stops at the
            // wrap), is reserved by our group and below `released + cap`, so only our group
            // touches these cells; every lane of it staged its part and synchronised before
            // this call (the caller's part).
            unsafe {
                copy_cells_together(
                    self.cell(p),
                    self.stage_cell(p),
                    (end - p) as usize,
                    rank as usize,
                    n as usize,
                )
            };
            p = end;
        }
    }

    /// Marks `[s, e)` written. One release fence, then relaxed adds to the chunk counters
    /// and to `committed`: the bytes (this thread's, and those of lanes synchronised with
    /// it, e.g. by the group's `sync` before a leader commits their record) happen-before
    /// the flusher's acquire fence after it read any of these counters (fence-to-fence
    /// synchronisation; later adds by others are read-modify-writes, so they continue the
    /// release sequence).
    #[inline(never)] // one call per record; and tests/ptx_atomics/ finds it by name
    pub fn commit(&self, s: u64, e: u64) {
        fence(Ordering::Release);
        let (counters, chunk) = (self.counters(), self.chunk);
        let mut p = s;
        while p < e {
            let hi = e.min((p | (chunk - 1)) + 1);
            counters.of(p).fetch_add((hi - p) as u32, Ordering::Relaxed);
            p = hi;
        }
        self.committed.fetch_add(e - s, Ordering::Relaxed);
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

    fn round(&mut self, stream: &Stream, ring: &Ring, reap: impl FnMut() + Copy) {
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds % self.every == 1 % self.every && !stream.flusher.busy() {
            stream.help(ring, reap);
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
