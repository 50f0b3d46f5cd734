//! The GPU suite: kernels shaped as users write them (odd block sizes, lanes diverging
//! between call sites and streams, `print!` pieces, lines of every shape, stack buffers in
//! file I/O, thousands of threads on a tiny ring, idle kernels, several runtimes), run over
//! every configuration this machine has:
//!
//! - `cpu`: the CPU backend (always; the kernels run on host threads, one lane each);
//! - `cuda`: CUDA, the `sm_90` PTX, independent thread scheduling;
//! - `lockstep`: CUDA, the `sm_60` PTX, which the GPU runs with the lanes of each warp in
//!   lockstep, as AMD GPUs run wavefronts (`gpuio_device::arch` on why that matters).
//!
//! Its own harness (`harness = false`): one module load per configuration, one line per
//! case, and a summary that counts skipped cases and says why. A case that hangs fails:
//! its runtime has a hang timeout, and a watchdog aborts the run naming the case.
//!
//! ```text
//! cargo test --release --test gpu                       # every configuration there is
//! cargo test --release --test gpu -- --config lockstep --repeat 3
//! cargo test --release --test gpu -- --case stack --case ring  # cases whose name contains either
//! ```

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::cuda::Cuda;
use gpuio::{Arg, Backend, Builder, Error, GpuModule, Runtime, Sandbox, Scheduling};
use gpuio_test_kernels as k;

/// The example kernels as PTX: `sm_90` and `sm_60` (build.rs).
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_NVPTX;

/// A configuration of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    Cpu,
    Cuda,
    Lockstep,
}

impl Config {
    const ALL: [Config; 3] = [Config::Cpu, Config::Cuda, Config::Lockstep];

    fn name(self) -> &'static str {
        match self {
            Config::Cpu => "cpu",
            Config::Cuda => "cuda",
            Config::Lockstep => "lockstep",
        }
    }

    fn gpu(self) -> bool {
        self != Config::Cpu
    }

    /// A builder for this configuration, with a hang timeout: a hang fails the case with
    /// a report of what was outstanding, instead of hanging the run.
    fn builder(self) -> Builder {
        let b = Runtime::builder().backend(if self.gpu() { Backend::Cuda } else { Backend::Cpu });
        b.lockstep(self == Config::Lockstep)
            .hang_timeout(Some(Duration::from_secs(30)))
    }

    /// `gpu` on the GPU configurations, `cpu` on the CPU backend (which runs one host
    /// thread per GPU thread).
    fn pick(self, gpu: u32, cpu: u32) -> u32 {
        if self.gpu() {
            gpu
        } else {
            cpu
        }
    }
}

/// What a case found.
type Outcome = Result<String, String>;

/// A case: its name and its body.
struct Case {
    name: &'static str,
    run: fn(Config, &Scratch) -> Outcome,
}

const CASES: &[Case] = &[
    Case {
        name: "scheduling_is_the_one_asked_for",
        run: scheduling_is_the_one_asked_for,
    },
    Case {
        name: "blocks_of_33_and_37_threads",
        run: blocks_of_33_and_37_threads,
    },
    Case {
        name: "every_line_once_in_order",
        run: every_line_once_in_order,
    },
    Case {
        name: "divergent_call_sites",
        run: divergent_call_sites,
    },
    Case {
        name: "one_warp_mixing_streams_and_pieces",
        run: one_warp_mixing_streams_and_pieces,
    },
    Case {
        name: "one_print_call_two_streams",
        run: one_print_call_two_streams,
    },
    Case {
        name: "lines_of_every_shape",
        run: lines_of_every_shape,
    },
    Case {
        name: "tiny_ring_and_log_thousands_of_threads",
        run: tiny_ring_and_log_thousands_of_threads,
    },
    Case {
        name: "stack_buffers_pwrite_pread",
        run: stack_buffers_pwrite_pread,
    },
    Case {
        name: "file_io_4_arena_blocks_2048_threads",
        run: file_io_4_arena_blocks_2048_threads,
    },
    Case {
        name: "idle_longer_than_sq_thread_idle",
        run: idle_longer_than_sq_thread_idle,
    },
    Case {
        name: "print_to_a_closed_fd_is_reported",
        run: print_to_a_closed_fd_is_reported,
    },
    Case {
        name: "a_hang_is_reported_then_waited_out",
        run: a_hang_is_reported_then_waited_out,
    },
    Case {
        name: "two_runtimes_in_one_process",
        run: two_runtimes_in_one_process,
    },
    Case {
        name: "hundred_runtime_create_drop_cycles",
        run: hundred_runtime_create_drop_cycles,
    },
    Case {
        name: "another_layout_is_refused",
        run: another_layout_is_refused,
    },
];

/// A directory for the case's files (tmpfs when there is one), emptied per case.
struct Scratch(PathBuf);

impl Scratch {
    fn file(&self, name: &str) -> (std::fs::File, PathBuf) {
        let path = self.0.join(name);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        (f, path)
    }
}

