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
//!
//! # A print inside a `Display`, and a `Display` that fails
//! The first formatting pass (into the stack buffer, counting what does not fit) calls the
//! arguments' `Display`s once, while nothing is reserved: a print a `Display` makes then
//! goes out as usual, whole and once, *before* the line that formats it (std's reentrant
//! stdout lock gives the same order when the outer line has no text before the value).
//! A line longer than the buffer needs a second pass, formatting in place into its reserved
//! range. There a print from the `Display` would be its second copy, and it would reserve
//! behind the outer line's unwritten bytes and wait for room that only they free: with a
//! log shorter than the two lines, forever (it did, reported as a hang). So the thread
//! marks itself for that pass ([`InPlaceLines`]), and its prints during it are skipped:
//! they went out in the first.
//!
//! [`InPlaceLines`]: crate::protocol::in_place::InPlaceLines
//!
//! A `Display` that returns `Err` ends the line where it failed: the text written so far,
//! then [`FORMAT_ERROR`], then the newline, if any. The stream counts it
//! (`WriteErrors::format_errors`) and the host's `synchronize` reports it as a print error
//! (std's `println!` panics there; a panic on a GPU ends the kernel).

use core::fmt::{self, Write};

use crate::protocol::context::{Context, STDOUT};
use crate::protocol::group::Group;
use crate::protocol::ring::Ring;
use crate::protocol::stream::Stream;
use crate::protocol::sync::Ordering;

/// A print macro's argument, for [`ByCopy`] and [`ByRef`] (the macros' expansion,
/// `__print!`, says why): `(&Arg(&value)).by_value()` is a copy of `value` where its type is
/// a number, `bool`, `char`, a reference or a raw pointer, and `&value` otherwise (method
/// lookup tries `ByCopy`'s receiver, `&Arg`, before `ByRef`'s, `&&Arg`).
///
/// Why those types and not every `Copy` one: they are what a hot loop's check prints, each
/// a register or two; a large `Copy` array would be copied to the stack for nothing. And a
/// blanket `impl<T: Copy>` also claims a value whose type is inferred only after the print
/// (`let mut last = None; println!("{:?}", last); last = Some(text);`): lookup cannot yet
/// tell whether it is `Copy`, takes the copy, and the build then fails where std's
/// `println!` compiles. A generic type (`Option<_>`) matches none of these impls, so it is
/// borrowed.
#[doc(hidden)]
pub struct Arg<'a, T: ?Sized>(pub &'a T);

/// [`Arg`] of a value that is copied: the value.
#[doc(hidden)]
pub trait ByCopy<T> {
    /// A copy of the argument.
    fn by_value(&self) -> T;
}

/// `ByCopy` for each of these types.
macro_rules! by_copy {
    ($($t:ty),*) => {$(
        impl ByCopy<$t> for Arg<'_, $t> {
            #[inline(always)]
            fn by_value(&self) -> $t {
                *self.0
            }
        }
    )*};
}
by_copy!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64, bool, char);

impl<'b, T: ?Sized> ByCopy<&'b T> for Arg<'_, &'b T> {
    #[inline(always)]
    fn by_value(&self) -> &'b T {
        self.0
    }
}

impl<T: ?Sized> ByCopy<*const T> for Arg<'_, *const T> {
    #[inline(always)]
    fn by_value(&self) -> *const T {
        *self.0
    }
}

impl<T: ?Sized> ByCopy<*mut T> for Arg<'_, *mut T> {
    #[inline(always)]
    fn by_value(&self) -> *mut T {
        *self.0
    }
}

/// [`Arg`] of any other value: the reference.
#[doc(hidden)]
pub trait ByRef<'a, T: ?Sized> {
    /// The argument's reference.
    fn by_value(&self) -> &'a T;
}

impl<'a, T: ?Sized> ByRef<'a, T> for &Arg<'a, T> {
    #[inline(always)]
    fn by_value(&self) -> &'a T {
        self.0
    }
}

/// Lines up to this many bytes (newline included) take the fast path.
pub const LINE_BUF: usize = 256;

/// What ends a line whose `Display` returned `Err`, after the text written until then.
pub const FORMAT_ERROR: &str = "<gpuio: formatter error>";

