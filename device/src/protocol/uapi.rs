//! The Linux io_uring user ABI, as far as gpuio uses it.
//!
//! Our own copy, like liburing's: Debian's kernel headers (6.1) lack `NO_MMAP`,
//! `NO_SQARRAY` and `user_addr`, and the device side must not depend on any system header.
//! Every layout is asserted at compile time against the kernel's `include/uapi/linux/io_uring.h`.

use core::mem::{offset_of, size_of};

/// A submission queue entry (`struct io_uring_sqe`), 64 bytes.
///
/// Only the plain form is used: no SQE128. Union members are named after the opcode
/// family that uses them (`rw_flags` is also `fsync_flags`, `open_flags`, ...).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe {
    /// `IORING_OP_*`.
    pub opcode: u8,
    /// `IOSQE_*`.
    pub flags: u8,
    /// Request priority.
    pub ioprio: u16,
    /// File descriptor the request works on.
    pub fd: i32,
    /// File offset; `u64::MAX` means "the current file position".
    pub off: u64,
    /// Buffer address (or path address for OPENAT).
    pub addr: u64,
    /// Buffer length (or mode for OPENAT).
    pub len: u32,
    /// `rw_flags` / `fsync_flags` / `open_flags`.
    pub rw_flags: u32,
    /// Returned unchanged in the completion.
    pub user_data: u64,
    /// Registered buffer index.
    pub buf_index: u16,
    /// Credentials personality.
    pub personality: u16,
    /// `splice_fd_in` / `file_index`.
    pub splice_fd_in: i32,
    /// Third address (unused here).
    pub addr3: u64,
    /// Reserved.
    pub pad2: u64,
}

/// A completion queue entry (`struct io_uring_cqe`), 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// The submission's `user_data`.
    pub user_data: u64,
    /// Result: bytes transferred, a file descriptor, or `-errno`.
    pub res: i32,
    /// `IORING_CQE_F_*`.
    pub flags: u32,
}

/// `struct io_sqring_offsets`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SqringOffsets {
    /// Byte offset of the SQ head (SQEs the kernel has consumed; the kernel writes it).
    pub head: u32,
    /// Byte offset of the SQ tail (SQEs the application has published; it writes it).
    pub tail: u32,
    /// Byte offset of the SQ ring mask (entries - 1).
    pub ring_mask: u32,
    /// Byte offset of the number of SQ entries.
    pub ring_entries: u32,
    /// Byte offset of the SQ flags word (`IORING_SQ_*`).
    pub flags: u32,
    /// Byte offset of the count of invalid SQEs the kernel dropped.
    pub dropped: u32,
    /// Byte offset of the SQ index array (none with `IORING_SETUP_NO_SQARRAY`).
    pub array: u32,
    /// Reserved.
    pub resv1: u32,
    /// With `IORING_SETUP_NO_MMAP`: the address of the SQE array.
    pub user_addr: u64,
}

/// `struct io_cqring_offsets`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CqringOffsets {
    /// Byte offset of the CQ head (CQEs the application has reaped; it writes it).
    pub head: u32,
    /// Byte offset of the CQ tail (CQEs the kernel has posted; the kernel writes it).
    pub tail: u32,
    /// Byte offset of the CQ ring mask (entries - 1).
    pub ring_mask: u32,
    /// Byte offset of the number of CQ entries.
    pub ring_entries: u32,
    /// Byte offset of the count of completions lost to a full CQ.
    pub overflow: u32,
    /// Byte offset of the CQE array.
    pub cqes: u32,
    /// Byte offset of the CQ flags word (`IORING_CQ_*`).
    pub flags: u32,
    /// Reserved.
    pub resv1: u32,
    /// With `IORING_SETUP_NO_MMAP`: the address of the rings (heads, tails, CQEs).
    pub user_addr: u64,
}

