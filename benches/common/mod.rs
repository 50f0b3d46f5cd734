//! Shared by the benchmarks (not a benchmark itself; tests/bench_checker.rs tests its
//! checker): option helpers, the CUDA GPU a benchmark runs on, machine information,
//! statistics, and the checker for `t=<t> i=<i>` lines padded with `.` (the output of the
//! `stress` kernel and of the std and printf comparisons).
// Each includer uses a different part of it.
#![allow(dead_code)]
use std::path::Path;

// ---------------------------------------------------------------------------------------
// The CUDA GPU a benchmark runs on

/// What a CUDA benchmark runs: the GPU's name, the scheduling `GPUIO_LOCKSTEP` asks for, and
/// the PTX built for it.
pub struct CudaTarget {
    /// The GPU's name, as the driver gives it.
    pub gpu_name: String,
    /// Independent, or lockstep where `GPUIO_LOCKSTEP=1`.
    pub scheduling: gpuio::Scheduling,
    /// The PTX's architecture (`sm_90`, `sm_60`).
    pub arch: &'static str,
    /// The PTX text.
    pub ptx: String,
}

/// The CUDA GPU and the PTX of `nvptx` (a kernel crate's `(arch, PTX)` pairs) for the
/// scheduling asked for. `None` where there is no CUDA GPU, or `GPUIO_BACKEND` forces
/// another backend: the line saying that `bench` skipped is printed. `Err` (for the caller's
/// usage message): a setting it cannot read, or a build without that scheduling's PTX.
pub fn cuda_target(bench: &str, nvptx: &'static [(&'static str, &'static [u8])]) -> Result<Option<CudaTarget>, String> {
    use gpuio::{Backend, Scheduling};
    match Backend::from_env().map_err(|e| e.to_string())? {
        Some(Backend::Cuda) | None => {}
        Some(b) => {
            println!(
                "{bench}: skipped: no CUDA GPU (GPUIO_BACKEND={} selects another backend)",
                b.name()
            );
            return Ok(None);
        }
    }
    let gpu_name = match gpuio::cuda::Cuda::open() {
        Ok(cuda) => cuda.device_name().to_string(),
        Err(reason) => {
            println!("{bench}: skipped: no CUDA GPU ({reason})");
            return Ok(None);
        }
    };
    let scheduling = match Scheduling::lockstep_from_env().map_err(|e| e.to_string())? {
        Some(true) => Scheduling::Lockstep,
        Some(false) | None => Scheduling::Independent,
    };
    let Some(&(arch, ptx)) = nvptx
        .iter()
        .find(|(arch, _)| Scheduling::of_sm(arch) == Some(scheduling))
    else {
        return Err(format!(
            "this build has no PTX for {scheduling}: rebuild with GPUIO_GPU_TARGETS naming sm_90 and \
             sm_60, and without GPUIO_SKIP_GPU_BUILD=1"
        ));
    };
    let ptx = String::from_utf8_lossy(ptx).into_owned();
    Ok(Some(CudaTarget {
        gpu_name,
        scheduling,
        arch,
        ptx,
    }))
}

// ---------------------------------------------------------------------------------------
// CUDA C++ kernels printing through gpuio

/// The nvcc to build CUDA C++ with: `$NVCC`, else /usr/local/cuda/bin/nvcc, else the first
/// on `PATH`; `None` where there is none.
pub fn find_nvcc() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut candidates = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from("/usr/local/cuda/bin/nvcc")])
        .chain(
            std::env::var_os("PATH")
                .into_iter()
                .flat_map(|p| std::env::split_paths(&p).map(|d| d.join("nvcc")).collect::<Vec<_>>()),
        );
    candidates.find(|p| p.is_file())
}

/// gpuio's device header, written beside a CUDA C++ source as `gpuio/device.h` (the bench
/// binaries run where the source tree may not be).
const DEVICE_H: &str = include_str!("../../device/include/gpuio/device.h");

