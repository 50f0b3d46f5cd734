//! Performing one SQE with ordinary syscalls, as the kernel would.

use std::os::fd::RawFd;
use std::sync::RwLock;

use gpuio_device::protocol::uapi::*;

/// `IORING_FSYNC_DATASYNC`: `gpuio_device::protocol::uapi` does not export it (the device keeps a
/// private copy in `io/mod.rs`).
pub(super) const IORING_FSYNC_DATASYNC: u32 = 1 << 0;

/// The result of a syscall that returned `r`: itself, or `-errno`. Retries `EINTR`: no
/// signal reaches the fallback's thread (but a debugger's may), while a kernel thread that
/// performs inline blocks only SIGPIPE, SIGXFSZ, SIGTTIN and SIGTTOU, so the program's
/// other signals interrupt its syscalls.
fn retry(mut call: impl FnMut() -> isize) -> i32 {
    loop {
        let r = call();
        if r >= 0 {
            return r.min(i32::MAX as isize) as i32;
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        if errno != libc::EINTR {
            return -errno;
        }
    }
}

/// What the ring's owner registered, as `io_uring_register(2)` would: fixed files, fixed
/// buffers, and the restrictions (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Tables {
    /// `IOSQE_FIXED_FILE` index -> fd (-1: an empty slot); empty: no file table, as a ring
    /// that registered none. The ring's owner sets it before the ring is enabled; then only
    /// the thread changes it, between requests (an `OPENAT` into a slot, a `CLOSE` of one).
    pub(super) files: Vec<RawFd>,
    /// Where the next `IORING_FILE_INDEX_ALLOC` open looks first, as the kernel's
    /// `file_table.alloc_hint`.
    pub(super) alloc_hint: usize,
    /// The ring's requests run under a file root (`HostRing::confine_to_root`): the thread
    /// refuses what Landlock does not check ([`beyond_landlock`]).
    pub(super) file_root: bool,
    /// `buf_index` -> (address, length).
    pub(super) buffers: Vec<(u64, u64)>,
    /// The restrictions, where any were registered: the opcodes allowed, and the SQE flags
    /// allowed and required.
    pub(super) restrictions: Option<Restricted>,
}

impl Drop for Tables {
    fn drop(&mut self) {
        close_files(&self.files);
    }
}

impl Tables {
    /// Puts `fd` (the ring's own descriptor) in the slot an `OPENAT`'s `file_index` names,
    /// as the kernel's `io_fixed_fd_install`: `IORING_FILE_INDEX_ALLOC` takes the first
    /// free slot from the hint on (`-ENFILE` if none, or no table), any other index `i`
    /// slot `i - 1` (`-ENXIO` without a table, `-EINVAL` past its end), closing the file
    /// that was there. The CQE's result: the slot taken (`ALLOC`) or 0, or `-errno`, and
    /// then `fd` is closed.
    fn install(&mut self, fd: RawFd, file_index: u32) -> i32 {
        let n = self.files.len();
        let alloc = file_index == IORING_FILE_INDEX_ALLOC;
        let slot = if alloc {
            let free = (self.alloc_hint..n)
                .chain(0..self.alloc_hint.min(n))
                .find(|&i| self.files[i] < 0);
            if free.is_none() {
                self.alloc_hint = 0;
            }
            free.ok_or(libc::ENFILE)
        } else if n == 0 {
            Err(libc::ENXIO)
        } else {
            Some(file_index as usize - 1).filter(|&i| i < n).ok_or(libc::EINVAL)
        };
        match slot {
            Ok(i) => {
                close_files(&[std::mem::replace(&mut self.files[i], fd)]);
                self.alloc_hint = i + 1;
                if alloc {
                    i as i32
                } else {
                    0
                }
            }
            Err(errno) => {
                close_files(&[fd]);
                -errno
            }
        }
    }