fn main() {
    let mut configs: Vec<Config> = Vec::new();
    let (mut repeat, mut filters) = (1u32, Vec::<String>::new());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" => {
                let v = args.next().unwrap_or_default();
                let c = Config::ALL.into_iter().find(|c| c.name() == v);
                configs.push(c.unwrap_or_else(|| usage(&format!("unknown config {v:?}"))));
            }
            "--repeat" => {
                repeat = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage("--repeat N"))
            }
            "--case" => filters.push(args.next().unwrap_or_else(|| usage("--case NAME"))),
            // What cargo's test runner passes; this harness has no use for them.
            "--nocapture" | "--quiet" | "-q" | "--test-threads" | "--color" | "--format" => {}
            other if other.starts_with("--") => {}
            // A positional filter, as `cargo test NAME` passes.
            other => filters.push(other.to_string()),
        }
    }
    if configs.is_empty() {
        configs = Config::ALL.to_vec();
    }
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f.as_str())))
        .collect();

    let scratch_root = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let scratch = Scratch(scratch_root.join(format!("gpuio-gpu-suite-{}", std::process::id())));
    let (mut passed, mut failed, mut skipped) = (0u32, Vec::new(), Vec::new());
    let started = Instant::now();
    for &config in &configs {
        if let Some(why) = unavailable(config) {
            println!("gpu suite: {}: skipped, {why}", config.name());
            skipped.push(format!("{} ({} cases): {why}", config.name(), cases.len()));
            continue;
        }
        println!("gpu suite: {}: {}", config.name(), describe(config));
        for round in 1..=repeat {
            if repeat > 1 {
                println!("  round {round} of {repeat}");
            }
            for case in &cases {
                let _ = std::fs::remove_dir_all(&scratch.0);
                std::fs::create_dir_all(&scratch.0).expect("scratch directory");
                let t0 = Instant::now();
                let dog = Watchdog::start(format!("{} ({})", case.name, config.name()), 150);
                let outcome =
                    std::panic::catch_unwind(|| (case.run)(config, &scratch)).unwrap_or_else(|p| Err(panic_text(&*p)));
                drop(dog);
                let secs = t0.elapsed().as_secs_f64();
                match outcome {
                    Ok(detail) => {
                        passed += 1;
                        println!("  {} ... ok ({secs:.2} s): {detail}", case.name);
                    }
                    Err(why) => {
                        println!("  {} ... FAILED ({secs:.2} s): {why}", case.name);
                        failed.push(format!("{} ({}): {why}", case.name, config.name()));
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch.0);
    let skipped_cases: usize = skipped.len();
    println!(
        "gpu suite: {passed} passed, {} failed, {skipped_cases} configuration(s) skipped, in {:.1} s",
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if let Ok(log) = std::env::var("GPUIO_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            for s in &skipped {
                let _ = writeln!(f, "gpu suite, {s}");
            }
        }
    }
    for s in &skipped {
        println!("  SKIPPED {s}");
    }
    for f in &failed {
        println!("  FAILED {f}");
    }
    if !failed.is_empty() {
        std::process::exit(1);
    }
}

fn usage(why: &str) -> ! {
    eprintln!("gpu suite: {why}\nusage: gpu [--config cpu|cuda|lockstep]... [--repeat N] [--case NAME]...");
    std::process::exit(2);
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned());
    format!("panicked: {}", msg.unwrap_or_else(|| "(no message)".into()))
}

/// Why `config` cannot run here, if it cannot.
fn unavailable(config: Config) -> Option<String> {
    if !config.gpu() {
        return None;
    }
    match Runtime::builder().backend(Backend::Cuda).build() {
        Ok(_) => None,
        Err(Error::BackendUnavailable { reason, .. }) => Some(format!("no CUDA GPU ({reason})")),
        Err(e) => Some(format!("the CUDA runtime failed: {e}")),
    }
}

/// The device and the scheduling its module runs with, as a line.
fn describe(config: Config) -> String {
    let rt = match config.builder().build() {
        Ok(rt) => rt,
        Err(e) => return format!("(runtime failed: {e})"),
    };
    let t0 = Instant::now();
    match Kernels::load(&rt) {
        Ok(k) => format!(
            "{} backend{}, {}{}",
            rt.backend().name(),
            rt.device_name().map(|n| format!(" on {n}")).unwrap_or_default(),
            k.scheduling(),
            match k.module.as_ref().and_then(|m| m.jit_ms()) {
                Some(ms) => format!(
                    "; first module load {:.1} s (the driver's JIT: {:.1} s)",
                    t0.elapsed().as_secs_f64(),
                    ms / 1000.0
                ),
                None => String::new(),
            }
        ),
        Err(e) => format!("(loading the kernels failed: {e})"),
    }
}

/// Aborts the process if a case runs longer than `secs`: a hang the runtime did not catch
/// fails the run, naming the case, instead of hanging it.
struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    fn start(what: String, secs: u64) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < until {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            println!("gpu suite: {what} did not finish in {secs} s: aborting");
            eprintln!("gpu suite: {what} did not finish in {secs} s: aborting");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The kernels on a runtime: a loaded module on CUDA, the host functions on the CPU.
struct Kernels<'rt> {
    rt: &'rt Runtime,
    module: Option<GpuModule<'rt>>,
}

impl<'rt> Kernels<'rt> {
    fn load(rt: &'rt Runtime) -> Result<Kernels<'rt>, String> {
        let module = match rt.backend() {
            Backend::Cpu => None,
            _ => Some(
                rt.load_matching(NVPTX)
                    .map_err(|e| format!("loading the kernels: {e}"))?,
            ),
        };
        Ok(Kernels { rt, module })
    }

    fn scheduling(&self) -> String {
        match &self.module {
            None => format!("{} (host threads)", Scheduling::Independent),
            Some(m) => match m.scheduling() {
                Some(s @ Scheduling::Lockstep) => format!("{s} (sm_60 PTX)"),
                Some(s) => format!("{s} (sm_90 PTX)"),
                None => "unknown scheduling".into(),
            },
        }
    }

    fn cuda(&self) -> Option<&Arc<Cuda>> {
        self.module.as_ref().and_then(|m| m.cuda())
    }

    /// Launches kernel `name` (on the CPU backend: `cpu` on every thread).
    fn launch(
        &self,
        name: &str,
        grid: u32,
        block: u32,
        args: &[Arg],
        cpu: impl Fn() + Send + Sync + 'static,
    ) -> Result<(), String> {
        match &self.module {
            Some(m) => m.launch(name, grid, block, args),
            None => self.rt.launch(grid, block, cpu),
        }
        .map_err(|e| format!("launching {name}: {e}"))
    }
}

/// Memory a kernel reads or writes: device memory on a GPU, a host vector on the CPU.
enum Mem {
    Host(Vec<u8>),
    Gpu(Arc<Cuda>, u64, usize),
}

impl Mem {
    fn zeroed(k: &Kernels, len: usize) -> Mem {
        match k.cuda() {
            None => Mem::Host(vec![0; len]),
            Some(c) => Mem::Gpu(c.clone(), c.alloc_zeroed(len.max(1)).expect("cuMemAlloc"), len),
        }
    }
    fn addr(&mut self) -> u64 {
        match self {
            Mem::Host(v) => v.as_mut_ptr() as u64,
            Mem::Gpu(_, d, _) => *d,
        }
    }
    fn read(&self) -> Vec<u8> {
        match self {
            Mem::Host(v) => v.clone(),
            Mem::Gpu(c, d, n) => {
                let mut v = vec![0; *n];
                c.copy_from_device(&mut v, *d).expect("cuMemcpyDtoH");
                v
            }
        }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Mem::Gpu(c, d, _) = self {
            c.free(*d);
        }
    }
}

fn sync(rt: &Runtime) -> Result<(), String> {
    rt.synchronize().map_err(|e| format!("synchronize: {e}"))
}

fn build(b: Builder) -> Result<Runtime, String> {
    b.build().map_err(|e| format!("building the runtime: {e}"))
}

/// Runs `name` (`cpu` on the CPU backend) once on a fresh runtime from `b` whose stdout and
/// stderr are files; returns what each received.
fn run_printing(
    b: Builder,
    scratch: &Scratch,
    name: &str,
    (grid, block): (u32, u32),
    args: &[Arg],
    cpu: impl Fn() + Send + Sync + 'static,
) -> Result<(String, String), String> {
    let (out, out_path) = scratch.file(&format!("{name}.out"));
    let (err, err_path) = scratch.file(&format!("{name}.err"));
    {
        let rt = build(b.stdout_fd(out.as_raw_fd()).stderr_fd(err.as_raw_fd()))?;
        let k = Kernels::load(&rt)?;
        k.launch(name, grid, block, args, cpu)?;
        sync(&rt)?;
    }
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let text = |bytes: Vec<u8>, what: &str| {
        String::from_utf8(bytes).map_err(|e| format!("{what} is not UTF-8 (a torn character?): {e}"))
    };
    Ok((text(read(&out_path)?, "stdout")?, text(read(&err_path)?, "stderr")?))
}

/// Checks lines `t=<t> i=<i><suffix>`: each (t, i) exactly once, in order per thread, for
/// `threads` threads of `lines` lines each; `suffix` checks the rest of each line.
fn check_numbered(
    text: &str,
    threads: u64,
    lines: u64,
    suffix: impl Fn(u64, u64, &str) -> Result<(), String>,
) -> Result<(), String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the output ends in the middle of a line".into());
    }
    let mut next = vec![0u64; threads as usize];
    for (n, line) in text.lines().enumerate() {
        let bad = || format!("line {n} is torn or foreign: {:?}", &line[..line.len().min(120)]);
        let rest = line.strip_prefix("t=").ok_or_else(bad)?;
        let (t, rest) = rest.split_once(" i=").ok_or_else(bad)?;
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (i, tail) = rest.split_at(digits);
        let (t, i): (u64, u64) = (t.parse().map_err(|_| bad())?, i.parse().map_err(|_| bad())?);
        if t >= threads {
            return Err(bad());
        }
        if i != next[t as usize] {
            return Err(format!(
                "thread {t}: line i={i} where i={} was due (lost, repeated or out of order)",
                next[t as usize]
            ));
        }
        suffix(t, i, tail).map_err(|e| format!("line {n} ({line:?}): {e}"))?;
        next[t as usize] += 1;
    }
    match next.iter().position(|&c| c != lines) {
        Some(t) => Err(format!("thread {t} printed {} of {lines} lines", next[t])),
        None => Ok(()),
    }
}

