//! Printing: odd block sizes, lanes diverging between call sites and streams, `print!`
//! pieces, lines of every shape, thousands of threads on a tiny ring.
//!
//! Here: lines from blocks of odd sizes, divergent call sites, a locked stdout's pieces,
//! lines of every shape, a tiny ring and log, warps' records near the log's size. Beside it,
//! in `cases_print/`: `launches.rs` (what a launch hands its threads and gets back: shared
//! memory, 3-D launches, typed parameters, strings and slices, `Output`s), `streams.rs` (one
//! warp's lanes on both streams, in pieces and in one print call), `registers.rs` (a print
//! leaves a kernel its registers).

mod launches;
mod registers;
mod streams;

use gpuio_test_kernels as k;

pub(crate) use launches::{
    a_block_shares_dynamic_shared_memory, each_thread_writes_its_own_element, launch_bounds_are_kept,
    results_come_back_through_outputs, strings_and_slices_as_parameters, three_dimensional_launches,
    typed_launch_passes_every_parameter_type,
};
pub(crate) use registers::{a_print_leaves_a_kernel_its_registers, print_registers_unavailable};
pub(crate) use streams::{one_print_call_two_streams, one_warp_mixing_streams_and_pieces};

use crate::harness::{Config, Scratch};
use crate::kernels::{check_numbered, plain, run_printing};
use crate::Outcome;

pub(crate) fn blocks_of_33_and_37_threads(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, lines) = (config.pick(64, 3), 40u32);
    let mut total = 0;
    for block in [33u32, 37] {
        let (out, _) = run_printing(config.builder(), scratch, k::stress, (grid, block), (lines, 0u32))?;
        check_numbered(&out, (grid * block) as u64, lines as u64, plain).map_err(|e| format!("block {block}: {e}"))?;
        total += out.lines().count();
    }
    Ok(format!(
        "{grid} blocks of 33, then of 37 threads: {total} lines whole, once, in order"
    ))
}

pub(crate) fn every_line_once_in_order(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines, width) = (config.pick(64, 4), config.pick(256, 16), 16u32, 40u32);
    let (out, _) = run_printing(config.builder(), scratch, k::stress, (grid, block), (lines, width))?;
    check_numbered(&out, (grid * block) as u64, lines as u64, |_, _, tail| {
        plain(0, 0, tail)?;
        Ok(())
    })?;
    if let Some(l) = out.lines().find(|l| l.len() + 1 != width as usize) {
        return Err(format!("a line is not padded to {width} bytes: {l:?}"));
    }
    Ok(lines_from(&out, grid * block))
}

pub(crate) fn divergent_call_sites(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(64, 16), 20u32);
    let (out, _) = run_printing(config.builder(), scratch, k::divergent_sites, (grid, block), (lines,))?;
    check_numbered(&out, (grid * block) as u64, lines as u64, |t, i, tail| {
        let want = match (t % 3, i % 2) {
            (0, _) => " site=a",
            (1, _) => " site=b more",
            (_, 0) => " site=c",
            _ => " site=d",
        };
        tail_is(tail, want)
    })?;
    Ok(format!("4 call sites: {}", lines_from(&out, grid * block)))
}

/// `io::stdout().lock()`: each thread's `write!` pieces make whole lines, nothing of another
/// thread inside, while the lanes of a warp write different numbers of pieces.
pub(crate) fn a_locked_stdouts_pieces_make_whole_lines(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(64, 16), 20u32);
    let (out, _) = run_printing(config.builder(), scratch, k::locked_lines, (grid, block), (lines,))?;
    check_numbered(&out, (grid * block) as u64, lines as u64, |t, _, tail| {
        let want: String = format!(":{} end", (0..(t % 7 + 3)).map(|k| format!(" {k}")).collect::<String>());
        tail_is(tail, &want)
    })?;
    Ok(format!(
        "5 to 11 pieces a line, every line whole: {}",
        lines_from(&out, grid * block)
    ))
}

pub(crate) fn lines_of_every_shape(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 2), config.pick(32, 8));
    let threads = (grid * block) as u64;
    let mut summary = Vec::new();
    // A 4 KiB log (the 64 KiB lines and the long ones go out in pieces), then the default.
    for (log, long) in [(Some(4096usize), 10_000u32), (None, 300)] {
        let mut b = config.builder();
        if let Some(n) = log {
            b = b.log_bytes(n);
        }
        let (out, _) = run_printing(b, scratch, k::line_shapes, (grid, block), (long,))?;
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

pub(crate) fn tiny_ring_and_log_thousands_of_threads(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(64, 4), config.pick(64, 16), 10u32);
    let b = config.builder().sq_entries(8).log_bytes(4096);
    let (out, _) = run_printing(b, scratch, k::stress, (grid, block), (lines, 0u32))?;
    check_numbered(&out, (grid * block) as u64, lines as u64, plain)?;
    Ok(format!(
        "sq_entries(8), a 4 KiB log: {}",
        lines_from(&out, grid * block)
    ))
}

pub(crate) fn warp_records_near_the_log_size(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(8, 2), config.pick(64, 8), 20u32);
    let b = config.builder().log_bytes(4096);
    let (out, _) = run_printing(b, scratch, k::near_log_records, (grid, block), (lines,))?;
    check_numbered(&out, (grid * block) as u64, 2 * lines as u64, |t, i, tail| {
        let want = if i % 2 == 0 {
            String::new()
        } else {
            format!(" {}", "z".repeat(k::near_log_pad(t, i as u32)))
        };
        if tail == want {
            Ok(())
        } else {
            Err(format!(
                "t={t} i={i}: {} bytes after the number, {} due",
                tail.len(),
                want.len()
            ))
        }
    })?;
    Ok(format!(
        "a 4 KiB log, warps' records of 2.5-4.6 KiB behind short ones: {}",
        lines_from(&out, grid * block)
    ))
}

/// `Ok` if the rest of a line, `tail`, is `want`; otherwise what was expected.
fn tail_is(tail: &str, want: &str) -> Result<(), String> {
    if tail == want {
        Ok(())
    } else {
        Err(format!("expected {want:?}"))
    }
}

/// What a case's summary ends with: `<n> lines from <threads> threads`, `n` counted in `out`.
fn lines_from(out: &str, threads: u32) -> String {
    format!("{} lines from {threads} threads", out.lines().count())
}
