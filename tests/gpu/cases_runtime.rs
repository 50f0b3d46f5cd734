//! The runtime around the kernels: idle kernels, errors reported, hangs, several
//! runtimes, create/drop cycles, and code objects built for another layout.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use gpuio::{Error, Scheduling};
use gpuio_test_kernels as k;

use crate::harness::{Config, Scratch};
use crate::kernels::{build, check_numbered, plain, run_printing, sync, Kernels, NVPTX};
use crate::Outcome;

pub(crate) fn idle_longer_than_sq_thread_idle(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 1), config.pick(64, 8));
    let ns = 300_000_000u64;
    let b = config.builder().sq_thread_idle_ms(10);
    let (out, _) = run_printing(b, scratch, k::idle_then_print, (grid, block), (ns,))?;
    check_numbered(&out, (grid * block) as u64, 1, plain)?;
    Ok(format!(
        "{} threads idled 300 ms (SQPOLL idles after 10 ms), then printed: all lines there",
        grid * block
    ))
}

/// How long the launch and synchronize of the case below may take: well past what it takes
/// (a few milliseconds), well short of the parked waker's look (100 ms after the warm-up's
/// synchronize, 80 after the launch).
const BLOCKING_LAUNCH_LIMIT: Duration = Duration::from_millis(50);

/// A launch call that returns only once its kernel has ended (`CUDA_LAUNCH_BLOCKING=1`, as
/// Nsight Compute and compute-sanitizer launch too) while SQPOLL sleeps: the kernel's last
/// flush to a pipe (a serial stream, one write in flight) waits for its earlier write to
/// land, which needs the waker to wake SQPOLL, since a GPU cannot. So the waker must look
/// during the call, not only once it returned. The driver reads `CUDA_LAUNCH_BLOCKING` once,
/// so on a GPU the check runs in a child process of this test binary that has it set. (On
/// the CPU backend a launch returns as its threads start, the waker already looking: there
/// it runs here, and only its lines are checked.)
pub(crate) fn a_launch_call_that_waits_for_its_kernel(config: Config, _: &Scratch) -> Outcome {
    if config.gpu() && crate::common::child::child_mode().is_none() {
        return in_a_child(config, "a_launch_call_that_waits_for_its_kernel");
    }
    let (grid, block, lines, width) = (config.pick(16, 2), config.pick(256, 8), 4u32, 40u32);
    let (r, w) = crate::common::pipes::pipe();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut text).map(|_| text)
    });
    let (launched, took) = {
        // SQPOLL falls asleep 1 ms after its last work.
        let rt = build(config.builder().sq_thread_idle_ms(1).stdout_fd(w.as_raw_fd()))?;
        let k = Kernels::load(&rt)?;
        // A first launch: when its synchronize ends the waker parks, looking again in 100 ms.
        k.launch(k::stress, 1, 1, (1u32, width))?;
        sync(&rt)?;
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        k.launch(k::stress, grid, block, (lines, width))?;
        let launched = t.elapsed();
        sync(&rt)?;
        (launched, t.elapsed())
    };
    drop(w);
    let text = reader
        .join()
        .map_err(|_| "the pipe's reader panicked".to_string())?
        .map_err(|e| format!("reading the pipe: {e}"))?;
    // The first launch's line, then the second's.
    let rest = text.split_once('\n').map_or("", |(_, rest)| rest);
    check_numbered(rest, (grid * block) as u64, lines as u64, plain)?;
    let what = format!(
        "{}: the launch call took {:.1} ms, to synchronize {:.1} ms; {} lines",
        if config.gpu() {
            "CUDA_LAUNCH_BLOCKING=1, SQPOLL asleep"
        } else {
            "the CPU backend"
        },
        launched.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e3,
        grid * block * lines
    );
    if !config.gpu() {
        return Ok(what);
    }
    // The call must have waited for the kernel (else this checks nothing): the kernel is
    // most of the time to synchronize.
    if launched * 2 < took {
        return Err(format!(
            "{what}: the launch call returned before its kernel ended, so it was not blocking \
             (CUDA_LAUNCH_BLOCKING not in effect?)"
        ));
    }
    if took > BLOCKING_LAUNCH_LIMIT {
        return Err(format!(
            "{what}: more than {} ms (the waker parked during the launch call?)",
            BLOCKING_LAUNCH_LIMIT.as_millis()
        ));
    }
    Ok(what)
}