    /// Empties slot `file_index - 1` and closes its file, as the kernel's
    /// `io_fixed_fd_remove`: `-ENXIO` without a table, `-EINVAL` past its end, `-EBADF`
    /// for an empty slot.
    fn remove(&mut self, file_index: u32) -> i32 {
        let i = file_index as usize - 1;
        match self.files.get(i) {
            _ if self.files.is_empty() => -libc::ENXIO,
            None => -libc::EINVAL,
            Some(&fd) if fd < 0 => -libc::EBADF,
            Some(&fd) => {
                close_files(&[fd]);
                self.files[i] = -1;
                self.alloc_hint = i;
                0
            }
        }
    }
}

/// Closes a file table's descriptors (the ring's own duplicates) and its empty slots' -1s
/// not at all.
pub(super) fn close_files(files: &[RawFd]) {
    for &fd in files.iter().filter(|&&fd| fd >= 0) {
        // SAFETY: the ring's own duplicates (`HostRing::register_files`), each closed once:
        // by the table that replaces it, or as the table drops.
        unsafe { libc::close(fd) };
    }
}

/// `IORING_REGISTER_RESTRICTIONS`, as the kernel keeps them.
#[derive(Debug, Default)]
pub(super) struct Restricted {
    /// Bit `op` for each allowed opcode.
    pub(super) ops: [u64; 4],
    pub(super) flags_allowed: u8,
    pub(super) flags_required: u8,
}

impl Restricted {
    /// The kernel's reading of a restriction array (`io_register_restrictions`): SQE opcode
    /// and flag entries; register opcodes mean nothing here (the fallback has no
    /// `io_uring_register`).
    pub(super) fn new(r: &[Restriction]) -> std::io::Result<Restricted> {
        let mut out = Restricted::default();
        for e in r {
            match e.opcode {
                IORING_RESTRICTION_SQE_OP => out.ops[e.arg as usize / 64] |= 1 << (e.arg % 64),
                IORING_RESTRICTION_SQE_FLAGS_ALLOWED => out.flags_allowed = e.arg,
                IORING_RESTRICTION_SQE_FLAGS_REQUIRED => out.flags_required = e.arg,
                IORING_RESTRICTION_REGISTER_OP => {}
                _ => return Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
            }
        }
        Ok(out)
    }

    /// Whether the kernel would let `sqe` through (`io_check_restriction`): its opcode
    /// allowed, every required flag set, and no flag neither allowed nor required.
    pub(super) fn permits(&self, sqe: &Sqe) -> bool {
        self.ops[sqe.opcode as usize / 64] & (1 << (sqe.opcode % 64)) != 0
            && sqe.flags & self.flags_required == self.flags_required
            && sqe.flags & !(self.flags_allowed | self.flags_required) == 0
    }
}

/// Performs one request with ordinary syscalls; returns the CQE's `res`. A request the
/// restrictions forbid completes with `-EACCES` without being performed, as through
/// io_uring.
///
/// Addresses in the SQE are used as the kernel would use them: the syscalls read and write
/// them (a bad one gives `-EFAULT`); Rust code never dereferences them. A `*_FIXED`
/// request's range must lie inside its registered buffer (`-EFAULT` otherwise, as the
/// kernel's `io_import_fixed`).
pub(super) fn execute(sqe: &Sqe, registered: &RwLock<Tables>) -> i32 {
    match admit(sqe, registered) {
        Ok((sqe, _)) if file_index(&sqe) != 0 && sqe.flags & IOSQE_FIXED_FILE == 0 => direct(&sqe, registered),
        Ok((sqe, fd)) => perform(&sqe, fd),
        Err(errno) => -errno,
    }
}

/// `IORING_FILE_INDEX_ALLOC`: an `OPENAT` into whichever fixed-file slot is free.
const IORING_FILE_INDEX_ALLOC: u32 = u32::MAX;

/// The `file_index` of an `OPENAT` or a `CLOSE` (the SQE's `splice_fd_in`; 0 for any other
/// opcode): non-zero, the request opens into or closes a slot of the ring's fixed files,
/// not a descriptor of the process.
fn file_index(sqe: &Sqe) -> u32 {
    match sqe.opcode {
        IORING_OP_OPENAT | IORING_OP_CLOSE => sqe.splice_fd_in as u32,
        _ => 0,
    }
}

