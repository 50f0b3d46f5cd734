//! The device [`Context`] made from the placed memory ([`Parts`]): each ring, stream,
//! completion slot and arena block at its layout's offset, and how each print stream
//! writes to its file descriptor.

use std::os::fd::RawFd;

use gpuio_device::protocol::arena::Arena;
use gpuio_device::protocol::context::CONTEXT_MAGIC;
use gpuio_device::protocol::context::{Context, Refusals};
use gpuio_device::protocol::pool::Pool;
use gpuio_device::protocol::request::Requests;
use gpuio_device::protocol::ring::Ring;
use gpuio_device::protocol::running::Running;
use gpuio_device::protocol::solo::Solo;
use gpuio_device::protocol::stream::Stream;
use gpuio_device::protocol::sync::{AtomicI32, AtomicU32, AtomicU64, SharedCell};
use gpuio_device::protocol::uapi::{Cqe, Sqe};

use crate::consumer::restrictions::Setup;
use crate::consumer::submission::Queue;
use crate::memory::Mapping;

use super::layout::{completion_slots, Layout};
use super::SharedConfig;

/// What the context is made of: the layout and settings, and where the memory lies.
///
/// Every pointer it makes points into the queues', the logs', the arena's or the state
/// region's memory, at the kernel's offsets or at the layout's, which those regions cover;
/// all of it lives as long as `Shared`, which outlives every kernel and the waker. The
/// state region is zeroed: the initial state of ready flags, chunk counters and flights.
pub(super) struct Parts<'a> {
    pub(super) layout: &'a Layout,
    pub(super) cfg: &'a SharedConfig,
    pub(super) setup: &'a Setup,
    /// The state region as the agents see it.
    pub(super) base: *mut u8,
    /// Each region as the agents see it (see `Shared::new`'s order).
    pub(super) views: &'a [*mut u8],
    pub(super) logs: &'a Mapping,
    pub(super) arena: &'a Mapping,
}

