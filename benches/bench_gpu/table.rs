//! The report: the table and the targets' verdicts.

use std::io::Write;
use std::time::Duration;

use crate::cases::{ms, ratio, Cold, HostWrite, PrintfResult, Row, HOST_WRITERS};
use crate::common;
use crate::options::{Config, Kernel, Target};

pub(crate) fn print_table(cfg: &Config, rows: &[Row], cold: &Cold) {
    let mut out = std::io::stdout().lock();
    let many_cold = format!("x{HOST_WRITERS} cold");
    let header = [
        "case",
        "lines",
        "gpuio ms",
        "gpuio M lines/s",
        "gpuio GB/s",
        "printf ms",
        "printf M lines/s",
        "gpuio/printf",
        "lost gpuio",
        "lost printf",
        "SQEs",
        "host CPU ms/GB",
        "dd GB/s",
        "fs alone x1 hot GB/s",
        "x1 cold",
        &many_cold,
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let g = r.gpuio.time.map(|t| t.as_secs_f64());
            let gpuio_cells = match (g, &r.gpuio.error) {
                (Some(g), None) => [
                    format!("{:.2}", g * 1e3),
                    format!("{:.1}", r.lines as f64 / g / 1e6),
                    format!("{:.2}", r.bytes as f64 / g / 1e9),
                ],
                (_, Some(e)) if e == "timeout" => ["timeout".into(), "-".into(), "-".into()],
                _ => ["error".into(), "-".into(), "-".into()],
            };
            let (p_ms, p_rate, ratio, p_lost) = match &r.printf {
                PrintfResult::Measured { time, lost } => {
                    let p = time.as_secs_f64();
                    (
                        format!("{:.2}", p * 1e3),
                        format!("{:.2}", r.lines as f64 / p / 1e6),
                        g.map_or("-".into(), |g| ratio(p / g)),
                        lost.map_or("n/a".into(), |l| l.to_string()),
                    )
                }
                PrintfResult::Timeout(t) => (
                    format!(">{:.0}", t.as_secs_f64() * 1e3),
                    format!("<{:.2}", r.lines as f64 / t.as_secs_f64() / 1e6),
                    g.map_or("-".into(), |g| format!(">{}", ratio(t.as_secs_f64() / g))),
                    "timeout".into(),
                ),
                PrintfResult::Skipped(_) => ("skipped".into(), "-".into(), "-".into(), "-".into()),
                PrintfResult::Failed(_) => ("error".into(), "-".into(), "-".into(), "-".into()),
            };
            let g_lost = if r.gpuio.error.is_some() && r.gpuio.time.is_none() {
                "?".into()
            } else {
                r.gpuio.lost.to_string()
            };
            let [g_ms, g_rate, g_gbs] = gpuio_cells;
            vec![
                r.name.clone(),
                r.lines.to_string(),
                g_ms,
                g_rate,
                g_gbs,
                p_ms,
                p_rate,
                ratio,
                g_lost,
                p_lost,
                r.gpuio.sqes.map_or("-".into(), |s| s.to_string()),
                r.gpuio
                    .cpu
                    .map_or("-".into(), |c| format!("{:.1}", ms_per_gb(c[0], r.bytes))),
                match &r.dd {
                    Some(Ok(rate)) => format!("{rate:.2}"),
                    Some(Err(_)) => "error".into(),
                    None => "-".into(),
                },
                host_write_cell(r, 0),
                host_write_cell(r, 1),
                host_write_cell(r, 2),
            ]
        })
        .collect();
    common::write_table(&mut out, &header, cells, 1);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "case: L lines per thread, W bytes per line (newline included), into a {} file (shm) or /dev/null.",
        cfg.dir.display()
    );
    let _ = writeln!(
        out,
        "gpuio: median of {} reps, launch .. synchronize returned; lost summed over the reps. GB = 10^9 bytes.",
        cfg.reps
    );
    let _ = writeln!(
        out,
        "printf: CUDA device printf (vprintf) of the same lines, one run, launch .. synchronize + fflush; \
         gpuio/printf = printf time / gpuio time."
    );
    let _ = writeln!(
        out,
        "lost: expected lines - lines found once, whole, in order (shm); /dev/null: gpuio's own count, printf n/a."
    );
    let _ = writeln!(
        out,
        "host CPU: the gpuio child's CPU time (every thread: the SQPOLL thread, the waker, the launching thread, \
         the driver's) over launch .. synchronize of the median rep, per GB printed; dd: `dd bs=4M` into a fresh \
         file in the same directory, as many bytes, median of the reps; fs alone: the file system alone, as \
         many bytes `pwrite`n from host memory into a fresh file there in 4 MiB writes (no device, no \
         formatting): one host thread from a buffer it reuses (hot: the most any writer gets), one thread and \
         {HOST_WRITERS} from a source as large as the file, each byte read once (cold: gpuio's log is a ring the \
         GPU writes over PCIe and the kernel reads once; how warm its bytes are then was not measured), medians \
         of the reps."
    );
    for r in rows {
        if let Some(c) = r.gpuio.cpu {
            let per_gb = |ns: u64| ms_per_gb(ns, r.bytes);
            let _ = writeln!(
                out,
                "{}: host CPU per GB {:.1} ms = SQPOLL {:.1} + waker {:.2} + the rest {:.1}",
                r.name,
                per_gb(c[0]),
                per_gb(c[1]),
                per_gb(c[2]),
                per_gb(c[0].saturating_sub(c[1] + c[2]))
            );
        }
        if let Some(Err(e)) = &r.dd {
            let _ = writeln!(out, "{}: dd: {e}", r.name);
        }
        if let Some(Err(e)) = &r.host_write {
            let _ = writeln!(out, "{}: {e}", r.name);
        }
    }
    for r in rows {
        if let Some(e) = &r.gpuio.error {
            let _ = writeln!(out, "{}: gpuio: {e}", r.name);
        }
        match &r.printf {
            PrintfResult::Failed(e) => {
                let _ = writeln!(out, "{}: printf failed: {e}", r.name);
            }
            PrintfResult::Skipped(why) => {
                let _ = writeln!(out, "{}: printf skipped: {why}", r.name);
            }
            _ => {}
        }
    }
    let _ = writeln!(out);

    // Cold start.
    if cold.reps.is_empty() {
        let _ = writeln!(out, "cold start: not measured ({})", cold.errors.join("; "));
    } else {
        let med = |k: usize| {
            let mut v: Vec<Duration> = cold.reps.iter().map(|r| r[k]).collect();
            v.sort();
            v[v.len() / 2]
        };
        let all: Vec<String> = cold.reps.iter().map(|r| format!("{:.1}", ms(r[3]))).collect();
        let _ = writeln!(
            out,
            "cold start (fresh process, on a bare CUDA context made first ({:.1} ms), runtime creation to the first \
             line on disk; median of {}): {:.1} ms = runtime build {:.1} ms + module load {:.1} ms + launch to \
             first line {:.3} ms (each rep: {} ms){}",
            ms(med(4)),
            cold.reps.len(),
            ms(med(3)),
            ms(med(0)),
            ms(med(1)),
            ms(med(2)),
            all.join(", "),
            if cold.seen_by_sync {
                "; NOTE: the line appeared only after synchronize in some rep"
            } else {
                ""
            }
        );
        for e in &cold.errors {
            let _ = writeln!(out, "cold start: {e}");
        }
    }
    let _ = writeln!(out);

    // Targets, each over every case it names; the print targets are defined for
    // the formatted `stress` lines at 16777216 lines a case.
    let verdict = |ok: bool| if ok { "MET" } else { "NOT MET" };
    let measured = |r: &Row| match (&r.gpuio.error, r.gpuio.time) {
        (None, Some(t)) => Some(t.as_secs_f64()),
        _ => None,
    };
    let mut target = |what: &str, rows: Vec<&Row>, value: &dyn Fn(&Row) -> Option<f64>, unit: &str, min: f64| {
        let values: Vec<(String, Option<f64>)> = rows.iter().map(|r| (r.name.clone(), value(r))).collect();
        // No case, or none measured (`all` of nothing is true).
        if values.iter().all(|(_, v)| v.is_none()) {
            let _ = writeln!(out, "target {what}: not measured in this run");
            return;
        }
        let ok = values.iter().all(|(_, v)| v.is_some_and(|v| v >= min));
        let shown: Vec<String> = values
            .iter()
            .map(|(n, v)| match v {
                Some(v) => format!("{n} {v:.2}{unit}"),
                None => format!("{n} not measured"),
            })
            .collect();
        let _ = writeln!(out, "target {what}: {} ({})", verdict(ok), shown.join(", "));
    };
    let print_rows = |w: u32, t: Target| -> Vec<&Row> {
        if cfg.kernel != Kernel::Stress {
            return Vec::new();
        }
        rows.iter()
            .filter(|r| r.width == w && r.target == t && r.lines == 16_777_216)
            .collect()
    };
    target(
        ">= 250 M lines/s, 32-byte lines into /dev/null",
        print_rows(32, Target::Null),
        &|r| Some(r.lines as f64 / measured(r)? / 1e6),
        " M",
        250.0,
    );
    target(
        ">= 12 GB/s, 128-byte lines into /dev/null",
        print_rows(128, Target::Null),
        &|r| Some(r.bytes as f64 / measured(r)? / 1e9),
        " GB/s",
        12.0,
    );
    let mut shm = print_rows(32, Target::Shm);
    shm.extend(print_rows(128, Target::Shm));
    // Lines printed after the verdicts (`target` holds `out`): each tmpfs case beside the
    // file system alone, and what the printf ratios ask of it.
    let mut asks: Vec<String> = shm
        .iter()
        .filter_map(|r| {
            let (
                g,
                Some(Ok(HostWrite {
                    medians: [hot, cold, _],
                    ..
                })),
            ) = (measured(r)?, &r.host_write)
            else {
                return None;
            };
            let rate = r.bytes as f64 / g / 1e9;
            Some(format!(
                "  {}: gpuio {rate:.2} GB/s into tmpfs, {:.2}x the file system alone from one host thread (cold), \
                 {:.2}x (hot)",
                r.name,
                rate / cold,
                rate / hot
            ))
        })
        .collect();
    target(
        ">= 1.0x dd bs=4M into a fresh tmpfs file (32- and 128-byte lines)",
        shm,
        &|r| {
            let dd = r.dd.as_ref()?.as_ref().ok()?;
            Some(r.bytes as f64 / measured(r)? / 1e9 / dd)
        },
        "x",
        1.0,
    );
    let vs_printf = |r: &Row| -> Option<f64> {
        let g = measured(r)?;
        match &r.printf {
            PrintfResult::Measured { time, .. } => Some(time.as_secs_f64() / g),
            // A printf run killed at the timeout took at least that long.
            PrintfResult::Timeout(t) => Some(t.as_secs_f64() / g),
            _ => None,
        }
    };
    for (w, min) in [(32, 80.0), (128, 40.0)] {
        let mut all = print_rows(w, Target::Shm);
        all.extend(print_rows(w, Target::Null));
        target(
            &format!(">= {min}x CUDA printf, {w}-byte lines, every case"),
            all,
            &vs_printf,
            "x",
            min,
        );
        // Into tmpfs, what the ratio asks of the file system, beside what it took from
        // host memory alone in the same run.
        for r in print_rows(w, Target::Shm) {
            let (Some(x), Some(g), Some(Ok(fs))) = (vs_printf(r), measured(r), &r.host_write) else {
                continue;
            };
            if x < min {
                let [hot, cold, many] = fs.medians;
                let need = r.bytes as f64 / g / 1e9 * min / x;
                // printf killed at the timeout: its ratio is a lower bound, what it asks an
                // upper one.
                let timed_out = matches!(r.printf, PrintfResult::Timeout(_));
                asks.push(format!(
                    "  {}: {min}x printf asks {}{need:.2} GB/s of the file; the file system alone took (medians) \
                     {hot:.2} GB/s from one host thread (hot), {cold:.2} (cold), {many:.2} from {HOST_WRITERS} (cold), \
                     at most {:.2} in any run ({})",
                    r.name,
                    if timed_out { "at most " } else { "" },
                    fs.best,
                    if need > fs.best {
                        "more than any host writer got here"
                    } else {
                        "within what a host writer got"
                    }
                ));
            }
        }
    }
    if cfg.kernel == Kernel::Cpp {
        target(
            ">= 50x CUDA printf, C++ kernels (gpuio_printf against printf), every case",
            rows.iter().filter(|r| r.lines == 16_777_216).collect(),
            &vs_printf,
            "x",
            50.0,
        );
    }
    for a in asks {
        let _ = writeln!(out, "{a}");
    }
    if !cold.reps.is_empty() {
        let mut v: Vec<Duration> = cold.reps.iter().map(|r| r[0]).collect();
        v.sort();
        let med = ms(v[v.len() / 2]);
        let _ = writeln!(
            out,
            "target gpuio's setup on a bare CUDA context (runtime build) <= 20 ms: {} (median {med:.1} ms of {})",
            verdict(med <= 20.0),
            v.len()
        );
    }
    let lost: u64 = rows.iter().map(|r| r.gpuio.lost).sum();
    let failed = rows.iter().filter(|r| r.gpuio.error.is_some()).count();
    let _ = writeln!(
        out,
        "target zero lines lost by gpuio: {} ({lost} lost{})",
        verdict(lost == 0 && failed == 0),
        if failed > 0 {
            format!(", {failed} case(s) failed")
        } else {
            String::new()
        }
    );
    if cfg.total != 16_777_216 {
        let _ = writeln!(
            out,
            "(the targets are defined at 16777216 lines; this run used --total {})",
            cfg.total
        );
    }
}

/// Column `k` (0: one thread hot, 1: one thread cold, 2: [`HOST_WRITERS`] cold) of a row's
/// [`Row::host_write`].
fn host_write_cell(r: &Row, k: usize) -> String {
    match &r.host_write {
        Some(Ok(fs)) => format!("{:.2}", fs.medians[k]),
        Some(Err(_)) => "error".into(),
        None => "-".into(),
    }
}

/// Milliseconds of CPU time (`ns`) per 10^9 bytes printed (`bytes`).
fn ms_per_gb(ns: u64, bytes: u64) -> f64 {
    ns as f64 / 1e6 / (bytes as f64 / 1e9)
}