/// A CUDA C++ source that includes `<gpuio/device.h>`, built as a CUDA C++ programmer builds
/// it for gpuio: `nvcc -rdc=true -ptx -O3 -arch=<arch>` (with `defines`, `-DNAME[=V]`), its
/// PTX joined with gpuio's device library for `arch` (`gpuio::link_ptx`). `arch` is the
/// gpuio PTX's: `sm_60` (the lockstep build) takes nvcc's sm_75 PTX retargeted, as nvcc 13
/// builds nothing older (the source must use nothing sm_60 and PTX 7.8 lack). Returns the
/// joined module's PTX and the seconds nvcc took, or what failed. `dir` is a scratch
/// directory the caller removes.
pub fn cpp_module(
    nvcc: &Path,
    source: &str,
    arch: &str,
    defines: &[&str],
    dir: &Path,
) -> Result<(String, f64), String> {
    let include = dir.join("include");
    std::fs::create_dir_all(include.join("gpuio")).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(include.join("gpuio/device.h"), DEVICE_H).map_err(|e| format!("{}: {e}", include.display()))?;
    let (cu, ptx) = (dir.join("kernel.cu"), dir.join("kernel.ptx"));
    std::fs::write(&cu, source).map_err(|e| format!("{}: {e}", cu.display()))?;
    let nvcc_arch = if arch == "sm_60" { "sm_75" } else { arch };
    let t = std::time::Instant::now();
    let o = std::process::Command::new(nvcc)
        .args(["-rdc=true", "-ptx", "-O3", "-std=c++17", &format!("-arch={nvcc_arch}")])
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg(format!("-I{}", include.display()))
        .arg(&cu)
        .arg("-o")
        .arg(&ptx)
        .output()
        .map_err(|e| format!("{}: {e} (NVCC names another)", nvcc.display()))?;
    if !o.status.success() {
        return Err(format!("nvcc failed: {}", String::from_utf8_lossy(&o.stderr).trim()));
    }
    let secs = t.elapsed().as_secs_f64();
    let mut kernel = std::fs::read_to_string(&ptx).map_err(|e| format!("{}: {e}", ptx.display()))?;
    if arch == "sm_60" {
        kernel = kernel
            .lines()
            .map(|l| match l {
                l if l.starts_with(".target ") => ".target sm_60",
                l if l.starts_with(".version ") => ".version 7.8",
                l => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
    }
    let Some(&(_, library)) = gpuio_kernels_gpu::C_LIBRARY_NVPTX.iter().find(|(a, _)| *a == arch) else {
        return Err(format!(
            "this build has no {arch} device library for C++ kernels (GPUIO_GPU_TARGETS naming {arch})"
        ));
    };
    let library = String::from_utf8_lossy(library);
    let joined = gpuio::link_ptx(&[library.trim_end_matches('\0'), &kernel]).map_err(|e| e.to_string())?;
    Ok((joined, secs))
}

// ---------------------------------------------------------------------------------------
// Options

/// The program's arguments, without the program's name and without the `--bench` that
/// `cargo bench` adds to a benchmark's arguments (these benchmarks run the same either way).
pub fn args() -> Vec<String> {
    std::env::args().skip(1).filter(|a| a != "--bench").collect()
}

/// A program's name and usage line, for option errors.
pub struct Cli {
    pub name: &'static str,
    pub usage: &'static str,
}

impl Cli {
    /// Prints `<name>: <msg>` and the usage to stderr and exits 2.
    pub fn fail(&self, msg: &str) -> ! {
        eprintln!("{}: {msg}\n{}", self.name, self.usage);
        std::process::exit(2)
    }

    /// Fails unless `args` are pairs of an option in `known` and its value.
    pub fn only_known(&self, args: &[String], known: &[&str]) {
        for pair in args.chunks(2) {
            if !known.contains(&pair[0].as_str()) {
                self.fail(&format!("unknown option {}", pair[0]));
            }
        }
    }

    /// The value after `name`, parsed; `None` when `name` is absent. Fails on a missing or
    /// bad value.
    pub fn opt<T: std::str::FromStr>(&self, args: &[String], name: &str) -> Option<T> {
        let i = args.iter().position(|a| a == name)?;
        match args.get(i + 1).map(|v| v.parse()) {
            Some(Ok(v)) => Some(v),
            _ => self.fail(&format!("{name} needs a valid value")),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Machine information

/// The CPU's model name from `/proc/cpuinfo`, or `unknown`.
pub fn cpu_model() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The kernel release (`uname -r`), or `unknown`.
pub fn uname_release() -> String {
    // SAFETY: uname fills the zeroed struct we own; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// Whether `dir` is tmpfs, and the bytes free there.
pub fn statfs(dir: &Path) -> std::io::Result<(bool, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statfs fills the zeroed struct we own; `c` is a NUL-terminated path.
    let st = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        st
    };
    Ok((st.f_type == libc::TMPFS_MAGIC, st.f_bavail as u64 * st.f_bsize as u64))
}

/// Today's date in UTC, `YYYY-MM-DD` (civil-from-days).
pub fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Where [`write_fresh`]'s writers take their bytes from.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// Each thread writes every block from one buffer of the block's size, which stays in
    /// its caches: the most any writer of the file could hope for.
    Hot,
    /// Block `i` comes from `i`'s place in this slice, as large as the file (the caller
    /// fills it before, once for many runs): each byte read once, from memory the writers
    /// have not touched since it was filled.
    Cold(&'a [u8]),
}

/// What the file system alone takes: `threads` host threads `pwrite` `bytes` from host
/// memory (`source`) into one fresh file in `dir`, thread `j` the blocks `j, j + threads,
/// ...` of `block` bytes. Returns GB/s (10^9 bytes a second), from the first write to the
/// last one's return; the file is removed, also on an error. No copy from a device and no
/// formatting: what a writer of those bytes can get there (a fresh file on tmpfs takes one
/// writer at a time, under the file's lock).
///
/// # Panics
///
/// If a [`Source::Cold`] slice is shorter than `bytes`.
pub fn write_fresh(dir: &Path, bytes: u64, threads: usize, block: usize, source: Source) -> std::io::Result<f64> {
    use std::os::unix::fs::FileExt;
    use std::time::Instant;
    let len = usize::try_from(bytes).map_err(std::io::Error::other)?;
    if let Source::Cold(src) = source {
        assert!(
            src.len() >= len,
            "write_fresh: a cold source of {} bytes for {len}",
            src.len()
        );
    }
    let (block, threads) = (block.clamp(1, len.max(1)), threads.max(1));
    // Only the threads that get a block.
    let threads = threads.min(len.div_ceil(block).max(1));
    let path = dir.join(format!("gpuio-write-fresh-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let hot: Vec<Vec<u8>> = match source {
        Source::Hot => (0..threads).map(|j| vec![b'a' + (j % 26) as u8; block]).collect(),
        Source::Cold(_) => Vec::new(),
    };
    let start = std::sync::Barrier::new(threads + 1);
    let secs = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|j| {
                let (file, start, hot) = (&file, &start, &hot);
                s.spawn(move || -> std::io::Result<(Instant, Instant)> {
                    start.wait();
                    let began = Instant::now();
                    let mut at = j * block;
                    while at < len {
                        let n = block.min(len - at);
                        let bytes = match source {
                            Source::Hot => &hot[j][..n],
                            Source::Cold(src) => &src[at..at + n],
                        };
                        file.write_all_at(bytes, at as u64)?;
                        at += threads * block;
                    }
                    Ok((began, Instant::now()))
                })
            })
            .collect();
        start.wait();
        // Each writer times itself: the main thread, preempted after the barrier on a busy
        // machine, could start a clock of its own after the writers were done.
        let spans = workers
            .into_iter()
            .map(|w| w.join().expect("writer panicked"))
            .collect::<std::io::Result<Vec<_>>>()?;
        let first = spans.iter().map(|s| s.0).min().expect("at least one writer");
        let last = spans.iter().map(|s| s.1).max().expect("at least one writer");
        Ok::<f64, std::io::Error>(last.duration_since(first).as_secs_f64())
    });
    let _ = std::fs::remove_file(&path);
    Ok(bytes as f64 / secs? / 1e9)
}

/// The CPUs this process may run on as sysfs describes them: how many, on how many
/// physical cores (distinct `physical_package_id`, `core_id`) and packages, and the
/// largest `thread_siblings_list` seen. In a VM this is what the hypervisor says, which
/// need not be the hardware.
pub fn topology() -> String {
    let Ok(allowed) = allowed_cpus() else {
        return "unknown (sched_getaffinity failed)".into();
    };
    let read = |cpu: usize, what: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    };
    let (mut cores, mut packages, mut widest) = (Vec::new(), Vec::new(), String::new());
    for &cpu in &allowed {
        let (package, core, siblings) = (
            read(cpu, "physical_package_id"),
            read(cpu, "core_id"),
            read(cpu, "thread_siblings_list"),
        );
        if !packages.contains(&package) {
            packages.push(package.clone());
        }
        if !cores.contains(&(package.clone(), core.clone())) {
            cores.push((package, core));
        }
        if siblings.len() > widest.len() {
            widest = siblings;
        }
    }
    format!(
        "{} CPUs on {} cores in {} package(s); thread siblings e.g. {widest}",
        allowed.len(),
        cores.len(),
        packages.len()
    )
}

/// The CPUs this process may run on (`sched_getaffinity`), ascending.
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: sched_getaffinity fills the zeroed set we own.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        set
    };
    // SAFETY: every index is below CPU_SETSIZE, the set's size.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

// ---------------------------------------------------------------------------------------
// Report

/// Writes a Markdown table, `header` and then `cells` row by row, each column padded to its
/// widest cell: the first `left` columns aligned left, the others right.
pub fn write_table(out: &mut impl std::io::Write, header: &[&str], cells: Vec<Vec<String>>, left: usize) {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cols: Vec<String>| {
        let padded: Vec<String> = cols
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (s, w))| {
                if i < left {
                    format!("{s:<w$}")
                } else {
                    format!("{s:>w$}")
                }
            })
            .collect();
        format!("| {} |", padded.join(" | "))
    };
    let _ = writeln!(out, "{}", line(header.iter().map(|h| h.to_string()).collect()));
    let _ = writeln!(
        out,
        "|{}|",
        widths
            .iter()
            .enumerate()
            .map(|(i, w)| if i < left {
                format!(":{}", "-".repeat(w + 1))
            } else {
                format!("{}:", "-".repeat(w + 1))
            })
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in cells {
        let _ = writeln!(out, "{}", line(r));
    }
}