fn plain(_: u64, _: u64, tail: &str) -> Result<(), String> {
    if tail.trim_end_matches('.').is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected text {tail:?}"))
    }
}

// ------------------------------------------------------------------------------ cases

/// The configuration's scheduling is the one asked for: a spin lock taken the way that
/// needs independent scheduling completes on every lane with it, and makes lanes give up
/// in lockstep. (On the CPU backend the threads are preemptible, so a lane could give up
/// behind a descheduled holder: skipped.)
fn scheduling_is_the_one_asked_for(config: Config, _: &Scratch) -> Outcome {
    if !config.gpu() {
        return Ok("CPU threads are independent by construction: nothing to probe".into());
    }
    let rt = build(config.builder())?;
    let k = Kernels::load(&rt)?;
    let (mut lock, mut out) = (Mem::zeroed(&k, 4), Mem::zeroed(&k, 8));
    let (grid, block, tries) = (4u32, 64u32, 2_000_000u32);
    k.launch(
        "lockstep_probe",
        grid,
        block,
        &[lock.addr().into(), out.addr().into(), tries.into()],
        || {},
    )?;
    sync(&rt)?;
    let words = out.read();
    let ran = u32::from_ne_bytes(words[0..4].try_into().unwrap());
    let gave_up = u32::from_ne_bytes(words[4..8].try_into().unwrap());
    let detail = format!(
        "{ran} of {} lanes took the lock, {gave_up} gave up after {tries} tries",
        grid * block
    );
    match (config, gave_up) {
        (Config::Lockstep, 0) => Err(format!("{detail}: this is not lockstep scheduling")),
        (Config::Cuda, n) if n > 0 => Err(format!("{detail}: this is not independent scheduling")),
        _ if ran + gave_up != grid * block => Err(format!("{detail}: lanes are missing")),
        _ => Ok(detail),
    }
}

