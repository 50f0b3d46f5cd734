//! Waiting for kernels and their I/O: [`Runtime::synchronize`] and what it builds on
//! (the host's drain, the GPU's waits; what the watchdog observes is `observe.rs`), and the reports it
//! makes: kernel failures, refused requests, failed prints.

use std::time::Duration;

use gpuio_device::protocol::arch::host::install_doorbell;
use gpuio_device::protocol::context::Context;
use gpuio_device::protocol::stream::Stream;
use gpuio_device::protocol::sync::Ordering;
use gpuio_device::protocol::uapi::IORING_SQ_CQ_OVERFLOW;

use super::{Gpu, Runtime};
use crate::backend::cpu::THREADS_PACING;
use crate::error::{Error, HangReport, OutputErrors, PrintErrors, Refused, Result, Waiting};
use crate::runtime::print_files::{self, Mode};
use crate::sandbox;
use crate::shared::Shared;
use crate::watchdog::{self, Pacing};

/// How many failed threads a kernel failure names; it counts the rest ("and N more").
const SHOWN_FAILURES: usize = 4;

/// The host's drain: as the device's own backoff (`gpuio_device::protocol::sync::Backoff`), which
/// `Context::drain` uses: completions usually arrive within microseconds, so it yields for
/// a long while, then dozes 50 µs at a time.
const DRAIN_PACING: Pacing = Pacing {
    spins: 8,
    yields: 4096,
    first_pause: Duration::from_micros(1),
    max_pause: Duration::from_micros(50),
};
/// A GPU: a few µs of polling the driver, then sleeps growing to 1 ms while a long
/// kernel runs.
const GPU_PACING: Pacing = Pacing {
    spins: 16,
    yields: 16,
    first_pause: Duration::from_micros(1),
    max_pause: Duration::from_millis(1),
};

impl Runtime {
    /// Waits until every kernel finished and every request they submitted completed
    /// (invariant 8), then reports failed kernels, requests the kernel refused
    /// ([`Error::Refused`]), and failed fire-and-forget prints since the last report
    /// (invariant 7), in that order; what is not reported now is at the next call. On CUDA,
    /// once the host program announced launches of its own
    /// ([`Runtime::prepare_external_launch`]), it waits for every stream of the context
    /// (cudarc's too), else for gpuio's launches; `synchronize_streams` (the `cudarc`
    /// feature) waits for the streams named.
    ///
    /// No silent hang (invariant 11): if nothing moves for the hang timeout
    /// ([`Builder::hang_timeout`](crate::Builder::hang_timeout)), it returns [`Error::Hang`], naming what is outstanding;
    /// the kernels stay launched, and the next call waits for them again. Without a
    /// timeout it waits for as long as it takes, saying so on stderr after 30 s.
    pub fn synchronize(&self) -> Result<()> {
        self.synchronize_only(None)
    }

    /// [`Runtime::synchronize`], waiting for the host's CUDA streams `only` (as addresses)
    /// rather than all of the context's.
    pub(crate) fn synchronize_only(&self, only: Option<&[usize]>) -> Result<()> {
        let result = self.synchronize_kernels(only);
        // Whatever it found: the launches' strings and slices go once no kernel runs.
        self.release_staged();
        result
    }

    /// [`Runtime::synchronize`] without the release of launch arguments.
    fn synchronize_kernels(&self, only: Option<&[usize]>) -> Result<()> {
        super::outside_kernels("Runtime::synchronize")?;
        if let Some(gpu) = &self.gpu {
            gpu.usable()?;
        }
        let failures = self.cpu.join(|exits| {
            self.wait(
                THREADS_PACING,
                || Ok(exits.running() == 0),
                |max| exits.wait(max),
                Waiting::KernelThreads,
            )
        })?;
        if let Some(ctx) = self.shared.host_context() {
            if let Err(e) = self.drain_host(ctx) {
                // Joined: the synchronize that completes the drain reports them.
                self.cpu.keep_failures(failures);
                return Err(e);
            }
        }
        self.cpu.finish_launches(|| self.waker.deactivate());
        if let Some(gpu) = &self.gpu {
            self.synchronize_launched(gpu, only)?;
        }
        for i in 0..self.shared.queues.len() {
            let sq_flags = self.ring_words_of(i)[2];
            if sq_flags & IORING_SQ_CQ_OVERFLOW != 0 {
                self.print_files.end();
                return Err(Error::CqOverflow { sq_flags });
            }
        }
        self.settle_positions()?;
        if !failures.is_empty() {
            return Err(self.failed_threads(failures));
        }
        if let Some(refused) = self.take_refused()? {
            return Err(Error::Refused(refused));
        }
        let errors = self.take_print_errors()?;
        if errors.outputs.is_empty() {
            Ok(())
        } else {
            Err(Error::Print(errors))
        }
    }

