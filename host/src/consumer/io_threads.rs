//! How gpuio's own host threads that move I/O run: each ring's consumer (the SQPOLL thread
//! and the io-wq workers it starts, or the fallback's thread) and the waker. Those of them
//! gpuio starts itself take no signal and sleep precisely ([`quiet_this_thread`]); on the
//! CPU backend all of them get a short scheduler slice ([`shorten`]), from their maker
//! where they are the kernel's ([`on_the_ring_thread`], which also confines them to a
//! `file_root`).
//!
//! # The short slice
//!
//! On the CPU backend a launch with more threads than cores runs them at nice +10
//! (`backend/cpu.rs`), so that these threads, at the nice value of whoever made them, get
//! a larger share of the cores than the kernel's threads. A share is not a prompt turn:
//! Linux's fair scheduler (EEVDF) usually lets a waking thread with the default slice
//! preempt a running one no sooner than the next tick (4 ms at `HZ=250`), and then runs
//! the thread with the earliest virtual deadline, which the woken one often is not. A
//! nice-0 thread that woke every 100 µs among 64 threads spinning at nice +10 on 2 cores
//! (a C probe) ran 3.9 ms late at the median and 16-24 ms at the 99th percentile, and in
//! `bench_liveness` the waker ran up to 85 ms after its wakeup (`perf sched`). A waking
//! thread whose slice is shorter than the running thread's may preempt it at once (EEVDF's
//! `PREEMPT_SHORT`, Linux 6.12, where it is eligible and its deadline comes first): with a
//! 100 µs slice the same probe's wakeups ran 0.07-0.08 ms late at the median, 0.1-0.5 ms at
//! the 99th percentile.
//!
//! That serves a thread that sleeps between looks: the waker, the io-wq workers, and less
//! the fallback's thread, which looks every 20 µs. It does not always get the core: EEVDF
//! runs a waking thread only once it is eligible (`realtime.rs`), so where the program asks
//! for it, while launches have more threads than cores, the waker of the rings it enters and
//! its io-wq workers run at real-time priority where the kernel allows, and keep this slice
//! otherwise. It cannot serve SQPOLL while lines flow: SQPOLL polls without sleeping for
//! `sq_thread_idle` after its last work, uses up its share of its core (about a fifth
//! beside the 32 computing threads of its core) and then waits several ticks for its next
//! turn, whatever its slice; most lines that are late there
//! wait in an SQE that SQPOLL has not taken yet (docs/PROTOCOL.md, invariant 12). In
//! `bench_liveness` with 32 to 64 threads computing on 2 cores, the runs with the short
//! slice had fewer late lines than those without over the fallback and with 32 computing,
//! and as many over SQPOLL with 62-64; each difference is within the runs' noise.
//!
//! How: the slice is per thread (`sched_setattr(2)`'s `sched_runtime` for `SCHED_OTHER`;
//! any user may set it on its own threads) and a new thread inherits its creator's. So the
//! CPU backend makes its rings, and the waker that submits to those without SQPOLL, on a
//! thread with the slice (SQPOLL, the io-wq workers it or the waker starts, the waker and
//! the fallback's threads inherit it); a waker started elsewhere gets it by its id.
//! What it costs: a thread with it that wakes preempts a computing kernel thread at once,
//! where it waited for a tick before (the waker looks up to 20,000 times a second while
//! I/O flows); when others wait for the core these threads run in turns of 100 µs instead
//! of the default (1.4 ms on 2 cores, more on more). Their share of the CPU (their nice
//! value) is unchanged. Kernels before 6.12 ignore the field. Only the CPU backend asks
//! for it: on a GPU the kernel's threads do not compete for the cores.

use std::io;

use crate::error::{Error, Result};
use std::time::Duration;

/// The slice: the shortest Linux accepts for `SCHED_OTHER` (0.1 ms).
pub(crate) const SHORT_SLICE: Duration = Duration::from_micros(100);

/// `SCHED_FLAG_RESET_ON_FORK`: a flag an unprivileged thread may set but not clear.
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

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

const _: () = assert!(size_of::<SchedAttr>() == 48, "SCHED_ATTR_SIZE_VER0");

/// Gives thread `tid` (0: the calling thread) the [`SHORT_SLICE`], keeping its policy, its
/// nice value and its reset-on-fork flag. A thread under another policy than `SCHED_OTHER`
/// or `SCHED_BATCH` is left as it is (the field means something else there, or nothing).
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
    // The thread's own nice value (read above) and reset-on-fork flag go back as they were:
    // changing either may need a privilege.
    attr.flags &= SCHED_FLAG_RESET_ON_FORK;
    attr.runtime = SHORT_SLICE.as_nanos() as u64;
    // SAFETY: sched_setattr reads `attr.size` bytes from `attr`, a SchedAttr of that size.
    if unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &raw const attr, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Blocks every signal on this thread (they go to the program's own threads) and makes
/// its sleeps precise: the default 50 µs timer slack would make every poll cost 70 µs.
/// The fallback's thread and the waker call it first: on rings without SQPOLL the waker
/// issues writes itself, and a write to a pipe whose reader is gone raises `SIGPIPE` in
/// the thread that issued it.
pub(crate) fn quiet_this_thread() {
    // SAFETY: changes only this thread's signal mask and timer slack.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64);
    }
}

