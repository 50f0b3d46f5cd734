//! A kernel's launch bounds in the PTX this linker writes: `kernel!`'s
//! `#[launch_bounds(MAX, MIN)]` leaves a comment in the entry's body,
//! `// gpuio.launch_bounds MAX MIN` (rustc has no attribute for PTX's `.maxntid`), which
//! [`write_directives`] turns into the entry's `.maxntid MAX, 1, 1` (and `.minnctapersm MIN`
//! where `MIN` > 0), so that every program that loads the PTX (gpuio's loader, cudarc's
//! `load_module`, a C host's `cuModuleLoadData`) compiles the kernel for its bound.

/// The comment a bounded entry's body carries (`gpuio_device`'s `mark_launch_bounds`).
const MARK: &str = "// gpuio.launch_bounds ";

/// `ptx` with each marked entry's directives in its header, or `None` where no entry is
/// marked. An entry that declares `.maxntid` or `.reqntid` itself keeps its own; a mark that
/// cannot be read (not two numbers, `MAX` not 1 to 1,024) stays the comment it is (`kernel!`
/// makes none such).
pub fn write_directives(ptx: &str) -> Option<String> {
    let mut out = String::new();
    let mut copied = 0;
    for e in entries(ptx) {
        let (None, Some((max, min))) = (e.declared, e.marked) else {
            continue;
        };
        out.push_str(&ptx[copied..e.body_at]);
        // The directives on lines of their own, before the body's `{`.
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(".maxntid {max}, 1, 1\n"));
        if min > 0 {
            out.push_str(&format!(".minnctapersm {min}\n"));
        }
        copied = e.body_at;
    }
    (copied > 0).then(|| out + &ptx[copied..])
}

/// One `.entry` as [`entries`] reads it.
struct Entry {
    /// Where its body's opening `{` is: the directives go before it.
    body_at: usize,
    /// Whether its header declares `.maxntid` or `.reqntid`.
    declared: Option<()>,
    /// Its body's mark: most threads a block, least blocks an SM (0: none asked).
    marked: Option<(u32, u32)>,
}

/// The entries of `ptx` whose bodies open, with where, what their headers declare and what
/// their bodies mark.
fn entries(ptx: &str) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    // In an entry's header (its `.entry` line seen, its body not yet opened), and in its
    // body at this depth of braces.
    let (mut header, mut depth) = (false, 0i64);
    let mut offset = 0;
    for line in ptx.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        let code = line.split_once("//").map_or(line, |(code, _)| code);
        let mut from = 0;
        if depth == 0 {
            if let Some(e) = code.find(".entry ") {
                // A new header (one left unopened is dropped: text this reader does not follow).
                header = true;
                from = e;
                entries.push(Entry {
                    body_at: 0,
                    declared: None,
                    marked: None,
                });
            }
        }
        if header {
            let e = entries.last_mut().expect("a header has its entry");
            let t = code.trim_start();
            if t.starts_with(".maxntid") || t.starts_with(".reqntid") {
                e.declared = Some(());
            }
            if let Some(open) = code[from..].find('{') {
                e.body_at = at + from + open;
                header = false;
                depth =
                    code[from + open..].matches('{').count() as i64 - code[from + open..].matches('}').count() as i64;
                continue;
            }
            continue;
        }
        if depth > 0 {
            if let Some(mark) = line.trim().strip_prefix(MARK) {
                let nums: Vec<Option<u32>> = mark.split_whitespace().map(|w| w.parse().ok()).collect();
                if let ([Some(max @ 1..=1024), Some(min)], Some(e)) = (&nums[..], entries.last_mut()) {
                    e.marked = Some((*max, *min));
                }
            }
            depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
        }
    }
    entries.retain(|e| e.body_at > 0);
    entries
}

#[cfg(test)]
mod tests {
    use super::write_directives;

    const PTX: &str = ".version 7.8\n.target sm_90\n.address_size 64\n\n\
        .visible .entry plain(\n\t.param .u32 plain_param_0\n)\n{\n\tret;\n}\n\
        .visible .entry tile(\n\t.param .u32 tile_param_0\n)                // @tile\n{\n\
        \t.reg .b32 %r<2>;\n\t// begin inline asm\n\t// gpuio.launch_bounds 256 0\n\t// end inline asm\n\
        \t{ // callseq 0\n\t} // callseq 0\n\tret;\n}\n\
        .visible .entry two(\n\t.param .u32 two_param_0\n)\n{\n\t// gpuio.launch_bounds 128 2\n\tret;\n}\n\
        .visible .entry cpp(\n\t.param .u32 cpp_param_0\n)\n.maxntid 64, 2, 1\n{\n\t// gpuio.launch_bounds 32 0\n\tret;\n}\n";

    #[test]
    fn marked_entries_get_their_directives() {
        let ptx = write_directives(PTX).expect("directives were added");
        assert!(ptx.contains("// @tile\n.maxntid 256, 1, 1\n{\n"), "{ptx}");
        assert!(
            ptx.contains("two_param_0\n)\n.maxntid 128, 1, 1\n.minnctapersm 2\n{\n"),
            "{ptx}"
        );
        assert!(ptx.contains("plain_param_0\n)\n{\n"), "{ptx}");
        // An entry's own directive wins over a mark.
        assert!(ptx.contains(".maxntid 64, 2, 1\n{\n"), "{ptx}");
        assert_eq!(ptx.matches(".maxntid").count(), 3);
        // Only the directives were added.
        let added = ".maxntid 256, 1, 1\n.maxntid 128, 1, 1\n.minnctapersm 2\n";
        assert_eq!(ptx.len(), PTX.len() + added.len());
    }

    #[test]
    fn a_body_opened_on_its_header_line_is_found() {
        let ptx = ".visible .entry k() {\n\tret;\n}\n.visible .entry j(\n\t.param .u32 p\n) {\n\t// gpuio.launch_bounds 64 0\n\tret;\n}\n";
        let out = write_directives(ptx).expect("j is marked");
        assert_eq!(
            out,
            ptx.replace(") {\n\t// gpuio", ") \n.maxntid 64, 1, 1\n{\n\t// gpuio"),
            "{out}"
        );
    }

    #[test]
    fn unmarked_or_unreadable_text_is_left_alone() {
        assert_eq!(write_directives(".visible .entry k(\n)\n{\n\tret;\n}\n"), None);
        // A mark out of range, one outside any entry, or an entry cut short adds nothing.
        assert_eq!(
            write_directives(".visible .entry k(\n)\n{\n\t// gpuio.launch_bounds 2000 0\n\tret;\n}\n"),
            None
        );
        assert_eq!(
            write_directives(".func f(\n)\n{\n\t// gpuio.launch_bounds 64 0\n\tret;\n}\n"),
            None
        );
        assert_eq!(write_directives(".visible .entry k(\n)\n"), None);
    }
}
