//! What a synchronize that gave up reports ([`HangReport`]): what it was waiting for, and
//! the rings', streams' and solo ring's words at that moment.

use std::fmt;
use std::io;
use std::time::Duration;

use gpuio_device::protocol::uapi::{IORING_SQ_CQ_OVERFLOW, IORING_SQ_NEED_WAKEUP};

/// What [`Runtime::synchronize`](crate::Runtime::synchronize) was waiting for when nothing moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// CPU-backend kernel threads to finish.
    KernelThreads,
    /// The host's drain on the CPU backend: every kernel thread has finished, and what they
    /// printed or submitted is still being written out or completed.
    Drain,
    /// GPU kernels to finish.
    GpuKernels,
    /// The `gpuio_drain` kernel, which writes out what GPU kernels printed, to finish.
    GpuDrain,
}

/// The io_uring's head and tail words, as read from host memory (volatile reads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingWords {
    /// SQ head: SQEs the kernel (or the host-thread fallback) has consumed.
    pub sq_head: u32,
    /// SQ tail: SQEs the device has published.
    pub sq_tail: u32,
    /// SQ flags: `IORING_SQ_NEED_WAKEUP` (1), `IORING_SQ_CQ_OVERFLOW` (2), ...
    pub sq_flags: u32,
    /// CQ head: completions the device has reaped.
    pub cq_head: u32,
    /// CQ tail: completions the kernel has posted.
    pub cq_tail: u32,
}

impl RingWords {
    /// Whether the kernel says completions overflowed the CQ (`IORING_SQ_CQ_OVERFLOW`).
    pub fn cq_overflow(&self) -> bool {
        self.sq_flags & IORING_SQ_CQ_OVERFLOW != 0
    }

    /// The words without the flags: what counts as progress.
    fn counters(&self) -> [u32; 4] {
        [self.sq_head, self.sq_tail, self.cq_head, self.cq_tail]
    }
}

/// The device's SQ tickets (CPU backend: the counters live in host memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tickets {
    /// Tickets (SQ positions) handed to submitters.
    pub taken: u32,
    /// SQEs published to the kernel (the SQ tail the device last stored).
    pub published: u32,
    /// Completions reaped (the CQ head the device last stored).
    pub reaped: u32,
}

/// One ring past ring 0 of a runtime with several ([`crate::Builder::rings`]), in a
/// [`HangReport`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OtherRing {
    /// Its words.
    pub words: RingWords,
    /// Its SQ tickets, where the context could be read.
    pub tickets: Option<Tickets>,
}

/// A print stream's positions, in bytes since the runtime was created: producers reserve,
/// then commit; the flusher hands committed bytes to writes; completed writes release.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamPositions {
    /// The file descriptor the stream writes to.
    pub fd: i32,
    /// Bytes handed to producers.
    pub reserved: u64,
    /// Bytes producers have written into the log.
    pub committed: u64,
    /// Bytes handed to write requests.
    pub flushed: u64,
    /// Bytes whose writes completed, as the device has seen (it reaped their completions).
    pub released: u64,
    /// Bytes known written: `released`, plus what the completions that no reaper has
    /// taken yet say their writes wrote (the host looks at the CQ without consuming it).
    /// A hang report counts the bytes below `reserved` and past this as not confirmed
    /// written.
    pub written: u64,
    /// Lines (newlines) among the complete bytes past `written` (up to `flushed`, or up to
    /// `committed` when no print was in progress): whole lines whose write is not
    /// confirmed. Counted from the log itself.
    pub unconfirmed_lines: u64,
}

/// The solo ring's part of a [`HangReport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoloRing {
    /// Its words.
    pub words: RingWords,
    /// Whether a thread held it (read as the tickets are; `None` where they could not be).
    pub held: Option<bool>,
}

