//! Printing: odd block sizes, lanes diverging between call sites and streams, `print!`
//! pieces, lines of every shape, thousands of threads on a tiny ring.

use std::os::fd::AsRawFd;

use gpuio::LaunchConfig;
use gpuio_test_kernels as k;

use crate::harness::{Config, Scratch};
use crate::kernels::{build, check_numbered, plain, run_printing, sync, Kernels};
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
    Ok(format!("{} lines from {} threads", out.lines().count(), grid * block))
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

/// `io::stdout().lock()`: each thread's `write!` pieces make whole lines, nothing of another
/// thread inside, while the lanes of a warp write different numbers of pieces.
pub(crate) fn a_locked_stdouts_pieces_make_whole_lines(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(64, 16), 20u32);
    let (out, _) = run_printing(config.builder(), scratch, k::locked_lines, (grid, block), (lines,))?;
    check_numbered(&out, (grid * block) as u64, lines as u64, |t, _, tail| {
        let want: String = format!(":{} end", (0..(t % 7 + 3)).map(|k| format!(" {k}")).collect::<String>());
        if tail == want {
            Ok(())
        } else {
            Err(format!("expected {want:?}"))
        }
    })?;
    Ok(format!(
        "{} lines of 5 to 11 pieces each from {} threads, every one whole",
        out.lines().count(),
        grid * block
    ))
}

/// Dynamic shared memory and `sync_threads`: each block's threads pass words around
/// through their block's shared memory for 3 rounds (`shared_memory_rounds`), under the
/// 48 KiB a launch gets without opting in, past it (CUDA: the launch raises the kernel's
/// limit), and with none (the kernel sees an empty region).
pub(crate) fn a_block_shares_dynamic_shared_memory(config: Config, scratch: &Scratch) -> Outcome {
    let rounds = 3u32;
    let launches = [
        (config.pick(4, 2), config.pick(256, 8), config.pick(1024, 32)),
        (config.pick(2, 1), config.pick(128, 4), 64 << 10),
        (1, config.pick(64, 4), 0),
    ];
    let mut said = Vec::new();
    for (i, &(grid, block, bytes)) in launches.iter().enumerate() {
        let (out_file, path) = scratch.file(&format!("shared-{i}.out"));
        {
            let rt = build(config.builder().stdout_fd(out_file.as_raw_fd()))?;
            let k = Kernels::load(&rt)?;
            k.launch_with(
                k::shared_memory_rounds,
                LaunchConfig::linear(grid, block).with_shared_mem(bytes),
                (rounds,),
            )?;
            sync(&rt)?;
        }
        let out = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        let mut seen = std::collections::BTreeSet::new();
        for line in out.lines() {
            let field = |key: &str| line.split(' ').find_map(|w| w.strip_prefix(key)?.parse::<u64>().ok());
            let (Some(t), Some(len)) = (field("t="), field("len=")) else {
                return Err(format!("a torn line {line:?}"));
            };
            if len != bytes as u64 {
                return Err(format!("{line:?}: the launch gave {bytes} bytes"));
            }
            let (b, n) = (t / block as u64, block as u64);
            let neighbour = |r: u64| b * 1_000_000 + r * 1_000 + (t % n + 1) % n;
            let expected = if bytes == 0 {
                line.ends_with(" short")
            } else {
                field("next=") == Some(neighbour(rounds as u64 - 1))
                    && field("sum=") == Some((0..rounds as u64).map(neighbour).sum())
            };
            if !expected {
                return Err(format!("{line:?}: not what block {b}'s shared words held"));
            }
            if !seen.insert(t) {
                return Err(format!("{line:?}: thread {t} twice"));
            }
        }
        if seen.len() != (grid * block) as usize {
            return Err(format!("{} of {} threads printed", seen.len(), grid * block));
        }
        said.push(format!("{grid} x {block} threads with {bytes} bytes"));
    }
    Ok(format!(
        "{} (3 rounds each, every thread read its neighbour's words)",
        said.join(", ")
    ))
}