fn blocks_of_33_and_37_threads(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, lines) = (config.pick(64, 3), 40u32);
    let mut total = 0;
    for block in [33u32, 37] {
        let (out, _) = run_printing(
            config.builder(),
            scratch,
            "stress",
            (grid, block),
            &[lines.into(), 0u32.into()],
            k_stress(lines, 0),
        )?;
        check_numbered(&out, (grid * block) as u64, lines as u64, plain).map_err(|e| format!("block {block}: {e}"))?;
        total += out.lines().count();
    }
    Ok(format!(
        "{grid} blocks of 33, then of 37 threads: {total} lines whole, once, in order"
    ))
}

fn k_stress(lines: u32, width: u32) -> impl Fn() + Send + Sync + 'static {
    move || k::stress(lines, width)
}

fn every_line_once_in_order(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines, width) = (config.pick(64, 4), config.pick(256, 16), 16u32, 40u32);
    let (out, _) = run_printing(
        config.builder(),
        scratch,
        "stress",
        (grid, block),
        &[lines.into(), width.into()],
        k_stress(lines, width),
    )?;
    check_numbered(&out, (grid * block) as u64, lines as u64, |_, _, tail| {
        plain(0, 0, tail)?;
        Ok(())
    })?;
    if let Some(l) = out.lines().find(|l| l.len() + 1 != width as usize) {
        return Err(format!("a line is not padded to {width} bytes: {l:?}"));
    }
    Ok(format!("{} lines from {} threads", out.lines().count(), grid * block))
}

fn divergent_call_sites(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(64, 16), 20u32);
    let (out, _) = run_printing(
        config.builder(),
        scratch,
        "divergent_sites",
        (grid, block),
        &[lines.into()],
        move || k::divergent_sites(lines),
    )?;
    check_numbered(&out, (grid * block) as u64, lines as u64, |t, i, tail| {
        let want = match (t % 3, i % 2) {
            (0, _) => " site=a",
            (1, _) => " site=b more",
            (_, 0) => " site=c",
            _ => " site=d",
        };
        if tail == want {
            Ok(())
        } else {
            Err(format!("expected {want:?}"))
        }
    })?;
    Ok(format!(
        "{} lines from 4 call sites, {} threads",
        out.lines().count(),
        grid * block
    ))
}

/// A `<t:i:kind>` token of [`k::mixed_streams`].
type Token = (u64, u32, char);

/// Splits `text` into `<t:i:k>` tokens and what follows each up to the next token; text
/// before the first token, or a broken token, is an error.
fn tokens(text: &str) -> Result<Vec<(Token, &str)>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    if !rest.is_empty() && !rest.starts_with('<') {
        return Err(format!(
            "text before the first token: {:?}",
            &rest[..rest.len().min(80)]
        ));
    }
    while let Some(body) = rest.strip_prefix('<') {
        let end = body.find('>').ok_or("a token is not closed")?;
        let mut parts = body[..end].split(':');
        let bad = || format!("a torn token: <{}>", &body[..end.min(40)]);
        let t = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let i = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let kind = parts
            .next()
            .filter(|p| p.len() == 1)
            .and_then(|p| p.chars().next())
            .ok_or_else(bad)?;
        let after = &body[end + 1..];
        let next = after.find('<').unwrap_or(after.len());
        out.push(((t, i, kind), &after[..next]));
        rest = &after[next..];
    }
    Ok(out)
}

