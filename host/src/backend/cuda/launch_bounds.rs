//! Launch bounds: the most threads a block of a kernel may have, where the kernel declares
//! it in its PTX header (`.maxntid`, or `.reqntid`): a Rust kernel's `#[launch_bounds]`, which
//! `gpuio-linker` writes so, or CUDA C++'s `__launch_bounds__`, which nvcc does. Read at load
//! so that a launch by name of larger blocks is refused (`crate::launch::check_launch_bounds`)
//! with an error that says why, where the driver would refuse it or not by the registers the
//! kernel happened to take.

use std::collections::HashMap;

use super::split::code;

/// Whether `ptx` may declare launch bounds (a mention in a comment counts too, which only
/// adds a JIT option that then changes nothing: `jit.rs`).
pub(super) fn declares_any(ptx: &str) -> bool {
    ptx.contains(".maxntid") || ptx.contains(".reqntid")
}

/// The most threads a block of each kernel of `ptx` that declares launch bounds may have:
/// the product of its `.maxntid` (or `.reqntid`) dimensions.
pub(super) fn read(ptx: &str) -> HashMap<String, u32> {
    let mut bounds = HashMap::new();
    if !declares_any(ptx) {
        return bounds;
    }
    // The entry whose header is being read, and the depth of braces outside headers.
    let (mut header, mut depth): (Option<&str>, i64) = (None, 0);
    for line in ptx.lines() {
        let c = code(line);
        let mut from = 0;
        if depth == 0 {
            if let Some(at) = c.find(".entry ") {
                let rest = &c[at + ".entry ".len()..];
                let end = rest
                    .find(|ch: char| ch == '(' || ch.is_whitespace())
                    .unwrap_or(rest.len());
                header = Some(rest[..end].trim());
                from = at;
            }
        }
        if let Some(name) = header {
            // The header's part of the line: up to the body's `{`, if it opens here.
            let h = c[from..].split('{').next().unwrap_or_default();
            for directive in [".maxntid", ".reqntid"] {
                let Some(at) = h.find(directive) else { continue };
                let dims = &h[at + directive.len()..];
                let end = dims
                    .find(|ch: char| !(ch.is_ascii_digit() || ch == ',' || ch.is_whitespace()))
                    .unwrap_or(dims.len());
                let threads = dims[..end]
                    .split(',')
                    .map(|d| d.trim().parse::<u32>().ok())
                    .try_fold(1u32, |n, d| n.checked_mul(d?));
                if let Some(n) = threads {
                    bounds.insert(name.to_string(), n);
                }
            }
            if c[from..].contains('{') {
                header = None;
            } else {
                continue;
            }
        }
        depth += c.matches('{').count() as i64 - c.matches('}').count() as i64;
    }
    bounds
}

#[cfg(test)]
mod tests {
    use super::read;

    #[test]
    fn reads_each_entrys_declared_bound() {
        let ptx = ".version 7.8\n.target sm_90\n.address_size 64\n\n\
            .visible .entry plain(\n\t.param .u32 plain_param_0\n)\n{\n\tret;\n}\n\
            .visible .entry tile(\n\t.param .u32 tile_param_0\n)                // @tile\n\
            .maxntid 256, 1, 1\n{\n\t{ // callseq 0\n\t} // callseq 0\n\tret;\n}\n\
            .visible .entry two(\n)\n.maxntid 128, 1, 1\n.minnctapersm 2\n{\n\tret;\n}\n\
            .visible .entry cpp(\n\t.param .u32 cpp_param_0\n)\n.maxntid 64, 2, 1\n{\n\tret;\n}\n\
            .visible .entry exact(\n)\n.reqntid 8, 8, 1\n{\n\tret;\n}\n\
            .visible .entry k() {\n\tret;\n}\n.visible .entry j(\n) .maxntid 32, 1, 1 {\n\tret;\n}\n";
        let mut bounds: Vec<_> = read(ptx).into_iter().collect();
        bounds.sort();
        let want = [("cpp", 128), ("exact", 64), ("j", 32), ("tile", 256), ("two", 128)];
        assert_eq!(bounds, want.map(|(k, n)| (k.to_string(), n)));
    }

    #[test]
    fn text_without_bounds_or_a_mention_in_a_body_reads_none() {
        assert!(read(".visible .entry k(\n)\n{\n\tret;\n}\n").is_empty());
        // Only a header's directive counts; a `.maxntid` in a body or a comment does not.
        let body = ".visible .entry k(\n)\n{\n\t// .maxntid 64, 1, 1\n\tret;\n}\n.func f()\n{\n.maxntid 8\n}\n";
        assert!(read(body).is_empty());
    }
}