/// Prints `args` (and a newline if `newline`) to stdout or stderr. Used by the macros.
#[doc(hidden)]
#[inline(never)]
pub fn print_to(stderr: bool, newline: bool, args: fmt::Arguments) {
    let ctx = crate::protocol::context::current();
    if ctx.is_null() {
        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        crate::protocol::arch::host::print_without_context(stderr, newline, args);
        return;
    }
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    let _in_print = crate::protocol::arch::host::InPrint::enter();
    // SAFETY: the host installs a context that outlives every kernel that can see it.
    let ctx = unsafe { &*ctx };
    // A print made by a `Display` while its thread formats a long line in place is skipped:
    // it went out in the line's first pass (the module docs say why). Relaxed: only this
    // thread's own mark matters here, and its own add is sequenced before this load.
    // (A GPU panic's report from there is skipped too: behind the unfinished line, which
    // nothing completes before the trap, it could not get out. On the CPU backend a panic
    // inside a print is std's to report.)
    if ctx.in_place.count.load(Ordering::Relaxed) != 0 && ctx.in_place.is_mine() {
        return;
    }
    let index = ctx.stream_index(stderr);
    // The lanes executing this call together may have come from a `println!` and from an
    // `eprintln!` (this function is shared, and lanes meet at its entry): a record is
    // reserved in one stream, so each stream's lanes form a group of their own.
    let group = crate::protocol::arch::Warp::default().split(index != STDOUT);
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
    // The one pass that calls the `Display`s while nothing is reserved (the module docs).
    let formatted = line.format(args, newline);
    let fits = if formatted {
        line.len <= LINE_BUF
    } else {
        line.failed(stream, newline)
    };
    let my_len = if fits { line.len as u64 } else { 0 };
    // One sum gives the record's layout and, in the high bits, how many lanes have a line
    // that did not fit the stack buffer, how many print anything at all, and how many
    // lanes the group has (and this lane's rank in it).
    let printing = my_len > 0 || !fits;
    let v = my_len | ((!fits as u64) << UNFIT_SHIFT) | ((printing as u64) << PRINTING_SHIFT) | (1 << MEMBER_SHIFT);
    let (before, sums) = g.exclusive_sum(v);
    // The record's part takes a turn on the SM, given back once the record is in the log
    // (`emit_record`), or, by a group with no record, at the end: every lane has
    // formatted its line by now (the sum is the group's first collective), so a print made
    // by a `Display` above never waits for its own group's turn (`arch::turns` says why
    // NVIDIA's SMs let a few groups in at a time).
    let print_turn = crate::protocol::arch::turns::PrintTurn::take(g);
    let total = sums & ((1u64 << UNFIT_SHIFT) - 1);
    // (`total` is the same on every lane, so every lane takes the same branch and runs the
    // same collectives.)
    let as_record = fits_as_record(stream, total);
    // Where the stream's writes go and how their completions are reaped, passed down to
    // each step that may flush or wait for room.
    let (ring, reap) = ctx.print_out();
    // Held to the end by a group with no record, whose lines all go out one lane at a time.
    let _turn_held = if as_record {
        let mine = if fits { line.bytes() } else { &[] };
        emit_record(g, stream, ring, reap, mine, before, sums, print_turn);
        None
    } else {
        Some(print_turn)
    };
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
            // A line in the stack buffer is written from it: its Displays ran once.
            let buffered = fits.then(|| line.bytes());
            emit_long(
                ctx,
                stream,
                ring,
                reap,
                newline,
                args,
                buffered,
                line.len as u64,
                !formatted,
            );
        }
    }
    // The group's lanes leave together, once every line of theirs was flushed (invariant
    // 12). With independent thread scheduling a lane that left first and then spun (a
    // compute loop with no pause) could keep its sibling, the leader still flushing, from
    // running at all: the lines of a warp whose lanes but the leader went on to compute
    // could stay unwritten (and the leader's print not return) until those lanes stopped,
    // as the hardware may stay on the spinning branch. After this sync the group's lines are in a submitted write, or in the hands of
    // a flusher whose own group waits for it the same way.
    g.sync();
    // No reaping here: completions are reaped by a flush that finds its flights full, by
    // threads waiting for log space, and by the drain. (On a GPU, looking at the CQ means
    // reads across PCIe; doing it on every print costs more than the print.)
}