/// `struct io_uring_params`, in and out of `io_uring_setup(2)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Params {
    /// Out: the SQ's entries (the `entries` argument, rounded up to a power of two).
    pub sq_entries: u32,
    /// The CQ's entries (in: the size asked for, with `IORING_SETUP_CQSIZE`; out: the size).
    pub cq_entries: u32,
    /// `IORING_SETUP_*`.
    pub flags: u32,
    /// The CPU the SQPOLL thread is bound to, with `IORING_SETUP_SQ_AFF`.
    pub sq_thread_cpu: u32,
    /// Milliseconds the SQPOLL thread polls an idle ring before it sleeps.
    pub sq_thread_idle: u32,
    /// Out: `IORING_FEAT_*`, what the kernel supports.
    pub features: u32,
    /// With `IORING_SETUP_ATTACH_WQ`: the ring whose async workers to share.
    pub wq_fd: u32,
    /// Reserved, zero.
    pub resv: [u32; 3],
    /// Out: where the SQ ring's fields are.
    pub sq_off: SqringOffsets,
    /// Out: where the CQ ring's fields are.
    pub cq_off: CqringOffsets,
}

// Setup flags (`IORING_SETUP_*`).
/// `IORING_SETUP_SQPOLL`: a kernel thread polls the SQ, so submitting needs no system call.
pub const IORING_SETUP_SQPOLL: u32 = 1 << 1;
/// `IORING_SETUP_SQ_AFF`: the SQPOLL thread is bound to `Params::sq_thread_cpu`.
pub const IORING_SETUP_SQ_AFF: u32 = 1 << 2;
/// `IORING_SETUP_CQSIZE`: the CQ has `Params::cq_entries` entries.
pub const IORING_SETUP_CQSIZE: u32 = 1 << 3;
/// `IORING_SETUP_SUBMIT_ALL`: `io_uring_enter` goes on submitting past an SQE that fails
/// (its error goes to its CQE) rather than stopping there (Linux 5.18).
pub const IORING_SETUP_SUBMIT_ALL: u32 = 1 << 7;
/// `IORING_SETUP_CLAMP`: too large SQ and CQ sizes are clamped to the maximum, not refused.
pub const IORING_SETUP_CLAMP: u32 = 1 << 4;
/// `IORING_SETUP_ATTACH_WQ`: share the async workers (and, with SQPOLL, the SQPOLL thread)
/// of the ring whose fd is `Params::wq_fd`.
pub const IORING_SETUP_ATTACH_WQ: u32 = 1 << 5;
/// `IORING_SETUP_R_DISABLED`: the ring starts disabled, until
/// `IORING_REGISTER_ENABLE_RINGS`.
pub const IORING_SETUP_R_DISABLED: u32 = 1 << 6;
/// `IORING_SETUP_NO_MMAP`: the application provides the ring and SQE memory (the
/// `user_addr` fields), instead of mapping the kernel's.
pub const IORING_SETUP_NO_MMAP: u32 = 1 << 14;
/// `IORING_SETUP_NO_SQARRAY`: no SQ index array; SQEs are consumed in ring order.
pub const IORING_SETUP_NO_SQARRAY: u32 = 1 << 16;

// SQ ring flags, written by the kernel.
/// The SQPOLL thread is asleep and needs `IORING_ENTER_SQ_WAKEUP`.
pub const IORING_SQ_NEED_WAKEUP: u32 = 1 << 0;
/// The CQ ring overflowed (must never happen with gpuio's credit scheme).
pub const IORING_SQ_CQ_OVERFLOW: u32 = 1 << 1;

// `io_uring_enter(2)` flags.
/// `IORING_ENTER_GETEVENTS`: wait for `min_complete` completions.
pub const IORING_ENTER_GETEVENTS: u32 = 1 << 0;
/// `IORING_ENTER_SQ_WAKEUP`: wake the SQPOLL thread.
pub const IORING_ENTER_SQ_WAKEUP: u32 = 1 << 1;