// ---------------------------------------------------------------------------------------
// Statistics and settings, as the benchmarks print them

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// A runtime's SQPOLL CPUs (`Runtime::sqpoll_cpus`) as `31,30` or `unbound,unbound`.
pub fn cpu_list(cpus: &[Option<u32>]) -> String {
    cpus.iter()
        .map(|c| c.map_or("unbound".to_string(), |c| c.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

// ---------------------------------------------------------------------------------------
// Expected output and the checker

/// Bytes of `lines` lines from each of `threads` threads, each `t=<t> i=<i>` padded with
/// dots to `width` bytes including the newline (never cut; `width` 0 pads nothing).
pub fn expected_bytes(threads: u64, lines: u64, width: u32) -> u64 {
    let w = u64::from(width);
    let mut sum = 0;
    for t in 0..threads {
        let dt = digits(t);
        for i in 0..lines {
            sum += w.max("t= i=\n".len() as u64 + dt + digits(i));
        }
    }
    sum
}

fn digits(mut n: u64) -> u64 {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// Parses a decimal number without sign or leading zeros.
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || (s.len() > 1 && s[0] == b'0') {
        return None;
    }
    s.iter()
        .try_fold(0u64, |n, &c| c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0')))
}

/// Why a line (without its newline) is not `t=<t> i=<i>` + its dots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineFault {
    /// No `t=` at the start or no ` i=` after it.
    Malformed,
    /// The thread is not a decimal number without sign or leading zeros.
    BadThread,
    /// The sequence number is not a decimal number without sign or leading zeros.
    BadSeq,
    /// Not `max(width, natural length)` bytes with the newline.
    Length { got: usize, want: usize },
}

impl std::fmt::Display for LineFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineFault::Malformed => write!(f, "malformed"),
            LineFault::BadThread => write!(f, "bad thread"),
            LineFault::BadSeq => write!(f, "bad seq"),
            LineFault::Length { got, want } => write!(f, "length {got} (want {want})"),
        }
    }
}

