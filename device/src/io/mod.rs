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

pub use crate::errno::Errno;
use crate::protocol::context::{installed, Context};
use crate::protocol::solo::SOLO_STAGE;
use crate::protocol::sync::{copy_to_cells, SharedCell};
use crate::protocol::uapi::{
    Sqe, IORING_OP_CLOSE, IORING_OP_FSYNC, IORING_OP_FTRUNCATE, IORING_OP_MKDIRAT, IORING_OP_OPENAT,
    IORING_OP_RENAMEAT, IORING_OP_UNLINKAT,
};
pub use crate::stdio::{stderr, stdout, Stderr, StderrLock, Stdout, StdoutLock};
/// The no_std ecosystem's io traits (`embedded-io`), which device files, their
/// `BufWriter`, stdout, stderr and their locks implement: code generic over `W: io::Write`
/// takes any of them. `Error` is the trait of their errors (`kind()`); `ReadExactError` and
/// `WriteFmtError` are what the traits' `read_exact` and `write_fmt` return.
pub use embedded_io::{Error, ErrorKind, ErrorType, Read, ReadExactError, Seek, SeekFrom, Write, WriteFmtError};

mod transfer;

pub use transfer::Pending;
use transfer::{transfer, Op};

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
    let stage = |cells: *const SharedCell<u8>| {
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
    let solo = paths_on_solo(ctx, stage, |io| sqe(addrs(io)));
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

/// [`with_path_parts`]' request on the solo ring if no other thread holds it: `stage` writes
/// the paths into its buffer, `sqe` builds the request from the buffer's kernel address.
fn paths_on_solo(ctx: &Context, stage: impl Fn(*const SharedCell<u8>), sqe: impl Fn(u64) -> Sqe) -> Option<i32> {
    let mut turn = ctx.solo.take()?;
    stage(turn.stage());
    let request = sqe(turn.stage_io());
    Some(ctx.call_solo(&mut turn, request))
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
