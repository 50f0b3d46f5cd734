//! Launch bounds: the most threads a block of a kernel may have, where the kernel declares
//! it (`kernel!`'s `#[launch_bounds(MAX, MIN)]`, CUDA C++'s `__launch_bounds__`), given to
//! the JIT as the entry's `.maxntid` (and `.minnctapersm`) and checked at every launch.
//!
//! rustc has no attribute for those directives, so a Rust kernel's entry carries a PTX
//! comment instead, `// gpuio.launch_bounds MAX MIN` (`gpuio_device`'s `mark_launch_bounds`,
//! an `asm!` that emits no instruction), which [`apply`] turns into the directives before the
//! module is compiled. nvcc writes `.maxntid` itself; [`apply`] reads it for the launch check.
//!
//! Why a kernel would: told the block size, ptxas may give each thread up to 65,536 / `MAX`
//! registers and weighs them against loads in flight knowing it. Not told, it keeps a
//! kernel launchable with any block (docs/PROTOCOL.md, "A register-heavy loop").

use std::collections::HashMap;

use super::split::code;

/// The comment a bounded entry's body carries (`gpuio_device`'s `mark_launch_bounds`).
const MARK: &str = "// gpuio.launch_bounds ";

/// A module's PTX with each marked entry's directives in its header, and every entry's
/// bound (most threads a block) where it has one.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Bounds {
    /// The PTX with directives added; `None` where nothing was added.
    pub(super) ptx: Option<String>,
    /// The most threads a block of each bounded kernel may have.
    pub(super) max_threads: HashMap<String, u32>,
}

/// One `.entry` as [`apply`] reads it.
struct Entry<'a> {
    name: &'a str,
    /// Where its body's opening `{` line starts: the directives go before it.
    body_at: usize,
    /// Its header's `.maxntid` or `.reqntid` (threads in all), where it has one.
    declared: Option<u32>,
    /// Its body's mark: most threads a block, least blocks an SM (0: none asked).
    marked: Option<(u32, u32)>,
}

/// Reads every entry's launch bounds from `ptx`, and writes `.maxntid MAX, 1, 1` (and
/// `.minnctapersm MIN` where `MIN` > 0) into the header of each entry whose body is marked
/// and that declares none itself. A mark that cannot be read (not two numbers, `MAX` not 1
/// to 1,024) is left as the comment it is, as `kernel!` makes none such.
pub(super) fn apply(ptx: &str) -> Bounds {
    let entries = entries(ptx);
    let mut bounds = Bounds::default();
    let mut out = String::new();
    let mut copied = 0;
    for e in &entries {
        let max = match (e.declared, e.marked) {
            (Some(n), _) => n,
            (None, Some((max, min))) => {
                out.push_str(&ptx[copied..e.body_at]);
                out.push_str(&format!(".maxntid {max}, 1, 1\n"));
                if min > 0 {
                    out.push_str(&format!(".minnctapersm {min}\n"));
                }
                copied = e.body_at;
                max
            }
            (None, None) => continue,
        };
        bounds.max_threads.insert(e.name.to_string(), max);
    }
    if copied > 0 {
        out.push_str(&ptx[copied..]);
        bounds.ptx = Some(out);
    }
    bounds
}

