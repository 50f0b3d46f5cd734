//! `print!`, `println!`, `eprint!`, `eprintln!`: std's format syntax, no allocation.
//!
//! A line is formatted into a small buffer on the thread's stack. If it fits (the common
//! case), the lanes of the warp add up their lengths, one lane reserves space for all of
//! them, each lane copies its line into its place, and one flush sends them out. A longer
//! line is measured first (a formatting pass that only counts), then formatted straight
//! into its reserved space, in pieces if it is longer than the whole log: it stays whole
//! and contiguous at any length.

use core::fmt::{self, Write};

use crate::context::Context;
use crate::group::Group;
use crate::stream::Stream;

/// Lines up to this many bytes (newline included) take the fast path.
pub const LINE_BUF: usize = 256;

/// Prints `args` (and a newline if `newline`) to stdout or stderr. Used by the macros.
#[doc(hidden)]
#[inline(never)]
pub fn print_to(stderr: bool, newline: bool, args: fmt::Arguments) {
    let ctx = crate::arch::context();
    if ctx.is_null() {
        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        crate::arch::host::print_without_context(stderr, newline, args);
        return;
    }
    // SAFETY: the host installs a context that outlives every kernel that can see it.
    let ctx = unsafe { &*ctx };
    emit(&crate::arch::Warp::default(), ctx, ctx.stream(stderr), newline, args);
}

/// Prints one record for the group `g`: every lane's line, back to back, in lane order.
///
/// Every lane of `g` must call this together (it is a collective operation).
pub fn emit<G: Group>(g: &G, ctx: &Context, stream: &Stream, newline: bool, args: fmt::Arguments) {
    let mut line = LineBuf::new();
    let fits = line.format(args, newline);
    let my_len = if fits { line.len as u64 } else { 0 };
    let (before, total) = g.exclusive_sum(my_len);
    // The record must fit the log: its last byte could otherwise wait for room that only
    // the flush of its own first bytes would free. (`total` is the same on every lane, so
    // every lane takes the same branch and runs the same collectives.)
    let as_record = total > 0 && total <= stream.cap;
    if as_record {
        let mut base = 0;
        if g.is_leader() {
            base = stream.reserve(total);
        }
        let base = g.broadcast(base);
        // From here on each lane works alone: it waits for room for its own line, writes it
        // and commits it, and the leader flushes once its own line is in. No barrier: on
        // an H100, lanes were seen to get past a barrier or shuffle without a lane that had
        // spent a long time in a wait loop. (A design in which the leader committed the
        // record for its lanes after a barrier produced wrong output; one in which the
        // leader waited for room for the whole record while its lanes waited at a barrier
        // stalled the stream for good, with 128-byte lines after the log wrapped: the ring
        // idle, the flusher stopped at a chunk boundary, so some line there was never
        // committed; presumably a lane left behind at a barrier its group had passed.)
        // A lane that commits after the leader's flush is flushed by the next flush, by a
        // thread waiting for room, or by the drain.
        if my_len > 0 {
            let pos = base + before;
            stream.wait_record_room(ctx, pos, my_len, g.is_leader());
            stream.put_uncommitted(pos, line.bytes());
            stream.commit(pos, pos + my_len);
        }
        if g.is_leader() {
            ctx.flush(stream);
        }
    }
    if !fits || (my_len > 0 && !as_record) {
        emit_long(ctx, stream, newline, args);
    }
    // No reaping here: completions are reaped by a flush that finds its flights full, by
    // threads waiting for log space, and by the drain. (On a GPU, looking at the CQ means
    // reads across PCIe; doing it on every print costs more than the print.)
}

/// The slow path: measure, reserve, format in place.
fn emit_long(ctx: &Context, stream: &Stream, newline: bool, args: fmt::Arguments) {
    let mut count = Count(0);
    let _ = count.write_fmt(args);
    let len = count.0 + newline as u64;
    if len == 0 {
        return;
    }
    let pos = stream.reserve(len);
    let mut w = InPlace {
        ctx,
        stream,
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
struct InPlace<'a> {
    ctx: &'a Context,
    stream: &'a Stream,
    pos: u64,
    /// The end of the line's text (the newline, if any, comes after it).
    end: u64,
    newline: bool,
}

impl Drop for InPlace<'_> {
    /// Pads what the Display did not write (it printed less the second time, or it
    /// panicked: then this runs during unwinding), so the range is whole and committed.
    /// A reserved range left uncommitted would stop the stream for good: the flusher never
    /// passes it, and synchronize and drop would wait for it forever.
    fn drop(&mut self) {
        while self.pos < self.end {
            let n = (self.end - self.pos).min(64) as usize;
            self.stream.fill(self.ctx, self.pos, &[b' '; 64][..n]);
            self.pos += n as u64;
        }
        if self.newline {
            self.stream.fill(self.ctx, self.end, b"\n");
        }
        self.ctx.flush(self.stream);
    }
}

impl Write for InPlace<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = (s.len() as u64).min(self.end - self.pos) as usize;
        self.stream.fill(self.ctx, self.pos, &s.as_bytes()[..n]);
        self.pos += n as u64;
        Ok(())
    }
}