/// Whether a record of `total` bytes goes into `stream` as one: it must fit the log less one
/// chunk, or its lanes could wait for room that nothing frees. They wait until the record's
/// last byte has room, which needs every byte a log's length before it released. A record
/// of more than `cap - chunk` bytes needs some of the bytes just before it, in the chunk
/// where it starts; but the flusher takes a chunk only whole (the record's own bytes in it
/// are not written yet) or once every reserved byte is written, so those bytes never go
/// out. A record of at most `cap - chunk` bytes needs only bytes of earlier chunks, which
/// fill and go out whole. Longer lines go out one lane at a time, in pieces as room comes
/// (`Stream::fill`).
#[inline(always)]
fn fits_as_record(stream: &Stream, total: u64) -> bool {
    total > 0 && total <= stream.cap - stream.chunk
}

/// [`emit`]'s record: the group's lines that fit the stack buffer (this lane's is `mine`,
/// empty if it did not fit), back to back in lane order, reserved as one range, written,
/// committed and flushed by the leader. `before` and `sums` are the group's exclusive and
/// total sums of [`emit`]'s packed lengths and counts. `turn` is given back once the record
/// is in the log, before the commit: the commit's system-scope fence waits for the record's
/// stores to reach host memory, and the flush may serve others' requests, and neither adds
/// to the crowd that turns keep out (`arch::turns`). Held until the group's end, a turn
/// was mostly that wait, and the SM's other printing warps waited for it
/// (docs/PROTOCOL.md, "A line a thread").
///
/// Every lane of `g` must call this together (it is a collective operation).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn emit_record<G: Group>(
    g: &G,
    stream: &Stream,
    ring: &Ring,
    reap: impl FnMut() + Copy,
    mine: &[u8],
    before: u64,
    sums: u64,
    turn: crate::protocol::arch::turns::PrintTurn,
) {
    let low = (1u64 << UNFIT_SHIFT) - 1;
    let (offset, total) = (before & low, sums & low);
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
    turn.give_back();
    if g.is_leader() {
        stream.commit(base, base + total);
        stream.flush(ring, reap);
    }
}