/// A 3-D launch: every (block, thread) pair in x, y and z runs once, sees the launch's
/// sizes, and its `global_thread_idx` is the linear rank over all three (x fastest).
pub(crate) fn three_dimensional_launches(config: Config, scratch: &Scratch) -> Outcome {
    let cfg = if config.gpu() {
        LaunchConfig::new((3, 2, 2), (8, 4, 2))
    } else {
        LaunchConfig::new((2, 2, 1), (2, 3, 2))
    };
    let (out_file, path) = scratch.file("dims.out");
    {
        let rt = build(config.builder().stdout_fd(out_file.as_raw_fd()))?;
        let k = Kernels::load(&rt)?;
        k.launch_with(k::dims_3d, cfg, ())?;
        sync(&rt)?;
    }
    let out = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let (g, b) = (cfg.grid, cfg.block);
    let per_block = b.count();
    let mut seen = std::collections::BTreeSet::new();
    for line in out.lines() {
        let field = |key: &str| -> Result<[u64; 3], String> {
            let v = line
                .split(' ')
                .find_map(|w| w.strip_prefix(key))
                .ok_or_else(|| format!("no {key} in {line:?}"))?;
            let n: Vec<u64> = v.split(',').filter_map(|x| x.parse().ok()).collect();
            n.try_into().map_err(|_| format!("a torn {key} in {line:?}"))
        };
        let t: u64 = line
            .strip_prefix("t=")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("a torn line {line:?}"))?;
        let (bi, ti) = (field("b=")?, field("th=")?);
        if field("g=")? != [g.x as u64, g.y as u64, g.z as u64] || field("bd=")? != [b.x as u64, b.y as u64, b.z as u64]
        {
            return Err(format!("{line:?}: the launch was {cfg:?}"));
        }
        let block_rank = bi[0] + g.x as u64 * (bi[1] + g.y as u64 * bi[2]);
        let thread_rank = ti[0] + b.x as u64 * (ti[1] + b.y as u64 * ti[2]);
        if t != block_rank * per_block + thread_rank {
            return Err(format!("{line:?}: global_thread_idx is not the linear rank"));
        }
        if !seen.insert(t) {
            return Err(format!("{line:?}: thread {t} twice"));
        }
    }
    if seen.len() as u64 != cfg.threads() {
        return Err(format!("{} of {} threads printed", seen.len(), cfg.threads()));
    }
    Ok(format!(
        "({}, {}, {}) blocks of ({}, {}, {}) threads: each of the {} once, ids and sizes as launched",
        g.x,
        g.y,
        g.z,
        b.x,
        b.y,
        b.z,
        cfg.threads()
    ))
}

/// A typed launch (`Runtime::kernels`, `Kernels::launch`) hands each parameter type to
/// every thread as it was passed: values at the edges of their types, signed ones negative.
pub(crate) fn typed_launch_passes_every_parameter_type(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 2), 33);
    let args = (u32::MAX - 1, -7i32, u64::MAX - 2, i64::MIN + 3, 1.5f32, -0.1f64);
    let (out, _) = run_printing(config.builder(), scratch, k::every_param_type, (grid, block), args)?;
    let (a, b, c, d, e, f) = args;
    let want = format!(" u32={a} i32={b} u64={c} i64={d} f32={e} f64={f}");
    every_thread_printed(&out, grid * block, &want)?;
    Ok(format!("{} threads each got {want:?}", grid * block))
}

/// A typed launch's `&str` and `&[T]` parameters reach every thread whole: a UTF-8 name, a
/// slice of several pages, an empty slice; the copies stay until the synchronize.
pub(crate) fn strings_and_slices_as_parameters(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 2), 33);
    let name = String::from("files/ünïcødé ✓.txt");
    let values: Vec<u64> = (1..=3000).collect();
    // The name by reference, the values moved in: both copied at launch.
    let args = (&name, values.clone(), 0.25f32, &[0u8; 0]);
    let (out, _) = run_printing(config.builder(), scratch, k::strings_and_slices, (grid, block), args)?;
    let want = format!(
        " name={name} n=3000 sum={} last=3000 scale=0.25 empty=0",
        values.iter().sum::<u64>()
    );
    every_thread_printed(&out, grid * block, &want)?;
    Ok(format!("{} threads each read {want:?}", grid * block))
}

