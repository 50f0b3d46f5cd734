//! A module's PTX read as items: one PTX program per kernel, cut from it for a module
//! compiled as whole programs ([`Jit::Whole`](super::Jit::Whole)), and the module without
//! the functions nothing reaches ([`without_unreached`], for every load).
//!
//! A whole program's compile time grows faster than its kernels: gpuio's test module of
//! 35 kernels (sm_60 PTX) took over 12 minutes in `ptxas -arch=sm_90 -O3` on one core
//! (stopped there), and one kernel of it alone, with the functions and data it reaches,
//! 14-16 s. The driver compiles the parts one after another; its JIT cache keeps each.
//!
//! A part is the module's header, its `.extern` declarations, one `.entry`, and every
//! function and global that entry reaches (through calls, or through a global's initializer
//! such as a vtable), in the module's order, plus `gpuio_context` and `gpuio_layout`, which
//! the host writes and checks in every part. The cut is refused (`None`: the module is
//! compiled whole) where it would change what a program means: a global outside shared
//! memory that more than one part reaches and that has no initializer (a `static` the
//! kernels share, which would become one per kernel; gpuio's print turns excepted), or text this reader does not follow
//! (debug info's `.file`, `.loc`, `.section`). A global with an initializer is taken for a
//! constant, as every one in gpuio's modules is (`core`'s tables, vtables, strings): a
//! `static` with a nonzero initial value that several kernels write gets a copy per kernel,
//! which USAGE.md says.

use std::collections::{HashMap, HashSet};

/// The two globals the host writes and reads in every part.
const HOST_GLOBALS: [&str; 2] = ["gpuio_context", "gpuio_layout"];

/// The end of the mangled name of gpuio's print turns (the count of warps of each SM
/// writing a print record, `gpuio_device::protocol::arch::nvptx::turns`): state with no
/// initializer that every printing kernel reaches, which a part may have a copy of. A copy
/// per program lets each program's kernels take their own turns, a looser limit where
/// kernels of several programs print at once on one SM, never a wrong result (turns only
/// pace how many warps write records at once).
const COPIED_PER_PART: [&str; 1] = ["12gpuio_device8protocol4arch5nvptx5turns7HOLDERS"];

/// The directives of the module's header, each a line of its own without a `;`.
const HEADER: [&str; 3] = [".version", ".target", ".address_size"];

/// What a top-level item of PTX text is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    /// `.version`, `.target`, `.address_size`, comments.
    Header,
    /// `.extern ...;`
    Extern,
    /// A `.func` prototype (no body).
    Prototype,
    /// A `.func` with its body.
    Function,
    /// A kernel.
    Entry,
    /// A `.global`, `.const` or `.shared` variable; `true` where it has an initializer.
    Variable(bool),
}

pub(super) struct Item<'a> {
    pub(super) text: &'a str,
    pub(super) kind: Kind,
    pub(super) name: &'a str,
}

/// One PTX text per kernel (`(name, text)`, in the module's order), or `None` where the
/// module has fewer than two kernels or cannot be cut without changing its meaning.
pub(crate) fn per_kernel(ptx: &str) -> Option<Vec<(String, String)>> {
    let items = items(ptx)?;
    // The definitions each name refers to (a function's prototype and body share a name).
    let mut defined: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        if matches!(item.kind, Kind::Function | Kind::Variable(_) | Kind::Entry) {
            defined.entry(item.name).or_default().push(i);
        }
    }
    let entries: Vec<usize> = (0..items.len()).filter(|&i| items[i].kind == Kind::Entry).collect();
    if entries.len() < 2 {
        return None;
    }
    // The definitions each item's body or initializer names, read once for every entry's
    // walk (other kernels are never reached: a kernel is not called).
    let refers: Vec<Vec<usize>> = items
        .iter()
        .map(|item| {
            let mut to: Vec<usize> = identifiers(item.text)
                .filter_map(|w| defined.get(w))
                .flatten()
                .copied()
                .filter(|&d| items[d].kind != Kind::Entry)
                .collect();
            to.sort_unstable();
            to.dedup();
            to
        })
        .collect();
    let mut parts = Vec::with_capacity(entries.len());
    let mut reached_by: HashMap<&str, usize> = HashMap::new();
    for &e in &entries {
        // The definitions the entry reaches, through the bodies and initializers it reaches.
        let mut reached = vec![false; items.len()];
        let mut todo = vec![e];
        todo.extend(HOST_GLOBALS.iter().filter_map(|g| defined.get(g)).flatten());
        while let Some(i) = todo.pop() {
            if !std::mem::replace(&mut reached[i], true) {
                todo.extend(refers[i].iter().filter(|&&d| !reached[d]));
            }
        }
        // By name, so that a function's prototype goes with its body.
        let seen: HashSet<&str> = (0..items.len())
            .filter(|&i| reached[i])
            .map(|i| items[i].name)
            .collect();
        for &name in &seen {
            *reached_by.entry(name).or_default() += 1;
        }
        let mut text = String::new();
        for (i, item) in items.iter().enumerate() {
            let keep = match item.kind {
                Kind::Header | Kind::Extern => true,
                Kind::Entry => i == e,
                Kind::Prototype | Kind::Function | Kind::Variable(_) => seen.contains(item.name),
            };
            if keep {
                text.push_str(item.text);
                text.push('\n');
            }
        }
        parts.push((items[e].name.to_string(), text));
    }
    // A variable with no initializer that two parts reach is state they share: cut, each
    // part would have its own. (`.shared` memory is each block's, copied or not.)
    let shared_state = items.iter().any(|item| {
        item.kind == Kind::Variable(false)
            && !HOST_GLOBALS.contains(&item.name)
            && !COPIED_PER_PART.iter().any(|end| item.name.ends_with(end))
            && !item.text.split_whitespace().any(|w| w == ".shared")
            && reached_by.get(item.name).is_some_and(|&n| n > 1)
    });
    (!shared_state).then_some(parts)
}