/// The slow path, for a line printed alone (waiting for room and flushing with `ring` and
/// `reap`, as [`emit`] does): the `buffered` line whole (it fits the stack buffer but not
/// the log as one record), or else the line the first pass measured (`measured` bytes:
/// the text, and the newline unless `failed`), reserved and formatted in place, and ended
/// with [`FORMAT_ERROR`] if `failed` (its `Display` returned `Err` in the first pass).
/// Prints the `Display`s make in that second pass are skipped
/// ([`InPlaceLines`](crate::protocol::in_place::InPlaceLines)).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
#[cold]
fn emit_long(
    ctx: &Context,
    stream: &Stream,
    ring: &Ring,
    reap: impl FnMut() + Copy,
    newline: bool,
    args: fmt::Arguments,
    buffered: Option<&[u8]>,
    measured: u64,
    failed: bool,
) {
    if let Some(line) = buffered {
        let pos = stream.reserve(line.len() as u64);
        stream.fill(pos, line, ring, reap);
        stream.flush(ring, reap);
        return;
    }
    // The first pass counted the newline only if the text ended well.
    let text = measured - (newline && !failed) as u64;
    let tail: &'static [u8] = if failed { FORMAT_ERROR.as_bytes() } else { &[] };
    let len = text + tail.len() as u64 + newline as u64;
    if len == 0 {
        return;
    }
    // Before the reservation: a thread waits for a mark only while it holds no log room.
    // Dropped after `w` (declared first), so it covers the padding too.
    let _mark = ctx.in_place.mark();
    let pos = stream.reserve(len);
    let mut w = InPlace {
        stream,
        ring,
        reap,
        pos,
        end: pos + text,
        tail,
        newline,
    };
    // If this unwinds (a Display that panics only on this second pass; CPU backend: on a
    // GPU a panic traps), dropping `w` still completes the reserved range. A Display that
    // fails here, or writes less, is padded; one that writes more is cut at the length the
    // first pass measured.
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

    /// Formats into the buffer, and counts in `len` what did not fit (then the line is
    /// longer than the buffer: `len > LINE_BUF`). `false` if a Display returned `Err`: `len`
    /// then counts the text written before it, without the newline.
    fn format(&mut self, args: fmt::Arguments, newline: bool) -> bool {
        // A literal with no arguments needs no formatting machinery.
        let ok = match args.as_str() {
            Some(s) => self.write_str(s).is_ok(),
            None => self.write_fmt(args).is_ok(),
        };
        ok && (!newline || self.write_str("\n").is_ok())
    }

    /// A Display returned `Err` in [`LineBuf::format`]: counts it on `stream` and ends the
    /// line with [`FORMAT_ERROR`] (and the newline). `true` if the line still fits the
    /// buffer; if not, `len` stays the text's length and the slow path ends the line.
    #[inline(never)]
    #[cold]
    fn failed(&mut self, stream: &Stream, newline: bool) -> bool {
        // Relaxed: a count the host reads after the drain, which orders it.
        stream.errors.format_errors.fetch_add(1, Ordering::Relaxed);
        if self.len + FORMAT_ERROR.len() + newline as usize > LINE_BUF {
            return false;
        }
        let _ = self.write_str(FORMAT_ERROR);
        if newline {
            let _ = self.write_str("\n");
        }
        true
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Write for LineBuf {
    #[inline]
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Past the buffer it only counts: the line then takes the slow path, which needs
        // its length, and the Displays run to their end once, here, while nothing is
        // reserved (the module docs).
        let end = self.len + s.len();
        if end <= LINE_BUF {
            self.buf[self.len..end].copy_from_slice(s.as_bytes());
        }
        self.len = end;
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
    /// The end of the line's text (`tail` and the newline, if any, come after it).
    end: u64,
    /// [`FORMAT_ERROR`] when the first pass's Display failed, else empty.
    tail: &'static [u8],
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
        if !self.tail.is_empty() {
            self.stream.fill(self.end, self.tail, self.ring, self.reap);
        }
        if self.newline {
            let at = self.end + self.tail.len() as u64;
            self.stream.fill(at, b"\n", self.ring, self.reap);
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

#[cfg(test)]
mod tests {
    /// A value that is not `Copy`: the print macros pass it by reference.
    #[derive(Debug)]
    struct NotCopy(u32);
    impl core::fmt::Display for NotCopy {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            write!(f, "nc{}", self.0)
        }
    }

    /// Every form of argument std's macros take compiles through the by-value rewriting
    /// (`__print!`) and runs (with no context the lines go to the test's stdout).
    #[test]
    fn the_print_macros_take_every_argument_form() {
        let (i, v, s, w) = (7u64, 1.5f32, "str", 6usize);
        let (nc, arr) = (NotCopy(3), [1u8, 2, 3]);
        crate::println!("{} {} {} {} {}", i, v, s, nc, 1);
        crate::println!("{x} {i} {v}", x = 2.5);
        crate::println!("{:?} {:>w$}|{:>2$}|", arr, i, w,);
        crate::println!(concat!("{}", " {}"), i, nc);
        crate::print!("{0} {0}\n", nc);
        crate::eprintln!("{:p} {} {:?}", &nc, { NotCopy(9) }, &arr[..]);
        crate::println!();
        assert_eq!(crate::dbg!(i + 1), 8);
        // Precision and width from arguments, named and positional.
        crate::println!("{:.*}|{:w$.p$}|", 2, v, v, w = 8, p = 3);
        // A type inferred only after the print (std's `println!` takes it).
        let mut last = None;
        crate::println!("{:?}", last);
        last = Some(NotCopy(4));
        crate::println!("{}", last.map_or(0, |n| n.0));
        // A generic argument.
        fn show<T: core::fmt::Display + Copy>(t: T) {
            crate::println!("{} {t}", t);
        }
        show(1.25f64);
        show('c');
    }
}
