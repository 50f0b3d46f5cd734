//! Child processes: the parent runs each measurement in one, and the child modes run it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpuio::cuda::Cuda;
use gpuio::{Arg, Backend, Error, GpuModule, Runtime};

use crate::common::Check;
use crate::readback::check_file;
use crate::{fail, MIB, NVPTX, REPORT};

/// `key=value` arguments of a child mode.
pub(crate) fn child_args(args: &[String]) -> HashMap<String, String> {
    args.iter()
        .map(|a| match a.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => fail(&format!("child argument {a:?} is not key=value")),
        })
        .collect()
}

pub(crate) fn get<T: std::str::FromStr>(kv: &HashMap<String, String>, key: &str) -> T {
    kv.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| child_error(&format!("missing or bad child argument {key}")))
}

/// Child side: one report line for the parent.
pub(crate) fn report(kind: &str, fields: &[(&str, String)]) {
    let mut s = format!("{REPORT}{kind}");
    for (k, v) in fields {
        s.push_str(&format!(" {k}={v}"));
    }
    eprintln!("{s}");
}

/// Child side: reports an error and exits 3.
pub(crate) fn child_error(msg: &str) -> ! {
    eprintln!("{REPORT}error {msg}");
    std::process::exit(3)
}

/// One report line from a child: its kind and fields.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) kind: String,
    pub(crate) fields: HashMap<String, String>,
}

impl Report {
    pub(crate) fn u64(&self, key: &str) -> Option<u64> {
        self.fields.get(key).and_then(|v| v.parse().ok())
    }

    /// The [`Check`] a child's report carries (`Check::fields`).
    pub(crate) fn check(&self) -> Check {
        let f = |k: &str| self.u64(k).unwrap_or(0);
        Check {
            bytes: f("bytes"),
            read: f("read"),
            good: f("good"),
            malformed: f("malformed"),
            duplicate: f("duplicate"),
            disorder: f("disorder"),
        }
    }
}

/// What a child left.
pub(crate) struct ChildRun {
    pub(crate) reports: Vec<Report>,
    /// `@bench error` messages, then a description of an abnormal exit.
    pub(crate) errors: Vec<String>,
    pub(crate) timed_out: bool,
}

/// Runs this binary in child mode `mode`, with `stdout`, passing its stderr on (indented,
/// tagged) except report lines, which it collects. Kills it after `timeout`.
pub(crate) fn run_child(mode: &str, args: &[String], stdout: Stdio, timeout: Duration, tag: &str) -> ChildRun {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&format!("current_exe: {e}")));
    let mut child = Command::new(exe)
        .arg(mode)
        .args(args)
        .env("GPUIO_QUIET", "1")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("starting a child: {e}")));
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    let tag = tag.to_string();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            match line.strip_prefix(REPORT) {
                Some(r) => {
                    let _ = tx.send(r.to_string());
                }
                None => eprintln!("    [{tag}] {line}"),
            }
        }
    });
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => fail(&format!("waiting for a child: {e}")),
        }
    };
    let _ = reader.join();
    let (mut reports, mut errors) = (Vec::new(), Vec::new());
    for r in rx.try_iter() {
        if let Some(msg) = r.strip_prefix("error ") {
            errors.push(msg.to_string());
            continue;
        }
        let mut parts = r.split(' ');
        let kind = parts.next().unwrap_or_default().to_string();
        let fields = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        reports.push(Report { kind, fields });
    }
    if timed_out {
        errors.push(format!("killed after {} s (timeout)", timeout.as_secs()));
    } else if let Some(s) = status.filter(|s| !s.success()) {
        errors.push(format!("child exited with {s}"));
    }
    ChildRun {
        reports,
        errors,
        timed_out,
    }
}

/// Opens the target of a child: `/dev/null` for writing, or creates (truncates) a file.
pub(crate) fn open_target(path: &str) -> File {
    let r = if path == "/dev/null" {
        File::options().write(true).open(path)
    } else {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    };
    r.unwrap_or_else(|e| child_error(&format!("open {path}: {e}")))
}