/// An `OPENAT` into, or a `CLOSE` of, a fixed-file slot ([`file_index`]), as the kernel
/// performs it (`io_openat2`, `io_close`): on the ring's own table, never on a descriptor
/// of the process. A ring without a table (every ring under `Sandbox::FileIo`) answers
/// `-ENXIO`; an `OPENAT` has opened (and, with `O_CREAT`, created) the file by then, as
/// the kernel has, and closes it again.
fn direct(sqe: &Sqe, registered: &RwLock<Tables>) -> i32 {
    let index = file_index(sqe);
    let table = || registered.write().unwrap_or_else(|e| e.into_inner());
    match sqe.opcode {
        IORING_OP_OPENAT => {
            // `__io_openat_prep`: a slot has no close-on-exec flag.
            if sqe.rw_flags as i32 & libc::O_CLOEXEC != 0 {
                return -libc::EINVAL;
            }
            // Opened as the kernel opens it, close-on-exec while it is a descriptor of the
            // process (the kernel's never is one).
            let opened = at_path(
                &Sqe {
                    rw_flags: sqe.rw_flags | libc::O_CLOEXEC as u32,
                    ..*sqe
                },
                sqe.fd,
            );
            if opened < 0 {
                return opened;
            }
            // SAFETY: F_DUPFD_CLOEXEC only creates a new descriptor: the ring's own, clear of
            // the low numbers programs `dup2` onto, as `HostRing::register_files` makes them.
            let own = unsafe { libc::fcntl(opened, libc::F_DUPFD_CLOEXEC, 64) };
            let failed = -std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE);
            close_files(&[opened]);
            if own < 0 {
                return failed;
            }
            table().install(own, index)
        }
        // `io_close_prep`: nothing but the slot, or the descriptor, not both.
        IORING_OP_CLOSE if sqe.off != 0 || sqe.addr != 0 || sqe.len != 0 || sqe.rw_flags != 0 || sqe.buf_index != 0 => {
            -libc::EINVAL
        }
        IORING_OP_CLOSE if sqe.fd != 0 => -libc::EINVAL,
        IORING_OP_CLOSE => table().remove(index),
        _ => -libc::EINVAL,
    }
}

/// What a file root refuses on the fallback that Landlock, which confines the paths the
/// thread reaches, does not check: an `OPENAT` with `O_PATH` (Landlock checks no such open,
/// which would tell whether any path exists, and what it is: a file, a directory, a
/// link), and one that creates a file with a set-id bit (`S_ISUID`, `S_ISGID`: as root, a
/// set-user-ID-root program inside the root). `MKDIRAT` needs no check: mkdir(2) drops
/// both bits.
fn beyond_landlock(sqe: &Sqe) -> bool {
    let flags = sqe.rw_flags as i32;
    let creates = flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE;
    sqe.opcode == IORING_OP_OPENAT
        && (flags & libc::O_PATH != 0 || creates && sqe.len & (libc::S_ISUID | libc::S_ISGID) != 0)
}

