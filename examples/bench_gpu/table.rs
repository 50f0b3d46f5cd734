//! The report: the table and the targets' verdicts.

use std::io::Write;
use std::time::Duration;

use crate::cases::{ms, ratio, Cold, PrintfResult, Row};
use crate::common;
use crate::options::{Config, Target};

pub(crate) fn print_table(cfg: &Config, rows: &[Row], cold: &Cold) {
    let mut out = std::io::stdout().lock();
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
            "cold start (fresh process, runtime creation to the first line on disk; median of {}): \
             {:.1} ms = runtime build {:.1} ms + module load {:.1} ms + launch to first line {:.3} ms \
             (each rep: {} ms){}",
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

    // Targets.
    let at = |r: &Row| r.lines == 16_777_216;
    let fast: Vec<&Row> = rows
        .iter()
        .filter(|r| r.target == Target::Shm && r.width == 32 && at(r))
        .collect();
    let rate = |r: &Row| match (&r.gpuio.error, r.gpuio.time) {
        (None, Some(t)) => r.lines as f64 / t.as_secs_f64() / 1e6,
        _ => 0.0,
    };
    let verdict = |ok: bool| if ok { "MET" } else { "NOT MET" };
    if fast.is_empty() {
        let _ = writeln!(
            out,
            "target >= 100 M lines/s (32-byte lines, tmpfs, 16777216 lines): not measured in this run"
        );
    } else {
        let rates: Vec<String> = fast.iter().map(|r| format!("{} {:.1}", r.name, rate(r))).collect();
        let _ = writeln!(
            out,
            "target >= 100 M lines/s (32-byte lines, tmpfs, 16777216 lines): {} ({})",
            verdict(fast.iter().all(|r| rate(r) >= 100.0)),
            rates.join(", ")
        );
    }
    let ratios: Vec<(String, f64, bool)> = rows
        .iter()
        .filter_map(|r| {
            let g = r.gpuio.time.filter(|_| r.gpuio.error.is_none())?.as_secs_f64();
            match &r.printf {
                PrintfResult::Measured { time, .. } => Some((r.name.clone(), time.as_secs_f64() / g, false)),
                PrintfResult::Timeout(t) => Some((r.name.clone(), t.as_secs_f64() / g, true)),
                _ => None,
            }
        })
        .collect();
    let compared = ratios.len();
    let compare_rows = rows
        .iter()
        .filter(|r| !matches!(r.printf, PrintfResult::Skipped(_)))
        .count();
    match ratios.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        Some((name, min, lower)) => {
            let _ = writeln!(
                out,
                "target gpuio >= 50x CUDA printf (every compared case): {} (lowest {}{}x at {name}; {compared} of {} cases compared)",
                verdict(*min >= 50.0 && compared == compare_rows),
                if *lower { ">" } else { "" },
                ratio(*min),
                rows.len()
            );
        }
        None => {
            let _ = writeln!(out, "target gpuio >= 50x CUDA printf: not measured in this run");
        }
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
