//! How long a printed line takes to reach its file while other threads compute
//! (invariant 12: output makes progress without any other thread's progress).
//!
//! ```sh
//! cargo bench --bench bench_liveness                   # CPU backend without a GPU
//! cargo bench --bench bench_liveness -- --reps 5 --out /dev/shm/live.txt
//! GPUIO_LOCKSTEP=1 cargo bench --bench bench_liveness  # NVIDIA: the sm_60 build
//! ```
//!
//! Each rep launches `print_then_compute` (kernels-test) in one shape: every thread prints
//! one line and marks a word in host memory once its print returned; then the threads the
//! shape names compute until the host says stop. The host polls the marks and the file as
//! fast as it can, and takes each line's delay as the time from its mark to its line in the
//! file (0 where the line was there first). It prints p50, p99 and the largest delay per
//! shape, and the verdict against the target: every line out within 100 ms.
//!
//! The delays include the host's polling (a read of the file's new bytes and of the marks
//! per round, and a 50 µs pause after a round that found no new bytes): they bound the
//! real delay from above. The poller polls with a short scheduler slice (`poller_slice`):
//! on the CPU backend its own wakeups among the kernel's threads would be late too.
//!
//! On the CPU backend the table ends with the OS's part, measured without gpuio: how long a
//! thread spinning among as many threads as a shape computes with (at the nice value the
//! CPU backend gives kernel threads that outnumber the cores) waits for its core once
//! preempted. A kernel thread preempted while it holds a stream's flush or a ring's
//! reaping turn holds the lines behind it that long (the rarer stall: most late lines wait
//! for SQPOLL's turn, docs/PROTOCOL.md, invariant 12).

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use gpuio::{Backend, GpuModule, Runtime, Sandbox, Scheduling};
use gpuio_test_kernels as k;

const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_NVPTX;

/// The target: every line in its file this long after its print returned.
const TARGET: Duration = Duration::from_millis(100);

/// How long the host pauses after a look that found no new bytes.
const POLL_PAUSE: Duration = Duration::from_micros(50);

/// How long one rep waits for prints and lines before it gives up on the rest.
const REP_WAIT: Duration = Duration::from_secs(5);

/// The nice value of the CPU backend's kernel threads when they outnumber the cores
/// (gpuio-host's `backend/cpu.rs`), for the OS rows.
const OVERSUBSCRIBED_NICE: i32 = 10;

/// How long each OS row's threads spin.
const OS_SPIN: Duration = Duration::from_secs(1);

/// `print_then_compute`'s shapes (kernels-test/src/suite/scheduling.rs), by number.
const SHAPES: [&str; 5] = [
    "thread 0 computes",
    "all but lane 0 of each warp compute",
    "warp 0 of each block computes",
    "block 0 computes",
    "lane 0 computes instead of printing",
];

struct Cli {
    reps: u32,
    grid: u32,
    block: u32,
    out: String,
}

fn usage() -> ! {
    eprintln!(
        "usage: bench_liveness [--reps N] [--grid G] [--block B] [--out FILE]\n\
         defaults: 3 reps, 4 blocks of 64 threads (CPU backend: 2 of 32), FILE in /tmp"
    );
    std::process::exit(2)
}

fn parse() -> Cli {
    let mut cli = Cli {
        reps: 3,
        grid: 0,
        block: 0,
        out: std::env::temp_dir()
            .join(format!("bench_liveness-{}.txt", std::process::id()))
            .display()
            .to_string(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        let number = |v: String| v.parse::<u32>().ok().filter(|&n| n > 0).unwrap_or_else(|| usage());
        match a.as_str() {
            "--reps" => cli.reps = number(value()),
            "--grid" => cli.grid = number(value()),
            "--block" => cli.block = number(value()),
            "--out" => cli.out = value(),
            // `cargo bench` adds it; it changes nothing here.
            "--bench" => {}
            "-h" | "--help" => usage(),
            _ => usage(),
        }
    }
    cli
}

/// What every rep uses: the runtime (stdout into the file), the kernels, the marks.
struct Bench<'rt> {
    rt: &'rt Runtime,
    file: std::fs::File,
    reader: std::fs::File,
    module: Option<GpuModule<'rt>>,
    base: *mut u32,
    dev: u64,
    grid: u32,
    block: u32,
}