/// What the kernel checks before it performs `sqe`: the restrictions, the flags, a fixed
/// buffer's range (the request becomes a plain transfer once checked) and a fixed file's
/// slot. The request to perform and the fd it names, or the errno it fails with.
fn admit(sqe: &Sqe, registered: &RwLock<Tables>) -> Result<(Sqe, i32), i32> {
    // Not held past this check, nor across the syscall, which may block (a pipe nobody
    // writes): a host buffer made or dropped meanwhile updates the buffer table. What was
    // checked stays valid: the fixed files change only before the ring is enabled or on
    // this thread, between requests ([`direct`]), and a dropped host buffer's memory stays
    // mapped while a kernel may use it (`HostBuffer`'s drop).
    let registered = registered.read().unwrap_or_else(|e| e.into_inner());
    if registered.restrictions.as_ref().is_some_and(|r| !r.permits(sqe)) {
        return Err(libc::EACCES);
    }
    // Refused as Landlock refuses a path outside the root: `EACCES`, the caller's.
    if registered.file_root && beyond_landlock(sqe) {
        return Err(libc::EACCES);
    }
    if sqe.flags & !(IOSQE_FIXED_FILE | IOSQE_IO_DRAIN | IOSQE_ASYNC) != 0 {
        return Err(libc::EINVAL);
    }
    let mut sqe = *sqe;
    if matches!(sqe.opcode, IORING_OP_READ_FIXED | IORING_OP_WRITE_FIXED) {
        let inside = registered
            .buffers
            .get(sqe.buf_index as usize)
            .is_some_and(|&(base, len)| {
                // In range, without an overflow: `addr - base` is known not to wrap first. An
                // empty slot (0, 0) holds nothing.
                len > 0
                    && sqe.addr >= base
                    && (sqe.addr - base)
                        .checked_add(sqe.len as u64)
                        .is_some_and(|end| end <= len)
            });
        if !inside {
            return Err(libc::EFAULT);
        }
        sqe.opcode = if sqe.opcode == IORING_OP_READ_FIXED {
            IORING_OP_READ
        } else {
            IORING_OP_WRITE
        };
    }
    if sqe.flags & IOSQE_FIXED_FILE == 0 {
        return Ok((sqe, sqe.fd));
    }
    match usize::try_from(sqe.fd).ok().and_then(|i| registered.files.get(i)) {
        Some(&fd) => Ok((sqe, fd)),
        None => Err(libc::EBADF),
    }
}

/// Performs an admitted `sqe` on `fd` (the fixed file's, if it names one): its result as
/// a CQE's `res`.
fn perform(sqe: &Sqe, fd: i32) -> i32 {
    let fixed = sqe.flags & IOSQE_FIXED_FILE != 0;
    // Every call below is a plain syscall on the fd and buffer the SQE names, as io_uring
    // would make it: the kernel checks the fd and faults on a bad address (EFAULT) rather
    // than letting the host touch it; the submitter keeps the buffer alive until the
    // completion, as io_uring requires.
    match sqe.opcode {
        IORING_OP_NOP => 0,
        IORING_OP_WRITE | IORING_OP_READ => transfer(sqe, fd),
        // `IOSQE_FIXED_FILE` on these: `-EBADF`, as the kernel's preparation answers (an
        // OPENAT or CLOSE names a slot by `file_index` instead: `direct`).
        IORING_OP_OPENAT | IORING_OP_CLOSE | IORING_OP_UNLINKAT | IORING_OP_MKDIRAT | IORING_OP_RENAMEAT if fixed => {
            -libc::EBADF
        }
        IORING_OP_UNLINKAT | IORING_OP_MKDIRAT | IORING_OP_RENAMEAT | IORING_OP_OPENAT => at_path(sqe, fd),
        // SAFETY: ftruncate(2) touches no memory.
        IORING_OP_FTRUNCATE => retry(|| unsafe { libc::ftruncate(fd, sqe.off as libc::off_t) as isize }),
        // close is not retried: after EINTR the fd is gone on Linux.
        // SAFETY: close(2) of the fd the device named: the device owns it (it opened it
        // through the ring), as with io_uring's CLOSE.
        IORING_OP_CLOSE => match unsafe { libc::close(fd) } {
            0 => 0,
            _ => -std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO),
        },
        IORING_OP_FSYNC if sqe.rw_flags & !IORING_FSYNC_DATASYNC != 0 => -libc::EINVAL,
        IORING_OP_FSYNC if sqe.rw_flags & IORING_FSYNC_DATASYNC != 0 => {
            // SAFETY: fdatasync(2) touches no memory.
            retry(|| unsafe { libc::fdatasync(fd) as isize })
        }
        // SAFETY: fsync(2) touches no memory.
        IORING_OP_FSYNC => retry(|| unsafe { libc::fsync(fd) as isize }),
        _ => -libc::EINVAL,
    }
}

