//! Output makes progress without any other thread's progress (invariant 12): a line whose
//! print returned reaches its file while other threads (its own warp's lanes among them)
//! compute, in each shape of `print_then_compute`.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use gpuio::Sandbox;
use gpuio_test_kernels as k;

use crate::common::pipes::{fill, small_pipe};
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
/// how fast is the benchmark's question: `benches/bench_liveness.rs`).
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
        let marks = Marks::new(&rt, threads)?;
        let s = shape as u32;
        marks.launch(&k, s, grid, block)?;
        // The prints that return while the busy threads compute.
        let printers = threads - usize::from(shape == 4);
        let started = Instant::now();
        let returned = marks.returned(printers);
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
        marks.stop();
        sync(&rt)?;
        drop(marks);
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

/// As above with every thread computing after its print (one block, shape 3), into a pipe
/// whose buffer is full: the first write blocks in the kernel until the host reads, so the
/// later prints find the stream's one flight out. Once the host reads, every line must come
/// out after the filler while every printer still computes.
pub(crate) fn lines_reach_a_full_pipe_while_the_printers_compute(config: Config, _scratch: &Scratch) -> Outcome {
    let block = config.pick(64, 16);
    let threads = block as usize;
    let (r, w) = small_pipe();
    let filled = fill(w.as_raw_fd());
    let rt = build(config.builder().sandbox(Sandbox::FileIo).stdout_fd(w.as_raw_fd()))?;
    let k = Kernels::load(&rt)?;
    let marks = Marks::new(&rt, threads)?;
    marks.launch(&k, 3, 1, block)?;
    // Let the prints run into the full pipe first (those of the flusher's warp wait with
    // it, in lockstep and at the print's end).
    let started = Instant::now();
    let returned_before = marks.returned(threads).len();
    std::thread::sleep(Duration::from_millis(100));
    let mut reader = std::fs::File::from(r);
    // SAFETY: fcntl only changes the file status flags of our own read end.
    unsafe {
        let fl = libc::fcntl(reader.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(reader.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let looked = Instant::now();
    let mut out = Vec::new();
    let seen = loop {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(out.get(filled..).unwrap_or_default()).into_owned();
        let seen: std::collections::BTreeSet<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("t=")?.strip_suffix(" i=0")?.parse().ok())
            .collect();
        if seen.len() == threads || looked.elapsed() > WAIT {
            break seen;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let delay = looked.elapsed();
    let returned = marks.returned(threads).len();
    marks.stop();
    sync(&rt)?;
    drop(marks);
    drop(k);
    drop(rt);
    if seen.len() != threads {
        let missing: Vec<u64> = (0..threads as u64).filter(|t| !seen.contains(t)).take(8).collect();
        return Err(format!(
            "{} of {threads} lines held back from the pipe {WAIT:?} after the reader started, \
             while every printer computed ({returned} prints had returned; threads {missing:?}...)",
            threads - seen.len()
        ));
    }
    if !out[..filled].iter().all(|&c| c == b'x') {
        return Err("the pipe's filler did not come out first, whole".into());
    }
    let text = String::from_utf8_lossy(&out[filled..]).into_owned();
    check_numbered(&text, threads as u64, 1, plain)?;
    Ok(format!(
        "{returned_before}/{threads} prints returned into the full pipe within {:.1?}; \
         all {threads} lines out {delay:.1?} after the reader started",
        started.elapsed().saturating_sub(Duration::from_millis(100))
    ))
}

/// A hang report names what still runs: on a GPU the blocks whose threads have not
/// returned, with how many (`kernel!` counts them in and out: with independent scheduling a
/// lone busy thread is one, in lockstep its warp's lanes wait with it at the end of its
/// branch, 32), on the CPU backend the threads themselves. Shapes 0 (thread 0 busy) and 3
/// (block 0 busy) of `print_then_compute`, under a 0.5 s hang timeout.
pub(crate) fn a_hang_report_names_the_blocks_still_running(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 2), config.pick(64, 32));
    let threads = (grid * block) as usize;
    let mut said = Vec::new();
    for shape in [0u32, 3] {
        let (out, _) = scratch.file(&format!("named-{shape}.out"));
        let rt = build(
            config
                .builder()
                .sandbox(Sandbox::FileIo)
                .stdout_fd(out.as_raw_fd())
                .hang_timeout(Some(Duration::from_millis(500))),
        )?;
        let k = Kernels::load(&rt)?;
        let marks = Marks::new(&rt, threads)?;
        marks.launch(&k, shape, grid, block)?;
        let report = rt.synchronize();
        marks.stop();
        sync(&rt)?;
        let report = match report {
            Err(gpuio::Error::Hang(r)) => r,
            other => return Err(format!("shape {shape}: expected a hang after 0.5 s, got {other:?}")),
        };
        // What still runs: (block, threads) on a GPU, (block, thread) on the CPU backend.
        let busy = match (shape, config) {
            (0, Config::Lockstep) => vec![(0, 32)],
            (0, Config::Cuda) => vec![(0, 1)],
            (0, Config::Cpu) => vec![(0, 0)],
            (_, Config::Cpu) => (0..8).map(|t| (0, t)).collect(),
            _ => vec![(0, block)],
        };
        let text = report.to_string();
        let seen = match (&report.running.blocks, config.gpu()) {
            (Some(b), true) => (b.threads, b.first.clone()),
            (None, false) => (report.running.count as u64, report.running.first.clone()),
            _ => return Err(format!("shape {shape}: the report names no {}: {text}", config.name())),
        };
        let count = if config.gpu() {
            busy.iter().map(|&(_, n)| n as u64).sum()
        } else if shape == 0 {
            1
        } else {
            block as u64
        };
        if seen != (count, busy.clone()) {
            return Err(format!(
                "shape {shape}: the report names {seen:?}, not ({count}, {busy:?}): {text}"
            ));
        }
        let named = text.split("; ").find(|p| p.contains("block")).unwrap_or("").to_string();
        said.push(format!("{}: {named}", SHAPES[shape as usize]));
    }
    Ok(said.join("; "))
}

/// The words a `print_then_compute` launch shares with the host: word 0 stops the busy
/// threads, word `1 + t` marks thread `t`'s returned print.
struct Marks<'rt> {
    words: gpuio::HostBuffer<'rt>,
    /// The first word: the mapping's address, which moving `words` does not change.
    base: *mut u32,
    threads: usize,
}

impl<'rt> Marks<'rt> {
    /// Needs a `FileIo` runtime: host buffers are for device file I/O.
    fn new(rt: &'rt gpuio::Runtime, threads: usize) -> Result<Marks<'rt>, String> {
        let mut words = rt
            .host_buffer(4 * (1 + threads))
            .map_err(|e| format!("host buffer: {e}"))?;
        let base = words.as_mut_slice().as_mut_ptr() as *mut u32;
        Ok(Marks { words, base, threads })
    }

    fn word(&self, i: usize) -> u32 {
        assert!(i <= self.threads);
        // SAFETY: one of the `1 + threads` words of the host buffer, which lives as long as
        // `self`; a volatile read of a word the kernel writes.
        unsafe { std::ptr::read_volatile(self.base.add(i)) }
    }

    /// Launches `print_then_compute` in `shape` on `grid` blocks of `block` threads, the
    /// busy threads computing for at most a minute.
    fn launch(&self, k: &Kernels, shape: u32, grid: u32, block: u32) -> Result<(), String> {
        let (w, max_ns) = (self.words.device_ptr(), 60_000_000_000u64);
        k.launch(k::print_then_compute, grid, block, (shape, w, max_ns))
    }

    /// The threads whose print returned, once `printers` of them have or `PRINT_WAIT` has
    /// passed.
    fn returned(&self, printers: usize) -> Vec<u64> {
        let started = Instant::now();
        loop {
            let r: Vec<u64> = (0..self.threads as u64)
                .filter(|&t| self.word(1 + t as usize) != 0)
                .collect();
            if r.len() >= printers || started.elapsed() > PRINT_WAIT {
                return r;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn stop(&self) {
        // SAFETY: word 0 of the host buffer, which lives as long as `self`; a volatile
        // write the kernel polls.
        unsafe { std::ptr::write_volatile(self.base, 1) }
    }
}
