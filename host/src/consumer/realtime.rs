//! Real-time priority for the waker of the rings it enters (the CPU backend's io_uring rings
//! without SQPOLL), and through it for the io-wq workers that write its requests' bytes. On
//! rings performed inline (the CPU backend's default) it is never asked: the kernel threads
//! perform their own requests, and the waker is off the data path.
//!
//! On those rings a line's write is a hand-off between host threads: the waker submits the
//! SQE (`io_uring_enter`), an io-wq worker writes a regular file's bytes (ext4 and tmpfs
//! take no buffered write inline), the waker reaps and sends the next. Beside many computing
//! kernel threads each waits for a core, and the short slice (`io_threads.rs`) does not always
//! get it in: Linux's fair scheduler (EEVDF) runs a waking thread only once it is
//! *eligible*, and a waker that ran ahead of its share waits until the others catch up.
//! Sampled during `bench_liveness` (2 x 32 threads computing at nice +10 on 2 vCPUs), the
//! waker was runnable and not eligible in 35 of 124 samples, up to 4.95 ms of virtual time
//! ahead (about 20 ms of real time at that load), and waited over 10 ms for its core 31
//! times in one run (at most 91 ms), mostly while one launch's threads exited and the
//! next's started; the io-wq worker 13 times (at most 31 ms). A `SCHED_FIFO` thread is not
//! under the fair scheduler: a computing thread gives it the core as soon as it wakes.
//!
//! How, where the program asks for it (`Builder::real_time_waker`, `GPUIO_REAL_TIME_WAKER`;
//! off by default: gpuio takes no real-time thread it was not asked for): from a launch
//! with more threads than cores, counting those still running (`Waker::crowded`, called
//! before that launch's threads start), until a launch that fits them (`Waker::fits`), the
//! waker runs under `SCHED_FIFO` at priority 1, the lowest, and so do its io-wq workers:
//! those it has (found by name, `iou-wrk-<waker>`; not in a PID namespace, whose workers'
//! names carry the host's id) and those io_uring makes from it meanwhile (a thread inherits
//! its maker's policy). A notice says so the first time. Where the kernel refuses (a
//! process needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of 1 or more) the waker keeps the
//! short slice, and the bound of invariant 12 is best effort there (`docs/PROTOCOL.md`).
//! `Stats::real_time_waker` says which.
//!
//! What it costs everyone else: the waker preempts any thread of the fair scheduler, of
//! this process or another, on its core each time it wakes (up to 20,000 looks a second
//! while I/O flows, each a few µs), and the io-wq workers, which serve every request of
//! these rings (a device `pwrite`'s copy into the page cache included), preempt them while
//! they work. Under the fair scheduler the waker goes on looking for 20 µs after each
//! submission (`waker.rs`, `LINGER`); at real-time priority it does not, since while
//! kernel threads keep publishing that looking would hold its core from every fair thread
//! of the machine, up to the kernel's real-time throttle (95% of each second): it parks
//! between looks. A real-time thread that spins waiting for a thread of the fair scheduler
//! on its core would keep that thread off it, so the waker's waits inside the protocol (a
//! rescue's flush waiting for an SQ slot or a CQ credit) sleep between rounds instead of
//! yielding (`arch::host::relax_by_dozing`). Rings with SQPOLL, and the host-thread
//! fallback, are left as they were: SQPOLL polls for `sq_thread_idle` after its last work,
//! and at real-time priority would hold its core that long. `bench_neighbour` measures
//! what the CPU backend costs other processes, with and without it.

use std::io;

/// Gives thread `tid` of this process (0: the calling thread) `SCHED_FIFO` at priority 1,
/// which the threads it makes inherit (no reset-on-fork). `Err` where the kernel refuses
/// (no `CAP_SYS_NICE`, an `RLIMIT_RTPRIO` of 0): the thread is then as it was.
pub(crate) fn make_real_time(tid: libc::pid_t) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sched_setscheduler reads one sched_param from `param`, a valid one; it changes
    // only thread `tid`'s policy.
    if unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Puts thread `tid` of this process (0: the calling thread) back under the fair scheduler
/// (`SCHED_OTHER`, its nice value kept) with the short slice it had before
/// [`make_real_time`] (`io_threads.rs`). Lowering a thread's policy needs no privilege.
pub(crate) fn make_fair(tid: libc::pid_t) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in `make_real_time`: one valid sched_param read, thread `tid` changed.
    if unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Best effort, as where the slice was first given (kernels before 6.12 ignore it).
    let _ = crate::consumer::io_threads::shorten(tid);
    Ok(())
}

/// What a person is told, once per process, when a waker first becomes real-time.
pub(crate) const NOTICE: &str = "gpuio: the CPU backend's waker and its io-wq workers now run at \
    real-time priority (SCHED_FIFO 1), as Builder::real_time_waker or GPUIO_REAL_TIME_WAKER=1 \
    asked, while launches have more threads than cores: they preempt every other process's \
    threads on their core while the kernels do I/O (docs/USAGE.md says what that costs)";