/// What was outstanding when [`Runtime::synchronize`](crate::Runtime::synchronize) saw
/// nothing move ([`Error::Hang`](super::Error::Hang), and the default's warnings on
/// stderr). Its `Display` is one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HangReport {
    /// What synchronize was waiting for.
    pub waiting_for: Waiting,
    /// How long nothing had moved.
    pub stalled: Duration,
    /// Ring 0's words (the ring that carries the prints).
    pub ring: RingWords,
    /// The device's SQ tickets: on the CPU backend, and on CUDA from a copy of the
    /// context read while the kernels run; `None` where the context could not be read
    /// (HSA, or that copy failed).
    pub tickets: Option<Tickets>,
    /// Rings 1 onward, where there are several.
    pub other_rings: Vec<OtherRing>,
    /// The solo ring (`Builder::solo`), if the runtime has one (boxed: it keeps
    /// [`Error`](super::Error) small).
    pub solo: Option<Box<SoloRing>>,
    /// Each print stream's positions (read as the tickets are; empty where they could not
    /// be).
    pub streams: Vec<StreamPositions>,
    /// Kernel threads still running, as the backend can tell (boxed: it keeps
    /// [`Error`](super::Error) small).
    pub running: Box<RunningThreads>,
    /// The errno of the last failed `io_uring_enter` of the waker (`IORING_ENTER_SQ_WAKEUP`,
    /// or a submission to a ring without SQPOLL), if one failed: SQPOLL that sleeps and
    /// cannot be woken stops consuming, and so does a ring the waker cannot submit to.
    pub wake_error: Option<std::num::NonZeroI32>,
}

/// Kernel threads still running: on the CPU backend each thread; on a GPU, by block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunningThreads {
    /// CPU backend: how many.
    pub count: usize,
    /// CPU backend: the first of them (up to [`HangReport::NAMED_THREADS`]), as `(block,
    /// thread)`, in order.
    pub first: Vec<(u32, u32)>,
    /// GPU: the blocks whose threads have not all returned, of kernels declared with
    /// `kernel!` (they count themselves in and out; a driver tells only that a kernel
    /// runs). `None` on the CPU backend and where the context could not be read (HSA).
    pub blocks: Option<RunningBlocks>,
}

/// The blocks of a GPU's `kernel!` kernels whose threads have not all returned (see
/// [`RunningThreads::blocks`]), read from a copy of the context taken while they run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunningBlocks {
    /// Threads started and not returned, over all blocks.
    pub threads: u64,
    /// How many blocks have such threads (blocks counted modulo `modulo`, where set).
    pub blocks: usize,
    /// The first of them (up to [`HangReport::NAMED_THREADS`]), as `(block, threads not
    /// returned)`, in block order.
    pub first: Vec<(u32, u32)>,
    /// Set when a grid had more blocks than the context counts apart: block numbers are
    /// then this modulus's residues (block 3 stands for blocks 3, 3 + m, 3 + 2m, ...).
    pub modulo: Option<u32>,
}

impl fmt::Display for RunningBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.threads == 0 {
            return write!(f, "every thread of its kernel!-declared kernels has returned");
        }
        let named: Vec<String> = self.first.iter().map(|(b, n)| format!("{n} in block {b}")).collect();
        let more = if self.blocks > named.len() { ", ..." } else { "" };
        write!(
            f,
            "{} thread(s) of kernel!-declared kernels have not returned, in {} block(s): {}{more}",
            self.threads,
            self.blocks,
            named.join(", ")
        )?;
        if let Some(m) = self.modulo {
            write!(f, " (block numbers modulo {m}: a grid had more blocks)")?;
        }
        Ok(())
    }
}

impl HangReport {
    /// How many running threads a report names.
    pub const NAMED_THREADS: usize = 8;

    /// Whether `self` and `other` show the same progress: everything but the time and the
    /// SQ flags (SQPOLL setting `NEED_WAKEUP` as it falls asleep is not progress).
    pub(crate) fn same_progress(&self, other: &HangReport) -> bool {
        self.waiting_for == other.waiting_for
            && self.ring.counters() == other.ring.counters()
            && self.tickets == other.tickets
            && self.other_rings.len() == other.other_rings.len()
            && self
                .other_rings
                .iter()
                .zip(&other.other_rings)
                .all(|(a, b)| a.words.counters() == b.words.counters() && a.tickets == b.tickets)
            && self.solo.as_ref().map(|s| (s.words.counters(), s.held))
                == other.solo.as_ref().map(|s| (s.words.counters(), s.held))
            && self.streams == other.streams
            && self.running.count == other.running.count
            && self.running.blocks == other.running.blocks
    }
}

/// How far counter `a` is ahead of counter `b` (modulo 2^32), or 0 where it is behind: the
/// words are read one at a time, and the solo ring's holder may store the CQ head before
/// the kernel's tail shows it (`Solo::waiting_on_results`).
fn ahead(a: u32, b: u32) -> u32 {
    let d = a.wrapping_sub(b);
    if (d as i32) < 0 {
        0
    } else {
        d
    }
}