/// A WRITE or a READ: `len` bytes at `addr`, at offset `off` or the fd's position.
fn transfer(sqe: &Sqe, fd: i32) -> i32 {
    let (buf, len) = (sqe.addr as usize, sqe.len as usize);
    let current = sqe.off == OFF_CURRENT_POSITION;
    match sqe.opcode {
        // SAFETY: pwritev2(2) reads `len` bytes at `buf`, as write(2) below; `RWF_APPEND`
        // puts them at the file's end (the offset then only says whether to move the fd's).
        IORING_OP_WRITE if sqe.rw_flags == RWF_APPEND => retry(|| unsafe {
            let iov = libc::iovec {
                iov_base: buf as *mut _,
                iov_len: len,
            };
            libc::pwritev2(fd, &iov, 1, sqe.off as libc::off_t, libc::RWF_APPEND)
        }),
        IORING_OP_WRITE | IORING_OP_READ if sqe.rw_flags != 0 => -libc::EOPNOTSUPP,
        // SAFETY: write(2) reads `len` bytes at `buf`, which the submitter keeps alive.
        IORING_OP_WRITE if current => retry(|| unsafe { libc::write(fd, buf as *const _, len) }),
        // SAFETY: pwrite(2), as write(2) above. A file without offsets (a pipe, a socket, a
        // terminal) is written as io_uring writes it: at its current position, ignoring
        // `off` (pwrite(2) would refuse it with ESPIPE).
        IORING_OP_WRITE => match retry(|| unsafe { libc::pwrite(fd, buf as *const _, len, sqe.off as libc::off_t) }) {
            // SAFETY: as write(2) above.
            r if r == -libc::ESPIPE => retry(|| unsafe { libc::write(fd, buf as *const _, len) }),
            r => r,
        },
        // SAFETY: read(2) writes up to `len` bytes at `buf`, the submitter's buffer for it.
        IORING_OP_READ if current => retry(|| unsafe { libc::read(fd, buf as *mut _, len) }),
        // SAFETY: pread(2), as read(2) above; a file without offsets is read as io_uring
        // reads it, as pwrite above.
        IORING_OP_READ => match retry(|| unsafe { libc::pread(fd, buf as *mut _, len, sqe.off as libc::off_t) }) {
            // SAFETY: as read(2) above.
            r if r == -libc::ESPIPE => retry(|| unsafe { libc::read(fd, buf as *mut _, len) }),
            r => r,
        },
        _ => -libc::EINVAL,
    }
}

/// An operation on a NUL-terminated path at `addr` relative to the directory fd `fd`:
/// UNLINKAT, MKDIRAT, RENAMEAT (the second path at `off`), OPENAT.
fn at_path(sqe: &Sqe, fd: i32) -> i32 {
    let buf = sqe.addr as usize;
    match sqe.opcode {
        IORING_OP_UNLINKAT => {
            let (path, flags) = (buf as *const libc::c_char, sqe.rw_flags as libc::c_int);
            // SAFETY: unlinkat(2) reads the NUL-terminated path at `buf`, kept alive by the
            // submitter; the kernel faults on a bad one.
            retry(|| unsafe { libc::unlinkat(fd, path, flags) as isize })
        }
        IORING_OP_MKDIRAT => {
            let (path, mode) = (buf as *const libc::c_char, sqe.len as libc::mode_t);
            // SAFETY: mkdirat(2), as unlinkat(2) above; the mode is in `len`.
            retry(|| unsafe { libc::mkdirat(fd, path, mode) as isize })
        }
        // SAFETY: renameat2(2) reads the two NUL-terminated paths at `addr` and `addr2`
        // (`off`), as the kernel's RENAMEAT does; the new path's directory fd is in `len`.
        IORING_OP_RENAMEAT => retry(|| unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                fd,
                buf as *const libc::c_char,
                sqe.len as i32,
                sqe.off as *const libc::c_char,
                sqe.rw_flags,
            ) as isize
        }),
        // SAFETY: openat(2) reads the NUL-terminated path at `buf`, kept alive by the
        // submitter; the kernel faults on a bad one.
        IORING_OP_OPENAT => retry(|| unsafe {
            libc::openat(
                fd,
                buf as *const libc::c_char,
                sqe.rw_flags as libc::c_int,
                sqe.len as libc::c_uint,
            ) as isize
        }),
        _ => -libc::EINVAL,
    }
}