/// Results come back through `Output`s (`Out<T>` parameters): every element written by its
/// thread, reading before the synchronize refused, and an Output dropped while its kernel
/// may still write it kept until the kernel is done.
pub(crate) fn results_come_back_through_outputs(config: Config, _: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(40, 4), config.pick(256, 16));
    let n = (grid * block) as usize - 3; // the last 3 threads write nothing
    let x: Vec<u64> = (0..n as u64).map(|i| i * 7 + 1).collect();
    let rt = build(config.builder())?;
    let k = Kernels::load(&rt)?;
    let mut squares = rt.output::<u64>(n).map_err(|e| format!("output: {e}"))?;
    let mut halves = rt.output::<f32>(n + 3).map_err(|e| format!("output: {e}"))?;
    k.launch(k::squares_into, grid, block, (&x, &mut squares, &mut halves))?;
    let early = match squares.read() {
        Err(e) => e.to_string(),
        Ok(_) => return Err("an Output was read before the synchronize".into()),
    };
    // Dropped while its kernel may still run: kept until the synchronize finds it done.
    let mut dropped = rt.output::<u64>(n).map_err(|e| format!("output: {e}"))?;
    let mut spare = rt.output::<f32>(n).map_err(|e| format!("output: {e}"))?;
    k.launch(k::squares_into, grid, block, (&x, &mut dropped, &mut spare))?;
    drop(dropped);
    drop(spare);
    sync(&rt)?;
    let (sq, hv) = (
        squares.read().map_err(|e| e.to_string())?,
        halves.read().map_err(|e| e.to_string())?,
    );
    for i in 0..n {
        if sq[i] != x[i] * x[i] + i as u64 || hv[i] != x[i] as f32 / 2.0 {
            return Err(format!("element {i}: {} and {}, from x = {}", sq[i], hv[i], x[i]));
        }
    }
    if hv[n..] != [0.0; 3] {
        return Err(format!("elements nothing wrote are {:?}, not zero", &hv[n..]));
    }
    Ok(format!(
        "{n} u64 and {n} f32 results from {} threads, each right; read before the synchronize: {early}",
        grid * block
    ))
}

/// Checks that each of `threads` threads printed one line `t=<t> i=0<want>`.
fn every_thread_printed(out: &str, threads: u32, want: &str) -> Result<(), String> {
    check_numbered(out, u64::from(threads), 1, |_, _, rest| {
        if rest == want {
            Ok(())
        } else {
            Err(format!("{rest:?}, expected {want:?}"))
        }
    })
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

pub(crate) fn one_warp_mixing_streams_and_pieces(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(64, 16), 8u32);
    let threads = (grid * block) as u64;
    let (out, err) = run_printing(config.builder(), scratch, k::mixed_streams, (grid, block), (lines,))?;
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
pub(crate) fn one_print_call_two_streams(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, lines) = (config.pick(16, 2), config.pick(64, 16), 8u32);
    let threads = (grid * block) as u64;
    let (out, err) = run_printing(
        config.builder(),
        scratch,
        k::two_streams_one_call,
        (grid, block),
        (lines,),
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
        "sq_entries(8), a 4 KiB log: {} lines from {} threads",
        out.lines().count(),
        grid * block
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
        "a 4 KiB log, warps' records of 2.5-4.6 KiB behind short ones: {} lines from {} threads",
        out.lines().count(),
        grid * block
    ))
}

/// Why the register case cannot run in `config`, if it cannot: registers are a GPU's; the
/// lockstep build, `GPUIO_JIT=whole` and `GPUIO_PRINT_REGISTERS=off` compile a module
/// whole, without the cap of gpuio's functions; `GPUIO_MAX_REGISTERS` caps every kernel,
/// so a count under it would prove nothing; under `GPUIO_BLOCK_THREADS` the JIT may take
/// more registers than a kernel's own code needs.
pub(crate) fn print_registers_unavailable(config: Config) -> Option<String> {
    let set = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_ascii_lowercase())
            .filter(|v| !v.is_empty())
    };
    match config {
        Config::Cpu => Some("registers are a GPU's; the cpu configuration has none".into()),
        Config::Lockstep => Some(
            "the lockstep build is compiled whole, where gpuio's functions get no register cap of their own".into(),
        ),
        Config::Cuda if set("GPUIO_PRINT_REGISTERS").as_deref() == Some("off") => {
            Some("GPUIO_PRINT_REGISTERS=off: no cap to check".into())
        }
        Config::Cuda if set("GPUIO_JIT").as_deref() == Some("whole") => {
            Some("GPUIO_JIT=whole: compiled whole, no cap to check".into())
        }
        Config::Cuda if set("GPUIO_MAX_REGISTERS").is_some() => {
            Some("GPUIO_MAX_REGISTERS caps every kernel: the count would prove nothing".into())
        }
        Config::Cuda if set("GPUIO_BLOCK_THREADS").is_some() => Some(
            "GPUIO_BLOCK_THREADS lets the JIT give a kernel more registers than its own code needs: no count to hold it to"
                .into(),
        ),
        Config::Cuda => None,
    }
}