    /// Waits for the GPU launches so far (claimed here, so that a launch from now on
    /// activates the waker anew), or for those on `only`'s streams; a fault other than a
    /// hang leaves the context marked unusable, with its reason.
    fn synchronize_launched(&self, gpu: &Gpu, only: Option<&[usize]>) -> Result<()> {
        // Counted in before the claim and out when the wait ended: the claimed kernels
        // stay pending meanwhile (`kernels_pending`: an `Output` is not read, nor launch
        // memory freed, under them).
        let _waiting = ClaimedWait::enter(&gpu.waiting);
        // Claim the launches so far; a launch from now on activates the waker anew.
        if gpu.launched.swap(false, Ordering::AcqRel) {
            match self.synchronize_gpu(gpu, only) {
                Ok(()) => self.waker.deactivate(),
                Err(e @ Error::Hang(_)) => {
                    // Still launched. If a launch meanwhile found `launched` clear, it
                    // activated the waker again: once is enough.
                    if gpu.launched.swap(true, Ordering::AcqRel) {
                        self.waker.deactivate();
                    }
                    return Err(e);
                }
                Err(e) => {
                    self.settle_after_fault();
                    self.waker.deactivate();
                    let why = match &e {
                        Error::Kernel(why) => why.clone(),
                        e => e.to_string(),
                    };
                    *gpu.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The kernel failure that names the first failed CPU threads (and counts the rest),
    /// with what the sandbox refused meanwhile.
    fn failed_threads(&self, mut failures: Vec<String>) -> Error {
        let n = failures.len();
        failures.truncate(SHOWN_FAILURES);
        let more = match n.saturating_sub(SHOWN_FAILURES) {
            0 => String::new(),
            more => format!("; and {more} more"),
        };
        // What the sandbox refused meanwhile is often why a thread failed (an open that
        // got EACCES): said here, with the sandbox that allows it, not left for later.
        // The CPU backend's only: after a GPU kernel's trap the counts are in the lost
        // context.
        // (A failure to read them leaves the failures to be said alone.)
        let refused = match self.take_refused().ok().flatten() {
            Some(r) => format!(". Also: {r}"),
            None => String::new(),
        };
        Error::Kernel(format!("{n} thread(s) failed: {}{more}{refused}", failures.join("; ")))
    }

    /// CPU backend: runs the protocol until every stream is written out and every request
    /// completed ([`Context::drain`], under the watchdog). Only while no kernel thread runs.
    fn drain_host(&self, ctx: &Context) -> Result<()> {
        // Its flushes publish SQEs as a kernel thread's do, and ring as they do.
        let _bell = install_doorbell(self.shared.doorbell.get().cloned());
        self.wait(
            DRAIN_PACING,
            || {
                ctx.progress();
                for s in &ctx.streams {
                    ctx.flush(s);
                }
                if ctx.idle() {
                    return Ok(true);
                }
                self.shared.nudge();
                Ok(false)
            },
            watchdog::sleep,
            Waiting::Drain,
        )
    }

    /// GPU backends: waits for the kernels, launches the drain kernel (unless one was
    /// launched after the latest kernel already), and waits for it.
    fn synchronize_gpu(&self, gpu: &Gpu, only: Option<&[usize]>) -> Result<()> {
        // gpuio's own launches are all on the null stream: the host's streams are waited
        // for (all of them, unless named) only after it launched kernels itself. Claimed
        // here (a launch announced meanwhile sets it again), given back if this wait fails.
        let external = gpu.external.swap(false, Ordering::AcqRel);
        // The streams gpuio launched on itself are waited for whatever the caller named.
        let own = std::mem::take(&mut *gpu.own_streams.lock().unwrap_or_else(|e| e.into_inner()));
        let named: Option<Vec<usize>> = only.map(|o| o.iter().copied().chain(own.iter().map(|s| s.0)).collect());
        let only = named.as_deref().or(if external { None } else { Some(&[]) });
        let waited = self.wait_gpu_and_drain(gpu, only);
        if waited.is_err() {
            if external {
                gpu.external.store(true, Ordering::Release);
            }
            gpu.own_streams.lock().unwrap_or_else(|e| e.into_inner()).extend(own);
        }
        waited
    }

    /// [`Runtime::synchronize_gpu`]'s waits: for the kernels, then for the drain kernel.
    fn wait_gpu_and_drain(&self, gpu: &Gpu, only: Option<&[usize]>) -> Result<()> {
        let phase = if gpu.drained.load(Ordering::Acquire) {
            Waiting::GpuDrain
        } else {
            Waiting::GpuKernels
        };
        self.wait_gpu(gpu, phase, only)?;
        if !gpu.drained.swap(true, Ordering::AcqRel) {
            let drain = gpu.drain.lock().unwrap_or_else(|e| e.into_inner());
            let m = drain.as_ref().expect("a kernel was launched, so a module is loaded");
            m.launch("gpuio_drain", crate::launch::LaunchConfig::linear(1, 1), &[])?;
            drop(drain);
            self.wait_gpu(gpu, Waiting::GpuDrain, only)?;
        }
        Ok(())
    }

    fn wait_gpu(&self, gpu: &Gpu, waiting: Waiting, only: Option<&[usize]>) -> Result<()> {
        gpu.device
            .synchronize_with(&mut |idle| self.wait(GPU_PACING, idle, watchdog::sleep, waiting), only)?;
        // The host's HIP launches run on HIP's queues, which the HSA backend's signal does
        // not count.
        #[cfg(feature = "hip")]
        if let Some(hip) = gpu.hip.get() {
            hip.synchronize_with(|idle| self.wait(GPU_PACING, idle, watchdog::sleep, waiting))?;
        }
        Ok(())
    }

    /// After a kernel fault: lets the requests the kernels submitted before it complete, so
    /// that what they wrote (a panic's report among it) is out before the fault is
    /// reported, and nothing uses the shared memory once the runtime frees it. Published
    /// SQEs are consumed and completed by the kernel whatever happened to the GPU; each
    /// gives one CQE, so the ring is settled when the CQ's tail has caught up with the
    /// SQ's. Bounded: a request that does not complete in time (a write to a full pipe)
    /// is left, as before. Then the regular files the kernels wrote at their own positions
    /// have their offsets moved to the end (see `Shared::positional_fds`).
    fn settle_after_fault(&self) {
        const SETTLE: Duration = Duration::from_secs(2);
        let start = std::time::Instant::now();
        while start.elapsed() < SETTLE {
            let settled = (0..self.shared.queues.len())
                .map(|i| self.ring_words_of(i))
                .chain(self.solo_words())
                .all(|[sq_head, sq_tail, _, _, cq_tail]| sq_head == sq_tail && cq_tail == sq_tail);
            if settled {
                break;
            }
            self.shared.wake_if_needed();
            watchdog::sleep(Duration::from_micros(50));
        }
        // The kernels' positional writes ended at most at each file's end; the context that
        // knows exactly where is in device memory, out of reach now.
        for &fd in &self.shared.positional_fds {
            // SAFETY: lseek on an output fd moves only its offset.
            unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        }
        self.print_files.end();
    }

    /// The watchdog's wait ([`watchdog::wait`]) with this runtime's policy and observations.
    fn wait(
        &self,
        pacing: Pacing,
        done: impl FnMut() -> Result<bool>,
        pause: impl FnMut(Duration),
        waiting: Waiting,
    ) -> Result<()> {
        watchdog::wait(
            &self.hang,
            pacing,
            done,
            pause,
            || self.observe(waiting, false),
            |r| HangReport {
                stalled: r.stalled,
                ..self.observe(waiting, true)
            },
        )
    }

    /// Before the first launch since the runtime settled (only while no kernel runs): how
    /// each stream writes its file this time (`print_files`: appending, unless the fd's
    /// offset stands inside a file no other runtime prints to), and, for positional
    /// streams, position 0 made the fd's current offset (the host may have written to the
    /// file between kernels).
    pub(crate) fn rebase_positions(&self) -> Result<()> {
        let (appends, bases) = self.shared.with_context(|ctx| {
            let offset = |s: &Stream| {
                // SAFETY: lseek only queries the offset of the fd.
                let pos = unsafe { libc::lseek(s.fd, 0, libc::SEEK_CUR) };
                (pos >= 0).then_some(pos as u64)
            };
            let modes = self.print_files.begin(|file| {
                Shared::live_streams(ctx).any(|s| {
                    s.positional != 0
                        && print_files::key(s.fd) == Some(file)
                        && offset(s).is_some_and(|o| o < print_files::size(s.fd))
                })
            })?;
            let mut appends = Vec::new();
            let mut bases = Vec::new();
            for s in Shared::live_streams(ctx) {
                let key = print_files::key(s.fd);
                let mode = modes.iter().find(|&&(f, _)| Some(f) == key).map(|&(_, m)| m);
                appends.push((s.index as usize, mode.map_or(0, Mode::append_word)));
                if s.positional == 0 || mode != Some(Mode::Positional) || !s.idle() {
                    continue;
                }
                if let Some(pos) = offset(s) {
                    bases.push((s.index as usize, pos.wrapping_sub(s.reserved.load(Ordering::Acquire))));
                }
            }
            Ok::<_, Error>((appends, bases))
        })??;
        for (i, append) in appends {
            self.shared.store(|c| &c.streams[i].append, append)?;
        }
        for (i, base) in bases {
            self.shared.store(|c| &c.streams[i].base, base)?;
        }
        Ok(())
    }

    /// Streams on regular files that printed since the last settle: leave the fd's offset
    /// after the last byte printed, as if the lines had been written with write(2)
    /// (appending streams: at the file's end), having let other runtimes of the files know
    /// that this one's kernels are done. A stream that printed nothing leaves the offset
    /// alone: the fd may share its offset with others (`> log 2>&1`), which the host may
    /// have moved meanwhile.
    fn settle_positions(&self) -> Result<()> {
        let mut settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
        // The kernels are done whatever the offsets' fate: other runtimes of the files
        // need not wait for them any more.
        self.print_files.end();
        self.shared.with_context(|ctx| {
            for s in Shared::live_streams(ctx) {
                let append = s.append.load(Ordering::Acquire) != 0;
                if s.positional == 0 && !append {
                    continue;
                }
                let reserved = s.reserved.load(Ordering::Acquire);
                let last = &mut settled[s.index as usize];
                if reserved == *last {
                    continue;
                }
                *last = reserved;
                if append {
                    // SAFETY: lseek on the stream's fd moves only its offset.
                    unsafe { libc::lseek(s.fd, 0, libc::SEEK_END) };
                } else {
                    let end = s.base.load(Ordering::Acquire).wrapping_add(reserved);
                    // SAFETY: lseek on the stream's fd moves only its offset.
                    unsafe { libc::lseek(s.fd, end as libc::off_t, libc::SEEK_SET) };
                }
            }
        })
    }

    /// Requests refused since the last report (and resets their count): requests no stream
    /// or device call made, and the sandbox's refusals of device requests: under
    /// [`Sandbox::PrintOnly`] every file-I/O request, under any policy a request whose
    /// opcode it forbids (the device caller got `EACCES` too).
    fn take_refused(&self) -> Result<Option<Refused>> {
        let (mut requests, mut errno, denied, forbidden) = self.shared.with_context(|ctx| {
            (
                ctx.refusals.unclaimed.load(Ordering::Acquire),
                ctx.refusals.errno.load(Ordering::Acquire),
                ctx.refusals.denied.load(Ordering::Acquire),
                ctx.refusals.forbidden.load(Ordering::Acquire),
            )
        })?;
        if denied != 0 {
            self.shared.store(|c| &c.refusals.denied, 0)?;
        }
        if forbidden != 0 {
            self.shared.store(|c| &c.refusals.forbidden, 0)?;
        }
        (requests, errno) = sandbox::merge_denied(self.sandbox, requests, errno, denied, forbidden);
        if requests == 0 {
            return Ok(None);
        }
        self.shared.store(|c| &c.refusals.unclaimed, 0)?;
        Ok(Some(Refused {
            requests,
            errno,
            sandbox: self.sandbox,
            fixed_files: self.fixed_files,
        }))
    }

    /// Failed fire-and-forget prints since the last report (and resets their counts).
    fn take_print_errors(&self) -> Result<PrintErrors> {
        let failed = self.shared.with_context(|ctx| {
            Shared::live_streams(ctx)
                .filter(|s| {
                    s.errors.failed_writes.load(Ordering::Acquire) > 0
                        || s.errors.format_errors.load(Ordering::Acquire) > 0
                })
                .map(|s| {
                    let e = &s.errors;
                    let o = OutputErrors {
                        fd: s.fd,
                        failed_writes: e.failed_writes.load(Ordering::Acquire),
                        errno: e.last_errno.load(Ordering::Acquire),
                        lost_bytes: e.lost_bytes.load(Ordering::Acquire),
                        lost_lines: e.lost_lines.load(Ordering::Acquire),
                        format_errors: e.format_errors.load(Ordering::Acquire),
                    };
                    (s.index as usize, o)
                })
                .collect::<Vec<_>>()
        })?;
        for &(i, _) in &failed {
            self.shared.store(|c| &c.streams[i].errors.failed_writes, 0)?;
            self.shared.store(|c| &c.streams[i].errors.lost_bytes, 0)?;
            self.shared.store(|c| &c.streams[i].errors.lost_lines, 0)?;
            self.shared.store(|c| &c.streams[i].errors.format_errors, 0)?;
        }
        Ok(PrintErrors {
            outputs: failed.into_iter().map(|(_, o)| o).collect(),
        })
    }
}

/// A synchronize counted in `Gpu::waiting` until it drops.
struct ClaimedWait<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> ClaimedWait<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicUsize) -> ClaimedWait<'a> {
        // AcqRel: ordered before the claim of `launched` that follows (kernels_pending
        // reads this first).
        count.fetch_add(1, Ordering::AcqRel);
        ClaimedWait(count)
    }
}

impl Drop for ClaimedWait<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::consumer::submission::Submission;