impl Bench<'_> {
    /// Runs `reps` reps of `shape` and prints its row; returns whether it met the target.
    fn shape_row(&mut self, shape: u32, name: &str, reps: u32) -> bool {
        let (mut delays, mut held) = (Vec::new(), 0);
        for _ in 0..reps {
            let (d, h) = self.rep(shape);
            delays.extend(d);
            held += h;
        }
        delays.sort_unstable();
        let max = delays.last().copied().unwrap_or_default();
        let met = max <= TARGET;
        println!(
            "| {name} | {} | {held} | {:.3?} | {:.3?} | {max:.3?} | {} |",
            delays.len(),
            quantile(&delays, 0.5),
            quantile(&delays, 0.99),
            if met { "MET" } else { "NOT MET" }
        );
        met
    }

    fn word(&self, i: usize) -> u32 {
        // SAFETY: word `i` of the host buffer (`1 + threads` words), which outlives every
        // rep's kernel; a volatile read of a word the kernel writes.
        unsafe { std::ptr::read_volatile(self.base.add(i)) }
    }

    fn set(&self, i: usize, v: u32) {
        // SAFETY: as in `word`; a volatile write of a word the kernel reads, or that no
        // kernel uses now.
        unsafe { std::ptr::write_volatile(self.base.add(i), v) }
    }

    /// One rep of one shape: each returned print's delay, and how many prints had not
    /// returned by the time the rep gave up waiting.
    fn rep(&mut self, shape: u32) -> (Vec<Duration>, usize) {
        let threads = (self.grid * self.block) as usize;
        for i in 0..=threads {
            self.set(i, 0);
        }
        // An empty file, the fd at its start (the runtime appends from there).
        self.file.set_len(0).unwrap();
        self.file.seek(SeekFrom::Start(0)).unwrap();
        self.reader.seek(SeekFrom::Start(0)).unwrap();
        let (dev, max_ns) = (self.dev, 20_000_000_000u64);
        match &self.module {
            Some(m) => m
                .launch(
                    "print_then_compute",
                    self.grid,
                    self.block,
                    &[shape.into(), dev.into(), max_ns.into()],
                )
                .expect("launch"),
            None => self
                .rt
                .launch(self.grid, self.block, move || k::print_then_compute(shape, dev, max_ns))
                .expect("launch"),
        }
        // The poller with a short slice while it polls (its wakeups would otherwise wait for
        // a tick among the kernel's threads), the default again before the next launch,
        // whose threads would inherit it.
        poller_slice(POLLER_SLICE_NS);
        let printers = threads - usize::from(shape == 4);
        let (mut returned_at, mut out_at) = (HashMap::new(), HashMap::new());
        let (mut text, mut buf) = (String::new(), vec![0u8; 1 << 16]);
        let start = Instant::now();
        loop {
            let now = Instant::now();
            for t in 0..threads {
                if self.word(1 + t) != 0 {
                    returned_at.entry(t as u64).or_insert(now);
                }
            }
            let mut read_any = false;
            while let Ok(n @ 1..) = self.reader.read(&mut buf) {
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                read_any = true;
            }
            while let Some(nl) = text.find('\n') {
                let line: String = text.drain(..=nl).collect();
                if let Some(t) = line.strip_prefix("t=").and_then(|l| l.trim_end().strip_suffix(" i=0")) {
                    out_at.entry(t.parse::<u64>().unwrap()).or_insert(now);
                }
            }
            let all_out = returned_at.keys().all(|t| out_at.contains_key(t));
            if (returned_at.len() == printers && all_out) || start.elapsed() > REP_WAIT {
                break;
            }
            if !read_any {
                // A pause, not a spin: on the CPU backend a poller that never sleeps is one
                // more thread competing for the cores, and a round it loses to the kernel's
                // threads (tens of milliseconds) would count as every pending line's delay.
                // Waking from a short sleep it gets a core at once.
                std::thread::sleep(POLL_PAUSE);
            }
        }
        poller_slice(0);
        self.set(0, 1);
        self.rt.synchronize().expect("synchronize");
        let delays = returned_at
            .iter()
            .map(|(t, r)| out_at.get(t).map_or(REP_WAIT, |o| o.saturating_duration_since(*r)))
            .collect();
        (delays, printers - returned_at.len())
    }
}