impl Parts<'_> {
    /// The state region's word at `offset`.
    pub(super) fn state<T>(&self, offset: usize) -> *const T {
        self.base.wrapping_add(offset) as *const T
    }

    /// The context over `queues` and the solo ring.
    ///
    /// # Safety
    /// `self` describes live memory as its docs say, and `queues` and `solo` are those its
    /// regions were made from, in that order.
    pub(super) unsafe fn context(&self, queues: &[Queue], solo: Option<&(Queue, Mapping)>) -> Context {
        let fds = self.cfg.fds;
        // SAFETY: the rings, streams, slots, arena and solo ring below are made of the memory
        // that the caller's contract vouches for.
        unsafe {
            Context {
                magic: CONTEXT_MAGIC,
                rings: std::array::from_fn(|i| match queues.get(i) {
                    Some(queue) => self.ring(i, queue),
                    None => Ring::unused(), // past `ring_count`
                }),
                ring_count: queues.len() as u32,
                streams: std::array::from_fn(|i| self.stream(i)),
                stderr_stream: if same_file(fds[0], fds[1]) { 0 } else { 1 },
                stray_completions: AtomicU32::new(0),
                refusals: Refusals::new(),
                requests: self.requests(completion_slots(queues)),
                arena: self.arena(),
                allowed_ops: AtomicU64::new(self.setup.allowed_ops()),
                solo: match solo {
                    None => Solo::unused(),
                    Some((q, stage)) => self.solo(queues.len(), q, stage),
                },
                running: Running::new(),
                in_place: gpuio_device::protocol::in_place::InPlaceLines::new(),
            }
        }
    }

    /// Ring `i`, over `queue`: its SQEs and words in views `2 + 2i` and `3 + 2i`.
    ///
    /// # Safety
    /// As [`Parts::context`].
    pub(super) unsafe fn ring(&self, i: usize, queue: &Queue) -> Ring {
        let p = queue.params();
        let (sqes, words) = (self.views[2 + 2 * i], self.views[3 + 2 * i]);
        // SAFETY: `words` views `queue.rings()`; the offsets are the kernel's.
        unsafe {
            let w = |off| word_at(queue, words, off);
            Ring::new(
                w(p.sq_off.head),
                w(p.sq_off.tail),
                w(p.sq_off.flags),
                sqes as *const SharedCell<Sqe>,
                w(p.cq_off.head),
                w(p.cq_off.tail),
                words.add(p.cq_off.cqes as usize) as *const SharedCell<Cqe>,
                self.state(self.layout.ready[i]),
                p.sq_entries,
                p.cq_entries,
            )
        }
    }

    /// Print stream `i` (stdout, stderr), over its log (view 0) and its state.
    ///
    /// # Safety
    /// As [`Parts::context`].
    pub(super) unsafe fn stream(&self, i: usize) -> Stream {
        let (layout, fd) = (self.layout, self.cfg.fds[i]);
        let (positional, pos) = output_mode(fd);
        // SAFETY: the log lies in the logs' view at the layout's offset; its chunk counters
        // and flights in the state region at the layout's (the caller's contract).
        let mut s = unsafe {
            Stream::new(
                i as u32,
                fd,
                positional,
                pos,
                self.views[0].add(layout.bufs[i]) as *const SharedCell<u8>,
                self.cfg.log_bytes[i] as u64,
                self.state(layout.chunks[i]),
                self.state(layout.flights[i]),
                if positional { self.cfg.max_flights } else { 1 },
            )
        };
        // The kernel reads the log at the host's address.
        s.io_base = self.logs.as_ptr() as u64 + layout.bufs[i] as u64;
        s.stage = self.state(layout.stages[i]);
        if self.setup.fixed_files {
            s.fixed_file = i as i32;
        }
        if self.setup.fixed_logs {
            // Ring 0's registered buffer `i` (`Memory::logs`).
            s.fixed_log = i as i32;
        }
        s
    }

    /// The completion slots (`slots` of them).
    ///
    /// # Safety
    /// As [`Parts::context`], and the layout has room for `slots` slots.
    pub(super) unsafe fn requests(&self, slots: u32) -> Requests {
        let word = |i: usize| self.layout.request_words[i];
        // SAFETY: the slots' three words each lie in the state region at the layout's
        // offsets, `slots` long (the caller's contract).
        unsafe { Requests::new(self.state(word(0)), self.state(word(1)), self.state(word(2)), slots) }
    }

    /// The file-I/O arena (view 1) and its block states.
    ///
    /// # Safety
    /// As [`Parts::context`].
    pub(super) unsafe fn arena(&self) -> Arena {
        let blocks = self.cfg.arena_bytes / self.cfg.arena_block_bytes;
        // SAFETY: the arena's view covers `arena_bytes`, and its block states lie in the
        // state region at the layout's offset, one word a block (the caller's contract).
        let mut arena = unsafe {
            Arena::new(
                self.views[1] as *const SharedCell<u8>,
                // The kernel reads and writes the arena at the host's address.
                self.arena.as_ptr() as u64,
                self.cfg.arena_block_bytes as u64,
                Pool::new(self.state(self.layout.block_states), blocks as u32),
            )
        };
        // Transfers name the buffer table (`Memory`), which every ring holds.
        arena.fixed = self.setup.fixed_transfers;
        arena
    }

    /// The solo ring `q` after `n` rings: its SQEs, words and stage in views `2 + 2n` to
    /// `4 + 2n`.
    ///
    /// # Safety
    /// As [`Parts::context`].
    pub(super) unsafe fn solo(&self, n: usize, q: &Queue, stage: &Mapping) -> Solo {
        let p = q.params();
        let (sqes, words, stage_view) = (self.views[2 + 2 * n], self.views[3 + 2 * n], self.views[4 + 2 * n]);
        // SAFETY: `words` views `q.rings()`; the offsets are the kernel's.
        unsafe {
            let w = |off| word_at(q, words, off);
            let solo = Solo::new(
                w(p.sq_off.tail),
                w(p.cq_off.head),
                w(p.cq_off.tail),
                sqes as *const SharedCell<Sqe>,
                words.add(p.cq_off.cqes as usize) as *const SharedCell<Cqe>,
                p.sq_entries,
                p.cq_entries,
                stage_view as *const SharedCell<u8>,
                // The kernel reads and writes the buffer at the host's address.
                stage.as_ptr() as u64,
            );
            if self.cfg.solo_waits_on_results {
                // Slot `i`'s `res` lies `i` CQEs on from slot 0's, in the CQ that `words`
                // views; the caller asks for this on x86-64 only.
                solo.waiting_on_results(
                    words.add(p.cq_off.cqes as usize + std::mem::offset_of!(Cqe, res)) as *const AtomicI32,
                    size_of::<Cqe>() as u32,
                )
            } else {
                solo
            }
        }
    }
}

/// The ring word at the kernel's offset `off` in `queue`'s rings, where the protocol's agents
/// see it: in `words`, their view of those rings.
///
/// # Safety
/// `words` views `queue.rings()` (the same length), and `off` is one of the kernel's offsets
/// of a word in it.
pub(super) unsafe fn word_at(queue: &Queue, words: *mut u8, off: u32) -> *const AtomicU32 {
    let host = queue.ring_word(off) as *const u8;
    // SAFETY: the caller's contract: the word lies inside the rings, and `words` views them.
    unsafe { words.add(host.offset_from(queue.rings().as_ptr()) as usize) as *const AtomicU32 }
}

/// How a print stream writes to its file descriptor.
pub(super) fn output_mode(fd: RawFd) -> (bool, u64) {
    // SAFETY: fstat/fcntl/lseek on an fd we do not own only query it.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return (false, 0);
        }
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || fl & libc::O_APPEND != 0 {
            return (false, 0);
        }
        let pos = libc::lseek(fd, 0, libc::SEEK_CUR);
        if pos < 0 {
            return (false, 0);
        }
        (true, pos as u64)
    }
}

/// Whether two fds are the same open file (so stdout and stderr must share one stream).
fn same_file(a: RawFd, b: RawFd) -> bool {
    // SAFETY: fstat only queries.
    unsafe {
        let mut sa: libc::stat = std::mem::zeroed();
        let mut sb: libc::stat = std::mem::zeroed();
        libc::fstat(a, &mut sa) == 0 && libc::fstat(b, &mut sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino
    }
}