/// `ptx` without the functions that no kernel and no variable reaches (through the bodies
/// and initializers of what they reach), nor their prototypes; `None` where nothing would
/// go, or the text is not as this reader expects. Every variable stays (a host may look one
/// up), and with it every function its initializer names (a table of function pointers).
///
/// Why: the driver compiles every function a module defines, reached or not. A C++
/// kernel's module joined with the device library (`link.rs`) holds the library's whole C
/// ABI, and a kernel that only prints reaches none of the file calls: about a third of the
/// library's PTX, compiled at the first load for nothing.
///
/// Only a `.visible` or `.weak` function can be left unreached: the compiler that wrote the
/// PTX (rustc's LLVM, nvcc) drops an internal one that nothing names. So a module without
/// such functions, every Rust kernel crate's, is not read at all: reading one costs a load
/// 12-13 ms a megabyte of PTX (2 vCPUs), which a load from the JIT cache would notice.
pub(crate) fn without_unreached(ptx: &str) -> Option<String> {
    if !ptx.contains(".visible .func") && !ptx.contains(".weak .func") {
        return None;
    }
    let items = items(ptx)?;
    let mut defined: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        if matches!(item.kind, Kind::Function | Kind::Variable(_) | Kind::Entry) {
            defined.entry(item.name).or_default().push(i);
        }
    }
    let mut reached = vec![false; items.len()];
    let mut todo: Vec<usize> = (0..items.len())
        .filter(|&i| matches!(items[i].kind, Kind::Entry | Kind::Variable(_)))
        .collect();
    while let Some(i) = todo.pop() {
        if std::mem::replace(&mut reached[i], true) {
            continue;
        }
        for w in identifiers(items[i].text) {
            todo.extend(defined.get(w).into_iter().flatten().filter(|&&d| !reached[d]));
        }
    }
    // By name, so that a function's prototype goes with its body.
    let seen: HashSet<&str> = (0..items.len())
        .filter(|&i| reached[i])
        .map(|i| items[i].name)
        .collect();
    let keep = |item: &Item| match item.kind {
        Kind::Header | Kind::Extern | Kind::Entry => true,
        Kind::Prototype | Kind::Function | Kind::Variable(_) => seen.contains(item.name),
    };
    if items.iter().all(keep) {
        return None;
    }
    let mut text = String::with_capacity(ptx.len());
    for item in items.iter().filter(|i| keep(i)) {
        text.push_str(item.text);
        text.push('\n');
    }
    Some(text)
}

/// `line` without its comment.
pub(super) fn code(line: &str) -> &str {
    line.split_once("//").map_or(line, |(code, _)| code)
}

/// The words of `text` that can name a symbol, comments left out.
pub(super) fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(code).flat_map(|l| {
        l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '%'))
            .filter(|w| !w.is_empty() && !w.starts_with('%') && !w.as_bytes()[0].is_ascii_digit())
    })
}