/// The cap `GPUIO_PRINT_REGISTERS` sets: 32 unset (the example kernels do no file I/O).
fn print_cap() -> u32 {
    std::env::var("GPUIO_PRINT_REGISTERS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(32)
}

/// A print leaves a kernel its occupancy: the example kernels, which print (core's float
/// formatting alone uses 253 registers compiled with them) and do no file I/O, hold no more
/// registers than the larger of their own code's count and gpuio's cap, read from the
/// driver.
pub(crate) fn a_print_leaves_a_kernel_its_registers(config: Config, _: &Scratch) -> Outcome {
    let cap = print_cap();
    let rt = config.builder().build().map_err(|e| format!("runtime: {e}"))?;
    let kernels = rt
        .kernels(gpuio_kernels_gpu::NVPTX)
        .map_err(|e| format!("loading the example kernels: {e}"))?;
    let module = kernels.module().ok_or("no module: not a GPU")?;
    let mut seen = Vec::new();
    // Their own code needs fewer than 32 (ptxas, compiled alone: 28 for `stress`).
    for name in ["hello", "stress", "literal"] {
        let r = module
            .resources(name)
            .map_err(|e| format!("{name}: {e}"))?
            .ok_or_else(|| format!("{name}: the CUDA backend did not tell its resources"))?;
        if r.registers > cap {
            return Err(format!(
                "{name} holds {} registers, more than the cap of {cap} on gpuio's functions ({} bytes of local memory)",
                r.registers, r.local_bytes
            ));
        }
        seen.push(format!(
            "{name}: {} registers, {} bytes local",
            r.registers, r.local_bytes
        ));
    }
    Ok(format!("at most {cap}: {}", seen.join("; ")))
}

/// Each thread writes its own element of an `Output` with no `unsafe` (`Out::write_own`),
/// threads past its end nothing; the same `Output` given to a second launch before a
/// synchronize is refused where the two may run at once (the CPU backend) and taken where
/// they run one after the other (CUDA's null stream).
pub(crate) fn each_thread_writes_its_own_element(config: Config, _: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(8, 2), config.pick(128, 16));
    let n = (grid * block) as usize - 5;
    let rt = build(config.builder())?;
    let k = Kernels::load(&rt)?;
    let mut out = rt.output::<u64>(n).map_err(|e| format!("output: {e}"))?;
    k.launch(k::own_elements, grid, block, (&mut out,))?;
    let again = k.launch(k::own_elements, grid, block, (&mut out,));
    let second = match (config.gpu(), again) {
        (true, Ok(())) => "taken on the null stream".to_string(),
        (false, Err(e)) if e.contains("may still run beside it") => "refused on the CPU backend".to_string(),
        (gpu, other) => return Err(format!("a second launch with the Output (gpu: {gpu}): {other:?}")),
    };
    sync(&rt)?;
    let got = out.read().map_err(|e| e.to_string())?;
    if let Some(i) = (0..n).find(|&i| got[i] != 3 * i as u64 + 1) {
        return Err(format!("element {i} is {}, not {}", got[i], 3 * i + 1));
    }
    // After the synchronize the Output goes to a launch again.
    k.launch(k::own_elements, grid, block, (&mut out,))?;
    sync(&rt)?;
    Ok(format!(
        "{n} elements from {} threads, each its own, none past the end; a second launch before a synchronize {second}",
        grid * block
    ))
}
