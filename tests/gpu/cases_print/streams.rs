//! One warp's lanes on stdout and stderr at once: mixed streams and `print!` pieces, and
//! one print call whose lanes pick their stream at run time.

use gpuio_test_kernels as k;

use crate::harness::{Config, Scratch};
use crate::kernels::run_printing;
use crate::Outcome;

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
