//! `print!`, `println!`, `eprint!`, `eprintln!`: std's format syntax, no allocation.
//!
//! A line is formatted into a small buffer on the thread's stack. If it fits (the common
//! case), the lanes of the warp that print to the same stream add up their lengths, one
//! lane reserves space for all of them, each lane copies its line into its place, and one
//! flush sends them out (if the lines together fit the log less a chunk; if not, they go
//! out one lane at a time, as long lines do). A longer line is measured first (a
//! formatting pass that only counts), then formatted straight into its reserved space, one
//! lane of the group at a time, in pieces if it is longer than the whole log: it stays
//! whole and contiguous at any length.
//!
//! `print!` (no newline) writes its text at once, whole, like a line: it is not held back
//! until the thread's line ends, so pieces of different threads sit side by side.

use core::fmt::{self, Write};

use crate::context::{Context, STDOUT};
use crate::group::Group;
use crate::ring::Ring;
use crate::stream::Stream;

/// Lines up to this many bytes (newline included) take the fast path.
pub const LINE_BUF: usize = 256;

/// Prints `args` (and a newline if `newline`) to stdout or stderr. Used by the macros.
#[doc(hidden)]
#[inline(never)]
pub fn print_to(stderr: bool, newline: bool, args: fmt::Arguments) {
    let ctx = crate::context::current();
    if ctx.is_null() {
        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        crate::arch::host::print_without_context(stderr, newline, args);
        return;
    }
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    let _in_print = crate::arch::host::InPrint::enter();
    // SAFETY: the host installs a context that outlives every kernel that can see it.
    let ctx = unsafe { &*ctx };
    let index = ctx.stream_index(stderr);
    // The lanes executing this call together may have come from a `println!` and from an
    // `eprintln!` (this function is shared, and lanes meet at its entry): a record is
    // reserved in one stream, so each stream's lanes form a group of their own.
    let group = crate::arch::Warp::default().split(index != STDOUT);
    emit(&group, ctx, &ctx.streams[index], newline, args);
}

/// Bit offsets of the counts that [`emit`] adds up together with the line lengths (a
/// group's lines are at most 64 x [`LINE_BUF`] bytes, far below 2^32; a group has at most
/// 64 lanes, below 2^10).
const UNFIT_SHIFT: u32 = 32;
const PRINTING_SHIFT: u32 = 42;
const MEMBER_SHIFT: u32 = 52;
const COUNT_MASK: u64 = (1 << 10) - 1;

/// Prints one record for the group `g`: every lane's line, back to back, in lane order.
/// Lines longer than [`LINE_BUF`] are printed after it, one lane at a time; and if the
/// lines together do not fit the log less a chunk, there is no record: every line is
/// printed that way.
///
/// Every lane of `g` must call this together (it is a collective operation).
pub fn emit<G: Group>(g: &G, ctx: &Context, stream: &Stream, newline: bool, args: fmt::Arguments) {
    let mut line = LineBuf::new();
    let fits = line.format(args, newline);
    let my_len = if fits { line.len as u64 } else { 0 };
    // One sum gives the record's layout and, in the high bits, how many lanes have a line
    // that did not fit the stack buffer, how many print anything at all, and how many
    // lanes the group has (and this lane's rank in it).
    let printing = my_len > 0 || !fits;
    let v = my_len | ((!fits as u64) << UNFIT_SHIFT) | ((printing as u64) << PRINTING_SHIFT) | (1 << MEMBER_SHIFT);
    let (before, sums) = g.exclusive_sum(v);
    let low = (1u64 << UNFIT_SHIFT) - 1;
    let (offset, total) = (before & low, sums & low);
    // The record must fit the log less one chunk, or its lanes could wait for room that
    // nothing frees: they wait until the record's last byte has room, which needs every
    // byte a log's length before it released. A record of more than `cap - chunk` bytes
    // needs some of the bytes just before it, in the chunk where it starts; but the flusher
    // takes a chunk only whole (the record's own bytes in it are not written yet) or once
    // every reserved byte is written, so those bytes never go out. A record of at most
    // `cap - chunk` bytes needs only bytes of earlier chunks, which fill and go out whole.
    // Longer lines go out one lane at a time, in pieces as room comes (`Stream::fill`).
    // (`total` is the same on every lane, so every lane takes the same branch and runs the
    // same collectives.)
    let as_record = total > 0 && total <= stream.cap - stream.chunk;
    // Where the stream's writes go and how their completions are reaped, passed down to
    // each step that may flush or wait for room.
    let (ring, reap) = ctx.print_out();
    if as_record {
        let mut base = 0;
        if g.is_leader() {
            base = stream.reserve(total);
        }
        let base = g.broadcast(base);
        // Each lane writes its line once the whole record has room (every lane waits for
        // the same condition); then, with every line in, the leader commits the record in
        // one piece (one system-scope fence and a few counter adds for the whole group, not
        // one per line) and flushes it. A lane whose line did not fit writes nothing here.
        //
        // Where the stream has a stage (GPUs), the lanes put their lines there and then copy
        // the record into the log together: lane k stores the k-th 16 bytes of each 16 x n,
        // so each store instruction writes one contiguous span, where each lane storing its
        // own line wrote a word into each of n places, one small write over the bus each.
        // (`lanes` is the same on every lane, so every lane takes the same branch.)
        let mine = if fits { line.bytes() } else { &[] };
        let (rank, lanes) = (
            (before >> MEMBER_SHIFT) & COUNT_MASK,
            (sums >> MEMBER_SHIFT) & COUNT_MASK,
        );
        let staged = lanes > 1 && !stream.stage.is_null();
        stream.write_part(base + total, base + offset, mine, staged, g.is_leader(), ring, reap);
        // The lanes' writes happen-before what the group's lanes do after `sync` (the
        // `Group::sync` contract): reading each other's staged lines, and the leader's
        // commit, whose release fence publishes the record to the flusher.
        g.sync();
        if staged {
            stream.copy_out(base, base + total, rank, lanes);
            g.sync();
        }
        if g.is_leader() {
            stream.commit(base, base + total);
            stream.flush(ring, reap);
        }
    }
    // The other lines go out one lane at a time, in lane order: each reserves its own range
    // and may wait for room piece by piece, and under the lockstep rule (arch/mod.rs) no
    // lane may wait for room that only a sibling's unfinished line would free. (`turns` is
    // the same on every lane, so every lane runs the same number of rounds.)
    let (long, turn, turns) = if as_record {
        (
            !fits,
            (before >> UNFIT_SHIFT) & COUNT_MASK,
            (sums >> UNFIT_SHIFT) & COUNT_MASK,
        )
    } else {
        (
            printing,
            (before >> PRINTING_SHIFT) & COUNT_MASK,
            (sums >> PRINTING_SHIFT) & COUNT_MASK,
        )
    };
    for k in 0..turns {
        if long && turn == k {
            emit_long(stream, ring, reap, newline, args);
        }
    }
    // The group's lanes leave together, once every line of theirs was flushed (invariant
    // 12). With independent thread scheduling a lane that left first and then spun (a
    // compute loop with no pause) could keep its sibling, the leader still flushing, from
    // running at all: on an H200 the lines of every warp whose lanes but the leader went on
    // to compute stayed unwritten (and the leader's print never returned) until those lanes
    // stopped. After this sync the group's lines are in a submitted write, or in the hands of
    // a flusher whose own group waits for it the same way.
    g.sync();
    // No reaping here: completions are reaped by a flush that finds its flights full, by
    // threads waiting for log space, and by the drain. (On a GPU, looking at the CQ means
    // reads across PCIe; doing it on every print costs more than the print.)
}