/// Empties a regular file and rewinds its offset (after a warm-up, between reps).
pub(crate) fn reset(file: &mut File) {
    let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if regular {
        file.set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)).map(|_| ()))
            .unwrap_or_else(|e| child_error(&format!("truncating the output: {e}")));
    }
}

pub(crate) fn ns(d: Duration) -> String {
    d.as_nanos().to_string()
}

/// Lines lost that `synchronize` reported, or the error if it failed otherwise.
pub(crate) fn runtime_lost(r: gpuio::Result<()>) -> Result<u64, String> {
    match r {
        Ok(()) => Ok(0),
        Err(Error::Print(p)) => {
            eprintln!("{p}");
            Ok(p.outputs.iter().map(|o| o.lost_lines).sum())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// CPU time this process's threads have run, in ns: `[all, SQPOLL threads, the waker]`,
/// from each thread's `/proc/self/task/TID/schedstat` (its time on a CPU, in ns) and its
/// name (`iou-sqp-PID`: an io_uring SQPOLL thread, which Linux runs as a thread of the
/// process that made the ring; `gpuio-waker`). Threads that exit between two readings take
/// their time with them; the children keep all theirs until they exit.
pub(crate) fn cpu_ns() -> [u64; 3] {
    let mut t = [0u64; 3];
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return t;
    };
    for task in dir.flatten() {
        let path = task.path();
        let Some(ns) = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        t[0] += ns;
        if comm.starts_with("iou-sqp") {
            t[1] += ns;
        } else if comm.starts_with("gpuio-waker") {
            t[2] += ns;
        }
    }
    t
}

/// The CUDA runtime of a child printing into `file` (a log of `log_mib` MiB for each output;
/// 0: the default), and how long its build took.
fn timed_runtime(file: &File, log_mib: u64) -> (Runtime, Duration) {
    let t = Instant::now();
    let mut builder = Runtime::builder().backend(Backend::Cuda).stdout_fd(file.as_raw_fd());
    if log_mib > 0 {
        builder = builder.log_bytes((log_mib * MIB) as usize);
    }
    let rt = builder
        .build()
        .unwrap_or_else(|e| child_error(&format!("runtime: {e}")));
    (rt, t.elapsed())
}

/// The bench's kernels loaded into `rt`: the PTX file `module` (`--kernel cpp`'s joined
/// module), or the example kernels' PTX where it is empty; and how long the load took.
fn timed_load<'rt>(rt: &'rt Runtime, module: &str) -> (GpuModule<'rt>, Duration) {
    let ptx = (!module.is_empty())
        .then(|| std::fs::read_to_string(module).unwrap_or_else(|e| child_error(&format!("{module}: {e}"))));
    let t = Instant::now();
    let loaded = match &ptx {
        Some(ptx) => rt.load_module(ptx),
        None => rt.load_matching(NVPTX),
    };
    let loaded = loaded.unwrap_or_else(|e| child_error(&format!("loading the kernels: {e}")));
    (loaded, t.elapsed())
}

/// A child's `module` argument: a PTX file, or empty for the example kernels.
fn module_arg(kv: &HashMap<String, String>) -> String {
    kv.get("module").cloned().unwrap_or_default()
}

/// Child mode `--gpuio-child`: build, load, warm up, then `reps` timed launches of the
/// kernel (`stress`, `literal` or `cpp_stress`).
pub(crate) fn gpuio_child(kv: &HashMap<String, String>) -> ! {
    let (lines, width, threads, block): (u32, u32, u32, u32) =
        (get(kv, "lines"), get(kv, "width"), get(kv, "threads"), get(kv, "block"));
    let (reps, log_mib): (u32, u64) = (get(kv, "reps"), get(kv, "log_mib"));
    let path: String = get(kv, "out");
    let kernel: String = get(kv, "kernel");
    let mut file = open_target(&path);
    let regular = path != "/dev/null";
    // `literal(lines)` or `stress(lines, width)`.
    let args = |lines: u32| -> Vec<Arg> {
        if kernel == "literal" {
            vec![lines.into()]
        } else {
            vec![lines.into(), width.into()]
        }
    };
    let (rt, build) = timed_runtime(&file, log_mib);
    let (module, load) = timed_load(&rt, &module_arg(kv));
    let t2 = Instant::now();
    let warm = module
        .launch(&kernel, 1, block, &args(1))
        .map_err(|e| e.to_string())
        .and_then(|_| runtime_lost(rt.synchronize()));
    if let Err(e) = warm {
        child_error(&format!("warm-up launch: {e}"));
    }
    let warm = t2.elapsed();
    reset(&mut file);
    let res = module.resources(&kernel).ok().flatten();
    report(
        "setup",
        &[
            ("build_ns", ns(build)),
            ("load_ns", ns(load)),
            ("warm_ns", ns(warm)),
            ("regs", res.map_or("?".into(), |r| r.registers.to_string())),
            ("local", res.map_or("?".into(), |r| r.local_bytes.to_string())),
        ],
    );
    for rep in 0..reps {
        let sq0 = rt.stats().sqes;
        let cpu0 = cpu_ns();
        let t = Instant::now();
        let launched = module.launch(&kernel, threads / block, block, &args(lines));
        if let Err(e) = launched {
            child_error(&format!("rep {rep}: launch: {e}"));
        }
        let synced = rt.synchronize();
        let elapsed = t.elapsed();
        let cpu1 = cpu_ns();
        let rt_lost = runtime_lost(synced).unwrap_or_else(|e| child_error(&format!("rep {rep}: synchronize: {e}")));
        let sqes = rt.stats().sqes.wrapping_sub(sq0);
        let mut fields = vec![
            ("rep", rep.to_string()),
            ("ns", ns(elapsed)),
            ("sqes", sqes.to_string()),
            ("rt_lost", rt_lost.to_string()),
            ("cpu_ns", cpu1[0].saturating_sub(cpu0[0]).to_string()),
            ("sqpoll_ns", cpu1[1].saturating_sub(cpu0[1]).to_string()),
            ("waker_ns", cpu1[2].saturating_sub(cpu0[2]).to_string()),
        ];
        if regular {
            let c = check_file(Path::new(&path), u64::from(threads), u64::from(lines), width);
            fields.extend(c.fields());
            reset(&mut file);
        }
        report("rep", &fields);
    }
    drop(module);
    drop(rt);
    if regular {
        let _ = std::fs::remove_file(&path);
    }
    std::process::exit(0)
}

/// Child mode `--printf-child`: stdout is the target. Set the FIFO, load, warm up, time one
/// launch of the printf kernel (`printf_stress`, or `cpp_printf_stress`).
pub(crate) fn printf_child(kv: &HashMap<String, String>) -> ! {
    let (lines, width, threads, block): (u32, u32, u32, u32) =
        (get(kv, "lines"), get(kv, "width"), get(kv, "threads"), get(kv, "block"));
    let kernel: String = get(kv, "kernel");
    let mut fifo: u64 = get(kv, "fifo");
    // The FIFO size must be set before any module that uses printf is loaded. `cuda` holds
    // the primary context (which the runtime shares) until the end, so the limit stays.
    let cuda = Cuda::open().unwrap_or_else(|e| child_error(&format!("CUDA: {e}")));
    loop {
        match cuda.set_printf_fifo(fifo as usize) {
            Ok(()) => break,
            Err(e) if fifo > 64 * MIB => {
                eprintln!("printf FIFO of {} MiB refused ({e}); trying half", fifo / MIB);
                fifo /= 2;
            }
            Err(e) => child_error(&format!("set_printf_fifo({fifo}): {e}")),
        }
    }
    // gpuio's own prints (none: printf_stress does not use them) go to /dev/null, so that the
    // runtime never repositions our stdout.
    let devnull = open_target("/dev/null");
    let rt = Runtime::builder()
        .backend(Backend::Cuda)
        .stdout_fd(devnull.as_raw_fd())
        .stderr_fd(devnull.as_raw_fd())
        .build()
        .unwrap_or_else(|e| child_error(&format!("runtime: {e}")));
    let (module, _) = timed_load(&rt, &module_arg(kv));
    let flush = || {
        // SAFETY: fflush(NULL) flushes every C stdio output stream; the driver writes the
        // printf output through C stdio (or directly; then there is nothing to flush).
        unsafe { libc::fflush(std::ptr::null_mut()) };
    };
    let warm = module
        .launch(&kernel, 1, 32, &[Arg::from(1u32), width.into()])
        .and_then(|_| rt.synchronize());
    if let Err(e) = warm {
        child_error(&format!("warm-up launch: {e}"));
    }
    flush();
    // SAFETY: dup only duplicates our stdout (fd 1, which stays open).
    let fd = unsafe { libc::dup(1) };
    if fd < 0 {
        child_error(&format!("dup(1): {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let mut stdout = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    reset(&mut stdout);
    let t = Instant::now();
    let run = module
        .launch(&kernel, threads / block, block, &[lines.into(), width.into()])
        .and_then(|_| rt.synchronize());
    flush();
    let elapsed = t.elapsed();
    if let Err(e) = run {
        child_error(&format!("{kernel}: {e}"));
    }
    let bytes = stdout.metadata().map(|m| m.len()).unwrap_or(0);
    // Anything the driver writes after synchronize returned (it should not) shows here.
    drop(module);
    drop(rt);
    drop(cuda);
    flush();
    let bytes_at_exit = stdout.metadata().map(|m| m.len()).unwrap_or(0);
    report(
        "printf",
        &[
            ("ns", ns(elapsed)),
            ("fifo", fifo.to_string()),
            ("bytes", bytes.to_string()),
            ("bytes_at_exit", bytes_at_exit.to_string()),
        ],
    );
    std::process::exit(0)
}

/// Child mode `--cold-child`: runtime creation to the first line in the file.
pub(crate) fn cold_child(kv: &HashMap<String, String>) -> ! {
    let path: String = get(kv, "out");
    let log_mib: u64 = get(kv, "log_mib");
    let kernel: String = get(kv, "kernel");
    let file = open_target(&path);
    // A bare CUDA context first (driver loaded, initialised, the primary context retained
    // and kept), so that the runtime's build below is gpuio's own setup on top of it.
    let tc = Instant::now();
    let cuda = Cuda::open().unwrap_or_else(|e| child_error(&format!("CUDA: {e}")));
    let ctx = tc.elapsed();
    let t0 = Instant::now();
    let (rt, build) = timed_runtime(&file, log_mib);
    let (module, load) = timed_load(&rt, &module_arg(kv));
    let t2 = Instant::now();
    module
        .launch(&kernel, 1, 1, &[Arg::from(1u32), Arg::from(0u32)])
        .unwrap_or_else(|e| child_error(&format!("launch: {e}")));
    let poll_until = t2 + Duration::from_secs(10);
    let mut seen_by = "poll";
    while std::fs::metadata(&path).map_or(0, |m| m.len()) == 0 {
        if Instant::now() > poll_until {
            // Not on disk without synchronize: say so, and time it with synchronize.
            seen_by = "synchronize";
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let mut first = t2.elapsed();
    let total = t0.elapsed();
    if let Err(e) = rt.synchronize() {
        child_error(&format!("synchronize: {e}"));
    }
    if seen_by == "synchronize" {
        first = t2.elapsed();
    }
    report(
        "cold",
        &[
            ("ctx_ns", ns(ctx)),
            ("build_ns", ns(build)),
            ("load_ns", ns(load)),
            ("first_ns", ns(first)),
            ("total_ns", ns(if seen_by == "poll" { total } else { t0.elapsed() })),
            ("seen_by", seen_by.into()),
        ],
    );
    drop(module);
    drop(rt);
    drop(cuda);
    std::process::exit(0)
}