/// Parses `t=<t> i=<i>` and exactly the dots that pad it to `width` bytes with its newline
/// (the line without its newline; `width` 0 or below the natural length: no dots).
pub fn parse_line(line: &[u8], width: usize) -> Result<(u64, u64), LineFault> {
    let core = &line[..line.iter().rposition(|&c| c != b'.').map_or(0, |n| n + 1)];
    let rest = core.strip_prefix(b"t=").ok_or(LineFault::Malformed)?;
    let sp = rest.windows(3).position(|w| w == b" i=").ok_or(LineFault::Malformed)?;
    let t = number(&rest[..sp]).ok_or(LineFault::BadThread)?;
    let i = number(&rest[sp + 3..]).ok_or(LineFault::BadSeq)?;
    let (got, want) = (line.len() + 1, width.max(core.len() + 1));
    if got != want {
        return Err(LineFault::Length { got, want });
    }
    Ok((t, i))
}

/// What the checker found in one output file.
#[derive(Clone, Copy, Debug, Default)]
pub struct Check {
    /// Bytes in the file.
    pub bytes: u64,
    /// Lines read (a last line without its newline counts).
    pub read: u64,
    /// Lines expected, whole and padded right, seen for the first time, after every earlier
    /// line of their thread.
    pub good: u64,
    /// Lines not of the form `t=<t> i=<i>` + the right dots (torn, garbled, extra).
    pub malformed: u64,
    /// Repeats of a line already seen.
    pub duplicate: u64,
    /// First sightings of a line after a later line of the same thread.
    pub disorder: u64,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} lines read, {} good", self.read, self.good)?;
        if self.malformed + self.duplicate + self.disorder > 0 {
            write!(
                f,
                ", {} malformed, {} duplicate, {} out of order",
                self.malformed, self.duplicate, self.disorder
            )?;
        }
        Ok(())
    }
}

