//! The CPU backend's waker and flushes: few looks while a kernel computes without I/O, a
//! thread printing alone batches its lines, and a flusher rings the doorbell only once it
//! let go of the stream.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::{eprintln, println};
use gpuio::{Backend, Runtime};

use crate::common::suite_builder as builder;
use crate::common::{check_lines, skip, stress_kernel, temp_file, watchdog, Suite};

pub(crate) fn a_quiet_kernel_costs_few_waker_looks_and_its_late_lines_all_get_out(sub: Suite) {
    // Invariant 9, and what it costs: while a kernel computes without I/O the waker backs
    // off to a look a millisecond (at 50 µs, 300 ms would be 6,000 looks); the first SQE
    // after the quiet spell still finds a waker that wakes the consumer.
    let _wd = watchdog(
        "a_quiet_kernel_costs_few_waker_looks_and_its_late_lines_all_get_out",
        120,
    );
    let (f, path) = temp_file("quiet.txt");
    // The consumer sleeps after 1 ms without work. A 4 KiB log: the burst after the quiet
    // spell cannot finish without completions, so without a wakeup it would hang.
    let rt = builder(sub)
        .stdout_fd(f.as_raw_fd())
        .sq_thread_idle_ms(1)
        .log_bytes(4096)
        .build()
        .unwrap();
    let quiet = Duration::from_millis(300);

    let before = rt.stats();
    let started = Instant::now();
    rt.launch(1, 1, move || std::thread::sleep(quiet)).unwrap();
    rt.synchronize().unwrap();
    let (took, after) = (started.elapsed(), rt.stats());
    let looks = after.waker_looks - before.waker_looks;
    eprintln!(
        "quiet {took:?}: {looks} waker looks ({:.0}/s)",
        looks as f64 / took.as_secs_f64()
    );
    assert!(
        looks < 1000,
        "{looks} waker looks in {took:?} of a kernel without I/O: it polls as if I/O flowed"
    );
    assert!(
        looks >= 10,
        "{looks} waker looks in {took:?}: the waker stopped looking"
    );

    let (threads, lines) = (4u64, 2_000u64);
    let before = rt.stats();
    let started = Instant::now();
    rt.launch(1, threads as u32, move || {
        std::thread::sleep(quiet);
        let t = gpuio::device::global_thread_idx();
        for i in 0..lines {
            println!("t={t} i={i}");
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    let (took, after) = (started.elapsed(), rt.stats());
    eprintln!(
        "quiet then a burst {took:?}: {} SQEs, {} wakeups, {} waker looks",
        after.sqes - before.sqes,
        after.wakeups - before.wakeups,
        after.waker_looks - before.waker_looks
    );
    // SQPOLL, asleep after the quiet spell, consumes nothing until someone wakes it, and the
    // burst cannot finish without completions: only the waker can have woken it. (The
    // host-thread fallback also wakes itself every 100 ms, so there the burst may go out
    // without the waker.)
    if sub.submission == gpuio::Submission::IoUring {
        assert!(
            after.wakeups > before.wakeups,
            "the burst went out without a wakeup ({before:?} -> {after:?})"
        );
    }
    assert_eq!(after.stray_completions, 0);
    drop(rt);
    check_lines(&std::fs::read(&path).unwrap(), threads, lines);
}

/// A thread that prints alone does not wait for each of its writes: the lines it prints
/// while a write is out go together in the next (invariant 12 on the CPU backend: a flush
/// there leaves what it cannot send to the next flush or to the waker's rescue). A flusher
/// that waited for its own write made one write per line.
pub(crate) fn a_thread_printing_alone_batches_its_lines(sub: Suite) {
    let _wd = watchdog("a_thread_printing_alone_batches_its_lines", 120);
    let (f, path) = temp_file("alone.txt");
    let rt = builder(sub).stdout_fd(f.as_raw_fd()).build().unwrap();
    let lines = 20_000u64;
    rt.launch(1, 1, stress_kernel(lines)).unwrap();
    rt.synchronize().unwrap();
    let sqes = u64::from(rt.stats().sqes);
    drop(rt);
    check_lines(&std::fs::read(&path).unwrap(), 1, lines);
    assert!(
        sqes <= lines / 4,
        "{sqes} writes for {lines} lines from one thread: it waited for its writes"
    );
}

/// On the CPU backend's rings without SQPOLL a publishing thread rings the waker's
/// doorbell, and a flusher rings it only once it has released the stream: the waker it
/// wakes can preempt it at once, and inside its flush it would hold every later line for
/// its next turn among the computing threads. Here a thread's doorbell, wrapped, records
/// whether the stream's flush role was held when it rang (one printing thread: if it is, the
/// holder is the thread that rang).
#[test]
fn a_flusher_rings_the_doorbell_only_once_it_let_go_of_the_stream() {
    let _wd = watchdog("a_flusher_rings_the_doorbell_only_once_it_let_go_of_the_stream", 60);
    let (f, path) = temp_file("doorbell.txt");
    // io_uring entered by the waker (the CPU backend's default performs inline, where no
    // doorbell wakes anyone to submit).
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(gpuio::Submission::Auto)
        .sqpoll(false)
        .stdout_fd(f.as_raw_fd())
        .build()
        .unwrap();
    if rt.stats().sqpoll || rt.submission() != gpuio::Submission::IoUring {
        skip(
            "a_flusher_rings_the_doorbell_only_once_it_let_go_of_the_stream",
            "no io_uring here",
        );
        return;
    }
    let ctx = rt.context().expect("CPU backend");
    let (rings, inside) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let lines = 2_000u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            // The runtime's doorbell (the waker looks as while kernels run), and over it one
            // that counts; the waker's looks submit what it does not.
            let _driving = rt.host_thread();
            let (r, i) = (rings.clone(), inside.clone());
            let stream_at = ctx.stream(false) as *const gpuio::device::protocol::stream::Stream as usize;
            let _counting = gpuio::device::protocol::arch::host::install_doorbell(Some(Arc::new(move || {
                // SAFETY: the stream lives in the runtime's context, which outlives this
                // thread (the scope ends before `rt` drops).
                let stream = unsafe { &*(stream_at as *const gpuio::device::protocol::stream::Stream) };
                r.fetch_add(1, Ordering::Relaxed);
                if stream.flusher.busy() {
                    i.fetch_add(1, Ordering::Relaxed);
                }
            })));
            let g = gpuio::device::protocol::group::SingleLane;
            for n in 0..lines {
                gpuio::device::protocol::print::emit(&g, ctx, ctx.stream(false), true, format_args!("t=0 i={n}"));
            }
        });
    });
    rt.synchronize().unwrap();
    drop(rt);
    let (rings, inside) = (rings.load(Ordering::Relaxed), inside.load(Ordering::Relaxed));
    assert!(rings > 0, "no doorbell rang for {lines} lines");
    assert_eq!(inside, 0, "{inside} of {rings} rings came from inside a flush");
    check_lines(&std::fs::read(&path).unwrap(), 1, lines);
}