// Opcodes.
/// `IORING_OP_NOP`: does nothing; completes with 0.
pub const IORING_OP_NOP: u8 = 0;
/// `IORING_OP_FSYNC`: fsync(2) of `fd` (fdatasync(2) with `IORING_FSYNC_DATASYNC` in
/// `rw_flags`).
pub const IORING_OP_FSYNC: u8 = 3;
/// `IORING_OP_READ_FIXED`: as [`IORING_OP_READ`], into registered buffer `buf_index`;
/// the kernel fails it with `EFAULT` unless `addr..addr + len` lies inside that buffer.
pub const IORING_OP_READ_FIXED: u8 = 4;
/// `IORING_OP_WRITE_FIXED`: as [`IORING_OP_WRITE`], from registered buffer `buf_index`;
/// the kernel fails it with `EFAULT` unless `addr..addr + len` lies inside that buffer.
pub const IORING_OP_WRITE_FIXED: u8 = 5;
/// `IORING_OP_OPENAT`: openat(2) of the path at `addr`, relative to `fd`, with
/// `open_flags` in `rw_flags` and the mode in `len`; completes with the new descriptor.
pub const IORING_OP_OPENAT: u8 = 18;
/// `IORING_OP_CLOSE`: close(2) of `fd`.
pub const IORING_OP_CLOSE: u8 = 19;
/// `IORING_OP_READ`: read(2) of `len` bytes into `addr` at `off` (at the file position
/// with [`OFF_CURRENT_POSITION`], -1).
pub const IORING_OP_READ: u8 = 22;
/// `IORING_OP_WRITE`: write(2) of `len` bytes from `addr` at `off` (at the file position
/// with [`OFF_CURRENT_POSITION`], -1).
pub const IORING_OP_WRITE: u8 = 23;
/// `IORING_OP_RENAMEAT`: renameat2(2) of the path at `addr` (relative to `fd`) to the path
/// at `addr2` (`off`; relative to the fd in `len`), with the flags in `rw_flags`.
pub const IORING_OP_RENAMEAT: u8 = 35;
/// `IORING_OP_UNLINKAT`: unlinkat(2) of the path at `addr`, relative to `fd` (flags in
/// `rw_flags`: `AT_REMOVEDIR`).
pub const IORING_OP_UNLINKAT: u8 = 36;
/// `IORING_OP_MKDIRAT`: mkdirat(2) of the path at `addr`, relative to `fd`, mode in `len`.
pub const IORING_OP_MKDIRAT: u8 = 37;
/// `IORING_OP_STATX`: statx(2), which writes a `struct statx` to `addr2` (any address: no
/// sandbox allows it).
pub const IORING_OP_STATX: u8 = 21;
/// `IORING_OP_FTRUNCATE`: ftruncate(2) of `fd` to `off` bytes (Linux 6.9).
pub const IORING_OP_FTRUNCATE: u8 = 55;

// SQE flags (`IOSQE_*`).
/// `fd` is an index into the ring's registered files, not a file descriptor.
pub const IOSQE_FIXED_FILE: u8 = 1 << 0;
/// `IOSQE_IO_DRAIN`: the kernel starts this SQE only once every SQE submitted before it has
/// completed, and none submitted after it before it completes.
pub const IOSQE_IO_DRAIN: u8 = 1 << 1;
/// `RWF_APPEND` (`rw_flags` of a write): this write goes to the end of the file, wherever
/// that is when the kernel does it (`pwritev2(2)`), as under `O_APPEND`.
pub const RWF_APPEND: u32 = 0x10;
/// Always punt to io-wq (gpuio never sets it; the sandbox refuses it).
pub const IOSQE_ASYNC: u8 = 1 << 4;

// `io_uring_register(2)` opcodes.
/// `IORING_REGISTER_BUFFERS`: registers an array of `iovec`s, which `*_FIXED` requests
/// name by index (`buf_index`).
pub const IORING_REGISTER_BUFFERS: u32 = 0;
/// `IORING_REGISTER_PROBE`: fills an `io_uring_probe` with the opcodes the kernel has.
pub const IORING_REGISTER_PROBE: u32 = 8;
/// `IORING_REGISTER_FILES`: registers an array of file descriptors, which SQEs with
/// `IOSQE_FIXED_FILE` name by index (-1: an empty slot).
pub const IORING_REGISTER_FILES: u32 = 2;
/// `IORING_REGISTER_RESTRICTIONS`: limits the opcodes and SQE flags the ring accepts (an
/// array of [`Restriction`]; only while the ring is disabled).
pub const IORING_REGISTER_RESTRICTIONS: u32 = 11;
/// `IORING_REGISTER_ENABLE_RINGS`: enables a ring created with `IORING_SETUP_R_DISABLED`.
pub const IORING_REGISTER_ENABLE_RINGS: u32 = 12;
/// `IORING_REGISTER_BUFFERS_UPDATE`: replaces registered buffers from `offset` on (an
/// [`RsrcUpdate`]; an iovec with a null base and length 0 empties a slot).
pub const IORING_REGISTER_BUFFERS_UPDATE: u32 = 16;