fn one_warp_mixing_streams_and_pieces(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(64, 16), 8u32);
    let threads = (grid * block) as u64;
    let (out, err) = run_printing(
        config.builder(),
        scratch,
        "mixed_streams",
        (grid, block),
        &[lines.into()],
        move || k::mixed_streams(lines),
    )?;
    // What each thread prints to each stream, in order, and what must follow each token
    // (`None`: anything, for the `print!` pieces).
    let expected = |t: u64, stderr: bool| -> Vec<(Token, Option<String>)> {
        let mut v = Vec::new();
        for i in 0..lines {
            match (t.is_multiple_of(2), stderr) {
                (true, false) => v.push(((t, i, 'o'), Some("\n".to_string()))),
                (false, true) => v.push(((t, i, 'e'), Some("\n".to_string()))),
                _ => {}
            }
        }
        for i in 0..lines {
            if stderr {
                v.push(((t, i, 'r'), Some("\n".into())));
                if i % 4 == 3 {
                    // An `eprint!` piece; its `eprintln!()` comes as a record of its own.
                    v.push(((t, i, 's'), None));
                }
            } else {
                v.push(((t, i, 'f'), Some(format!(" ünï ✓ {:?}\n", "d\"é"))));
                v.push(((t, i, 'p'), None));
                v.push(((t, i, 'q'), None));
            }
        }
        v
    };
    for (stderr, text) in [(false, &out), (true, &err)] {
        let what = if stderr { "stderr" } else { "stdout" };
        let toks = tokens(text).map_err(|e| format!("{what}: {e}"))?;
        let mut next = vec![0usize; threads as usize];
        let plans: Vec<_> = (0..threads).map(|t| expected(t, stderr)).collect();
        for ((t, i, kind), after) in &toks {
            let plan = plans.get(*t as usize).ok_or(format!("{what}: a token of thread {t}"))?;
            let n = &mut next[*t as usize];
            let Some((want, follow)) = plan.get(*n) else {
                return Err(format!(
                    "{what}: thread {t} printed <{t}:{i}:{kind}> after all it had to print"
                ));
            };
            if *want != (*t, *i, *kind) {
                return Err(format!(
                    "{what}: thread {t} printed <{t}:{i}:{kind}> where <{}:{}:{}> was due",
                    want.0, want.1, want.2
                ));
            }
            if let Some(f) = follow {
                // Bare line ends after it are other threads' empty `eprintln!()`s.
                if !after
                    .strip_prefix(f.as_str())
                    .is_some_and(|rest| rest.bytes().all(|b| b == b'\n'))
                {
                    return Err(format!("{what}: <{t}:{i}:{kind}> is followed by {after:?}, not {f:?}"));
                }
            } else if !after.bytes().all(|b| b == b'\n') {
                // A piece is followed by another token, or by other threads' line ends.
                return Err(format!("{what}: the piece <{t}:{i}:{kind}> is followed by {after:?}"));
            }
            *n += 1;
        }
        if let Some(t) = (0..threads as usize).find(|&t| next[t] != plans[t].len()) {
            return Err(format!(
                "{what}: thread {t} printed {} of its {} pieces",
                next[t],
                plans[t].len()
            ));
        }
        // Every line end is there once: one per `println!`/`eprintln!`.
        let per_thread: u64 = (0..threads)
            .map(|t| {
                let own = t.is_multiple_of(2) != stderr;
                lines as u64 * (own as u64 + 1) + if stderr { (lines / 4) as u64 } else { 0 }
            })
            .sum();
        let newlines = text.bytes().filter(|&b| b == b'\n').count() as u64;
        if newlines != per_thread {
            return Err(format!("{what}: {newlines} line ends, {per_thread} printed"));
        }
    }
    Ok(format!(
        "{threads} threads, even ones println!, odd ones eprintln!, then println!, 2 print! pieces, \
         eprintln!: {} tokens on stdout and {} on stderr, each once and in order",
        tokens(&out).map(|t| t.len()).unwrap_or(0),
        tokens(&err).map(|t| t.len()).unwrap_or(0)
    ))
}

/// The lanes of one `print_to` call choose their stream at run time, so a converged warp
/// holds both streams' lanes in one call: its group must split by stream (`Group::split`).
fn one_print_call_two_streams(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(64, 16), 8u32);
    let threads = (grid * block) as u64;
    let (out, err) = run_printing(
        config.builder(),
        scratch,
        "two_streams_one_call",
        (grid, block),
        &[lines.into()],
        move || k::two_streams_one_call(lines),
    )?;
    for (stderr, text) in [(false, &out), (true, &err)] {
        let what = if stderr { "stderr" } else { "stdout" };
        let mut next = vec![0u32; threads as usize];
        for line in text.lines() {
            let toks = tokens(line).map_err(|e| format!("{what}: {e}: {line:?}"))?;
            let [((t, i, 'x'), "")] = toks[..] else {
                return Err(format!("{what}: not one whole token: {line:?}"));
            };
            if t >= threads || (t % 2 == 1) != stderr {
                return Err(format!(
                    "{what}: a line of thread {t}, which prints to the other stream"
                ));
            }
            if i != next[t as usize] {
                return Err(format!(
                    "{what}: thread {t}: i={i} where i={} was due",
                    next[t as usize]
                ));
            }
            next[t as usize] += 1;
        }
        for t in (0..threads).filter(|t| (t % 2 == 1) == stderr) {
            if next[t as usize] != lines {
                return Err(format!(
                    "{what}: thread {t} printed {} of {lines} lines",
                    next[t as usize]
                ));
            }
        }
    }
    Ok(format!(
        "{threads} threads, one print call whose lanes pick stdout or stderr: every line once, on its stream, in order"
    ))
}