fn main() {
    let cli = parse();
    let lockstep = Scheduling::lockstep_from_env()
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or(false);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(&cli.out)
        .unwrap_or_else(|e| panic!("{}: {e}", cli.out));
    let reader = std::fs::File::open(&cli.out).unwrap();
    let rt = Runtime::builder()
        .lockstep(lockstep)
        .sandbox(Sandbox::FileIo)
        .stdout_fd(file.as_raw_fd())
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let gpu = rt.backend() != Backend::Cpu;
    let grid = if cli.grid > 0 {
        cli.grid
    } else if gpu {
        4
    } else {
        2
    };
    let block = if cli.block > 0 {
        cli.block
    } else if gpu {
        64
    } else {
        32
    };
    let mut words = rt.host_buffer(4 * (1 + (grid * block) as usize)).expect("host buffer");
    let base = words.as_mut_slice().as_mut_ptr() as *mut u32;
    let module = gpu.then(|| rt.load_matching(NVPTX).expect("loading the kernels"));
    let scheduling = module.as_ref().and_then(|m| m.scheduling());
    let mut bench = Bench {
        rt: &rt,
        file,
        reader,
        module,
        base,
        dev: words.device_ptr(),
        grid,
        block,
    };
    println!(
        "# bench_liveness: {} | backend {:?}{} | consumer {} | {grid} x {block} threads | {} reps | file {}",
        rt.device_name().unwrap_or("CPU"),
        rt.backend(),
        scheduling.map(|s| format!(", {s}")).unwrap_or_default(),
        match (rt.submission(), rt.stats().sqpoll) {
            (gpuio::Submission::Inline, _) => "inline (kernel threads perform)",
            (gpuio::Submission::HostThread, _) => "host thread",
            (_, true) => "SQPOLL",
            (_, false) => "io_uring entered by the waker",
        },
        cli.reps,
        cli.out
    );
    println!("| shape | lines | prints not returned | p50 | p99 | max | verdict (every line within {TARGET:?}) |");
    println!("|---|---|---|---|---|---|---|");
    let mut all_met = true;
    for (shape, name) in SHAPES.iter().enumerate() {
        all_met &= bench.shape_row(shape as u32, name, cli.reps);
    }
    drop(bench);
    drop(words);
    let _ = std::fs::remove_file(&cli.out);
    if !gpu {
        // Known only now: it starts with the first launch that crowds the cores.
        let real_time = rt.stats().real_time_waker;
        println!("# the waker at real-time priority (Stats::real_time_waker): {real_time}");
        // The shapes compute with all of the threads but a few, or half of them.
        for n in [grid * block, grid * block / 2] {
            os_row(n as usize);
        }
    }
    println!("verdict: {}", if all_met { "MET" } else { "NOT MET" });
}

/// The poller's scheduler slice while it polls: the shortest Linux takes.
const POLLER_SLICE_NS: u64 = 100_000;

/// Sets this thread's scheduler slice (`sched_setattr(2)`'s `sched_runtime`; 0: the
/// default), keeping its policy and nice value. On the CPU backend the poller shares the
/// cores with the kernel's threads, and a thread with the default slice that wakes among
/// them waits for a tick or more (gpuio-host's `consumer/io_threads.rs`), which would count as
/// every pending line's delay. Kernels before 6.12 ignore it.
fn poller_slice(ns: u64) {
    // SAFETY: an all-zero sched_attr is a valid value of the plain C struct.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    let size = size_of::<libc::sched_attr>() as u32;
    // SAFETY: sched_getattr writes at most `size` bytes to `attr`; sched_setattr reads them.
    unsafe {
        let fair = [libc::SCHED_OTHER, libc::SCHED_BATCH].map(|p| p as u32);
        if libc::syscall(libc::SYS_sched_getattr, 0, &raw mut attr, size, 0) == 0 && fair.contains(&attr.sched_policy) {
            attr.size = size;
            // Reset-on-fork (1) stays as it was: an unprivileged thread may not clear it.
            attr.sched_flags &= 1;
            attr.sched_runtime = ns;
            libc::syscall(libc::SYS_sched_setattr, 0, &raw const attr, 0);
        }
    }
}

/// Prints the OS's row for `n` spinning threads ([`os_turns`]).
fn os_row(n: usize) {
    let gaps = os_turns(n);
    println!(
        "| OS, no gpuio: a thread's wait for its core among {n} spinning at nice +{OVERSUBSCRIBED_NICE} | {} waits | - | {:.3?} | {:.3?} | {:.3?} | - |",
        gaps.len(),
        quantile(&gaps, 0.5),
        quantile(&gaps, 0.99),
        gaps.last().copied().unwrap_or_default()
    );
}

/// The `q` quantile of `sorted` (zero if empty).
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted
        .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or_default()
}

/// The OS's turns, sorted: `n` threads spin for [`OS_SPIN`] at [`OVERSUBSCRIBED_NICE`], each
/// noting every gap of over 200 µs between two of its clock readings (a time it was off
/// its core).
fn os_turns(n: usize) -> Vec<Duration> {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            std::thread::spawn(|| {
                // SAFETY: setpriority with PRIO_PROCESS and this thread's own id changes only
                // this thread's nice value; a refusal leaves it as it was.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, OVERSUBSCRIBED_NICE) };
                let start = Instant::now();
                let (mut last, mut gaps) = (start, Vec::new());
                while last - start < OS_SPIN {
                    let now = Instant::now();
                    if now - last > Duration::from_micros(200) {
                        gaps.push(now - last);
                    }
                    last = now;
                }
                gaps
            })
        })
        .collect();
    let mut gaps: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("an OS-row thread"))
        .collect();
    gaps.sort_unstable();
    gaps
}