/// `struct io_uring_rsrc_update2`, for `IORING_REGISTER_BUFFERS_UPDATE` (`nr_args` is its
/// size).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RsrcUpdate {
    /// The first slot replaced.
    pub offset: u32,
    /// Must be 0.
    pub resv: u32,
    /// The address of `nr` iovecs.
    pub data: u64,
    /// The address of `nr` tags (0: none).
    pub tags: u64,
    /// How many slots.
    pub nr: u32,
    /// Must be 0.
    pub resv2: u32,
}

// `struct io_uring_restriction` opcodes.
/// Allow one `io_uring_register(2)` opcode.
pub const IORING_RESTRICTION_REGISTER_OP: u16 = 0;
/// Allow one SQE opcode.
pub const IORING_RESTRICTION_SQE_OP: u16 = 1;
/// The SQE flags a request may carry.
pub const IORING_RESTRICTION_SQE_FLAGS_ALLOWED: u16 = 2;
/// The SQE flags every request must carry.
pub const IORING_RESTRICTION_SQE_FLAGS_REQUIRED: u16 = 3;

/// `struct io_uring_restriction`, for `IORING_REGISTER_RESTRICTIONS` (an array of them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restriction {
    /// `IORING_RESTRICTION_*`.
    pub opcode: u16,
    /// The union `register_op` / `sqe_op` / `sqe_flags`.
    pub arg: u8,
    /// Reserved, zero.
    pub resv: u8,
    /// Reserved, zero.
    pub resv2: [u32; 3],
}

/// `off` value meaning "use and advance the file position" (for pipes and terminals).
pub const OFF_CURRENT_POSITION: u64 = u64::MAX;

// Feature bits reported in `Params::features`.
/// `IORING_FEAT_NODROP`: the kernel keeps completions that do not fit the CQ, instead
/// of dropping them.
pub const IORING_FEAT_NODROP: u32 = 1 << 1;

const _: () = {
    assert!(size_of::<Sqe>() == 64);
    assert!(offset_of!(Sqe, opcode) == 0);
    assert!(offset_of!(Sqe, flags) == 1);
    assert!(offset_of!(Sqe, ioprio) == 2);
    assert!(offset_of!(Sqe, fd) == 4);
    assert!(offset_of!(Sqe, off) == 8);
    assert!(offset_of!(Sqe, addr) == 16);
    assert!(offset_of!(Sqe, len) == 24);
    assert!(offset_of!(Sqe, rw_flags) == 28);
    assert!(offset_of!(Sqe, user_data) == 32);
    assert!(offset_of!(Sqe, buf_index) == 40);
    assert!(offset_of!(Sqe, personality) == 42);
    assert!(offset_of!(Sqe, splice_fd_in) == 44);
    assert!(offset_of!(Sqe, addr3) == 48);
    assert!(offset_of!(Sqe, pad2) == 56);

    assert!(size_of::<Restriction>() == 16);
    assert!(size_of::<RsrcUpdate>() == 32);
    assert!(offset_of!(Restriction, arg) == 2);

    assert!(size_of::<Cqe>() == 16);
    assert!(offset_of!(Cqe, user_data) == 0);
    assert!(offset_of!(Cqe, res) == 8);
    assert!(offset_of!(Cqe, flags) == 12);

    assert!(size_of::<SqringOffsets>() == 40);
    assert!(offset_of!(SqringOffsets, user_addr) == 32);
    assert!(size_of::<CqringOffsets>() == 40);
    assert!(offset_of!(CqringOffsets, cqes) == 20);
    assert!(offset_of!(CqringOffsets, user_addr) == 32);

    assert!(size_of::<Params>() == 120);
    assert!(offset_of!(Params, sq_thread_idle) == 16);
    assert!(offset_of!(Params, features) == 20);
    assert!(offset_of!(Params, sq_off) == 40);
    assert!(offset_of!(Params, cq_off) == 80);
};
