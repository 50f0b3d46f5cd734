//! Errors of the host runtime.

use std::fmt;
use std::io;
use std::time::Duration;

use gpuio_device::protocol::uapi::{IORING_SQ_CQ_OVERFLOW, IORING_SQ_NEED_WAKEUP};

use crate::sandbox::Sandbox;

/// Everything the host runtime can report. New variants may come in minor releases
/// (`#[non_exhaustive]`): match the ones you handle and keep a `_` arm.
///
/// Failed prints are reported as [`Error::Print`], after the rest went out, so a caller
/// can report them and go on:
///
/// ```
/// use gpuio_host::{Backend, Error, Runtime};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// rt.launch(1, 4, || gpuio_device::println!("thread {}", gpuio_device::thread_idx()))?;
/// match rt.synchronize() {
///     Ok(()) => {}
///     Err(Error::Print(failed)) => {
///         for o in &failed.outputs {
///             eprintln!("fd {}: {} lines lost", o.fd, o.lost_lines);
///         }
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), Error>(())
/// ```
#[non_exhaustive]
pub enum Error {
    /// io_uring cannot be used here; the message names the cause.
    UringUnavailable(String),
    /// A system call failed.
    Os {
        /// What was being done, e.g. `mmap of the print logs`.
        what: &'static str,
        /// The error it returned.
        source: io::Error,
    },
    /// A backend was asked for (by `GPUIO_BACKEND` or the builder) but cannot run here.
    BackendUnavailable {
        /// The backend asked for, or that the call needs, e.g. `hsa`.
        backend: &'static str,
        /// Why it cannot run.
        reason: String,
    },
    /// A configuration value is out of range.
    Config(String),
    /// Prints that were fire-and-forget failed; nothing hung, the rest went out.
    Print(PrintErrors),
    /// A CUDA driver call failed (its `CUresult` in [`DriverError::code`]).
    Cuda(DriverError),
    /// An HSA runtime call failed (its `hsa_status_t` in [`DriverError::code`]).
    Hsa(DriverError),
    /// A HIP runtime call failed (the `hip` feature: modules the host loaded with HIP; its
    /// `hipError_t` in [`DriverError::code`]).
    Hip(DriverError),
    /// None of the code objects offered is for this runtime's GPU.
    NoCodeObject {
        /// The GPU, e.g. `gfx1030 (amdgcn-amd-amdhsa--gfx1030)`.
        gpu: String,
        /// The processors there were code objects for.
        available: Vec<String>,
    },
    /// Kernel threads panicked (CPU backend) or a kernel faulted.
    Kernel(String),
    /// The kernel refused (or failed) device requests that no print made: under the
    /// io_uring sandbox, forbidden opcodes or flags, never executed.
    Refused(Refused),
    /// [`Runtime::synchronize`](crate::Runtime::synchronize) gave up: nothing it can observe
    /// moved for the hang timeout ([`Builder::hang_timeout`](crate::Builder::hang_timeout)).
    /// The kernels and their I/O may still be running: the runtime stays as it was, and a
    /// later `synchronize` waits for them again (and succeeds if they finish).
    Hang(Box<HangReport>),
    /// A call that waits for kernels, or starts one, was made from inside a CPU kernel
    /// thread, where it would wait for itself.
    InsideKernel {
        /// The call, e.g. `Runtime::synchronize`.
        call: &'static str,
    },
    /// A call that needs the kernels done ([`Output::read`](crate::Output::read)) was made
    /// while kernels launched since the last successful synchronize may still run.
    KernelsRunning {
        /// The call, e.g. `Output::read`.
        call: &'static str,
    },
    /// The kernel set `IORING_SQ_CQ_OVERFLOW`: completions did not fit the completion queue
    /// and wait in the kernel. The device keeps no more requests in flight than the CQ
    /// holds, so this is a gpuio bug.
    CqOverflow {
        /// The SQ flags word, as read.
        sq_flags: u32,
    },
}

