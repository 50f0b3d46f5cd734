//! What the workloads share: the file's contents, the page-cached file and the buffers of
//! the throughput workloads, the host pipeline they race against, and what `/proc` says
//! about this process's threads.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::device::{DevBuf, Pinned};
use crate::uring::SQ_IDLE_MS;
use crate::Bench;

/// The file's contents: 8 bytes per index, from a splitmix of the index.
pub(crate) fn pattern(at: usize, buf: &mut [u8]) {
    for (i, w) in buf.chunks_mut(8).enumerate() {
        let mut z = ((at / 8 + i) as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let b = (z ^ (z >> 31)).to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
}

/// A new empty file, open for reading and writing.
pub(crate) fn rw(path: &std::path::Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("create")
}

/// `bytes` in `secs` as GB/s (10^9 bytes a second).
pub(crate) fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

/// The `p` quantile of `sorted` (ns) in us; NaN if empty.
pub(crate) fn quantile_us(sorted: &[u64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => sorted[((n - 1) as f64 * p) as usize] as f64 / 1e3,
    }
}

/// The file the pread and random-read workloads read (page-cached), and the buffers the
/// throughput workloads share.
pub(crate) struct Data {
    /// The file's path, removed at the end.
    pub(crate) path: PathBuf,
    /// The file, open for reading.
    pub(crate) file: File,
    /// Its descriptor, as the kernels take it.
    pub(crate) fd: u64,
    /// `size` bytes of device memory: where the preads go, where the pwrites come from.
    pub(crate) dev: DevBuf,
    /// The kernels' count of failed transfers (one u64).
    pub(crate) errs: DevBuf,
    /// Host x1's pinned buffer.
    pub(crate) pins1: Vec<Pinned>,
    /// Host xN's pinned buffers, one per thread.
    pub(crate) pins_n: Vec<Pinned>,
}

impl Data {
    /// Writes a `size` file of [`pattern`] into `dir` and reads it once, so that it is
    /// page-cached; then opens it and allocates the buffers.
    pub(crate) fn new(b: &Bench) -> Data {
        let (cfg, g) = (&b.cfg, &b.g);
        let path = cfg.dir.join(format!("gpuio-bench-file-{}", std::process::id()));
        {
            let f = rw(&path);
            let mut buf = vec![0u8; 16 << 20];
            let mut at = 0;
            while at < cfg.size {
                let n = buf.len().min(cfg.size - at);
                pattern(at, &mut buf[..n]);
                f.write_all_at(&buf[..n], at as u64).expect("write");
                at += n;
            }
            let mut sink = vec![0u8; 16 << 20];
            let mut at = 0;
            while at < cfg.size {
                at += f.read_at(&mut sink, at as u64).expect("read");
            }
        }
        let file = File::open(&path).expect("open");
        let fd = file.as_raw_fd() as u64;
        let dev = DevBuf::new(g, cfg.size);
        let errs = DevBuf::new(g, 8);
        let pins1 = vec![Pinned::new(g.cuda.clone(), cfg.block)];
        let pins_n: Vec<Pinned> = (0..cfg.host_threads)
            .map(|_| Pinned::new(g.cuda.clone(), cfg.block))
            .collect();
        Data {
            path,
            file,
            fd,
            dev,
            errs,
            pins1,
            pins_n,
        }
    }
}

/// Checks that `got` gives [`pattern`]'s bytes for the first `size` bytes, 16 MiB at a time;
/// if not, says where on stderr and sets `failed`.
pub(crate) fn check(size: usize, what: &str, got: &dyn Fn(usize, &mut [u8]), failed: &mut bool) {
    let mut a = vec![0u8; 16 << 20];
    let mut b = vec![0u8; 16 << 20];
    let mut at = 0;
    while at < size {
        let n = a.len().min(size - at);
        got(at, &mut a[..n]);
        pattern(at, &mut b[..n]);
        if a[..n] != b[..n] {
            eprintln!("bench_file: {what}: wrong bytes in [{at}, {})", at + n);
            *failed = true;
            return;
        }
        at += n;
    }
}

/// The host pipeline on `pins.len()` threads (inline when one): thread `j` takes blocks
/// `j, j + n, ...` (of its pinned buffer's size) of the first `size` bytes. Reading:
/// `pread` from `file` into its pinned buffer, then a copy to `dev` at the same offset.
/// Writing: the copy from `dev`, then `pwrite`. Returns the seconds it took.
pub(crate) fn host_pipeline(file: &File, dev: &mut DevBuf, pins: &mut [Pinned], size: usize, write: bool) -> f64 {
    let n = pins.len();
    let dev = dev.ranges();
    let dev = &dev;
    let work = move |j: usize, pin: &mut Pinned| {
        let block = pin.len();
        let mut at = j * block;
        while at < size {
            let len = block.min(size - at);
            let buf = &mut pin.slice()[..len];
            if write {
                // SAFETY: thread `j` alone copies its blocks; nothing writes `dev` meanwhile.
                unsafe { dev.download(at, buf) };
                file.write_all_at(buf, at as u64).expect("pwrite");
            } else {
                file.read_exact_at(buf, at as u64).expect("pread");
                // SAFETY: thread `j` alone copies its blocks; nothing reads `dev` meanwhile.
                unsafe { dev.upload(at, buf) };
            }
            at += n * block;
        }
    };
    let t0 = Instant::now();
    if let [pin] = pins {
        work(0, pin);
    } else {
        std::thread::scope(|s| {
            for (j, pin) in pins.iter_mut().enumerate() {
                s.spawn(move || work(j, pin));
            }
        });
    }
    t0.elapsed().as_secs_f64()
}

/// This process's threads whose name starts with `prefix`: (thread id, name).
pub(crate) fn threads_named(prefix: &str) -> Vec<(u64, String)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            comm.starts_with(prefix).then_some((tid, comm))
        })
        .collect()
}

/// How many SQPOLL threads this process has, and the CPU time they ran together during
/// `window` of quiet, measured after twice `SQ_IDLE_MS` (the time an SQPOLL thread spins
/// on an empty ring before it sleeps), from each thread's `/proc/self/task/TID/schedstat`
/// (time on a CPU, ns). What the runtime's rings cost while nothing asks anything of them.
pub(crate) fn sqpoll_cpu_while_idle(window: Duration) -> (usize, Duration) {
    let on_cpu = |tid: u64| {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    std::thread::sleep(Duration::from_millis(2 * SQ_IDLE_MS as u64));
    let threads: Vec<u64> = threads_named("iou-sqp").into_iter().map(|(tid, _)| tid).collect();
    let before: u64 = threads.iter().map(|&t| on_cpu(t)).sum();
    std::thread::sleep(window);
    let after: u64 = threads.iter().map(|&t| on_cpu(t)).sum();
    (threads.len(), Duration::from_nanos(after.saturating_sub(before)))
}
