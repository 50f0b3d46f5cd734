//! File I/O from device code: `pwrite`, `pread`, `open`, `close`, `fsync`, each one
//! io_uring request (or several, for large transfers) whose result comes back to the
//! calling thread ([`crate::protocol::request`]).
//!
//! ```
//! use gpuio_device::io;
//! // In a kernel launched by a gpuio runtime (outside one, every call fails with ENOSYS).
//! fn kernel(fd: i32) -> Result<(), io::Errno> {
//!     let n = io::pwrite(fd, b"hello\n", 0)?;
//!     let mut back = [0u8; 6];
//!     let m = io::pread(fd, &mut back, 0)?;
//!     assert!(n == 6 && m == 6);
//!     io::fsync(fd)
//! }
//! # assert_eq!(kernel(1), Err(io::Errno::ENOSYS));
//! ```
//!
//! # Buffers
//! A buffer inside a host-visible region the host registered (`Runtime::host_buffer`) is
//! read or written by the kernel directly. Any other buffer (device memory on a GPU) is
//! staged through the arena ([`crate::protocol::arena`]), one block per piece, with a copy on the GPU
//! that the lanes making it together share ([`crate::protocol::copy`]); a buffer on the thread's
//! stack (private to the thread) is copied by its own thread.
//!
//! # A lone request
//! [`pwrite`], [`pread`], [`open`], [`close`], [`fsync`] and [`fdatasync`] first try the
//! solo ring ([`crate::protocol::solo`]): a request that one SQE carries (a staged buffer of at most
//! [`SOLO_STAGE`] bytes, copied by the calling thread alone, or a direct one of at most
//! [`MAX_PIECE`]) goes there if no other thread holds it (and, where lanes run in lockstep,
//! if the lane calls alone), with none of the steps below. The `*_async` transfers never
//! do: the solo ring's round trip waits for the kernel.
//!
//! # Large transfers
//! A transfer is split into pieces (one arena block each when staged, at most 1 GiB when
//! direct), up to [`PIECES`] of them in flight at once, completed in order. Like POSIX
//! `pwrite`/`pread`, [`pwrite`] and [`pread`] may transfer fewer bytes than asked: they stop
//! at the first piece that comes back short (end of file, a full disk) or failed, and
//! return the bytes done before it; an error is returned only when nothing was
//! transferred. (Pieces already in flight after a short one still complete; their bytes
//! are not counted.) `fs::File::write_all_at` and `read_exact_at` retry until every byte
//! is done and report end of file and errors with the count done.

use core::marker::PhantomData;

pub use crate::errno::Errno;
use crate::protocol::arena::buffer;
use crate::protocol::context::{installed, Context};
use crate::protocol::request::Ticket;
use crate::protocol::solo::SOLO_STAGE;
#[cfg(loom)]
use crate::protocol::sync::copy_from_cells;
use crate::protocol::sync::{copy_to_cells, SharedCell};
use crate::protocol::uapi::{
    Sqe, IORING_OP_CLOSE, IORING_OP_FSYNC, IORING_OP_FTRUNCATE, IORING_OP_MKDIRAT, IORING_OP_OPENAT, IORING_OP_READ,
    IORING_OP_READ_FIXED, IORING_OP_RENAMEAT, IORING_OP_UNLINKAT, IORING_OP_WRITE, IORING_OP_WRITE_FIXED,
};
use crate::protocol::wait::until;
pub use crate::stdio::{stderr, stdout, Stderr, StderrLock, Stdout, StdoutLock};
/// The no_std ecosystem's io traits (`embedded-io`), which device files, their
/// `BufWriter`, stdout, stderr and their locks implement: code generic over `W: io::Write`
/// takes any of them. `Error` is the trait of their errors (`kind()`); `ReadExactError` and
/// `WriteFmtError` are what the traits' `read_exact` and `write_fmt` return.
pub use embedded_io::{Error, ErrorKind, ErrorType, Read, ReadExactError, Seek, SeekFrom, Write, WriteFmtError};

/// Pieces of one transfer in flight at once.
pub const PIECES: usize = 4;

/// Largest direct piece (Linux caps one read or write at `0x7ffff000` bytes).
pub const MAX_PIECE: usize = 1 << 30;

/// `openat`'s "relative to the current directory".
const AT_FDCWD: i32 = -100;
/// Longest path, with its NUL (Linux's `PATH_MAX`).
const PATH_MAX: usize = 4096;
// `open` stages a path and its NUL in the solo ring's buffer.
const _: () = assert!(PATH_MAX <= SOLO_STAGE as usize);
/// `IORING_FSYNC_DATASYNC`.
const FSYNC_DATASYNC: u32 = 1;
/// `unlinkat(2)`'s "remove a directory".
const AT_REMOVEDIR: u32 = 0x200;

