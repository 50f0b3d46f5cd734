//! A load run in this process while the probes run beside it, and what its window
//! measures: the load's rate and the CPU time of the process's threads.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::{Backend, Runtime, Sandbox};

use crate::probe::{spawn_probe, stat_cpu};
use crate::{Config, Load, Sample, BLOCK, WARM_UP, YIELD_NICE};

/// Runs `load` with the probes beside it.
pub(crate) fn run_load(cfg: &Config, load: Load) -> Sample {
    let path = cfg.dir.join(format!("bench_neighbour-{}.dat", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let threads = cfg.threads;
    // The load, started.
    let mut plain = Vec::new();
    let mut rt = None;
    match load {
        Load::Idle => {}
        Load::Plain => {
            let file = Arc::new(file.try_clone().unwrap());
            for t in 0..threads {
                let (file, stop, count) = (file.clone(), stop.clone(), count.clone());
                plain.push(std::thread::spawn(move || {
                    let data = [b'a' + (t % 26) as u8; BLOCK];
                    let off = u64::from(t) * BLOCK as u64;
                    while !stop.load(Ordering::Relaxed) {
                        file.write_all_at(&data, off).expect("pwrite");
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        Load::Spin => {
            for _ in 0..threads {
                let (stop, count) = (stop.clone(), count.clone());
                plain.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // A million loops of arithmetic the compiler cannot drop, counted.
                        let mut x = 1u64;
                        for i in 0..1_000_000u64 {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
                        }
                        std::hint::black_box(x);
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        Load::Yield | Load::Wake | Load::YieldWake => {
            let yielders = if load == Load::Wake { 0 } else { threads };
            for _ in 0..yielders {
                let (stop, count) = (stop.clone(), count.clone());
                plain.push(std::thread::spawn(move || {
                    // SAFETY: setpriority with PRIO_PROCESS and this thread's own id changes
                    // only this thread's nice value; a refusal leaves it as it was.
                    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, YIELD_NICE) };
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::yield_now();
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
            if load != Load::Yield {
                // One thread parks until the other unparks it; the other spins 20 µs, unparks
                // it and sleeps 10 µs: tens of thousands of wakeups a second.
                let parked_stop = stop.clone();
                let parked = std::thread::spawn(move || {
                    while !parked_stop.load(Ordering::Relaxed) {
                        std::thread::park_timeout(Duration::from_millis(1));
                    }
                });
                let (other, stop, count) = (parked.thread().clone(), stop.clone(), count.clone());
                plain.push(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        other.unpark();
                        count.fetch_add(1, Ordering::Relaxed);
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_micros(20) {
                            std::hint::spin_loop();
                        }
                        std::thread::sleep(Duration::from_micros(10));
                    }
                }));
                plain.push(parked);
            }
        }
        Load::Fair | Load::RealTime | Load::Print => {
            let r = Runtime::builder()
                .backend(Backend::Cpu)
                .sandbox(Sandbox::FileIo)
                .real_time_waker(load == Load::RealTime)
                .stdout_fd(file.as_raw_fd())
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"));
            let (fd, stop, count) = (file.as_raw_fd(), stop.clone(), count.clone());
            let print = load == Load::Print;
            r.launch(1, threads, move || {
                let t = gpuio::device::global_thread_idx();
                let data = [b'a' + (t % 26) as u8; BLOCK];
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if print {
                        gpuio::device::println!("t={t} i={i}");
                    } else {
                        gpuio::device::io::pwrite(fd, &data, t * BLOCK as u64).expect("device pwrite");
                    }
                    i += 1;
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
            .expect("launch");
            rt = Some(r);
        }
    }
    std::thread::sleep(WARM_UP);
    // The window: the probes run `secs`, then report.
    let cpu0 = io_cpu();
    let (n0, t0) = (count.load(Ordering::Relaxed), Instant::now());
    let probes: Vec<Child> = ["date", "busy", "sleep"]
        .iter()
        .map(|kind| spawn_probe(kind, cfg.secs, cfg.setsid))
        .collect();
    let outputs: Vec<String> = probes
        .into_iter()
        .map(|p| String::from_utf8(p.wait_with_output().expect("probe").stdout).unwrap())
        .collect();
    let (n1, t1) = (count.load(Ordering::Relaxed), Instant::now());
    let cpu1 = io_cpu();
    stop.store(true, Ordering::Relaxed);
    for p in plain {
        p.join().expect("plain writer");
    }
    if let Some(r) = &rt {
        r.synchronize().expect("synchronize");
    }
    drop(rt);
    drop(file);
    let _ = std::fs::remove_file(&path);
    let nums = |s: &str| -> Vec<Duration> {
        let mut v: Vec<Duration> = s
            .lines()
            .filter_map(|l| l.parse::<u64>().ok())
            .map(Duration::from_nanos)
            .collect();
        v.sort_unstable();
        v
    };
    Sample {
        dates: nums(&outputs[0]),
        busy_share: outputs[1].trim().parse().unwrap_or(f64::NAN),
        late: nums(&outputs[2]),
        rate: (n1 - n0) as f64 / (t1 - t0).as_secs_f64(),
        io_cpu: cpu1.io - cpu0.io,
        kernel_cpu: cpu1.kernel() - cpu0.kernel(),
    }
}

/// CPU seconds so far: the whole process, its main thread, and gpuio's I/O threads.
struct Cpu {
    process: f64,
    main: f64,
    io: f64,
}

impl Cpu {
    /// The kernel threads' (and any other thread's but the main one and the I/O threads').
    fn kernel(&self) -> f64 {
        self.process - self.main - self.io
    }
}

fn io_cpu() -> Cpu {
    let process = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| stat_cpu(&s))
        .unwrap_or(0.0);
    let me = std::process::id().to_string();
    let (mut main, mut io) = (0.0, 0.0);
    for t in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let cpu = std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| stat_cpu(&s))
            .unwrap_or(0.0);
        let comm = comm.trim();
        if t.file_name().to_str() == Some(me.as_str()) {
            main = cpu;
        } else if comm == "gpuio-waker" || comm.starts_with("iou-wrk-") {
            io += cpu;
        }
    }
    Cpu { process, main, io }
}
