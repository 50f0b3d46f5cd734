//! Faults at a CPU launch's edges, on the CPU backend: a launch beyond the memory mappings
//! the machine allows is refused with the limit named (never an abort of the whole
//! process); `launch` and `synchronize` called from inside a kernel are errors (there they
//! would wait for themselves); the kernel threads' stack is settable; and device
//! `pread`/`pwrite` on a pipe behave the same over io_uring and the host-thread fallback.

#[allow(dead_code)]
mod common;
use common::Suite;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use gpuio::{Error, LaunchConfig, Sandbox};

use common::faults::builder;
use common::pipes::small_pipe;
use common::watchdog;

/// More threads than the mappings `vm.max_map_count` leaves room for (std needs about four
/// per thread), up to the backend's 65,536; `None` where the limit is higher than that.
fn threads_past_the_map_count() -> Option<u32> {
    let max: u64 = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let n = max / 4 + 4096;
    (n <= 1 << 16).then_some(n as u32)
}

#[test]
fn a_launch_past_the_map_count_is_refused_with_the_limit_named() {
    let _wd = watchdog("a_launch_past_the_map_count_is_refused_with_the_limit_named", 60);
    let Some(n) = threads_past_the_map_count() else {
        eprintln!("SKIP a_launch_past_the_map_count_is_refused_with_the_limit_named: vm.max_map_count allows 65,536 threads here");
        return;
    };
    let rt = builder().build().unwrap();
    // As the issue found it: 32,768 threads on a stock limit aborted the process
    // ("failed to set up alternative stack guard page").
    match rt.launch(n / 64, 64, || {}) {
        Err(Error::Config(why)) => {
            assert!(
                why.contains("vm.max_map_count") && why.contains("launch fewer threads"),
                "{why}"
            );
            let text = Error::Config(why).to_string();
            assert!(
                text.contains(&format!("a CPU launch of {} threads", n / 64 * 64)),
                "{text}"
            );
        }
        other => panic!("expected Error::Config naming vm.max_map_count, got {other:?}"),
    }
    // Nothing was launched: the runtime goes on.
    rt.launch(1, 4, || {}).unwrap();
    rt.synchronize().unwrap();
}

/// A launch with a zero dimension, more threads than the CPU backend runs, or more dynamic
/// shared memory than a block takes, is refused with the shape named; nothing runs and the
/// runtime goes on.
#[test]
fn launch_shapes_the_backend_cannot_run_are_refused() {
    let _wd = watchdog("launch_shapes_the_backend_cannot_run_are_refused", 60);
    let rt = builder().build().unwrap();
    for cfg in [
        LaunchConfig::new((2, 0, 1), 4),
        LaunchConfig::new(1, (4, 1, 0)),
        // 512 blocks of 256: 131072 threads.
        LaunchConfig::new((16, 16, 2), (16, 8, 2)),
        // Past u64: refused, not wrapped to a small count.
        LaunchConfig::new((u32::MAX, u32::MAX, u32::MAX), (u32::MAX, 1, 1)),
        // More dynamic shared memory than a block takes.
        LaunchConfig::new(1, 4).with_shared_mem(LaunchConfig::CPU_SHARED_MEM_MAX + 1),
    ] {
        match rt.launch_with(cfg, || panic!("a refused launch ran")) {
            Err(Error::Config(why)) => assert!(
                why.contains("at least 1")
                    || why.contains("threads in a launch here") && why.contains("loop inside each")
                    || why.contains("CPU_SHARED_MEM_MAX"),
                "{why}"
            ),
            other => panic!("{cfg:?}: expected a refusal, got {other:?}"),
        }
    }
    rt.launch_with(LaunchConfig::new((1, 2), (2, 1, 2)), || {}).unwrap();
    rt.synchronize().unwrap();
}