/// What a transfer does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
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

/// What a transfer asks for ([`pwrite`], [`pread`] and their `_async` forms): `len` bytes of
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
/// [`pwrite_async`] and [`pread_async`]; [`Pending::wait`] finishes it. Dropping it waits
/// for the pieces in flight (the kernel may still be using the buffer), discarding their
/// results.
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
    fn new(op: Op, fd: i32, buf: *mut u8, len: usize, offset: u64) -> Pending<'a> {
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

/// Writes `buf` to `fd` at `offset`; returns the bytes written (see the module docs for
/// short counts). Waits for completion.
pub fn pwrite(fd: i32, buf: &[u8], offset: u64) -> Result<usize, Errno> {
    transfer(Op::Write, fd, buf.as_ptr() as *mut u8, buf.len(), offset)
}

/// Reads into `buf` from `fd` at `offset`; returns the bytes read, 0 at end of file (see
/// the module docs for short counts). Waits for completion.
pub fn pread(fd: i32, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
    transfer(Op::Read, fd, buf.as_mut_ptr(), buf.len(), offset)
}

/// A waiting transfer: on the solo ring if it can ([`solo`]), else through the shared rings
/// ([`Pending`]), `buf`'s region looked up once for both ([`Transfer::new`]).
fn transfer(op: Op, fd: i32, buf: *mut u8, len: usize, offset: u64) -> Result<usize, Errno> {
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
fn solo(ctx: &Context, t: Transfer) -> Option<Result<usize, Errno>> {
    if !t.in_range() {
        return None; // `Pending` refuses it (EINVAL)
    }
    if t.direct.is_some_and(|_| t.len > MAX_PIECE) || (t.direct.is_none() && t.len > SOLO_STAGE as usize) {
        return None;
    }
    let res = ctx.solo_call(
        |stage, stage_io| {
            if t.op == Op::Write && t.direct.is_none() {
                // SAFETY: the buffer is ours while we hold the solo ring; `buf[..len]` is the
                // caller's and fits it (`len <= SOLO_STAGE`).
                unsafe { stage_in(stage, t.buf, t.len, true) };
            }
            let (addr, buf_index) = t.direct.unwrap_or((stage_io, buffer::SOLO_STAGE));
            Sqe {
                opcode: t.op.opcode(ctx.arena.fixed),
                fd: t.fd,
                off: t.offset,
                addr,
                len: t.len as u32,
                buf_index,
                ..Sqe::default()
            }
        },
        |stage, res| {
            if t.op == Op::Read && t.direct.is_none() && res > 0 {
                // SAFETY: the read completed (the solo ring acquired its CQE), the buffer
                // is ours while we hold the ring, and `res <= len` (the kernel never reads
                // more than asked).
                unsafe { stage_out(stage, t.buf, (res as usize).min(t.len), true) };
            }
        },
    )?;
    ctx.arena.count(t.direct.is_some(), t.len);
    Some(if res < 0 {
        Err(Errno(-res))
    } else {
        Ok((res as usize).min(t.len))
    })
}

/// Starts writing `buf` to `fd` at `offset`; [`Pending::wait`] finishes it. The first
/// pieces are submitted before it returns if arena blocks and completion slots are free
/// then; it never waits for them (`wait` does).
///
/// While a `Pending` holds blocks and slots, other threads may wait for them; it gives back
/// those of completed pieces only when it is stepped (`wait`, or drop). So: on a GPU whose
/// lanes run in lockstep (AMD; NVIDIA code built for sm_60), finish it in code that the
/// lanes run together, since a sibling lane waiting for a block on another branch of the
/// kernel runs before this one can give its blocks back; and, with an arena of few blocks,
/// do not start another transfer on the same thread before finishing this one, which could
/// wait for blocks that only this `Pending` holds.
///
/// # Safety
/// The returned [`Pending`] must be waited for or dropped, not leaked (`mem::forget`):
/// the kernel may write from `buf` until then, and its completion slots and arena blocks
/// are given back only then.
pub unsafe fn pwrite_async(fd: i32, buf: &[u8], offset: u64) -> Pending<'_> {
    Pending::new(Op::Write, fd, buf.as_ptr() as *mut u8, buf.len(), offset)
}

/// Starts reading into `buf` from `fd` at `offset`; [`Pending::wait`] finishes it.
///
/// # Safety
/// As for [`pwrite_async`]: the kernel may write into `buf` until the [`Pending`] is
/// waited for or dropped, so it must not be leaked.
pub unsafe fn pread_async(fd: i32, buf: &mut [u8], offset: u64) -> Pending<'_> {
    Pending::new(Op::Read, fd, buf.as_mut_ptr(), buf.len(), offset)
}