/// A GPU driver or runtime call that failed ([`Error::Cuda`], [`Error::Hsa`],
/// [`Error::Hip`]): the driver's own code and name, for a program to match on, and the text
/// a person reads.
///
/// ```
/// use gpuio_host::{DriverError, Error};
/// fn missing_kernel(e: &Error) -> bool {
///     matches!(e, Error::Cuda(DriverError { code: Some(500), .. })) // CUDA_ERROR_NOT_FOUND
/// }
/// # assert!(!missing_kernel(&Error::Config("x".into())));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverError {
    /// The call's result code (`CUresult`, `hsa_status_t`, `hipError_t`); `None` for a
    /// failure gpuio found itself around a call that succeeded.
    pub code: Option<i64>,
    /// The code's name, e.g. `CUDA_ERROR_NOT_FOUND` (empty without a code).
    pub name: String,
    /// What failed and why, as displayed: `cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND
    /// (500)`.
    pub message: String,
}

impl DriverError {
    /// A call that returned `code`, named `name`: "`what` failed: `name` (`code`)", with
    /// `shown` the code as the driver's tools print it (decimal for CUDA, hex for HSA).
    pub fn call(what: &str, code: i64, name: &str, shown: &str) -> DriverError {
        DriverError {
            code: Some(code),
            name: name.to_string(),
            message: if name.is_empty() {
                format!("{what} failed: code {shown}")
            } else {
                format!("{what} failed: {name} ({shown})")
            },
        }
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DriverError {}

/// Its text, where a backend's setup collects reasons as strings.
impl From<DriverError> for String {
    fn from(e: DriverError) -> String {
        e.message
    }
}

/// A failure without a driver code, in the driver's words.
impl From<String> for DriverError {
    fn from(message: String) -> DriverError {
        DriverError {
            code: None,
            name: String::new(),
            message,
        }
    }
}

/// `Debug` is the `Display` text: a `main` that returns `Result<(), gpuio::Error>` prints
/// what went wrong and the way out, as a person should read it (the variants' fields are
/// public for programs that want them).
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UringUnavailable(why) => write!(f, "io_uring is unavailable: {why}"),
            Error::Os { what, source } => write!(f, "{what} failed: {source}"),
            Error::BackendUnavailable { backend, reason } => {
                write!(f, "the {backend} backend is unavailable: {reason}")
            }
            Error::Config(why) => write!(f, "invalid configuration: {why}"),
            Error::Print(p) => write!(f, "{p}"),
            Error::Cuda(why) => write!(f, "CUDA: {why}"),
            Error::Hsa(why) => write!(f, "HSA: {why}"),
            Error::Hip(why) => write!(f, "HIP: {why}"),
            Error::NoCodeObject { gpu, available } if available.is_empty() => write!(
                f,
                "no code object for this GPU, {gpu}: the program holds none (its build found no GPU, \
                 or was told to build none); build it with GPUIO_GPU_TARGETS=all, or a list that \
                 names this GPU's target"
            ),
            Error::NoCodeObject { gpu, available } => write!(
                f,
                "no code object for this GPU, {gpu}: there are code objects for [{}]; build the \
                 program with GPUIO_GPU_TARGETS naming this GPU's target, or all",
                available.join(", ")
            ),
            Error::Kernel(why) => write!(f, "kernel failed: {why}"),
            Error::Refused(r) => write!(f, "{r}"),
            Error::Hang(r) => write!(
                f,
                "synchronize gave up (hang timeout): {r}; the kernels and their I/O may still be \
                 running, and a later synchronize waits for them again"
            ),
            Error::InsideKernel { call } => write!(
                f,
                "{call} was called from inside a CPU kernel thread, where it would wait for the \
                 kernel it runs in: call it from a host thread"
            ),
            Error::KernelsRunning { call } => write!(
                f,
                "{call} while kernels launched since the last synchronize may still run: call \
                 Runtime::synchronize first"
            ),
            Error::CqOverflow { sq_flags } => write!(
                f,
                "the io_uring completion queue overflowed (IORING_SQ_CQ_OVERFLOW; SQ flags {sq_flags:#x}): \
                 the device keeps no more requests in flight than the CQ holds, so this is a gpuio bug"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Failed print writes, per output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrintErrors {
    /// One entry per output that had failures.
    pub outputs: Vec<OutputErrors>,
}

/// Failed writes to one file descriptor since the last report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputErrors {
    /// The file descriptor.
    pub fd: i32,
    /// Write requests that failed.
    pub failed_writes: u32,
    /// The errno of the latest failure.
    pub errno: i32,
    /// Bytes not written.
    pub lost_bytes: u64,
    /// Lines (newlines) among them.
    pub lost_lines: u64,
    /// Lines whose `Display` returned an error: each went out cut where it failed and
    /// marked with `gpuio_device::protocol::print::FORMAT_ERROR` (std's `println!` panics
    /// there). They were written; they are not among the lost ones.
    pub format_errors: u32,
}

impl fmt::Display for PrintErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device prints failed:")?;
        for (i, o) in self.outputs.iter().enumerate() {
            write!(f, "{} fd {}:", if i == 0 { "" } else { ";" }, o.fd)?;
            if o.failed_writes > 0 {
                write!(
                    f,
                    " {} write(s) failed, last error: {}; {} bytes / {} lines lost",
                    o.failed_writes,
                    io::Error::from_raw_os_error(o.errno),
                    o.lost_bytes,
                    o.lost_lines
                )?;
            }
            if o.format_errors > 0 {
                write!(
                    f,
                    "{} {} line(s) whose Display returned an error, cut there and marked {}",
                    if o.failed_writes > 0 { "," } else { "" },
                    o.format_errors,
                    gpuio_device::protocol::print::FORMAT_ERROR
                )?;
            }
        }
        Ok(())
    }
}

