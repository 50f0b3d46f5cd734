//! How a transfer moves: on the solo ring when one request does it ([`solo`]), else in
//! pieces through the shared rings ([`Pending`]), each piece direct or staged through an
//! arena block (`stage_in`, `stage_out`); the module docs of [`crate::io`] say what callers
//! see.

use core::marker::PhantomData;

use super::{Errno, MAX_PIECE, PIECES};
use crate::protocol::arena::buffer;
use crate::protocol::context::{installed, Context};
use crate::protocol::request::Ticket;
use crate::protocol::solo::SOLO_STAGE;
use crate::protocol::sync::SharedCell;
#[cfg(loom)]
use crate::protocol::sync::{copy_from_cells, copy_to_cells};
use crate::protocol::uapi::{Sqe, IORING_OP_READ, IORING_OP_READ_FIXED, IORING_OP_WRITE, IORING_OP_WRITE_FIXED};
use crate::protocol::wait::until;

/// What a transfer does.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Read,
    Write,
}

impl Op {
    /// The io_uring opcode of a piece of it: `*_FIXED` where the rings hold the buffer table
    /// ([`crate::protocol::arena::Arena::fixed`]).
    fn opcode(self, fixed: bool) -> u8 {
        match (self, fixed) {
            (Op::Read, false) => IORING_OP_READ,
            (Op::Write, false) => IORING_OP_WRITE,
            (Op::Read, true) => IORING_OP_READ_FIXED,
            (Op::Write, true) => IORING_OP_WRITE_FIXED,
        }
    }
}

/// What a transfer asks for ([`pwrite`](super::pwrite), [`pread`](super::pread) and their
/// `_async` forms): `len` bytes of
/// `buf` written to `fd` at `offset`, or read from there into `buf`. Built once, with `buf`'s
/// region looked up: a waiting transfer hands the same one to the solo ring and, failing
/// that, to the shared rings ([`transfer`]).
#[derive(Clone, Copy)]
struct Transfer {
    op: Op,
    fd: i32,
    buf: *mut u8,
    len: usize,
    offset: u64,
    /// The kernel's address of `buf[0]` and its region's buffer index, for a direct
    /// transfer.
    direct: Option<(u64, u16)>,
}

impl Transfer {
    /// `buf`'s region looked up in `ctx` ([`direct`]); none without a context.
    fn new(ctx: Option<&Context>, op: Op, fd: i32, buf: *mut u8, len: usize, offset: u64) -> Transfer {
        Transfer {
            op,
            fd,
            buf,
            len,
            offset,
            direct: ctx.and_then(|c| direct(c, buf, len)),
        }
    }

    /// Whether it ends at or before `i64::MAX`. The kernel refuses one that ends past it
    /// (EINVAL); we refuse it before splitting.
    fn in_range(&self) -> bool {
        self.offset
            .checked_add(self.len as u64)
            .is_some_and(|end| end <= i64::MAX as u64)
    }
}

/// No arena block (a direct piece).
const NO_BLOCK: u32 = u32::MAX;

/// One piece in flight: `len` bytes at `at` in the caller's buffer.
#[derive(Clone, Copy)]
struct Piece {
    ticket: Ticket,
    block: u32,
    at: usize,
    len: usize,
}

