//! The runtime context: everything a kernel needs to do I/O, in one block of memory the
//! host fills before launch. Kernels find it through a global (GPUs) or a thread-local
//! (the CPU backend), so they need no extra argument to print.

use crate::arena::Arena;
use crate::request::{Requests, KIND_REQUEST};
use crate::ring::Ring;
use crate::stream::Stream;
use crate::sync::{AtomicI32, AtomicU32, Ordering};
use crate::uapi::Cqe;

/// `"gpuio\0\0"` plus the layout version; the host writes it, the device checks it.
pub const CONTEXT_MAGIC: u64 = 0x6770_7569_6f00_0004;

/// The layout this build of the device crate gives the [`Context`]: the magic with the
/// Context's size folded in. A code object exports it as `gpuio_layout`; the host refuses a
/// code object whose layout differs from its own (one built against another gpuio), which
/// would otherwise read the context at the wrong offsets.
pub const CONTEXT_LAYOUT: u64 = CONTEXT_MAGIC ^ ((core::mem::size_of::<Context>() as u64) << 24);

/// [`CONTEXT_LAYOUT`], for the host to read from a loaded code object.
#[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static gpuio_layout: u64 = CONTEXT_LAYOUT;

/// Number of print streams: stdout and stderr.
pub const STREAMS: usize = 2;

/// Index of the stdout stream.
pub const STDOUT: usize = 0;

/// What a CQE's `user_data` says it completes.
const KIND_SHIFT: u32 = 56;
const KIND_STREAM: u64 = 1;

/// `user_data` for flight `seq` of stream `index`.
pub(crate) fn user_data_for_stream(index: u32, seq: u32) -> u64 {
    (KIND_STREAM << KIND_SHIFT) | ((index as u64) << 32) | seq as u64
}

/// The shared runtime state (see the module docs).
#[repr(C)]
pub struct Context {
    /// [`CONTEXT_MAGIC`].
    pub magic: u64,
    /// The io_uring.
    pub ring: Ring,
    /// stdout, stderr.
    pub streams: [Stream; STREAMS],
    /// The stream `eprint!` uses: 1, or 0 when stdout and stderr are the same file (so
    /// that the two never interleave inside a line or overwrite each other).
    pub stderr_stream: u32,
    /// CQEs whose `user_data` matched nothing and that succeeded (a bug if ever non-zero).
    pub stray_completions: AtomicU32,
    /// Requests that no stream made and that the kernel failed: under the host's io_uring
    /// sandbox, a forbidden opcode or SQE flag comes back as `-EACCES` without being
    /// executed. The host's `synchronize` reports them.
    pub refused_requests: AtomicU32,
    /// The errno of the latest of them.
    pub refused_errno: AtomicI32,
    /// Completion slots of device file I/O requests.
    pub requests: Requests,
    /// Host-visible staging memory for device file I/O, and the direct regions.
    pub arena: Arena,
    /// Device requests that came back `-EACCES`. Under the print-only sandbox every file
    /// request does (the kernel refused it without executing it); the host reports them.
    pub denied_requests: AtomicU32,
}

// SAFETY: the raw pointers in a Context point to memory shared by design between all
// agents; every access to it goes through the ring and stream protocols.
unsafe impl Sync for Context {}
unsafe impl Send for Context {}

impl Context {
    /// The stream `print!` (`stderr == false`) or `eprint!` writes to.
    #[inline]
    pub fn stream(&self, stderr: bool) -> &Stream {
        &self.streams[self.stream_index(stderr)]
    }

    /// The index in `streams` of the stream `print!` (`stderr == false`) or `eprint!`
    /// writes to.
    #[inline]
    pub fn stream_index(&self, stderr: bool) -> usize {
        if stderr {
            self.stderr_stream as usize % STREAMS
        } else {
            STDOUT
        }
    }

    /// Consumes available completions and routes each to its stream.
    #[inline] // on the print path (see `Stream::write_record`)
    pub fn reap(&self) -> bool {
        self.ring.reap(|cqe| self.dispatch(cqe))
    }

    fn dispatch(&self, cqe: Cqe) {
        let kind = cqe.user_data >> KIND_SHIFT;
        let index = ((cqe.user_data >> 32) & 0xff_ffff) as usize;
        if kind == KIND_STREAM && index < STREAMS && self.streams[index].complete(cqe.user_data as u32, cqe.res) {
            return;
        }
        if kind == KIND_REQUEST && self.requests.complete(cqe.user_data, cqe.res) {
            if cqe.res == -13 {
                // EACCES. Only the reaper writes it; the host reads it after a drain.
                self.denied_requests.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        if cqe.res < 0 {
            // Only the reaper writes these; the host reads them after a drain.
            self.refused_requests.fetch_add(1, Ordering::Relaxed);
            self.refused_errno.store(-cqe.res, Ordering::Relaxed);
        } else {
            self.stray_completions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Flushes `stream`, or asks whoever is flushing it to go on.
    #[inline] // on the print path (see `Stream::write_record`)
    pub fn flush(&self, stream: &Stream) {
        stream.flusher.run(|| stream.flush_work(self));
    }

    /// What a thread waiting for log space does: reap, then flush.
    ///
    /// Never called from inside a flush: a flush that waited on another flush's
    /// submission could wait on itself (tickets are taken in order).
    pub fn help(&self, stream: &Stream) {
        self.reap();
        self.flush(stream);
    }

    /// Reaps, and flushes every stream a completion kicked.
    pub fn progress(&self) {
        self.reap();
        for s in &self.streams {
            // AcqRel: pairs with the reaper's release of the kick.
            if s.kick.swap(0, Ordering::AcqRel) != 0 {
                self.flush(s);
            }
        }
    }

    /// Runs the protocol until every stream is written out and every request completed.
    /// `waiting` runs between rounds (the host wakes SQPOLL there; a GPU cannot).
    ///
    /// Only while no kernel prints into this context: the host's drain on the CPU
    /// backend, the `gpuio_drain` kernel on GPUs.
    pub fn drain(&self, mut waiting: impl FnMut()) {
        let mut backoff = crate::sync::Backoff::new();
        loop {
            self.progress();
            for s in &self.streams {
                self.flush(s);
            }
            if self.idle() {
                return;
            }
            waiting();
            backoff.snooze();
        }
    }

    /// Whether everything submitted has completed and every stream is written out.
    pub fn idle(&self) -> bool {
        self.streams.iter().all(|s| s.idle()) && self.ring.idle()
    }
}