/// How long the child of [`in_a_child`] may run (its module load included, from the JIT
/// cache its parent filled), before it is killed: inside the suite's watchdog, so that a
/// stuck child fails this case rather than the whole run.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

/// Runs case `name` of `config` in a child process of this test binary
/// (`common::child::run_child`), with `CUDA_LAUNCH_BLOCKING=1`, and passes on what it found.
fn in_a_child(config: Config, name: &str) -> Outcome {
    let test = format!("{}::{name}", config.name());
    let run = crate::common::child::run_child(
        &test,
        "CUDA_LAUNCH_BLOCKING=1",
        &[
            ("CUDA_LAUNCH_BLOCKING", Some("1")),
            ("GPUIO_GPU_SUITE_REPEAT", None),
            // The parent says what was skipped; a child that found no GPU fails the case.
            ("GPUIO_SKIP_LOG", None),
        ],
        CHILD_LIMIT,
    );
    // The case's line (`run_case`): `cuda::name (0.12 s): what it found`.
    // (after libtest's `test NAME ... ` with `--nocapture`).
    let at = format!("{test} (");
    match run.stdout.lines().find_map(|l| l.find(&at).map(|i| &l[i..])) {
        Some(line) if run.status.success() => Ok(format!("in a child process: {line}")),
        _ => Err(format!(
            "in a child process ({}): {}{}",
            run.status,
            run.stdout.trim_end(),
            run.stderr
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| format!("\n  {l}"))
                .collect::<String>()
        )),
    }
}

pub(crate) fn print_to_a_closed_fd_is_reported(config: Config, _: &Scratch) -> Outcome {
    let (grid, block) = (2u32, 64u32);
    let rt = build(config.builder().stdout_fd(1_000_000))?;
    let k = Kernels::load(&rt)?;
    k.launch(k::hello, grid, block, ())?;
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
pub(crate) fn a_hang_is_reported_then_waited_out(config: Config, scratch: &Scratch) -> Outcome {
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
    k.launch(k::idle_then_print, grid, block, (ns,))?;
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
    // Every thread idles: on a GPU each block is named with all its threads.
    let blocks = report.running.blocks.as_ref().map(|b| (b.threads, b.first.clone()));
    if config.gpu() && blocks != Some(((grid * block) as u64, (0..grid).map(|b| (b, block)).collect())) {
        return Err(format!(
            "the report does not name the {grid} blocks of {block} threads: {report}"
        ));
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

pub(crate) fn two_runtimes_in_one_process(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(128, 8), 20u32);
    let (a, a_path) = scratch.file("a.out");
    let (b, b_path) = scratch.file("b.out");
    {
        let rt_a = build(config.builder().stdout_fd(a.as_raw_fd()))?;
        let rt_b = build(config.builder().stdout_fd(b.as_raw_fd()))?;
        let (ka, kb) = (Kernels::load(&rt_a)?, Kernels::load(&rt_b)?);
        ka.launch(k::stress, grid, block, (lines, 0))?;
        kb.launch(k::stress, grid, block, (lines, 0))?;
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

pub(crate) fn hundred_runtime_create_drop_cycles(config: Config, scratch: &Scratch) -> Outcome {
    let (block, cycles, warm_up) = (32u32, 100u32, 20u32);
    // Warm up first: what a process makes once and keeps (the C library's cache of thread
    // stacks, which the CPU backend's kernel threads fill, the driver's lazy state) is no
    // leak.
    let mut before = HashMap::new();
    let t0 = Instant::now();
    for cycle in 0..warm_up + cycles {
        if cycle == warm_up {
            before = process_counts();
        }
        let (out, _) = run_printing(config.builder(), scratch, k::hello, (1, block), ())
            .map_err(|e| format!("cycle {cycle}: {e}"))?;
        let n = out.lines().filter(|l| l.starts_with("hello from thread ")).count();
        if n != block as usize || out.lines().count() != n {
            return Err(format!("cycle {cycle}: {n} hello lines of {block}: {out:?}"));
        }
    }
    // The kernel ends a dropped ring's SQPOLL thread after its fd closes, asynchronously
    // (io_uring's exit work, which first unregisters the ring's files and buffers): the
    // last cycles' threads may still be leaving. Wait (up to 10 s) for them to go.
    let settle = Instant::now();
    let mut after = process_counts();
    while after["threads"] > before["threads"] + 8 && settle.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        after = process_counts();
    }
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

pub(crate) fn another_layout_is_refused(config: Config, _: &Scratch) -> Outcome {
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
