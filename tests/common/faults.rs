//! What the fault tests (tests/faults_*.rs) share: the CPU backend's builder, files, and
//! the checks of an output of `stress_kernel` that failed writes may have cut.

use std::path::Path;

use gpuio::{Backend, Error, OutputErrors, Runtime};

pub fn builder() -> gpuio::Builder {
    Runtime::builder().backend(Backend::Cpu)
}

/// `builder` on the CUDA backend built, or `None` where this machine has no CUDA GPU, after
/// test `name`'s skip line says so (the caller returns).
pub fn cuda_or_skip(name: &str, builder: gpuio::Builder) -> Option<Runtime> {
    match builder.backend(Backend::Cuda).build() {
        Ok(rt) => Some(rt),
        Err(Error::BackendUnavailable { reason, .. }) => {
            super::skip(name, &format!("no CUDA GPU ({reason})"));
            None
        }
        Err(e) => panic!("CUDA runtime failed: {e}"),
    }
}

/// A new file at `path`, open for reading and writing, appending if `append`.
pub fn create(path: &Path, append: bool) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(!append) // (a new file either way: std refuses O_APPEND with O_TRUNC)
        .append(append)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()))
}

/// Bytes that `stress_kernel(lines)` prints from `threads` threads.
pub fn total_bytes(threads: u64, lines: u64) -> u64 {
    (0..threads)
        .flat_map(|t| (0..lines).map(move |i| format!("t={t} i={i}\n").len() as u64))
        .sum()
}

/// What a cut output of `stress_kernel` holds.
#[derive(Debug, Default)]
pub struct Cut {
    /// Bytes other than NUL (NULs: holes a failed positional write left before a later one).
    pub bytes: u64,
    /// Newlines.
    pub newlines: u64,
    /// Whole lines, each checked.
    pub whole: u64,
    /// Pieces of lines at a hole or at the end, where a write stopped.
    pub pieces: u64,
    /// NUL bytes.
    pub holes: u64,
}

/// Checks an output that may have been cut by failed writes: every line that is not next
/// to a cut is whole and well-formed, appears once, and keeps its thread's order. Pieces
/// of lines are allowed only where the output stops or a hole begins or ends.
pub fn check_cut(out: &[u8], threads: u64, lines: u64) -> Cut {
    let mut cut = Cut {
        holes: out.iter().filter(|&&b| b == 0).count() as u64,
        ..Cut::default()
    };
    let mut next = vec![0u64; threads as usize];
    for segment in out.split(|&b| b == 0).filter(|s| !s.is_empty()) {
        cut.bytes += segment.len() as u64;
        // A segment starts at the start of the output or right after a hole.
        let starts_after_hole = segment.as_ptr() != out.as_ptr();
        let pieces: Vec<&[u8]> = segment.split_inclusive(|&b| b == b'\n').collect();
        for (k, piece) in pieces.iter().enumerate() {
            let ends = piece.ends_with(b"\n");
            cut.newlines += ends as u64;
            if !ends || (k == 0 && starts_after_hole) {
                cut.pieces += 1;
                continue;
            }
            let line = std::str::from_utf8(&piece[..piece.len() - 1])
                .unwrap_or_else(|_| panic!("a line is not UTF-8: {piece:?}"));
            let (t, i) = line
                .strip_prefix("t=")
                .and_then(|r| r.split_once(" i="))
                .unwrap_or_else(|| panic!("torn or foreign line {line:?}"));
            let t: usize = t.parse().unwrap_or_else(|_| panic!("torn line {line:?}"));
            let i: u64 = i.parse().unwrap_or_else(|_| panic!("torn line {line:?}"));
            assert!(t < threads as usize && i < lines, "foreign line {line:?}");
            assert!(i >= next[t], "thread {t}: line {i} duplicated or out of order");
            next[t] = i + 1;
            cut.whole += 1;
        }
    }
    cut
}

/// Checks that an output of `stress_kernel` plus what the runtime reported lost adds up to
/// everything printed: nothing is lost beyond what is reported.
pub fn check_accounted(cut: &Cut, lost: &OutputErrors, threads: u64, lines: u64) {
    assert_eq!(
        cut.bytes + lost.lost_bytes,
        total_bytes(threads, lines),
        "bytes in the output ({}) + bytes reported lost ({}) != bytes printed",
        cut.bytes,
        lost.lost_bytes
    );
    assert_eq!(
        cut.newlines + lost.lost_lines,
        threads * lines,
        "lines in the output ({}) + lines reported lost ({}) != lines printed",
        cut.newlines,
        lost.lost_lines
    );
}

/// The one output a print error is about.
pub fn print_error(r: gpuio::Result<()>, fd: i32, errno: i32) -> OutputErrors {
    match r {
        Err(Error::Print(p)) => {
            assert_eq!(p.outputs.len(), 1, "{p}");
            let o = p.outputs[0].clone();
            assert_eq!(o.fd, fd, "{p}");
            assert_eq!(o.errno, errno, "{p}: expected errno {errno}");
            assert!(o.failed_writes >= 1, "{p}");
            o
        }
        other => panic!("expected a print error (errno {errno}), got {other:?}"),
    }
}