/// Runs `make` (which creates rings) on a new thread where the rings' threads must inherit
/// something from their maker, here otherwise: confined to `root` by Landlock (a thread's
/// confinement is for good), and, if `short_slice` (the CPU backend), with the short
/// scheduler slice, which SQPOLL, the io-wq workers it starts and the fallback's threads
/// then have from their first instant (set afterwards by thread id, it would race SQPOLL's
/// first run, before which the kernel names the ring's maker as its thread). Best effort
/// for the slice: where the kernel refuses it, `make` runs all the same.
pub(crate) fn on_the_ring_thread<T: Send>(
    root: Option<&std::path::Path>,
    short_slice: bool,
    make: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    if root.is_none() && !short_slice {
        return make();
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("gpuio-rings".into())
            .spawn_scoped(s, || {
                if short_slice {
                    let _ = shorten(0);
                }
                if let Some(root) = root {
                    crate::consumer::landlock::confine_this_thread(root)?;
                }
                make()
            })
            .map_err(|e| Error::Os {
                what: "starting the thread that creates the rings",
                source: e,
            })?
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::consumer::submission::{Queue, Submission};

    /// Whether this kernel gives threads slices of their own (Linux 6.12) and shows them in
    /// `/proc` (scheduler statistics); the tests below skip, saying so, where it does not.
    fn slices_shown() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release.split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
        let new_enough = (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 12);
        let shown = std::fs::read_to_string("/proc/thread-self/sched").is_ok_and(|s| s.contains("se.slice"));
        if !(new_enough && shown) {
            println!("SKIPPED: this kernel gives threads no slice of their own, or does not show it");
        }
        new_enough && shown
    }

    /// Thread `tid`'s slice in nanoseconds, as `/proc` shows it (where `slices_shown`);
    /// `None` if `tid` is no thread of this process.
    fn try_slice_of(tid: libc::pid_t) -> Option<u64> {
        let sched = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).ok()?;
        let line = sched.lines().find(|l| l.starts_with("se.slice")).expect("se.slice");
        Some(line.rsplit(':').next().unwrap().trim().parse().unwrap())
    }

    /// [`try_slice_of`] for a thread that must be one of ours.
    fn slice_of(tid: libc::pid_t) -> u64 {
        try_slice_of(tid).unwrap_or_else(|| panic!("thread {tid} is not a thread of this process"))
    }

    fn this_thread() -> libc::pid_t {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    }

    const SHORT: u64 = SHORT_SLICE.as_nanos() as u64;

    #[test]
    fn shortens_a_thread_and_keeps_its_nice_value() {
        if !slices_shown() {
            return;
        }
        std::thread::spawn(|| {
            // SAFETY: setpriority and getpriority on this thread touch no memory.
            let nice = unsafe {
                libc::setpriority(libc::PRIO_PROCESS, 0, 3);
                libc::getpriority(libc::PRIO_PROCESS, 0)
            };
            assert_ne!(slice_of(this_thread()), SHORT, "the default slice");
            shorten(0).expect("sched_setattr on this thread");
            assert_eq!(slice_of(this_thread()), SHORT);
            // SAFETY: as above.
            assert_eq!(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }, nice);
            // A thread it starts inherits it.
            let child = std::thread::spawn(|| slice_of(this_thread())).join().unwrap();
            assert_eq!(child, SHORT);
        })
        .join()
        .unwrap();
    }

    /// On the CPU backend the waker and every ring's consumer (SQPOLL, or the fallback's
    /// threads, the solo ring's included) run with the short slice.
    #[test]
    fn the_cpu_backends_io_threads_run_with_the_short_slice() {
        if !slices_shown() {
            return;
        }
        // io_uring without SQPOLL (the default: the waker submits), with it, the fallback.
        for (sub, sqpoll) in [
            (Submission::IoUring, false),
            (Submission::IoUring, true),
            (Submission::HostThread, false),
        ] {
            // The kernel's line goes nowhere: the test's output stays its own.
            let null = std::fs::File::create("/dev/null").unwrap();
            let rt = match crate::Runtime::builder()
                .backend(Backend::Cpu)
                .submission(sub)
                .sqpoll(sqpoll)
                .rings(2)
                .stdout_fd(std::os::fd::AsRawFd::as_raw_fd(&null))
                .build()
            {
                Ok(rt) => rt,
                Err(e) if sub == Submission::IoUring => {
                    println!("SKIPPED over io_uring: {e}");
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            // A kernel's line: SQPOLL has run (until then the kernel names the ring's maker
            // as its thread).
            rt.launch(1, 1, || gpuio_device::println!("x")).unwrap();
            rt.synchronize().unwrap();
            assert_eq!(
                slice_of(rt.waker.thread_id.expect("the waker's id")),
                SHORT,
                "{sub:?}, sqpoll {sqpoll}: the waker"
            );
            match &rt.shared.queues[0] {
                // The waker is its consumer (checked above).
                Queue::Uring(u) if !u.sqpoll() => {}
                Queue::Uring(u) => {
                    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", u.fd())).unwrap();
                    let tid: libc::pid_t = info
                        .lines()
                        .find_map(|l| l.strip_prefix("SqThread:"))
                        .and_then(|v| v.trim().parse().ok())
                        .expect("SqThread in the ring's fdinfo");
                    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
                    assert!(comm.starts_with("iou-sqp-"), "thread {tid} is {comm}");
                    assert_eq!(slice_of(tid), SHORT, "SQPOLL");
                }
                Queue::Host(_) => {
                    // This runtime's fallback threads among the process's (tests beside
                    // this one may make rings without the slice): at least one per ring.
                    let short = std::fs::read_dir("/proc/self/task")
                        .unwrap()
                        .flatten()
                        .filter(|t| {
                            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "gpuio-fallback")
                        })
                        .filter_map(|t| t.file_name().to_str()?.parse().ok())
                        .filter(|&tid| try_slice_of(tid) == Some(SHORT))
                        .count();
                    let rings = rt.shared.queues.len() + usize::from(rt.shared.solo.is_some());
                    assert!(
                        short >= rings,
                        "{short} fallback threads with the short slice, {rings} rings"
                    );
                }
            }
        }
    }
}
