//! Output makes progress without any other thread's progress (invariant 12): a line whose
//! print returned reaches its file while other threads (its own warp's lanes among them)
//! compute, in each shape of `print_then_compute`.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use gpuio::Sandbox;
use gpuio_test_kernels as k;

use crate::harness::{Config, Scratch};
use crate::kernels::{build, check_numbered, plain, sync, Kernels};
use crate::Outcome;

/// The shapes of `print_then_compute`, by number.
const SHAPES: [&str; 5] = [
    "thread 0 computes",
    "all lanes but lane 0 of each warp compute",
    "warp 0 of each block computes",
    "block 0 computes",
    "thread 0 computes instead of printing, its warp's lanes print in the other branch",
];

/// How long the case waits for the printers' prints to return (in the last shape, those of
/// thread 0's warp may not run until it stops).
const PRINT_WAIT: Duration = Duration::from_secs(3);

/// How long the case waits for the lines of the prints that returned: far beyond any
/// honest delay (the CPU configuration's threads compute on a few cores, and
/// how fast is the benchmark's question: `examples/bench_liveness.rs`).
const WAIT: Duration = Duration::from_secs(20);

pub(crate) fn returned_lines_out_while_others_compute(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 2), config.pick(64, 32));
    let threads = (grid * block) as usize;
    let mut said = Vec::new();
    for (shape, name) in SHAPES.iter().enumerate() {
        let (out, path) = scratch.file(&format!("live-{shape}.out"));
        // FileIo: host buffers are for device file I/O, and the flags live in one.
        let rt = build(config.builder().sandbox(Sandbox::FileIo).stdout_fd(out.as_raw_fd()))?;
        let k = Kernels::load(&rt)?;
        let mut words = rt
            .host_buffer(4 * (1 + threads))
            .map_err(|e| format!("host buffer: {e}"))?;
        let base = words.as_mut_slice().as_mut_ptr() as *mut u32;
        let word = |i: usize| {
            // SAFETY: `1 + threads` words of the host buffer, which outlives this case's
            // kernel; a volatile read of a word the kernel writes.
            unsafe { std::ptr::read_volatile(base.add(i)) }
        };
        let stop = || {
            // SAFETY: word 0 of the host buffer; a volatile write the kernel polls.
            unsafe { std::ptr::write_volatile(base, 1) }
        };
        let (dev, max_ns) = (words.device_ptr(), 60_000_000_000u64);
        let (s, w) = (shape as u32, dev);
        k.launch(
            "print_then_compute",
            grid,
            block,
            &[s.into(), w.into(), max_ns.into()],
            move || k::print_then_compute(s, w, max_ns),
        )?;
        // The prints that return while the busy threads compute.
        let printers = threads - usize::from(shape == 4);
        let started = Instant::now();
        let returned = loop {
            let r: Vec<u64> = (0..threads as u64).filter(|&t| word(1 + t as usize) != 0).collect();
            if r.len() == printers || started.elapsed() > PRINT_WAIT {
                break r;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let waited_for_prints = started.elapsed();
        // Their lines, in the file while the kernel still runs.
        let looked = Instant::now();
        let missing = loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let seen: std::collections::HashSet<u64> = text
                .lines()
                .filter_map(|l| l.strip_prefix("t=")?.strip_suffix(" i=0")?.parse().ok())
                .collect();
            let missing: Vec<u64> = returned.iter().copied().filter(|t| !seen.contains(t)).collect();
            if missing.is_empty() || looked.elapsed() > WAIT {
                break missing;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let delay = looked.elapsed();
        stop();
        sync(&rt)?;
        drop(words);
        drop(k);
        drop(rt);
        if !missing.is_empty() {
            return Err(format!(
                "{name}: {} of the {} prints that returned have no line in the file {WAIT:?} later \
                 (threads {:?}...)",
                missing.len(),
                returned.len(),
                &missing[..missing.len().min(8)]
            ));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        if shape == 4 {
            // Every thread but 0 once.
            let mut ts: Vec<u64> = text
                .lines()
                .filter_map(|l| l.strip_prefix("t=")?.strip_suffix(" i=0")?.parse().ok())
                .collect();
            ts.sort_unstable();
            if ts != (1..threads as u64).collect::<Vec<_>>() || text.lines().count() != printers {
                return Err(format!(
                    "{name}: {} lines, not one from each of threads 1 to {}",
                    text.lines().count(),
                    threads - 1
                ));
            }
        } else {
            check_numbered(&text, threads as u64, 1, plain).map_err(|e| format!("{name}: {e}"))?;
        }
        said.push(format!(
            "{name}: {}/{printers} prints returned in {waited_for_prints:.1?}, their lines out within {delay:.1?}",
            returned.len()
        ));
    }
    Ok(said.join("; "))
}