/// A transfer in progress: a `pwrite` or `pread`, possibly of many pieces. Returned by
/// [`pwrite_async`](super::pwrite_async) and [`pread_async`](super::pread_async);
/// [`Pending::wait`] finishes it. Dropping it waits for the pieces in flight (the kernel
/// may still be using the buffer), discarding their results.
#[must_use = "a transfer is finished by `wait` (dropping it waits and discards the result)"]
pub struct Pending<'a> {
    ctx: Option<&'static Context>,
    transfer: Transfer,
    /// Bytes handed to pieces so far.
    issued: usize,
    /// Bytes of the completed pieces, in order, up to the first short or failed one.
    done: usize,
    /// A piece came back short or failed: issue nothing more, count nothing more.
    stopped: bool,
    /// The errno of the failed piece, if one failed.
    errno: Option<Errno>,
    /// Whether the zero-length transfer's one request was issued.
    issued_empty: bool,
    pieces: [Option<Piece>; PIECES],
    /// Oldest piece in flight, and how many.
    oldest: usize,
    in_flight: usize,
    /// The oldest piece's result when this thread's own reap took its CQE (its slot
    /// already given back: `Context::waiting`), for the next `step`.
    mine: Option<i32>,
    _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> Pending<'a> {
    pub(super) fn new(op: Op, fd: i32, buf: *mut u8, len: usize, offset: u64) -> Pending<'a> {
        let ctx = installed();
        Pending::start(ctx, Transfer::new(ctx, op, fd, buf, len, offset))
    }

    /// [`Pending::new`] with the context and `buf`'s region ([`Transfer::new`]) already
    /// looked up.
    fn start(ctx: Option<&'static Context>, transfer: Transfer) -> Pending<'a> {
        let mut p = Pending {
            ctx,
            transfer,
            issued: 0,
            done: 0,
            stopped: false,
            errno: None,
            issued_empty: false,
            pieces: [None; PIECES],
            oldest: 0,
            in_flight: 0,
            mine: None,
            _buf: PhantomData,
        };
        if ctx.is_none() {
            p.stopped = true;
            p.errno = Some(Errno::ENOSYS);
        } else if !transfer.in_range() {
            p.stopped = true;
            p.errno = Some(Errno::EINVAL);
        } else {
            // Whatever may go now, without waiting: `wait` does the rest.
            p.step();
        }
        p
    }

    /// One round of the transfer, which never waits for an arena block or a completion
    /// slot: accounts for the pieces whose results are in (oldest first, in order), then
    /// issues pieces while a block (if staged) and a slot are free. (Submitting a piece may
    /// wait for an SQ slot and a CQ credit, which only the kernel and reaping free: a nested
    /// wait, safe under the lockstep rule.) Returns whether it is finished: nothing in
    /// flight and nothing more to issue.
    ///
    /// A piece takes its block and its slot together or not at all, and a lane holds them
    /// only while their request is in flight, which the kernel finishes whatever the other
    /// lanes do: no hold-and-wait between threads, and the lockstep rule (`arch/mod.rs`)
    /// holds when `wait` repeats this in rounds.
    #[inline(never)] // one copy in a code object
    fn step(&mut self) -> bool {
        while self.try_complete_oldest() {}
        while self.try_issue() {}
        self.in_flight == 0 && !self.may_issue()
    }

    /// Whether another piece is to be issued (resources aside).
    fn may_issue(&self) -> bool {
        let remaining = self.transfer.len - self.issued;
        !self.stopped && self.in_flight < PIECES && (remaining > 0 || (self.transfer.len == 0 && !self.issued_empty))
    }

    /// Issues the next piece if there is one and its resources are free now; returns
    /// whether it issued one.
    fn try_issue(&mut self) -> bool {
        let Some(ctx) = self.ctx else { return false };
        if !self.may_issue() {
            return false;
        }
        let remaining = self.transfer.len - self.issued;
        let block = match self.transfer.direct {
            Some(_) => NO_BLOCK,
            None => match ctx.arena.pool.try_take() {
                Some(b) => b,
                None => return false,
            },
        };
        let Some(ticket) = ctx.requests.try_take() else {
            if block != NO_BLOCK {
                ctx.arena.pool.give_back(block);
            }
            return false;
        };
        let (n, addr, buf_index) = match self.transfer.direct {
            Some((base, region)) => (remaining.min(MAX_PIECE), base + self.issued as u64, region),
            None => (
                remaining.min(ctx.arena.block as usize),
                ctx.arena.io_addr(block),
                buffer::ARENA,
            ),
        };
        ctx.arena.count(block == NO_BLOCK, n);
        if self.transfer.op == Op::Write && block != NO_BLOCK {
            // SAFETY: the block is ours until its request completes; `buf[issued..+n]` is
            // the caller's (borrowed for `'a`).
            unsafe { stage_in(ctx.arena.cells(block), self.transfer.buf.add(self.issued), n, false) };
        }
        let sqe = Sqe {
            opcode: self.transfer.op.opcode(ctx.arena.fixed),
            fd: self.transfer.fd,
            off: self.transfer.offset + self.issued as u64,
            addr,
            len: n as u32,
            buf_index,
            user_data: ticket.user_data(),
            ..Sqe::default()
        };
        // The payload (copied above, or the caller's) is written before the submission,
        // whose ready flag's release publishes it (ring.rs, step 4).
        ctx.submit(&sqe);
        let slot = (self.oldest + self.in_flight) % PIECES;
        self.pieces[slot] = Some(Piece {
            ticket,
            block,
            at: self.issued,
            len: n,
        });
        self.in_flight += 1;
        self.issued += n;
        self.issued_empty = true;
        true
    }

    /// Accounts for the oldest piece if its result is in; returns whether it was.
    fn try_complete_oldest(&mut self) -> bool {
        let (Some(ctx), Some(p)) = (self.ctx, self.pieces[self.oldest]) else {
            return false;
        };
        let Some(res) = self.mine.take().or_else(|| ctx.requests.try_result(p.ticket)) else {
            return false;
        };
        self.pieces[self.oldest] = None;
        self.oldest = (self.oldest + 1) % PIECES;
        self.in_flight -= 1;
        if self.transfer.op == Op::Read && p.block != NO_BLOCK && res > 0 && !self.stopped {
            // SAFETY: the read completed (the acquire in `try_result`, or this thread's own
            // acquire of the CQ tail when its reap took the CQE, orders the kernel's writes
            // to the block before this copy); the block is ours until we give it
            // back; `buf[at..at+res]` is the caller's, `res <= len` (the kernel never reads
            // more than asked).
            unsafe {
                stage_out(
                    ctx.arena.cells(p.block),
                    self.transfer.buf.add(p.at),
                    (res as usize).min(p.len),
                    false,
                )
            };
        }
        if p.block != NO_BLOCK {
            ctx.arena.pool.give_back(p.block);
        }
        if self.stopped {
            return true;
        }
        if res < 0 {
            self.stopped = true;
            self.errno = Some(Errno(-res));
        } else {
            let res = (res as usize).min(p.len);
            self.done += res;
            if res < p.len {
                self.stopped = true;
            }
        }
        true
    }

    /// Bytes transferred so far (by completed pieces, in order).
    pub fn done(&self) -> usize {
        self.done
    }

    /// Waits until the transfer is finished; returns the bytes transferred, or the error
    /// if nothing was.
    pub fn wait(mut self) -> Result<usize, Errno> {
        self.finish()
    }

    /// Repeats [`Pending::step`] until it is finished, reaping (and now and then flushing)
    /// between rounds.
    #[inline(never)] // one copy in a code object
    fn finish(&mut self) -> Result<usize, Errno> {
        if let Some(ctx) = self.ctx {
            let mut rounds = 0u32;
            // Between rounds, `waiting` reaps for everyone; when its reap takes the
            // oldest piece's CQE, the result goes to the next round's step.
            let oldest = core::cell::Cell::new(None);
            let mine = core::cell::Cell::new(None);
            until(
                || {
                    self.mine = mine.take();
                    let finished = self.step();
                    debug_assert!(self.mine.is_none(), "a result of our own reap was left over");
                    oldest.set(self.pieces[self.oldest].map(|p| p.ticket));
                    finished.then_some(())
                },
                || mine.set(ctx.waiting(&mut rounds, oldest.get())),
            );
        }
        match self.errno {
            Some(e) if self.done == 0 => Err(e),
            _ => Ok(self.done),
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        // The kernel may still read or write the buffer (or our blocks): wait for the
        // pieces in flight, issuing no more.
        self.stopped = true;
        let _ = self.finish();
    }
}

/// Copies `len` bytes of the caller's buffer into an arena block (a write's payload), with
/// the lanes making the call together sharing the copies (`copy::group_copy`); `alone`:
/// this lane by itself (`copy::copy_alone`: the solo ring's holder).
///
/// # Safety
/// The block is the caller's; `src .. src + len` is valid and fits in the block.
unsafe fn stage_in(cells: *const SharedCell<u8>, src: *const u8, len: usize, alone: bool) {
    #[cfg(not(loom))]
    // SAFETY: the caller's contract; a SharedCell<u8> is a transparent byte.
    unsafe {
        if alone {
            crate::protocol::copy::copy_alone(cells as *mut u8, src, len)
        } else {
            crate::protocol::copy::group_copy(&crate::protocol::arch::Warp::default(), cells as *mut u8, src, len)
        }
    };
    #[cfg(loom)]
    let _ = alone;
    #[cfg(loom)]
    // SAFETY: the caller's contract.
    unsafe {
        copy_to_cells(cells, core::slice::from_raw_parts(src, len))
    };
}

/// Copies `len` bytes of a completed read from an arena block into the caller's buffer, as
/// [`stage_in`] copies (`alone` likewise).
///
/// # Safety
/// The block is the caller's and its read completed; `dst .. dst + len` is valid.
unsafe fn stage_out(cells: *const SharedCell<u8>, dst: *mut u8, len: usize, alone: bool) {
    #[cfg(not(loom))]
    // SAFETY: the caller's contract; a SharedCell<u8> is a transparent byte.
    unsafe {
        if alone {
            crate::protocol::copy::copy_alone(dst, cells as *const u8, len)
        } else {
            crate::protocol::copy::group_copy(&crate::protocol::arch::Warp::default(), dst, cells as *const u8, len)
        }
    };
    #[cfg(loom)]
    let _ = alone;
    #[cfg(loom)]
    // SAFETY: the caller's contract.
    unsafe {
        copy_from_cells(cells, dst, len)
    };
}

/// A waiting transfer: on the solo ring if it can ([`solo`]), else through the shared rings
/// ([`Pending`]), `buf`'s region looked up once for both ([`Transfer::new`]).
pub(super) fn transfer(op: Op, fd: i32, buf: *mut u8, len: usize, offset: u64) -> Result<usize, Errno> {
    let ctx = installed();
    let t = Transfer::new(ctx, op, fd, buf, len, offset);
    if let Some(r) = ctx.and_then(|c| solo(c, t)) {
        return r;
    }
    Pending::start(ctx, t).wait()
}

/// The kernel's address of `buf[..len]` if it lies in a host-visible region
/// ([`crate::protocol::arena::Arena::direct`]), for a transfer without staging. A buffer on the
/// thread's stack is in none: no need to look.
fn direct(ctx: &Context, buf: *mut u8, len: usize) -> Option<(u64, u16)> {
    if crate::protocol::arch::is_thread_private(buf) {
        None
    } else {
        ctx.arena.direct(buf, len)
    }
}

/// A transfer that one request can do, on the solo ring ([`crate::protocol::solo`]) if no other thread
/// holds it: a direct buffer of at most [`MAX_PIECE`] bytes, or a staged one of at most
/// [`SOLO_STAGE`]. `None` (having done nothing) when it cannot: the caller goes through the
/// shared rings ([`Pending`]). Only the waiting calls take it: it waits for the kernel, which
/// `pwrite_async` and `pread_async` must not.
///
/// The result is what a one-piece [`Pending`] gives: the bytes moved, or the error.
///
/// Not `#[inline(never)]`: out of line, a test kernel's ptxas code (sm_90) held a uniform register
/// across a `YIELD` while lanes were still in `open`, and its transfers moved 0 bytes
/// (docs/PROTOCOL.md, "Compilers"; `tests/sass_yield.rs` looks for that shape).
fn solo(ctx: &Context, t: Transfer) -> Option<Result<usize, Errno>> {
    if !t.in_range() {
        return None; // `Pending` refuses it (EINVAL)
    }
    if t.direct.is_some_and(|_| t.len > MAX_PIECE) || (t.direct.is_none() && t.len > SOLO_STAGE as usize) {
        return None;
    }
    let mut turn = ctx.solo.take()?;
    if t.op == Op::Write && t.direct.is_none() {
        // SAFETY: the buffer is ours while we hold the solo ring; `buf[..len]` is the
        // caller's and fits it (`len <= SOLO_STAGE`).
        unsafe { stage_in(turn.stage(), t.buf, t.len, true) };
    }
    let (addr, buf_index) = t.direct.unwrap_or((turn.stage_io(), buffer::SOLO_STAGE));
    let sqe = Sqe {
        opcode: t.op.opcode(ctx.arena.fixed),
        fd: t.fd,
        off: t.offset,
        addr,
        len: t.len as u32,
        buf_index,
        ..Sqe::default()
    };
    let res = ctx.call_solo(&mut turn, sqe);
    if t.op == Op::Read && t.direct.is_none() && res > 0 {
        // SAFETY: the read completed (the solo ring acquired its CQE), the buffer is ours
        // while we hold the ring, and `res <= len` (the kernel never reads more than asked).
        unsafe { stage_out(turn.stage(), t.buf, (res as usize).min(t.len), true) };
    }
    drop(turn);
    ctx.arena.count(t.direct.is_some(), t.len);
    Some(if res < 0 {
        Err(Errno(-res))
    } else {
        Ok((res as usize).min(t.len))
    })
}