#[test]
fn launch_and_synchronize_inside_a_kernel_are_errors() {
    let _wd = watchdog("launch_and_synchronize_inside_a_kernel_are_errors", 60);
    let rt = Arc::new(builder().build().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (r, s) = (rt.clone(), seen.clone());
    rt.launch(1, 1, move || {
        let mut seen = s.lock().unwrap();
        seen.push(r.synchronize().map_err(|e| e.to_string()));
        seen.push(r.launch(1, 1, || {}).map_err(|e| e.to_string()));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (got, call) in seen.iter().zip(["Runtime::synchronize", "Runtime::launch"]) {
        let why = got.as_ref().expect_err(call);
        assert!(
            why.starts_with(&format!("{call} was called from inside a CPU kernel thread"))
                && why.contains("call it from a host thread"),
            "{why}"
        );
    }
    // The kernel's closure held a runtime: the last reference goes here.
    drop(rt);
}

#[test]
fn the_kernel_threads_stack_is_settable() {
    let _wd = watchdog("the_kernel_threads_stack_is_settable", 60);
    let e = builder()
        .cpu_stack_bytes(4096)
        .build()
        .err()
        .expect("too small a stack");
    assert!(e.to_string().contains("cpu_stack_bytes must be at least"), "{e}");
    // 1 MiB on the stack: four times the default stack, within the 4 MiB asked for.
    let rt = builder().cpu_stack_bytes(4 << 20).build().unwrap();
    let sum = Arc::new(AtomicI64::new(0));
    let s = sum.clone();
    rt.launch(1, 2, move || {
        let big = std::hint::black_box([1u8; 1 << 20]);
        s.fetch_add(big.iter().map(|&b| b as i64).sum(), Ordering::Relaxed);
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(sum.load(Ordering::Relaxed), 2 << 20);
}

over_submissions!(device_pwrite_and_pread_on_a_pipe_ignore_the_offset);

/// A pipe has no offsets: io_uring writes and reads it at its current position whatever
/// the offset; the fallback does the same (pwrite(2) alone would refuse it, ESPIPE).
fn device_pwrite_and_pread_on_a_pipe_ignore_the_offset(sub: Suite) {
    let _wd = watchdog("device_pwrite_and_pread_on_a_pipe_ignore_the_offset", 60);
    let (r, w) = small_pipe();
    let (r2, w2) = small_pipe();
    let rt = common::suite_builder(sub).sandbox(Sandbox::FileIo).build().unwrap();
    let (wfd, rfd) = (w.as_raw_fd(), r2.as_raw_fd());
    // What the host writes for the device to read.
    assert_eq!(
        nix_write(w2.as_raw_fd(), b"from the host"),
        13,
        "the second pipe takes the host's bytes"
    );
    let got = Arc::new(Mutex::new(None));
    let g = got.clone();
    rt.launch(1, 1, move || {
        let wrote = gpuio::device::io::pwrite(wfd, b"at offset 100", 100).map_err(|e| e.0);
        let mut buf = [0u8; 13];
        let read = gpuio::device::io::pread(rfd, &mut buf, 4096).map_err(|e| e.0);
        *g.lock().unwrap() = Some((wrote, read, buf));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let (wrote, read, buf) = got.lock().unwrap().take().unwrap();
    assert_eq!(wrote, Ok(13), "pwrite on a pipe");
    assert_eq!(read, Ok(13), "pread on a pipe");
    assert_eq!(&buf, b"from the host");
    drop(w);
    let mut out = String::new();
    std::fs::File::from(r).read_to_string(&mut out).unwrap();
    assert_eq!(out, "at offset 100");
}

fn nix_write(fd: i32, bytes: &[u8]) -> isize {
    // SAFETY: `bytes` is valid for its length.
    unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) }
}

gpuio::device::kernel! {
    /// Writes `v` to every element of `out` it has a thread for.
    pub fn fill_with(v: u32, out: gpuio::device::param::Out<u32>) {
        let i = gpuio::device::global_thread_idx() as usize;
        if i < out.len() {
            // SAFETY: thread i alone writes element i.
            unsafe { out.write(i, v) };
        }
    }
}

/// An `Output` goes only to launches of the runtime that made it (its reads wait for that
/// runtime's kernels alone); one of no elements launches, and reads as empty.
#[test]
fn an_output_of_another_runtime_is_refused_and_an_empty_one_works() {
    let _wd = watchdog("an_output_of_another_runtime_is_refused_and_an_empty_one_works", 60);
    let (a, b) = (builder().build().unwrap(), builder().build().unwrap());
    let kb = b.kernels(&[]).unwrap();
    let mut out = a.output::<u32>(8).unwrap();
    match kb.launch(fill_with, LaunchConfig::linear(1, 8), (7, &mut out)) {
        Err(Error::Config(why)) => assert!(
            why.contains("another runtime") && why.contains("Runtime::output"),
            "{why}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    b.synchronize().unwrap();
    assert_eq!(out.read().unwrap(), [0; 8], "nothing ran");
    let ka = a.kernels(&[]).unwrap();
    ka.launch(fill_with, LaunchConfig::linear(1, 8), (7, &mut out)).unwrap();
    let mut empty = a.output::<u32>(0).unwrap();
    ka.launch(fill_with, LaunchConfig::linear(1, 4), (9, &mut empty))
        .unwrap();
    assert!(matches!(empty.read(), Err(Error::KernelsRunning { .. })));
    a.synchronize().unwrap();
    assert_eq!(out.read().unwrap(), [7; 8]);
    assert!(empty.read().unwrap().is_empty());
}