fn lines_of_every_shape(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 2), config.pick(32, 8));
    let threads = (grid * block) as u64;
    let mut summary = Vec::new();
    // A 4 KiB log (the 64 KiB lines and the long ones go out in pieces), then the default.
    for (log, long) in [(Some(4096usize), 10_000u32), (None, 300)] {
        let mut b = config.builder();
        if let Some(n) = log {
            b = b.log_bytes(n);
        }
        let (out, _) = run_printing(b, scratch, "line_shapes", (grid, block), &[long.into()], move || {
            k::line_shapes(long)
        })?;
        let expected = |t: u64| -> Vec<String> {
            vec![
                format!("100% {{}} {{{t}}} t={t}"),
                format!("ünïcødé ✓ {:?} t={t}", "q\"uote"),
                k::Repeat { t, len: 65536 }.to_string(),
                k::Repeat { t, len: long as usize }.to_string(),
                format!("done t={t}"),
            ]
        };
        if !out.ends_with('\n') {
            return Err("the output does not end with a newline".into());
        }
        let mut next = vec![0usize; threads as usize];
        let mut empty = 0;
        for line in out.lines() {
            if line.is_empty() {
                empty += 1;
                continue;
            }
            // Which thread: every non-empty line names it.
            let t =
                thread_of(line).ok_or_else(|| format!("a foreign or torn line: {:?}", &line[..line.len().min(100)]))?;
            if t >= threads {
                return Err(format!("a line of thread {t}"));
            }
            let want = expected(t);
            let n = &mut next[t as usize];
            match want.get(*n) {
                Some(w) if w == line => *n += 1,
                Some(w) => {
                    return Err(format!(
                        "log {log:?}: thread {t}, line {n}: {} bytes {:?}... where {} bytes {:?}... were due",
                        line.len(),
                        &line[..line.len().min(60)],
                        w.len(),
                        &w[..w.len().min(60)]
                    ))
                }
                None => return Err(format!("thread {t} printed more lines than it had")),
            }
        }
        if empty != threads {
            return Err(format!("{empty} empty lines, expected {threads}"));
        }
        if let Some(t) = next.iter().position(|&n| n != 5) {
            return Err(format!("thread {t} printed {} of 5 non-empty lines", next[t]));
        }
        summary.push(format!(
            "log {}: {} bytes byte-exact",
            log.map_or("default".into(), |n| format!("{n} B")),
            out.len()
        ));
    }
    Ok(format!(
        "{threads} threads, `%`, `{{}}`, UTF-8, empty, 64 KiB and 10,000-byte lines; {}",
        summary.join(", ")
    ))
}

/// The thread a [`k::line_shapes`] line names: `t=<t>` at its end, or `L<t>:` at its start.
fn thread_of(line: &str) -> Option<u64> {
    if let Some(rest) = line.strip_prefix('L') {
        return rest.split(':').next()?.parse().ok();
    }
    let at = line.rfind("t=")?;
    line[at + 2..].parse().ok()
}

fn tiny_ring_and_log_thousands_of_threads(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(64, 4), config.pick(64, 16), 10u32);
    let b = config.builder().sq_entries(8).log_bytes(4096);
    let (out, _) = run_printing(
        b,
        scratch,
        "stress",
        (grid, block),
        &[lines.into(), 0u32.into()],
        k_stress(lines, 0),
    )?;
    check_numbered(&out, (grid * block) as u64, lines as u64, plain)?;
    Ok(format!(
        "sq_entries(8), a 4 KiB log: {} lines from {} threads",
        out.lines().count(),
        grid * block
    ))
}