/// Device requests the kernel refused or failed, that no print made (so nobody else
/// reports them), since the last report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// How many.
    pub requests: u32,
    /// The errno of the latest: `EACCES` when the sandbox refused it.
    pub errno: i32,
    /// The sandbox in force.
    pub sandbox: Sandbox,
    /// Whether print outputs are registered files.
    pub fixed_files: bool,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = io::Error::from_raw_os_error(self.errno);
        if self.errno == libc::EACCES {
            write!(
                f,
                "the sandbox refused {} device request(s) without running them (last error: {last})",
                self.requests
            )?;
        } else {
            write!(
                f,
                "{} device request(s) that no print made failed (last error: {last})",
                self.requests
            )?;
        }
        write!(
            f,
            "; the sandbox is {:?}: it allows {}",
            self.sandbox,
            self.sandbox.describe(self.fixed_files)
        )?;
        if self.errno == libc::EACCES && self.sandbox == Sandbox::PrintOnly {
            write!(
                f,
                "; for device file I/O, build the runtime with .sandbox(Sandbox::FileIo)"
            )?;
        }
        Ok(())
    }
}

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
/// nothing move ([`Error::Hang`], and the default's warnings on stderr). Its `Display`
/// is one line.
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
    /// [`Error`] small).
    pub solo: Option<Box<SoloRing>>,
    /// Each print stream's positions (read as the tickets are; empty where they could not
    /// be).
    pub streams: Vec<StreamPositions>,
    /// Kernel threads still running, as the backend can tell (boxed: it keeps [`Error`]
    /// small).
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

#[cfg(test)]
mod tests {
    use super::Error;

    /// A program with no code object for its GPU is told how to build one, whether it holds
    /// none (built where no GPU was found) or others.
    #[test]
    fn no_code_object_names_the_way_out() {
        let none = Error::NoCodeObject {
            gpu: "NVIDIA H200 (sm_90)".into(),
            available: Vec::new(),
        }
        .to_string();
        assert!(none.contains("the program holds none"), "{none}");
        assert!(none.contains("GPUIO_GPU_TARGETS=all"), "{none}");
        let others = Error::NoCodeObject {
            gpu: "gfx942 (amdgcn-amd-amdhsa--gfx942)".into(),
            available: vec!["gfx90a".into()],
        }
        .to_string();
        assert!(others.contains("there are code objects for [gfx90a]"), "{others}");
        assert!(
            others.contains("GPUIO_GPU_TARGETS naming this GPU's target"),
            "{others}"
        );
    }
}