/// One request that needs no buffer: takes a completion slot, submits the request, waits
/// and returns the result.
fn call(sqe: Sqe) -> Result<i32, Errno> {
    let ctx = installed().ok_or(Errno::ENOSYS)?;
    let res = ctx.call(sqe);
    if res < 0 {
        Err(Errno(-res))
    } else {
        Ok(res)
    }
}

/// Opens `path` (relative paths: the host process's current directory) with `open(2)`'s
/// `flags` and `mode` (see [`crate::fs`] for the flag values and an `OpenOptions`
/// builder); returns the new file descriptor.
///
/// Errors: a path containing NUL is `EINVAL`; one longer than `PATH_MAX - 1` bytes is
/// `ENAMETOOLONG`; anything else is the kernel's.
#[inline(never)] // one copy in a code object
pub fn open(path: &str, flags: i32, mode: u32) -> Result<i32, Errno> {
    open_at(AT_FDCWD, path, flags, mode)
}

/// As [`open`], with a relative `path` taken from the directory `dir` (an open descriptor)
/// rather than the host process's current directory (`openat(2)`).
#[inline(never)] // one copy in a code object
pub fn open_at(dir: i32, path: &str, flags: i32, mode: u32) -> Result<i32, Errno> {
    with_paths(path, None, |[at, _]| Sqe {
        opcode: IORING_OP_OPENAT,
        fd: dir,
        addr: at,
        len: mode,
        rw_flags: flags as u32,
        ..Sqe::default()
    })
}

/// Removes the file `path` (`unlinkat(2)`; a directory is `EISDIR`). Errors as [`open`]'s.
#[inline(never)]
pub fn remove_file(path: &str) -> Result<(), Errno> {
    with_paths(path, None, |[at, _]| Sqe {
        opcode: IORING_OP_UNLINKAT,
        fd: AT_FDCWD,
        addr: at,
        ..Sqe::default()
    })
    .map(drop)
}

/// Removes the empty directory `path` (`unlinkat(2)` with `AT_REMOVEDIR`). Errors as
/// [`open`]'s.
#[inline(never)]
pub fn remove_dir(path: &str) -> Result<(), Errno> {
    with_paths(path, None, |[at, _]| Sqe {
        opcode: IORING_OP_UNLINKAT,
        fd: AT_FDCWD,
        addr: at,
        rw_flags: AT_REMOVEDIR,
        ..Sqe::default()
    })
    .map(drop)
}

/// Creates the directory `path` with `mode` (less the host's umask; `mkdirat(2)`). Errors
/// as [`open`]'s.
#[inline(never)]
pub fn create_dir(path: &str, mode: u32) -> Result<(), Errno> {
    with_paths(path, None, |[at, _]| Sqe {
        opcode: IORING_OP_MKDIRAT,
        fd: AT_FDCWD,
        addr: at,
        len: mode,
        ..Sqe::default()
    })
    .map(drop)
}

/// Whether `path`, which exists, is a directory, in one request that opens nothing:
/// `mkdirat(2)` of `path/.` answers `EEXIST` for a directory and `ENOTDIR` for anything
/// else (also a dangling symbolic link's `ENOENT`: not a directory either); other errors
/// are the kernel's (`EACCES` where a parent may not be searched).
#[inline(never)]
pub(crate) fn is_dir(path: &str) -> Result<bool, Errno> {
    let made = with_path_parts([path, "/."], None, |[at, _]| Sqe {
        opcode: IORING_OP_MKDIRAT,
        fd: AT_FDCWD,
        addr: at,
        len: 0o777,
        ..Sqe::default()
    });
    match made {
        Err(Errno::EEXIST) => Ok(true),
        Err(Errno::ENOTDIR) | Err(Errno::ENOENT) => Ok(false),
        Err(errno) => Err(errno),
        // `path/.` cannot be made: there is always an entry named `.`.
        Ok(_) => Ok(true),
    }
}

/// Renames `from` to `to`, replacing `to` if it exists (`renameat2(2)` with no flags).
/// Errors as [`open`]'s; both paths together, each with its NUL, must fit one staging
/// buffer (`PATH_MAX` bytes; `ENAMETOOLONG` otherwise).
#[inline(never)]
pub fn rename(from: &str, to: &str) -> Result<(), Errno> {
    with_paths(from, Some(to), |[old, new]| Sqe {
        opcode: IORING_OP_RENAMEAT,
        fd: AT_FDCWD,
        addr: old,
        len: AT_FDCWD as u32, // the new path's directory
        off: new,             // `addr2`: the new path
        ..Sqe::default()
    })
    .map(drop)
}