fn stack_buffers_pwrite_pread(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(8, 2), 32u32);
    let threads = (grid * block) as usize;
    let (file, path) = scratch.file("stack_io.bin");
    // An 8-entry SQ: the 32 lanes of a warp submitting together need slots a lap apart.
    let rt = build(config.builder().sandbox(Sandbox::FileIo).sq_entries(8))?;
    let k = Kernels::load(&rt)?;
    let mut results = Mem::zeroed(&k, threads * 8);
    let (fd, res) = (file.as_raw_fd(), results.addr());
    k.launch("stack_io", grid, block, &[fd.into(), res.into()], move || {
        k::stack_io(fd, res)
    })?;
    sync(&rt)?;
    let codes: Vec<i64> = results
        .read()
        .chunks(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    drop(results);
    drop(k);
    drop(rt);
    let bad: Vec<(usize, i64)> = codes.iter().copied().enumerate().filter(|&(_, c)| c != 0).collect();
    if !bad.is_empty() {
        return Err(format!(
            "{} of {threads} threads failed (thread, 1000 * step + errno; 998 wrong bytes read back): {:?}",
            bad.len(),
            &bad[..bad.len().min(8)]
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    for t in 0..threads {
        if bytes.get(t * 64..t * 64 + 64) != Some(&k::stack_bytes(t as u64)[..]) {
            return Err(format!("the file's bytes of thread {t} are not the ones it wrote"));
        }
    }
    Ok(format!(
        "{threads} threads, an 8-entry SQ: wrote 64 bytes each from their stacks and read them back, byte-exact"
    ))
}

fn file_io_4_arena_blocks_2048_threads(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(16, 4), config.pick(128, 32));
    let threads = (grid * block) as usize;
    let bytes = 4096u32;
    let block_bytes = 64 << 10;
    let rt = build(
        config
            .builder()
            .sandbox(Sandbox::FileIo)
            .arena_bytes(4 * block_bytes)
            .arena_block_bytes(block_bytes)
            .sq_entries(8),
    )?;
    let k = Kernels::load(&rt)?;
    let dir = scratch.0.join("files");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (shared, shared_path) = scratch.file("shared.bin");
    let dir_text = dir.to_str().unwrap().as_bytes().to_vec();
    let mut dir_mem = Mem::zeroed(&k, dir_text.len());
    match (&mut dir_mem, k.cuda()) {
        (Mem::Host(v), _) => v.copy_from_slice(&dir_text),
        (Mem::Gpu(_, d, _), Some(c)) => c.copy_to_device(*d, &dir_text).map_err(|e| e.to_string())?,
        _ => unreachable!(),
    }
    let mut scratch_mem = Mem::zeroed(&k, threads * 2 * bytes as usize);
    let mut results = Mem::zeroed(&k, threads * 8);
    let (d, dl, fd, s, r) = (
        dir_mem.addr(),
        dir_text.len() as u32,
        shared.as_raw_fd(),
        scratch_mem.addr(),
        results.addr(),
    );
    k.launch(
        "file_check",
        grid,
        block,
        &[d.into(), dl.into(), fd.into(), bytes.into(), s.into(), r.into()],
        move || k::file_check(d, dl, fd, bytes, s, r),
    )?;
    sync(&rt)?;
    let codes: Vec<i64> = results
        .read()
        .chunks(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    let bad: Vec<(usize, i64)> = codes.iter().copied().enumerate().filter(|&(_, c)| c != 0).collect();
    if !bad.is_empty() {
        return Err(format!(
            "{} of {threads} threads failed (thread, step * 1000 + errno): {:?}",
            bad.len(),
            &bad[..bad.len().min(8)]
        ));
    }
    let shared_bytes = std::fs::read(&shared_path).map_err(|e| e.to_string())?;
    let mut want = vec![0u8; bytes as usize];
    for t in 0..threads {
        k::random_fill(t as u64, &mut want);
        let own = std::fs::read(dir.join(format!("t{t}"))).map_err(|e| format!("thread {t}'s file: {e}"))?;
        let at = t * bytes as usize;
        if own != want || shared_bytes.get(at..at + bytes as usize) != Some(&want[..]) {
            return Err(format!("thread {t}: the bytes in its files are not the ones it wrote"));
        }
    }
    Ok(format!(
        "{threads} threads, 4 arena blocks, an 8-entry SQ: each wrote, fsynced and read back its own \
         file and its part of a shared one ({} bytes each), byte-exact",
        bytes
    ))
}

fn idle_longer_than_sq_thread_idle(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 1), config.pick(64, 8));
    let ns = 300_000_000u64;
    let b = config.builder().sq_thread_idle_ms(10);
    let (out, _) = run_printing(b, scratch, "idle_then_print", (grid, block), &[ns.into()], move || {
        k::idle_then_print(ns)
    })?;
    check_numbered(&out, (grid * block) as u64, 1, plain)?;
    Ok(format!(
        "{} threads idled 300 ms (SQPOLL idles after 10 ms), then printed: all lines there",
        grid * block
    ))
}

fn print_to_a_closed_fd_is_reported(config: Config, _: &Scratch) -> Outcome {
    let (grid, block) = (2u32, 64u32);
    let rt = build(config.builder().stdout_fd(1_000_000))?;
    let k = Kernels::load(&rt)?;
    k.launch("hello", grid, block, &[], k::hello)?;
    match rt.synchronize() {
        Err(Error::Print(p)) if p.outputs.len() == 1 && p.outputs[0].errno == libc::EBADF => {
            if p.outputs[0].lost_lines != (grid * block) as u64 {
                return Err(format!(
                    "{} lines reported lost, {} printed: {p}",
                    p.outputs[0].lost_lines,
                    grid * block
                ));
            }
            sync(&rt)?;
            Ok(format!("reported: {p}"))
        }
        other => Err(format!(
            "expected EBADF with {} lines lost, got {other:?}",
            grid * block
        )),
    }
}

/// A kernel that does nothing visible for longer than the hang timeout: synchronize gives
/// up with a report of what is outstanding (on CUDA read from device memory while the
/// kernel runs), and later synchronizes wait for it again until it is done, with every line.
fn a_hang_is_reported_then_waited_out(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(2, 1), config.pick(64, 4));
    let ns = 3_000_000_000u64;
    let (out, path) = scratch.file("hang.out");
    let rt = build(
        config
            .builder()
            .stdout_fd(out.as_raw_fd())
            .hang_timeout(Some(Duration::from_millis(500))),
    )?;
    let k = Kernels::load(&rt)?;
    let t0 = Instant::now();
    k.launch("idle_then_print", grid, block, &[ns.into()], move || {
        k::idle_then_print(ns)
    })?;
    let report = match rt.synchronize() {
        Err(Error::Hang(r)) => r,
        other => return Err(format!("expected a hang after 0.5 s, got {other:?}")),
    };
    let gave_up = t0.elapsed();
    if gave_up >= Duration::from_nanos(ns) {
        return Err(format!("gave up only after {gave_up:?}, when the kernel was done"));
    }
    if report.tickets.is_none() || report.streams.is_empty() {
        return Err(format!("the report does not name the device's positions: {report}"));
    }
    let line = report.to_string();
    // Each synchronize gives up again while the kernel still idles; then it is done.
    loop {
        match rt.synchronize() {
            Ok(()) => break,
            Err(Error::Hang(_)) if t0.elapsed() < Duration::from_secs(60) => continue,
            Err(e) => return Err(format!("after the hang: {e}")),
        }
    }
    drop(k);
    drop(rt);
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    check_numbered(&text, (grid * block) as u64, 1, plain)?;
    Ok(format!(
        "gave up after {:.2} s: {line}; then waited out, every line there",
        gave_up.as_secs_f64()
    ))
}

