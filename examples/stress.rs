//! Prints `--lines` lines from each of `--threads` threads, to check for loss.
//!
//! `cargo run --release --example stress -- --threads T --lines L --output PATH [--width W]`
//!
//! Every line is `t=<thread> i=<seq>`, padded with `.` to `W` bytes including the newline
//! (`--width 0`, the default, pads nothing); `seq` counts `0..L` per thread. `--output -`
//! prints to stdout. Optional: `--block B` threads per block, `--log-bytes N`,
//! `--sq-entries N`, `--watch-s N` (a diagnostic: the ring words and output size every N s),
//! `--fallback` (the host-thread fallback instead of io_uring, like
//! `GPUIO_URING=off`). Check the output with `cargo run --release --example check -- ...`.
use std::os::fd::AsRawFd;

/// The example kernels (`kernels/`) as PTX for `sm_90` and `sm_60` (`GPUIO_LOCKSTEP=1`
/// picks the lockstep build), built by build.rs.
const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::NVPTX;
/// The same kernels for AMD GPUs, one code object per processor.
const AMDGCN: &[(&str, &[u8])] = gpuio_kernels_gpu::AMDGCN;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: Option<T>) -> T {
    match args.iter().position(|a| a == name) {
        Some(i) => match args.get(i + 1).map(|v| v.parse()) {
            Some(Ok(v)) => v,
            _ => fail(&format!("{name} needs a value")),
        },
        None => default.unwrap_or_else(|| fail(&format!("{name} is required"))),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("stress: {msg}\nusage: stress --threads T --lines L --output PATH|- [--width W] [--block B] [--log-bytes N] [--sq-entries N] [--max-flights N] [--fallback] [--watch-s N] [--warmups N]");
    std::process::exit(2)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let fallback = args.iter().any(|a| a == "--fallback");
    args.retain(|a| a != "--fallback");
    let threads: u32 = arg(&args, "--threads", None);
    let lines: u32 = arg(&args, "--lines", None);
    let output: String = arg(&args, "--output", None);
    let width: u32 = arg(&args, "--width", Some(0));
    let block: u32 = arg(&args, "--block", Some(threads.clamp(1, 256)));
    let log_bytes: usize = arg(&args, "--log-bytes", Some(0));
    let sq_entries: u32 = arg(&args, "--sq-entries", Some(256));
    let max_flights: u32 = arg(&args, "--max-flights", Some(0));
    if threads == 0 || !threads.is_multiple_of(block) {
        fail("--threads must be a positive multiple of --block");
    }
    let file = (output != "-")
        .then(|| std::fs::File::create(&output).unwrap_or_else(|e| fail(&format!("cannot create {output}: {e}"))));
    let fd = file.as_ref().map_or(1, |f| f.as_raw_fd());
    let mut builder = gpuio::Runtime::builder();
    if log_bytes != 0 {
        builder = builder.log_bytes(log_bytes);
    }
    if fallback {
        builder = builder.submission(gpuio::Submission::HostThread);
    }
    if max_flights != 0 {
        builder = builder.max_flights(max_flights);
    }
    let rt = builder
        .stdout_fd(fd)
        .sq_entries(sq_entries)
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let module = match rt.backend() {
        gpuio::Backend::Cuda => {
            eprintln!("stress: on {}", rt.device_name().unwrap_or("a CUDA GPU"));
            Some(rt.load_matching(NVPTX).unwrap_or_else(|e| fail(&e.to_string())))
        }
        gpuio::Backend::Hsa => {
            eprintln!("stress: on {}", rt.device_name().unwrap_or("an AMD GPU"));
            Some(rt.load_matching(AMDGCN).unwrap_or_else(|e| fail(&e.to_string())))
        }
        _ => None,
    };
    let start = std::time::Instant::now();
    let launch = || {
        let launched = match &module {
            Some(m) => m.launch("stress", threads / block, block, &[lines.into(), width.into()]),
            None => rt.launch(threads / block, block, move || gpuio_kernels::stress(lines, width)),
        };
        launched.unwrap_or_else(|e| fail(&e.to_string()));
    };
    // `--watch-s N`: every N seconds until the last synchronize returns, the ring's words
    // and the output's size on stderr (a diagnostic for runs that do not finish).
    // `--warmups N`: launches (each synchronized) before the measured one, into the same
    // output (a diagnostic: the runtime's state carried from kernel to kernel).
    let watch: u64 = arg(&args, "--watch-s", Some(0));
    let warmups: u32 = arg(&args, "--warmups", Some(0));
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut start = start;
    let result = std::thread::scope(|s| {
        if watch > 0 {
            s.spawn(|| {
                let mut last = std::time::Instant::now();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    if last.elapsed().as_secs() >= watch {
                        last = std::time::Instant::now();
                        let size = file.as_ref().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
                        let [sh, st, sf, ch, ct] = rt.ring_words();
                        eprintln!(
                            "stress: watch: sq head {sh} tail {st} flags {sf:#x} | cq head {ch} tail {ct} | output {size} bytes"
                        );
                    }
                }
            });
        }
        for w in 0..warmups {
            launch();
            rt.synchronize().unwrap_or_else(|e| fail(&e.to_string()));
            eprintln!(
                "stress: warm-up launch {w} done at {:.3} s",
                start.elapsed().as_secs_f64()
            );
        }
        start = std::time::Instant::now();
        launch();
        let r = rt.synchronize();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    });
    let secs = start.elapsed().as_secs_f64();
    let total = threads as u64 * lines as u64;
    let stats = rt.stats();
    eprintln!(
        "stress: {threads} threads x {lines} lines = {total} lines in {:.3} s ({:.2} M lines/s), {} SQEs, {} {} wakeups, \
         {} waker looks",
        secs,
        total as f64 / secs / 1e6,
        stats.sqes,
        stats.wakeups,
        match (rt.submission(), stats.sqpoll) {
            (gpuio::Submission::Inline, _) => "inline (kernel threads perform)",
            (gpuio::Submission::HostThread, _) => "fallback-thread",
            (_, true) => "SQPOLL",
            (_, false) => "waker submission",
        },
        stats.waker_looks
    );
    if stats.stray_completions != 0 {
        eprintln!(
            "stress: {} completions matched no request (a gpuio bug)",
            stats.stray_completions
        );
    }
    drop(module);
    if let Err(e) = result {
        eprintln!("stress: {e}");
        std::process::exit(1);
    }
}