    #[test]
    fn a_cq_overflow_flag_is_an_error() {
        // The host-thread fallback's SQ flags word is ours (the kernel's is not ours to set).
        // On the last of two rings: every ring is checked, not only ring 0.
        let rt = Runtime::builder()
            .backend(Backend::Cpu)
            .submission(Submission::HostThread)
            .rings(2)
            .build()
            .unwrap();
        rt.launch(1, 1, || {}).unwrap();
        let flags = rt.shared.queues[1].ring_word(rt.shared.queues[1].params().sq_off.flags);
        // SAFETY: a ring word in the queue's mapping; the fallback thread never writes it.
        unsafe { std::ptr::write_volatile(flags, IORING_SQ_CQ_OVERFLOW) };
        match rt.synchronize() {
            Err(
                e @ Error::CqOverflow {
                    sq_flags: IORING_SQ_CQ_OVERFLOW,
                },
            ) => {
                assert!(e.to_string().contains("IORING_SQ_CQ_OVERFLOW"), "{e}")
            }
            other => panic!("expected a CQ overflow, got {other:?}"),
        }
        let report = rt.observe(Waiting::Drain, true);
        assert!(report.other_rings[0].words.cq_overflow());
        assert!(report.to_string().contains("CQ_OVERFLOW"), "{report}");
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(flags, 0) };
        rt.synchronize().unwrap();
    }
}