/// Checks that `data` holds `lines` lines from each of `threads` threads, each exactly
/// once, whole, padded right to `width` bytes, in per-thread order, and nothing else.
pub fn verify(data: &[u8], threads: u64, lines: u64, width: u32) -> Check {
    let mut seen = vec![0u64; (threads * lines).div_ceil(64) as usize];
    let mut high = vec![0u64; threads as usize]; // 1 + the highest i seen per thread
    let mut c = Check {
        bytes: data.len() as u64,
        ..Check::default()
    };
    let w = width as usize;
    let mut rest = data;
    while !rest.is_empty() {
        c.read += 1;
        // Fast path: a line of exactly `width` bytes (the grammar admits no newline inside).
        let fast = (w > 1 && rest.len() >= w && rest[w - 1] == b'\n')
            .then(|| parse_line(&rest[..w - 1], w).ok())
            .flatten();
        let parsed = match fast {
            Some(ti) => {
                rest = &rest[w..];
                Some(ti)
            }
            None => {
                let (line, whole) = match rest.iter().position(|&b| b == b'\n') {
                    Some(n) => {
                        let line = &rest[..n];
                        rest = &rest[n + 1..];
                        (line, true)
                    }
                    None => (std::mem::take(&mut rest), false),
                };
                parse_line(line, w).ok().filter(|_| whole)
            }
        };
        let (t, i) = match parsed {
            Some((t, i)) if t < threads && i < lines => (t, i),
            _ => {
                c.malformed += 1;
                continue;
            }
        };
        let k = t * lines + i;
        let (word, bit) = ((k / 64) as usize, 1u64 << (k % 64));
        if seen[word] & bit != 0 {
            c.duplicate += 1;
            continue;
        }
        seen[word] |= bit;
        let h = &mut high[t as usize];
        if i < *h {
            c.disorder += 1;
        } else {
            *h = i + 1;
            c.good += 1;
        }
    }
    c
}
