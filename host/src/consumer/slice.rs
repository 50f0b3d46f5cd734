//! A short scheduler slice for the host threads that move the CPU backend's I/O: each
//! ring's consumer (the SQPOLL thread, and through it the io-wq workers it starts, or the
//! fallback's thread) and the waker.
//!
//! On the CPU backend a launch with more threads than cores runs them at nice +10
//! (`backend/cpu.rs`), so that these threads, at the nice value of whoever made them, get
//! a larger share of the cores than the kernel's threads. A share is not a prompt turn:
//! Linux's fair scheduler (EEVDF) lets a waking thread with the default slice preempt a
//! running one only at the next tick (4 ms at `HZ=250`), and then runs the thread with the
//! earliest virtual deadline, which the woken one often is not. A nice-0 thread that woke
//! every 100 µs among 64 threads spinning at nice +10 on 2 cores (a C probe) ran 3.9 ms
//! late at the median and 16-24 ms at the 99th percentile, and in `bench_liveness` the
//! waker ran up to 85 ms after its wakeup (`perf sched`). A waking thread whose slice is
//! shorter than the running thread's preempts it at once (EEVDF's `PREEMPT_SHORT`, Linux
//! 6.12): with a 100 µs slice the same probe's wakeups ran 0.07-0.08 ms late at the median,
//! 0.1-0.5 ms at the 99th percentile.
//!
//! That serves a thread that sleeps between looks, as the waker, the io-wq workers and the
//! fallback's thread do: over the fallback, with 62 or 64 of 64 threads spinning on 2
//! cores, a `bench_liveness` shape's largest delay over 10 reps passed 100 ms in 5 of 16
//! runs where it did in 9 of 16 without the short slice, and with 32 spinning over io_uring
//! in 0 of 8 where it did in 2 of 8. It does not serve SQPOLL while lines flow: SQPOLL
//! polls without sleeping for `sq_thread_idle` after its last work, uses up its share of
//! its core (about a fifth beside 32 threads at nice +10) and then waits several ticks for
//! its next turn, whatever its slice (12 and 13 of 16 runs past 100 ms, with and without);
//! most lines that are late there wait in an SQE that SQPOLL has not taken yet
//! (docs/PROTOCOL.md, invariant 12).
//!
//! The slice is per thread (`sched_setattr(2)`'s `sched_runtime` for `SCHED_OTHER`; any
//! user may set it on its own threads) and a new thread inherits its creator's, so the
//! io-wq workers that an SQPOLL thread starts get it too. What it costs: when other
//! threads wait for the core these run in turns of 100 µs instead of the default (1.4 ms
//! on 2 cores, more on more), a context switch more per turn; their share of the CPU (their nice value) is
//! unchanged. Kernels before 6.12 ignore the field, and the call changes nothing there.
//! Only the CPU backend asks for it: on a GPU the kernel's threads do not compete for the
//! cores.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// The slice: the shortest Linux accepts for `SCHED_OTHER` (0.1 ms).
pub(crate) const SHORT_SLICE: Duration = Duration::from_micros(100);

/// `struct sched_attr` as `sched_setattr(2)` first defined it (`SCHED_ATTR_SIZE_VER0`); the
/// kernel takes any size from that one up.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Gives thread `tid` (0: the calling thread) the [`SHORT_SLICE`], keeping its policy and
/// nice value. A thread under another policy than `SCHED_OTHER` or `SCHED_BATCH` is left
/// as it is (the field means something else there).
pub(crate) fn shorten(tid: libc::pid_t) -> io::Result<()> {
    let mut attr = SchedAttr::default();
    let size = size_of::<SchedAttr>() as u32;
    // SAFETY: sched_getattr writes at most `size` bytes to `attr`, a SchedAttr of that size.
    if unsafe { libc::syscall(libc::SYS_sched_getattr, tid, &raw mut attr, size, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if attr.policy != libc::SCHED_OTHER as u32 && attr.policy != libc::SCHED_BATCH as u32 {
        return Ok(());
    }
    attr.size = size;
    attr.flags = 0;
    attr.runtime = SHORT_SLICE.as_nanos() as u64;
    // SAFETY: sched_setattr reads `attr.size` bytes from `attr`, a SchedAttr of that size;
    // `nice` is the thread's own (read above), so no privilege is asked for.
    if unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &raw const attr, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Gives each thread of `tids` the [`SHORT_SLICE`]: best effort, since where the kernel
/// refuses, lines only wait longer for their turn.
pub(crate) fn shorten_all(tids: impl Iterator<Item = libc::pid_t>) {
    for tid in tids {
        let _ = shorten(tid);
    }
}

/// The SQPOLL thread of the io_uring instance `fd`, as the kernel's fdinfo names it
/// (`SqThread:`; -1 or absent while it has none).
pub(crate) fn sqpoll_thread(fd: RawFd) -> Option<libc::pid_t> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("SqThread:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&tid: &libc::pid_t| tid > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::consumer::submission::{Queue, Submission};

    /// Thread `tid`'s slice in nanoseconds, as `/proc` shows it, where the kernel gives
    /// threads slices of their own (Linux 6.12) and shows them (scheduler statistics).
    fn slice_of(tid: libc::pid_t) -> Option<u64> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        let mut v = release.split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
        if (v.next()?, v.next()?) < (6, 12) {
            return None;
        }
        let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).ok()?;
        let line = sched.lines().find(|l| l.starts_with("se.slice"))?;
        line.rsplit(':').next()?.trim().parse().ok()
    }

    #[test]
    fn shortens_a_thread_and_keeps_its_nice_value() {
        std::thread::spawn(|| {
            // SAFETY: setpriority and getpriority on this thread touch no memory.
            let nice = unsafe {
                libc::setpriority(libc::PRIO_PROCESS, 0, 3);
                libc::getpriority(libc::PRIO_PROCESS, 0)
            };
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let before = slice_of(tid);
            shorten(0).expect("sched_setattr on this thread");
            // SAFETY: as above.
            assert_eq!(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }, nice);
            match (before, slice_of(tid)) {
                (Some(before), Some(after)) => {
                    assert_ne!(before, SHORT_SLICE.as_nanos() as u64, "the default slice");
                    assert_eq!(after, SHORT_SLICE.as_nanos() as u64);
                }
                _ => println!("SKIPPED: this kernel gives threads no slice of their own, or does not show it"),
            }
        })
        .join()
        .unwrap();
    }

    /// On the CPU backend the waker and every ring's consumer (SQPOLL, or the fallback's
    /// thread) run with the short slice, over both submission paths.
    #[test]
    fn the_cpu_backends_io_threads_run_with_the_short_slice() {
        for sub in [Submission::IoUring, Submission::HostThread] {
            let rt = match crate::Runtime::builder()
                .backend(Backend::Cpu)
                .submission(sub)
                .rings(2)
                .build()
            {
                Ok(rt) => rt,
                Err(e) if sub == Submission::IoUring => {
                    println!("SKIPPED over io_uring: {e}");
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            let consumers: Vec<_> = rt.shared.queues.iter().filter_map(Queue::consumer_thread).collect();
            assert!(!consumers.is_empty(), "{sub:?}: no consumer thread named");
            for tid in consumers.into_iter().chain(rt.waker.thread_id) {
                match slice_of(tid) {
                    Some(ns) => assert_eq!(ns, SHORT_SLICE.as_nanos() as u64, "{sub:?}: thread {tid}"),
                    None => println!("SKIPPED: this kernel gives threads no slice of their own, or does not show it"),
                }
            }
        }
    }
}