/// One ring's part of a [`HangReport`]'s line.
fn write_ring(f: &mut fmt::Formatter<'_>, name: &str, r: &RingWords, tickets: Option<&Tickets>) -> fmt::Result {
    write!(
        f,
        "; {name}: SQ head {} tail {}, CQ head {} tail {} ({} SQE(s) not consumed, {} request(s) \
         in progress, {} completion(s) not reaped), flags {:#x}",
        r.sq_head,
        r.sq_tail,
        r.cq_head,
        r.cq_tail,
        ahead(r.sq_tail, r.sq_head),
        ahead(r.sq_head, r.cq_tail),
        ahead(r.cq_tail, r.cq_head),
        r.sq_flags
    )?;
    if r.sq_flags & IORING_SQ_NEED_WAKEUP != 0 {
        write!(f, " (SQPOLL asleep)")?;
    }
    if r.cq_overflow() {
        write!(f, " (CQ_OVERFLOW: completions overflowed the CQ, a gpuio bug)")?;
    }
    if let Some(t) = tickets {
        write!(
            f,
            "; SQ tickets: {} taken, {} published, {} reaped ({} request(s) in flight)",
            t.taken,
            t.published,
            t.reaped,
            t.taken.wrapping_sub(t.reaped)
        )?;
    }
    Ok(())
}

impl fmt::Display for HangReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "nothing has moved for {:.1} s while waiting for ",
            self.stalled.as_secs_f64()
        )?;
        self.write_waiting(f)?;
        if let Some(blocks) = &self.running.blocks {
            write!(f, "; {blocks}")?;
        }
        if let Some(e) = self.wake_error {
            write!(
                f,
                "; io_uring_enter failed ({}): waking the kernel's SQ thread, which consumes \
                 nothing while it sleeps, or submitting to a ring without one (a seccomp filter \
                 on io_uring_enter? GPUIO_URING=off serves the ring from a host thread)",
                io::Error::from_raw_os_error(e.get())
            )?;
        }
        let first = if self.other_rings.is_empty() { "ring" } else { "ring 0" };
        write_ring(f, first, &self.ring, self.tickets.as_ref())?;
        for (i, r) in self.other_rings.iter().enumerate() {
            write_ring(f, &format!("ring {}", i + 1), &r.words, r.tickets.as_ref())?;
        }
        if let Some(solo) = &self.solo {
            write_ring(f, "solo ring", &solo.words, None)?;
            if solo.held == Some(true) {
                write!(f, " (held by a thread)")?;
            }
        }
        for s in &self.streams {
            write_stream(f, s)?;
        }
        Ok(())
    }
}

impl HangReport {
    /// What the wait was for (with the CPU backend's threads still running).
    fn write_waiting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.waiting_for {
            Waiting::KernelThreads => {
                write!(
                    f,
                    "CPU kernel threads to finish: {} kernel thread(s) still running",
                    self.running.count
                )?;
                let named: Vec<String> = self
                    .running
                    .first
                    .iter()
                    .map(|(b, t)| format!("block {b} thread {t}"))
                    .collect();
                if !named.is_empty() {
                    let more = if self.running.count > named.len() { ", ..." } else { "" };
                    write!(f, " ({}{more})", named.join(", "))?;
                }
            }
            Waiting::Drain => write!(
                f,
                "the kernels' prints and requests to complete (every kernel thread has finished)"
            )?,
            Waiting::GpuKernels => write!(f, "the GPU: a GPU kernel is still running")?,
            Waiting::GpuDrain => write!(
                f,
                "the GPU: a GPU kernel is still running (gpuio_drain, which writes out what the \
                 kernels printed)"
            )?,
        }
        Ok(())
    }
}

/// One stream's positions in a hang report, and what of them is not confirmed written.
fn write_stream(f: &mut fmt::Formatter<'_>, s: &StreamPositions) -> fmt::Result {
    write!(
        f,
        "; fd {}: reserved {}, committed {}, flushed {}, released {}",
        s.fd, s.reserved, s.committed, s.flushed, s.released
    )?;
    // Counters are read one at a time while kernels may run: a difference that came out
    // negative is none.
    let unconfirmed = s.reserved.saturating_sub(s.written);
    let unsubmitted = s.reserved.saturating_sub(s.flushed);
    if unconfirmed != 0 {
        write!(
            f,
            " ({unconfirmed} byte(s), {} whole line(s), not confirmed written; \
             {unsubmitted} byte(s) not yet handed to a write)",
            s.unconfirmed_lines
        )?;
    } else {
        write!(f, " (every byte written)")?;
    }
    Ok(())
}