fn two_runtimes_in_one_process(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(128, 8), 20u32);
    let (a, a_path) = scratch.file("a.out");
    let (b, b_path) = scratch.file("b.out");
    {
        let rt_a = build(config.builder().stdout_fd(a.as_raw_fd()))?;
        let rt_b = build(config.builder().stdout_fd(b.as_raw_fd()))?;
        let (ka, kb) = (Kernels::load(&rt_a)?, Kernels::load(&rt_b)?);
        let args = [lines.into(), 0u32.into()];
        ka.launch("stress", grid, block, &args, k_stress(lines, 0))?;
        kb.launch("stress", grid, block, &args, k_stress(lines, 0))?;
        sync(&rt_b)?;
        sync(&rt_a)?;
    }
    for (name, path) in [("first", a_path), ("second", b_path)] {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        check_numbered(&text, (grid * block) as u64, lines as u64, plain)
            .map_err(|e| format!("{name} runtime: {e}"))?;
    }
    Ok(format!(
        "two runtimes, {} lines each, both whole and in order",
        grid * block * lines
    ))
}

fn hundred_runtime_create_drop_cycles(config: Config, scratch: &Scratch) -> Outcome {
    let before = process_counts();
    let (block, cycles) = (32u32, 100u32);
    let t0 = Instant::now();
    for cycle in 0..cycles {
        let (out, _) = run_printing(config.builder(), scratch, "hello", (1, block), &[], k::hello)
            .map_err(|e| format!("cycle {cycle}: {e}"))?;
        let n = out.lines().filter(|l| l.starts_with("hello from thread ")).count();
        if n != block as usize || out.lines().count() != n {
            return Err(format!("cycle {cycle}: {n} hello lines of {block}: {out:?}"));
        }
    }
    let after = process_counts();
    let grew: Vec<String> = before
        .iter()
        .filter_map(|(k, b)| {
            let a = after.get(k).copied().unwrap_or(0);
            // A little slack: the driver may open a file or map a region once, lazily.
            (a > b + 8).then(|| format!("{k} {b} -> {a}"))
        })
        .collect();
    if !grew.is_empty() {
        return Err(format!(
            "after {cycles} cycles the process holds more: {}",
            grew.join(", ")
        ));
    }
    Ok(format!(
        "{cycles} cycles of build, load, launch, synchronize, drop in {:.1} s; fds {} -> {}, maps {} -> {}, threads {} -> {}",
        t0.elapsed().as_secs_f64(),
        before["fds"],
        after["fds"],
        before["maps"],
        after["maps"],
        before["threads"],
        after["threads"]
    ))
}

/// Open fds, memory maps and threads of this process.
fn process_counts() -> HashMap<&'static str, usize> {
    let count_dir = |p: &str| std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0);
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map(|m| m.lines().count())
        .unwrap_or(0);
    HashMap::from([
        ("fds", count_dir("/proc/self/fd")),
        ("maps", maps),
        ("threads", count_dir("/proc/self/task")),
    ])
}

fn another_layout_is_refused(config: Config, _: &Scratch) -> Outcome {
    if !config.gpu() {
        return Ok("the CPU backend loads no code objects: nothing to refuse".into());
    }
    let rt = build(config.builder())?;
    let (arch, ptx) = NVPTX
        .iter()
        .find(|(arch, _)| {
            Scheduling::of_sm(arch)
                == Some(if config == Config::Lockstep {
                    Scheduling::Lockstep
                } else {
                    Scheduling::Independent
                })
        })
        .ok_or("no PTX for this configuration")?;
    let ptx = std::str::from_utf8(ptx).map_err(|e| e.to_string())?;
    // The same PTX with `gpuio_layout` changed, as a kernel built against another gpuio
    // version would carry: the runtime must refuse it, not read the context at the wrong
    // offsets.
    let decl = ".global .align 8 .b8 gpuio_layout[8] = {";
    let at = ptx.find(decl).ok_or("the PTX exports no gpuio_layout")? + decl.len();
    let end = at + ptx[at..].find('}').ok_or("gpuio_layout's initializer is not closed")?;
    let mut values: Vec<String> = ptx[at..end].split(',').map(|v| v.trim().to_string()).collect();
    values[0] = ((values[0].parse::<u32>().map_err(|e| e.to_string())? + 1) % 256).to_string();
    let changed = format!("{}{}{}", &ptx[..at], values.join(", "), &ptx[end..]);
    match rt.load_module(&changed) {
        Err(Error::Config(why)) if why.contains("another version of gpuio's device crate") => {
            rt.load_module(ptx)
                .map_err(|e| format!("the right {arch} PTX after the refusal: {e}"))?;
            Ok(format!("refused: {why}"))
        }
        Err(e) => Err(format!("expected a layout error, got {e}")),
        Ok(_) => Err("a code object with another context layout was accepted".into()),
    }
}