/// The module's top-level items, in order; `None` where the text is not as LLVM writes it.
pub(super) fn items(ptx: &str) -> Option<Vec<Item<'_>>> {
    let mut items = Vec::new();
    let mut start: Option<usize> = None;
    let mut depth = 0i64;
    let mut offset = 0;
    for line in ptx.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        let code = code(line).trim_end();
        if start.is_none() {
            if code.trim().is_empty() {
                continue;
            }
            start = Some(at);
        }
        depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
        if depth < 0 {
            return None;
        }
        let first = ptx[start.unwrap()..].trim_start();
        let one_line = HEADER.iter().any(|d| first.starts_with(d));
        let ends = depth == 0 && (one_line || code.ends_with(';') || code.ends_with('}'));
        if ends {
            let s = start.take().unwrap();
            items.push(item(ptx[s..offset].trim_end())?);
        }
    }
    if start.is_some() || depth != 0 {
        return None;
    }
    Some(items)
}

/// One item: its kind and the name it defines.
fn item(text: &str) -> Option<Item<'_>> {
    // Comment lines at its head belong to no definition. (`items` starts an item at a line
    // with code, so there is a first word.)
    let body = text.lines().map(code).collect::<Vec<_>>().join("\n");
    let words: Vec<&str> = body.split_whitespace().collect();
    let &first = words.first()?;
    let directives: Vec<&str> = words.iter().copied().take_while(|w| w.starts_with('.')).collect();
    let has = |d: &str| directives.contains(&d);
    if HEADER.contains(&first) {
        return Some(Item {
            text,
            kind: Kind::Header,
            name: "",
        });
    }
    if has(".extern") {
        return Some(Item {
            text,
            kind: Kind::Extern,
            name: "",
        });
    }
    let name_after = |d: &str| -> Option<&str> {
        // The name follows the directive and an optional `(.param ...)` return list.
        let at = text.find(d)? + d.len();
        let mut rest = text[at..].trim_start();
        if rest.starts_with('(') {
            rest = rest[rest.find(')')? + 1..].trim_start();
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    };
    if has(".entry") {
        return Some(Item {
            text,
            kind: Kind::Entry,
            name: name_after(".entry")?,
        });
    }
    if has(".func") {
        let kind = if body.contains('{') {
            Kind::Function
        } else {
            Kind::Prototype
        };
        return Some(Item {
            text,
            kind,
            name: name_after(".func")?,
        });
    }
    if has(".global") || has(".const") || has(".shared") {
        // `.global .align 8 .b8 name[8] = {...};`: the name is the first word that is not a
        // directive or a number.
        let decl = body.split('=').next()?;
        let name = decl
            .split(|c: char| c.is_whitespace() || c == '[' || c == ';')
            .find(|w| !w.is_empty() && !w.starts_with('.') && !w.as_bytes()[0].is_ascii_digit())?;
        let start = text.find(name)?;
        return Some(Item {
            text,
            kind: Kind::Variable(body.contains('=')),
            name: &text[start..start + name.len()],
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::per_kernel;

    const PTX: &str = "//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 6.2\n.target sm_60\n\
        .address_size 64\n\n\t// .globl\tone // -- Begin function one\n\
        .extern .func  (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0,\n\t.param .b64 vprintf_param_1\n)\n;\n\
        .func helper\n(\n\t.param .b64 helper_param_0\n)\n;\n\
        .global .align 8 .u64 anon_$_1[2] = {helper, 4};\n\
        .global .align 1 .b8 TABLE[3] = {1, 2, 3};\n\
        .visible .global .align 8 .b8 gpuio_context[8];\n\
        .visible .global .align 8 .b8 gpuio_layout[8] = {7, 0, 0, 111, 77, 117, 112, 103};\n\
        .visible .entry one(\n\t.param .u32 one_param_0\n)\n{\n\tmov.u64 %rd1, anon_$_1;\n\tret;\n}\n\
        \t// -- End function\n\t// .globl\ttwo // -- Begin function two\n\
        .visible .entry two()\n{\n\tmov.u64 %rd1, TABLE;\n\t{ // callseq 0\n\tcall.uni helper, (%rd1);\n\t} // callseq 0\n\tret;\n}\n\
        .func helper(\n\t.param .b64 helper_param_0\n)\n{\n\tret;\n}\n";

    #[test]
    fn each_kernel_gets_what_it_reaches() {
        let parts = per_kernel(PTX).expect("a module of two kernels is cut");
        let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["one", "two"]);
        let (one, two) = (&parts[0].1, &parts[1].1);
        for part in [one, two] {
            assert!(
                part.contains(".target sm_60") && part.contains(".extern .func"),
                "{part}"
            );
            assert!(
                part.contains("gpuio_context[8];") && part.contains("gpuio_layout[8] = "),
                "{part}"
            );
        }
        // `one` reaches `helper` through the vtable-like initializer, not `TABLE`.
        assert!(
            one.contains("anon_$_1[2]") && one.contains("{\n\tret;\n}") && !one.contains("TABLE"),
            "{one}"
        );
        assert!(!one.contains("entry two"));
        // `two` calls `helper` and reads `TABLE`, not `anon_$_1`.
        assert!(
            two.contains("TABLE[3]") && !two.contains("anon_$_1") && !two.contains("entry one"),
            "{two}"
        );
        assert!(
            two.contains(".func helper\n(") && two.contains(".func helper(\n"),
            "prototype and body: {two}"
        );
    }

    #[test]
    fn functions_nothing_reaches_go_with_their_prototypes() {
        // `unused` (a prototype and a body) is reached by no kernel and no variable;
        // `helper` by both kernels and a table.
        let ptx = PTX.replace(
            ".func helper(\n",
            ".func unused\n(\n)\n;\n.visible .func unused()\n{\n\t{ // callseq 1\n\tcall.uni helper, (%rd1);\n\t}\n\tret;\n}\n\
             .func helper(\n",
        );
        let pruned = super::without_unreached(&ptx).expect("unused goes");
        assert!(!pruned.contains("unused"), "{pruned}");
        for kept in [
            ".target sm_60",
            ".extern .func",
            ".func helper\n(",
            ".func helper(\n",
            "anon_$_1[2]",
            "TABLE[3]",
            "gpuio_context[8]",
            ".entry one(",
            ".entry two(",
        ] {
            assert!(pruned.contains(kept), "{kept} kept: {pruned}");
        }
        assert!(super::without_unreached(PTX).is_none(), "nothing unreached");
        // A function only a variable names stays, though no kernel reads that variable; an
        // unreached `.weak` function goes.
        let ptx = PTX.replace(
            ".func helper(\n",
            ".func tabled()\n{\n\tret;\n}\n.global .align 8 .u64 unread[1] = {tabled};\n\
             .weak .func gone()\n{\n\tret;\n}\n.func helper(\n",
        );
        let pruned = super::without_unreached(&ptx).expect("gone goes");
        assert!(
            pruned.contains(".func tabled()") && pruned.contains("unread[1]") && !pruned.contains("gone"),
            "{pruned}"
        );
    }

    #[test]
    fn a_static_two_kernels_share_keeps_the_module_whole() {
        let shared = PTX
            .replace(
                ".global .align 1 .b8 TABLE[3] = {1, 2, 3};",
                ".global .align 4 .b8 COUNT[4];",
            )
            .replace("mov.u64 %rd1, TABLE;", "mov.u64 %rd1, COUNT;")
            .replace("mov.u64 %rd1, anon_$_1;", "mov.u64 %rd1, COUNT;");
        assert!(per_kernel(&shared).is_none());
        // Shared memory is each block's: copies change nothing.
        let block = shared.replace(".global .align 4 .b8 COUNT[4];", ".shared .align 4 .b8 COUNT[4];");
        assert!(per_kernel(&block).is_some());
        // Reached by one kernel alone, it stays that kernel's.
        let alone = PTX
            .replace(
                ".global .align 1 .b8 TABLE[3] = {1, 2, 3};",
                ".global .align 4 .b8 COUNT[4];",
            )
            .replace("mov.u64 %rd1, TABLE;", "mov.u64 %rd1, COUNT;");
        assert!(per_kernel(&alone).is_some());
        // gpuio's print turns, which every printing kernel reaches, are copied per part.
        let turns = "_RNvNtNtNtNtCshX7ZGSWxKfC_12gpuio_device8protocol4arch5nvptx5turns7HOLDERS";
        let paced = shared.replace("COUNT", turns);
        let parts = per_kernel(&paced).expect("cut, turns and all");
        assert!(parts.iter().all(|(_, text)| text.contains(turns)));
    }

    #[test]
    fn one_kernel_or_unbalanced_text_is_not_cut() {
        let one = PTX.split("\t// -- End function").next().unwrap().to_string() + "\t// -- End function\n";
        assert!(per_kernel(&one).is_none());
        assert!(per_kernel(&PTX.replace("\tret;\n}\n\t// -- End", "\tret;\n\t// -- End")).is_none());
        // Debug info (`.file`, `.loc`, `.section`) is not followed: the module stays whole.
        assert!(per_kernel(&PTX.replace(".address_size 64\n", ".address_size 64\n.file 1 \"src/lib.rs\"\n")).is_none());
    }
}
