//! The arena: host-visible memory for the bytes of device file I/O, and the table of
//! host-visible regions that the kernel may read and write directly.
//!
//! A GPU thread's buffer usually lives in device memory, which the kernel's io_uring cannot
//! touch. Such a transfer is *staged*: it goes through a block of the arena (host memory
//! the GPU can address), in pieces of at most one block, and the GPU copies between the
//! block and the caller's buffer (before a write's submission, after a read's completion).
//!
//! A buffer inside a registered host-visible *region* (the host's
//! `Runtime::host_buffer`) needs no copy: its SQE points at it directly, translated to the
//! address at which the kernel sees it.
//!
//! Blocks are taken from a [`Pool`] and given back when the request that used them has
//! completed (invariant 3: not when the SQ head moves; the kernel may punt a request to
//! io-wq and touch the buffer later). A path for `open` also travels in a block.
//!
//! The invariants cited here are listed, numbered, in `docs/PROTOCOL.md`.

use crate::protocol::pool::Pool;
use crate::protocol::sync::{AtomicU64, Ordering, SharedCell};

/// How many host-visible regions can be registered at once.
pub const MAX_REGIONS: usize = 8;

/// The registered-buffer table (`IORING_REGISTER_BUFFERS`) of every ring whose transfers
/// are `*_FIXED` ([`Arena::fixed`]): the `buf_index` a request names for each part of
/// gpuio's memory. The kernel fails a fixed request whose range leaves its buffer with
/// `EFAULT`, so such a ring reads and writes nothing else. The logs are ring 0's alone
/// (it carries the prints); its other slots, and theirs elsewhere, may be empty.
pub mod buffer {
    use super::MAX_REGIONS;
    /// Stream `i`'s log is buffer `LOG + i` (stdout's, then stderr's).
    pub const LOG: u16 = 0;
    /// The arena's blocks, whole.
    pub const ARENA: u16 = 2;
    /// The solo ring's staging buffer ([`crate::protocol::solo`]).
    pub const SOLO_STAGE: u16 = 3;
    /// Host-visible region `i` is buffer `REGION + i`, while it is registered.
    pub const REGION: u16 = 4;
    /// Entries in the table.
    pub const COUNT: usize = REGION as usize + MAX_REGIONS;
}

/// A host-visible region: `[start, start + len)` as the device sees it, at `io_base` as the
/// kernel sees it. Written by the host only while no kernel runs; `len == 0`: unused.
#[repr(C)]
pub struct Region {
    /// First byte, device view.
    pub start: AtomicU64,
    /// Length in bytes (0: the entry is unused).
    pub len: AtomicU64,
    /// First byte, kernel view.
    pub io_base: AtomicU64,
}

impl Region {
    /// An unused entry.
    pub fn empty() -> Region {
        Region {
            start: AtomicU64::new(0),
            len: AtomicU64::new(0),
            io_base: AtomicU64::new(0),
        }
    }
}

/// The arena (see the module docs).
#[repr(C)]
pub struct Arena {
    /// The blocks, where the device sees them: `blocks * block` bytes.
    pub buf: *const SharedCell<u8>,
    /// The address of `buf[0]` as the kernel sees it (SQEs carry these addresses).
    pub io_base: u64,
    /// Bytes per block: a power of two, at least 4096 (a path must fit).
    pub block: u64,
    /// Which blocks are taken.
    pub pool: Pool,
    /// Registered host-visible regions.
    pub regions: [Region; MAX_REGIONS],
    /// Bytes handed to staged pieces (through blocks), for the host's statistics.
    pub staged_bytes: AtomicU64,
    /// Bytes handed to direct pieces (host-visible buffers), likewise.
    pub direct_bytes: AtomicU64,
    /// Whether every ring holds the [`buffer`] table, so that transfers are
    /// `IORING_OP_READ_FIXED`/`WRITE_FIXED` naming it (the `FileIo` sandbox, where the
    /// locked-memory limit allowed the registration). Set by the host before any kernel.
    pub fixed: bool,
}

impl Arena {
    /// An arena of `pool.count` blocks of `block` bytes at `buf` (kernel view `io_base`).
    ///
    /// # Safety
    /// `buf` points to `pool.count * block` bytes that stay valid, and are accessed only
    /// through this protocol, while the arena is used; `block` is a power of two.
    pub unsafe fn new(buf: *const SharedCell<u8>, io_base: u64, block: u64, pool: Pool) -> Arena {
        Arena {
            buf,
            io_base,
            block,
            pool,
            regions: core::array::from_fn(|_| Region::empty()),
            staged_bytes: AtomicU64::new(0),
            direct_bytes: AtomicU64::new(0),
            fixed: false,
        }
    }

    /// The cells of block `b`.
    pub fn cells(&self, b: u32) -> *const SharedCell<u8> {
        // SAFETY: `b < pool.count` for a taken block, so the offset stays inside `buf`.
        unsafe { self.buf.add(((b & (self.pool.count - 1)) as u64 * self.block) as usize) }
    }

    /// Block `b`'s address as the kernel sees it.
    pub fn io_addr(&self, b: u32) -> u64 {
        // The cells' offset from `buf` in bytes (under loom a cell is bigger than a byte).
        self.io_base.wrapping_add(self.cells(b) as u64 - self.buf as u64)
    }

    /// Where the kernel sees `[ptr, ptr + len)`, and the [`buffer`] index of its region, if
    /// that range lies inside one registered host-visible region.
    pub fn direct(&self, ptr: *const u8, len: usize) -> Option<(u64, u16)> {
        let (p, n) = (ptr as u64, len as u64);
        for (i, r) in self.regions.iter().enumerate() {
            // Relaxed: the table changes only while no kernel runs; a kernel launch orders
            // the host's writes before every device read.
            let rlen = r.len.load(Ordering::Relaxed);
            let start = r.start.load(Ordering::Relaxed);
            if rlen != 0 && p >= start && p - start <= rlen && n <= rlen - (p - start) {
                return Some((
                    r.io_base.load(Ordering::Relaxed) + (p - start),
                    buffer::REGION + i as u16,
                ));
            }
        }
        None
    }

    /// Adds `len` bytes handed to a piece to [`Arena::direct_bytes`] (`direct`) or
    /// [`Arena::staged_bytes`].
    pub fn count(&self, direct: bool, len: usize) {
        let counter = if direct { &self.direct_bytes } else { &self.staged_bytes };
        // Relaxed: statistics only.
        counter.fetch_add(len as u64, Ordering::Relaxed);
    }
}

// SAFETY: the pointers point to memory shared by design (`Arena::new`'s contract keeps it
// valid); blocks are handed out by the pool, and each is accessed only by its holder and by
// the kernel for the holder's request; the region table and the counters are atomics. So
// shared references from many threads are sound.
unsafe impl Sync for Arena {}
// SAFETY: an Arena owns nothing thread-bound: moving it moves only the pointers, whose
// validity `Arena::new`'s contract ties to the memory, not to a thread.
unsafe impl Send for Arena {}