/// Truncates or extends `fd` to `len` bytes (`ftruncate(2)`; through io_uring from Linux
/// 6.9; before it, `EACCES` under a sandbox and `EINVAL` without one).
pub fn set_len(fd: i32, len: u64) -> Result<(), Errno> {
    if len > i64::MAX as u64 {
        return Err(Errno::EINVAL);
    }
    call(Sqe {
        opcode: IORING_OP_FTRUNCATE,
        fd,
        off: len,
        ..Sqe::default()
    })
    .map(drop)
}

/// One request that names one or two paths: stages them, each with its NUL, one after the
/// other in one buffer (the solo ring's if no other thread holds it, else an arena block,
/// taken with a completion slot), builds the SQE from their kernel addresses (0 for no
/// second path) and waits for its result.
///
/// Errors: a path containing NUL is `EINVAL`; paths longer together than the buffer (at
/// most `PATH_MAX` bytes with their NULs) are `ENAMETOOLONG`.
fn with_paths(first: &str, second: Option<&str>, sqe: impl Fn([u64; 2]) -> Sqe) -> Result<i32, Errno> {
    with_path_parts([first, ""], second, sqe)
}

/// As [`with_paths`], the first path being `first[0]` followed by `first[1]`.
fn with_path_parts(first: [&str; 2], second: Option<&str>, sqe: impl Fn([u64; 2]) -> Sqe) -> Result<i32, Errno> {
    let ctx = installed().ok_or(Errno::ENOSYS)?;
    let (a0, a1, b) = (
        first[0].as_bytes(),
        first[1].as_bytes(),
        second.unwrap_or("").as_bytes(),
    );
    if a0.contains(&0) || a1.contains(&0) || b.contains(&0) {
        return Err(Errno::EINVAL);
    }
    let a_len = a0.len() + a1.len();
    // An empty second path is staged too (its NUL alone): the kernel answers it (ENOENT).
    let second = if second.is_some() { b.len() + 1 } else { 0 };
    if a_len + 1 + second > PATH_MAX.min(ctx.arena.block as usize) {
        return Err(Errno::ENAMETOOLONG);
    }
    let stage = |cells: *const crate::protocol::sync::SharedCell<u8>| {
        // SAFETY: both callers pass a buffer of ours (the solo ring's, held, of at least
        // `PATH_MAX` bytes, or a taken arena block), room for both paths and their NULs
        // (checked above).
        unsafe {
            copy_to_cells(cells, a0);
            copy_to_cells(cells.add(a0.len()), a1);
            copy_to_cells(cells.add(a_len), &[0]);
            if second != 0 {
                copy_to_cells(cells.add(a_len + 1), b);
                copy_to_cells(cells.add(a_len + 1 + b.len()), &[0]);
            }
        }
    };
    let addrs = |io: u64| [io, if second == 0 { 0 } else { io + a_len as u64 + 1 }];
    // The solo ring if no other thread holds it (`PATH_MAX <= SOLO_STAGE`).
    let solo = ctx.solo_call(
        |cells, io| {
            stage(cells);
            sqe(addrs(io))
        },
        |_, _| (),
    );
    // Else a block for the paths and a completion slot, taken together (see
    // `pool::with_taken`).
    let res = solo.unwrap_or_else(|| {
        ctx.with_taken(
            || ctx.try_take_block_and_slot(),
            |(block, ticket)| {
                // The block is ours until the request completes (we give it back after).
                stage(ctx.arena.cells(block));
                let res = ctx.submit_and_wait(ticket, sqe(addrs(ctx.arena.io_addr(block))));
                ctx.arena.pool.give_back(block);
                res
            },
        )
    });
    if res < 0 {
        Err(Errno(-res))
    } else {
        Ok(res)
    }
}

/// Closes `fd`.
pub fn close(fd: i32) -> Result<(), Errno> {
    call(Sqe {
        opcode: IORING_OP_CLOSE,
        fd,
        ..Sqe::default()
    })
    .map(|_| ())
}

/// Flushes `fd`'s data and metadata to storage (`fsync(2)`).
pub fn fsync(fd: i32) -> Result<(), Errno> {
    call(Sqe {
        opcode: IORING_OP_FSYNC,
        fd,
        ..Sqe::default()
    })
    .map(|_| ())
}

/// Flushes `fd`'s data to storage (`fdatasync(2)`).
pub fn fdatasync(fd: i32) -> Result<(), Errno> {
    call(Sqe {
        opcode: IORING_OP_FSYNC,
        fd,
        rw_flags: FSYNC_DATASYNC,
        ..Sqe::default()
    })
    .map(|_| ())
}