/// The io-wq workers that io_uring made from thread `tid` of this process: the threads it
/// names `iou-wrk-<tid>`. In a PID namespace (a container) the kernel names them with the
/// id the host sees, which differs from `tid`: none is found there. (A worker that exits
/// between this listing and a call on its id leaves an id that Linux could, in principle,
/// give a new thread within microseconds; not guarded against.)
pub(crate) fn io_workers_of(tid: libc::pid_t) -> Vec<libc::pid_t> {
    let name = format!("iou-wrk-{tid}");
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return vec![];
    };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel lets this process have real-time threads (as root, in CI), a thread
    /// made real-time is `SCHED_FIFO`, and so is a thread it then makes; elsewhere it stays
    /// as it was, and the test says that it skipped.
    #[test]
    fn a_real_time_thread_passes_its_policy_to_the_threads_it_makes() {
        std::thread::spawn(|| {
            // SAFETY: sched_getscheduler on this thread touches no memory.
            let before = unsafe { libc::sched_getscheduler(0) };
            match make_real_time(0) {
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
                    // SAFETY: as above.
                    assert_eq!(unsafe { libc::sched_getscheduler(0) }, before);
                    println!("SKIPPED: this process may not make real-time threads ({e})");
                }
                Ok(()) => {
                    // SAFETY: as above.
                    assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_FIFO);
                    // SAFETY: as above, on the new thread.
                    let child = std::thread::spawn(|| unsafe { libc::sched_getscheduler(0) });
                    assert_eq!(child.join().unwrap(), libc::SCHED_FIFO);
                }
            }
        })
        .join()
        .unwrap();
    }

    /// The policy of thread `tid` of this process.
    fn policy_of(tid: libc::pid_t) -> libc::c_int {
        // SAFETY: sched_getscheduler reads a thread's policy and touches no memory.
        unsafe { libc::sched_getscheduler(tid) }
    }

    /// Where it is asked for, on the CPU backend's io_uring rings without SQPOLL, the waker and
    /// the io-wq workers that write its requests run at real-time priority from a launch
    /// with more threads than cores until one that fits them, wherever this process may
    /// have such threads, and `Stats` says so; never by default, with SQPOLL or with
    /// `real_time_waker(false)`. Back under the fair scheduler they have the short slice
    /// again.
    #[test]
    fn the_waker_of_rings_it_enters_and_its_io_workers_run_at_real_time_priority_while_crowded() {
        use std::os::fd::AsRawFd;
        let allowed = std::thread::spawn(|| make_real_time(0).is_ok()).join().unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        let path = std::env::temp_dir().join(format!("gpuio-realtime-{}.txt", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        for (sqpoll, asked) in [
            (false, Some(true)),
            (true, Some(true)),
            (false, Some(false)),
            (false, None),
        ] {
            let mut builder = crate::Runtime::builder();
            if let Some(asked) = asked {
                builder = builder.real_time_waker(asked);
            }
            let asked = asked == Some(true);
            let rt = match builder
                .backend(crate::Backend::Cpu)
                .sqpoll(sqpoll)
                .submission(crate::Submission::IoUring)
                .stdout_fd(file.as_raw_fd())
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    println!("SKIPPED (sqpoll {sqpoll}): no io_uring here: {e}");
                    continue;
                }
            };
            let waker = rt.waker.thread_id.expect("the waker's id");
            // Lines into a regular file: io_uring hands their writes to io-wq workers.
            for (threads, crowded) in [(1, false), (cores + 1, true), (1, false), (cores + 1, true)] {
                rt.launch(1, threads, || gpuio_device::println!("a line")).unwrap();
                rt.synchronize().unwrap();
                let real_time = crowded && !sqpoll && asked && allowed;
                let case = format!("sqpoll {sqpoll}, asked {asked}, {threads} thread(s) on {cores} core(s)");
                assert_eq!(rt.stats().real_time_waker, real_time, "{case}");
                assert_eq!(policy_of(waker) == libc::SCHED_FIFO, real_time, "{case}: the waker");
                let workers = io_workers_of(waker);
                if real_time && workers.is_empty() {
                    println!(
                        "SKIPPED the io-wq workers: none named after the waker (the writes went \
                         inline, or a PID namespace hides the id in their names)"
                    );
                }
                for w in workers {
                    assert_eq!(policy_of(w) == libc::SCHED_FIFO, real_time, "{case}: io-wq worker {w}");
                }
                if asked && !sqpoll && allowed && !crowded {
                    // Given back: the fair scheduler, with the slice it had before.
                    assert_eq!(policy_of(waker), libc::SCHED_OTHER, "{case}: the waker");
                    // Where this kernel shows slices (Linux 6.12 on, with scheduler statistics).
                    let sched = std::fs::read_to_string(format!("/proc/self/task/{waker}/sched")).unwrap();
                    if let Some(line) = sched.lines().find(|l| l.starts_with("se.slice")) {
                        let slice: u64 = line.rsplit(':').next().unwrap().trim().parse().unwrap();
                        assert_eq!(
                            slice,
                            crate::consumer::io_threads::SHORT_SLICE.as_nanos() as u64,
                            "{case}"
                        );
                    }
                }
            }
        }
        let _ = std::fs::remove_file(path);
    }
}