/// The entries of `ptx` with where their bodies start, what their headers declare and what
/// their bodies mark.
fn entries(ptx: &str) -> Vec<Entry<'_>> {
    let mut entries: Vec<Entry> = Vec::new();
    // Inside an entry's header (`Some(false)`) or body (`Some(true)`), and the body's depth.
    let mut inside: Option<bool> = None;
    let mut depth = 0i64;
    let mut offset = 0;
    for line in ptx.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        let c = code(line).trim();
        match inside {
            None => {
                let Some(rest) = c.split_once(".entry ").map(|(_, r)| r) else {
                    continue;
                };
                let end = rest
                    .find(|ch: char| ch == '(' || ch.is_whitespace())
                    .unwrap_or(rest.len());
                entries.push(Entry {
                    name: &rest[..end],
                    body_at: 0,
                    declared: None,
                    marked: None,
                });
                inside = Some(false);
            }
            Some(false) => {
                let e = entries.last_mut().expect("an entry was pushed");
                if let Some(dims) = c.strip_prefix(".maxntid").or_else(|| c.strip_prefix(".reqntid")) {
                    e.declared = dims
                        .split(',')
                        .map(|d| d.trim().parse::<u32>().ok())
                        .try_fold(1u32, |n, d| n.checked_mul(d?));
                } else if c.starts_with('{') {
                    e.body_at = at;
                    depth = 0;
                    inside = Some(true);
                }
            }
            Some(true) => {}
        }
        if inside == Some(true) {
            depth += c.matches('{').count() as i64 - c.matches('}').count() as i64;
            if let Some(mark) = line.trim().strip_prefix(MARK) {
                let nums: Vec<Option<u32>> = mark.split_whitespace().map(|w| w.parse().ok()).collect();
                if let [Some(max @ 1..=1024), Some(min)] = nums[..] {
                    entries.last_mut().expect("an entry was pushed").marked = Some((max, min));
                }
            }
            if depth <= 0 {
                inside = None;
            }
        }
    }
    // An entry whose body never opened (text cut short) gets nothing written.
    entries.retain(|e| e.body_at > 0);
    entries
}

#[cfg(test)]
mod tests {
    use super::apply;

    const PTX: &str = ".version 7.8\n.target sm_90\n.address_size 64\n\n\
        .visible .entry plain(\n\t.param .u32 plain_param_0\n)\n{\n\tret;\n}\n\
        .visible .entry tile(\n\t.param .u32 tile_param_0\n)                // @tile\n{\n\
        \t.reg .b32 %r<2>;\n\t// begin inline asm\n\t// gpuio.launch_bounds 256 0\n\t// end inline asm\n\
        \t{ // callseq 0\n\t} // callseq 0\n\tret;\n}\n\
        .visible .entry two(\n\t.param .u32 two_param_0\n)\n{\n\t// gpuio.launch_bounds 128 2\n\tret;\n}\n\
        .visible .entry cpp(\n\t.param .u32 cpp_param_0\n)\n.maxntid 64, 2, 1\n{\n\tret;\n}\n";

    #[test]
    fn marked_entries_get_their_directives_and_every_bound_is_read() {
        let b = apply(PTX);
        let ptx = b.ptx.expect("directives were added");
        assert!(ptx.contains("// @tile\n.maxntid 256, 1, 1\n{\n"), "{ptx}");
        assert!(
            ptx.contains("two_param_0\n)\n.maxntid 128, 1, 1\n.minnctapersm 2\n{\n"),
            "{ptx}"
        );
        assert!(ptx.contains("plain_param_0\n)\n{\n"), "{ptx}");
        // The C++ entry's own directive is read, not written again.
        assert_eq!(ptx.matches(".maxntid").count(), 3);
        let mut bounds: Vec<_> = b.max_threads.into_iter().collect();
        bounds.sort();
        assert_eq!(bounds, [("cpp".into(), 128), ("tile".into(), 256), ("two".into(), 128)]);
        // Only the directives were added.
        let added = ".maxntid 256, 1, 1\n.maxntid 128, 1, 1\n.minnctapersm 2\n";
        assert_eq!(ptx.len(), PTX.len() + added.len());
    }

    #[test]
    fn unmarked_or_unreadable_text_is_left_alone() {
        let plain = ".visible .entry k(\n)\n{\n\tret;\n}\n";
        assert_eq!(apply(plain), Default::default());
        // A mark out of range, or cut short, adds nothing.
        let bad = ".visible .entry k(\n)\n{\n\t// gpuio.launch_bounds 2000 0\n\tret;\n}\n";
        assert_eq!(apply(bad), Default::default());
        let short = ".visible .entry k(\n)\n{\n\t// gpuio.launch_bounds 256 0\n";
        assert!(apply(short).max_threads.contains_key("k"));
        let open = ".visible .entry k(\n)\n";
        assert_eq!(apply(open), Default::default());
    }
}