/// The slow path: measure, reserve, format in place (waiting for room and flushing with
/// `ring` and `reap`, as [`emit`] does).
fn emit_long(stream: &Stream, ring: &Ring, reap: impl FnMut() + Copy, newline: bool, args: fmt::Arguments) {
    let mut count = Count(0);
    let _ = count.write_fmt(args);
    let len = count.0 + newline as u64;
    if len == 0 {
        return;
    }
    let pos = stream.reserve(len);
    let mut w = InPlace {
        stream,
        ring,
        reap,
        pos,
        end: pos + len - newline as u64,
        newline,
    };
    // If this unwinds (a Display that panics only on this second pass; CPU backend: on a
    // GPU a panic traps), dropping `w` still completes the reserved range.
    let _ = w.write_fmt(args);
}

/// A line on the stack.
struct LineBuf {
    buf: [u8; LINE_BUF],
    len: usize,
}

impl LineBuf {
    fn new() -> Self {
        LineBuf {
            buf: [0; LINE_BUF],
            len: 0,
        }
    }

    /// Formats into the buffer; `false` if it did not fit (or a Display failed).
    fn format(&mut self, args: fmt::Arguments, newline: bool) -> bool {
        // A literal with no arguments needs no formatting machinery.
        let ok = match args.as_str() {
            Some(s) => self.write_str(s).is_ok(),
            None => self.write_fmt(args).is_ok(),
        };
        ok && (!newline || self.write_str("\n").is_ok())
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Write for LineBuf {
    #[inline]
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > LINE_BUF {
            return Err(fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Counts formatted bytes.
struct Count(u64);

impl Write for Count {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len() as u64;
        Ok(())
    }
}

/// Formats straight into a reserved range, never past its end. Dropping it completes
/// the range and flushes it.
struct InPlace<'a, R: FnMut() + Copy> {
    stream: &'a Stream,
    ring: &'a Ring,
    /// The context's reaper of `ring` (`Context::print_out`).
    reap: R,
    pos: u64,
    /// The end of the line's text (the newline, if any, comes after it).
    end: u64,
    newline: bool,
}

impl<R: FnMut() + Copy> Drop for InPlace<'_, R> {
    /// Pads what the Display did not write (it printed less the second time, or it
    /// panicked: then this runs during unwinding), so the range is whole and committed.
    /// A reserved range left uncommitted would stop the stream for good: the flusher never
    /// passes it, and synchronize and drop would wait for it forever.
    fn drop(&mut self) {
        while self.pos < self.end {
            let n = (self.end - self.pos).min(64) as usize;
            self.stream.fill(self.pos, &[b' '; 64][..n], self.ring, self.reap);
            self.pos += n as u64;
        }
        if self.newline {
            self.stream.fill(self.end, b"\n", self.ring, self.reap);
        }
        self.stream.flush(self.ring, self.reap);
    }
}

impl<R: FnMut() + Copy> Write for InPlace<'_, R> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = (s.len() as u64).min(self.end - self.pos) as usize;
        self.stream.fill(self.pos, &s.as_bytes()[..n], self.ring, self.reap);
        self.pos += n as u64;
        Ok(())
    }
}
