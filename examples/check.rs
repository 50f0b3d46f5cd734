//! Independent checker for `stress` output: every line exactly once, whole, per-thread
//! order, nothing else.
//!
//! `cargo run --release --example check -- --threads T --lines L --input PATH [--width W]`
//! (`--input -` reads stdin). Exits 0 and prints `OK ...` or exits 1 naming the first faults.
use std::io::{BufRead, BufReader, Read};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let threads: u64 = get("--threads").and_then(|v| v.parse().ok()).expect("--threads T");
    let lines: u64 = get("--lines").and_then(|v| v.parse().ok()).expect("--lines L");
    let width: usize = get("--width").and_then(|v| v.parse().ok()).unwrap_or(0);
    let input = get("--input").expect("--input PATH|-");
    let reader: Box<dyn Read> = if input == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(&input).unwrap_or_else(|e| panic!("open {input}: {e}")))
    };
    let report = check(BufReader::with_capacity(1 << 20, reader), threads, lines, width);
    println!("{report}");
    if !report.starts_with("OK") {
        std::process::exit(1);
    }
}

fn check(mut r: impl BufRead, threads: u64, lines: u64, width: usize) -> String {
    let mut next = vec![0u64; threads as usize];
    let mut faults = Vec::new();
    let mut seen = 0u64;
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return format!("FAIL: read error {e}"),
        }
        n += 1;
        let fault = parse(&buf, width).and_then(|(t, i)| {
            if t >= threads {
                return Err(format!("thread {t} out of range"));
            }
            if i != next[t as usize] {
                return Err(format!("thread {t}: expected i={} got i={i}", next[t as usize]));
            }
            next[t as usize] += 1;
            Ok(())
        });
        match fault {
            Ok(()) => seen += 1,
            Err(e) if faults.len() < 5 => faults.push(format!(
                "line {n}: {e}: {:?}",
                String::from_utf8_lossy(&buf[..buf.len().min(80)])
            )),
            Err(_) => {}
        }
    }
    for (t, &got) in next.iter().enumerate() {
        if got != lines && faults.len() < 10 {
            faults.push(format!("thread {t}: {got} of {lines} lines"));
        }
    }
    if faults.is_empty() && seen == threads * lines {
        format!("OK {seen} lines: every line exactly once, whole, in per-thread order")
    } else {
        format!(
            "FAIL ({seen} good of {} expected, {n} read): {}",
            threads * lines,
            faults.join("; ")
        )
    }
}

/// Parses `t=<t> i=<i>` + exactly the dots that pad it to `width` bytes + `\n`.
fn parse(line: &[u8], width: usize) -> Result<(u64, u64), String> {
    std::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?;
    let body = line.strip_suffix(b"\n").ok_or("no newline (torn)")?;
    let core = &body[..body.iter().rposition(|&c| c != b'.').map_or(0, |n| n + 1)];
    let rest = core.strip_prefix(b"t=").ok_or("malformed")?;
    let sp = rest.windows(3).position(|w| w == b" i=").ok_or("malformed")?;
    let t = number(&rest[..sp]).ok_or("bad thread")?;
    let i = number(&rest[sp + 3..]).ok_or("bad seq")?;
    let (got, want) = (line.len(), width.max(core.len() + 1));
    if got != want {
        return Err(format!("length {got} (want {want})"));
    }
    Ok((t, i))
}

/// Parses a decimal number without sign or leading zeros.
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || (s.len() > 1 && s[0] == b'0') {
        return None;
    }
    s.iter()
        .try_fold(0u64, |n, &c| c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0')))
}
