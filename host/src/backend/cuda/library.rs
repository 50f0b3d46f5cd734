//! A module's PTX cut in two for separate compilation ([`Jit::Separate`](super::Jit::Separate)):
//! the user's part (the kernels and the user's own functions) and the library part (the
//! functions of `gpuio_device` and `core`: the print path, the ring, `core::fmt`, the panic
//! report), which the driver's linker compiles with a register cap of its own.
//!
//! Why: on NVIDIA a kernel's register count is the most that any function it may call uses,
//! and a print's formatting calls through function pointers (`core::fmt`), which may reach
//! every formatting function of the module (core's float formatting: 253 registers). So a
//! `println!` that never runs gave a kernel 160-255 registers, and at 256 threads a block 8
//! warps an SM instead of 64 (docs/PROTOCOL.md, "What a print costs the kernel around
//! it"). Compiled apart with a cap, the library's functions spill to local memory instead,
//! and a kernel's count is the larger of its own code's and the cap. The kernels
//! themselves, and the user's functions they call, keep every register they want; user code
//! inside a generic function of `core` or `gpuio_device` (a closure given to `sort_by`) is
//! the library's, as is what only a pointer calls.
//!
//! Which functions are the library's: those whose mangled name (Rust's `v0` scheme, `_R...`,
//! or the legacy one, `_ZN...`) says their path starts in the crate `gpuio_device`, `core`
//! or `compiler_builtins`, the device library's C ABI ([`C_ABI`]: C names, listed), and
//! every other function that no kernel calls but through them or through a table (a
//! `Display` of the user's crate, which `core::fmt` calls by pointer). What a kernel calls
//! directly, or through other functions of the user's, stays with the kernels, uncapped, as
//! does any other function whose name is not read (a C function of the user's) that a
//! kernel calls.
//!
//! The cut: every variable and every other function stays in the user's part; the library
//! part declares what it uses of them `.extern`, and the user's part the library functions
//! it calls or whose addresses its tables hold. A name used across the cut is made
//! `.visible` where it is defined (PTX's internal linkage would hide it from the linker).

use std::collections::HashSet;

use super::split::{self, Kind};

/// The crates whose functions are compiled with the library's register cap.
const LIBRARY_CRATES: [&str; 3] = ["gpuio_device", "core", "compiler_builtins"];

/// The two parts of `ptx`: `(user's, library's)`, each a PTX text of its own; `None` where
/// the module has no library function or its text is not as this reader expects.
pub(crate) fn cut(ptx: &str) -> Option<(String, String)> {
    let items = split::items(ptx)?;
    let named: HashSet<&str> = items
        .iter()
        .filter(|i| i.kind == Kind::Function && is_library(i.name))
        .map(|i| i.name)
        .collect();
    if named.is_empty() {
        return None;
    }
    // The user's functions that a kernel calls stay with the kernels. The rest (a `Display`
    // of the user's, which only `core::fmt` calls, through the table a `format_args!`
    // names) are the library's too.
    let called = called_by_kernels(&items, &named);
    let library: HashSet<&str> = items
        .iter()
        .filter(|i| i.kind == Kind::Function && !called.contains(i.name))
        .map(|i| i.name)
        .collect();
    // Which part defines each item: `Some(true)` the library (its functions), `Some(false)`
    // the user's (variables, entries, the user's functions); `None`, both (the header and
    // the `.extern`s) or neither (prototypes, which each part writes anew).
    let owner = |i: &split::Item| match i.kind {
        Kind::Function => Some(library.contains(i.name)),
        Kind::Variable(_) | Kind::Entry => Some(false),
        _ => None,
    };
    let defined: HashSet<&str> = items.iter().filter(|i| owner(i).is_some()).map(|i| i.name).collect();
    let uses = |lib: bool| -> HashSet<&str> {
        items
            .iter()
            .filter(|i| owner(i) == Some(lib))
            .flat_map(|i| split::identifiers(i.text))
            .filter(|w| defined.contains(w))
            .collect()
    };
    let (user_uses, library_uses) = (uses(false), uses(true));
    // Used across the cut: the library's functions the user's part names, and the user's
    // names the library names.
    let across: HashSet<&str> = user_uses
        .iter()
        .filter(|w| library.contains(**w))
        .chain(library_uses.iter().filter(|w| !library.contains(**w)))
        .copied()
        .collect();
    let mut parts = [String::new(), String::new()];
    for (p, lib) in [(0, false), (1, true)] {
        let out = &mut parts[p];
        for i in items.iter().filter(|i| matches!(i.kind, Kind::Header | Kind::Extern)) {
            out.push_str(i.text);
            out.push('\n');
        }
        // What this part uses of the other, declared `.extern`, in the module's order.
        let mine_uses = if lib { &library_uses } else { &user_uses };
        for i in items
            .iter()
            .filter(|i| owner(i) == Some(!lib) && mine_uses.contains(i.name))
        {
            out.push_str(&extern_declaration(i)?);
            out.push('\n');
        }
        // This part's functions declared first (PTX names nothing before its declaration; a
        // table may hold a function defined after it), then its definitions in order.
        for i in items
            .iter()
            .filter(|i| i.kind == Kind::Function && owner(i) == Some(lib))
        {
            out.push_str(&linked(&header(i.text), across.contains(i.name)));
            out.push_str(";\n");
        }
        for i in items.iter().filter(|i| owner(i) == Some(lib)) {
            out.push_str(&linked(i.text, across.contains(i.name)));
            out.push('\n');
        }
    }
    let [user, lib] = parts;
    Some((user, lib))
}

/// The functions not `named` that a kernel calls, directly or through others not named.
fn called_by_kernels<'p>(items: &[split::Item<'p>], named: &HashSet<&str>) -> HashSet<&'p str> {
    let functions: std::collections::HashMap<&str, &split::Item> = items
        .iter()
        .filter(|i| i.kind == Kind::Function)
        .map(|i| (i.name, i))
        .collect();
    let mut called: HashSet<&str> = HashSet::new();
    let mut todo: Vec<&split::Item> = items.iter().filter(|i| i.kind == Kind::Entry).collect();
    while let Some(item) = todo.pop() {
        for w in callees(item.text) {
            if let Some(f) = functions.get(w) {
                if !named.contains(w) && called.insert(f.name) {
                    todo.push(f);
                }
            }
        }
    }
    called
}

/// Whether a module does file I/O from device code: a kernel reaches gpuio's bulk copy
/// (`gpuio_device::protocol::copy`), which every `pread`, `pwrite` and `fs` call reaches and
/// which keeps 32 16-byte loads in flight a lane: capped, it spills them. Reached: named in a
/// kernel's text, or in the text of a function or variable (a table of function pointers)
/// reached so, which counts a function a table holds as called. The device library for C++
/// kernels holds every call of its C ABI, so that a kernel that only prints leaves the copy
/// unreached. Where the module's text is not as this reader expects: whether it has the copy
/// at all.
pub(crate) fn does_file_io(ptx: &str) -> bool {
    const COPY: &str = "12gpuio_device8protocol4copy";
    // A module without the copy is not read (a search, where reading costs a load
    // 12-13 ms a megabyte of PTX on 2 vCPUs).
    if !ptx.contains(COPY) {
        return false;
    }
    let Some(items) = split::items(ptx) else {
        return true;
    };
    let named: std::collections::HashMap<&str, &split::Item> = items
        .iter()
        .filter(|i| matches!(i.kind, Kind::Function | Kind::Variable(_)))
        .map(|i| (i.name, i))
        .collect();
    let mut reached: HashSet<&str> = HashSet::new();
    let mut todo: Vec<&split::Item> = items.iter().filter(|i| i.kind == Kind::Entry).collect();
    while let Some(item) = todo.pop() {
        for w in split::identifiers(item.text) {
            if let Some(i) = named.get(w) {
                if reached.insert(i.name) {
                    if i.kind == Kind::Function && i.name.contains(COPY) {
                        return true;
                    }
                    todo.push(i);
                }
            }
        }
    }
    false
}

/// The functions `text` calls directly: the name after each `call` (or `call.uni`) and its
/// optional return list, as in `call.uni (retval0), name, (param0);`, which LLVM spreads over
/// lines. A call through a register (`call %rd4, ...`) names none; a name that is only
/// loaded (`mov.u64 %rd1, name;`: a pointer for `core::fmt` to call) is not a call.
fn callees(text: &str) -> Vec<&str> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("call") {
        let start = from + at;
        from = start + 4;
        let before = text[..start].chars().next_back();
        let after = text[from..].chars().next();
        if before.is_some_and(is_word) || !after.is_some_and(|c| c == '.' || c.is_whitespace()) {
            continue;
        }
        // Past the modifiers (`.uni`), the return list and the comma.
        let mut rest = text[from..]
            .trim_start_matches(|c: char| c == '.' || is_word(c))
            .trim_start();
        if rest.starts_with('(') {
            let Some(close) = rest.find(')') else { break };
            rest = rest[close + 1..].trim_start().trim_start_matches(',').trim_start();
        }
        let end = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
        if end > 0 && !rest.as_bytes()[0].is_ascii_digit() {
            out.push(&rest[..end]);
        }
    }
    out
}

/// Whether a function of this mangled name belongs to a library crate.
fn is_library(name: &str) -> bool {
    C_ABI.contains(&name) || root_crate(name).is_some_and(|c| LIBRARY_CRATES.contains(&c))
}

/// The device library's C ABI (`device/include/gpuio/device.h`), which a CUDA C++ kernel
/// calls directly: C names, which say no crate, so listed. Without them in the library's
/// part, `gpuio_printf_args` (the print path, formatting inlined) would stay with the
/// kernels, uncapped, and a `gpuio_printf` never taken would give its kernel 253 registers.
const C_ABI: [&str; 8] = [
    "gpuio_printf_args",
    "gpuio_puts",
    "gpuio_write",
    "gpuio_open",
    "gpuio_pwrite",
    "gpuio_pread",
    "gpuio_fsync",
    "gpuio_close",
];

/// The crate a mangled path starts in, where it can be read: `_RNvNtCs1a_4core3fmt5write`
/// is `core`; `_ZN12gpuio_device5print8print_to17h..E` is `gpuio_device`.
fn root_crate(name: &str) -> Option<&str> {
    if let Some(rest) = name.strip_prefix("_ZN") {
        let (len, rest) = decimal(rest)?;
        return rest.get(..len);
    }
    let mut s = name.strip_prefix("_R")?.as_bytes();
    // v0: `N <namespace> <path>`, `X|M [<disambiguator>] <path> ...` (an impl: its path is
    // where it is written), `Y <type> <trait>` (`<T as Trait>`: read as its type, where that
    // is a path: a trait's default method instantiated for gpuio's `LineBuf` is gpuio's),
    // `I <path> ...` (generic arguments follow), `C [<disambiguator>] <identifier>`: the
    // crate. Anything else (a basic type, a reference, a backref) is not read.
    loop {
        match s.first()? {
            b'N' => s = s.get(2..)?,
            b'X' | b'M' => s = skip_disambiguator(&s[1..])?,
            b'Y' | b'I' => s = &s[1..],
            b'C' => {
                let rest = skip_disambiguator(&s[1..])?;
                let text = std::str::from_utf8(rest).ok()?;
                let (len, rest) = decimal(text)?;
                // An identifier may start with `_` to separate its digits from its text.
                let rest = rest.strip_prefix('_').unwrap_or(rest);
                return rest.get(..len);
            }
            _ => return None,
        }
    }
}

/// `s` past an optional `s <base-62> _` disambiguator.
fn skip_disambiguator(s: &[u8]) -> Option<&[u8]> {
    match s.strip_prefix(b"s") {
        Some(rest) => Some(&rest[rest.iter().position(|&b| b == b'_')? + 1..]),
        None => Some(s),
    }
}

/// A decimal number at the start of `s`, and what follows it.
fn decimal(s: &str) -> Option<(usize, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// A definition's text up to its body (a function) or initializer (a variable), comments and
/// the trailing `;` left out.
fn header(text: &str) -> String {
    let code: Vec<&str> = text.lines().map(split::code).filter(|l| !l.trim().is_empty()).collect();
    let code = code.join("\n");
    let end = code.find(['{', '=']).unwrap_or(code.len());
    code[..end].trim().trim_end_matches(';').trim_end().to_string()
}

/// `text` with `.visible` linkage where it is used across the cut and has none (a `.weak`
/// or `.visible` definition is left as it is).
fn linked(text: &str, across: bool) -> String {
    if !across {
        return text.to_string();
    }
    // The definition's first code line; comment lines before it are kept.
    let mut out = String::with_capacity(text.len() + 9);
    let mut done = false;
    for line in text.split_inclusive('\n') {
        let code = split::code(line).trim_start();
        if !done && !code.trim().is_empty() {
            done = true;
            if !code.starts_with(".visible") && !code.starts_with(".weak") {
                let indent = &line[..line.len() - line.trim_start().len()];
                out.push_str(indent);
                out.push_str(".visible ");
                out.push_str(line.trim_start());
                continue;
            }
        }
        out.push_str(line);
    }
    out
}

/// `.extern` and the definition's header, linkage left out: how the other part names it.
fn extern_declaration(item: &split::Item) -> Option<String> {
    let h = header(item.text);
    let h = h
        .strip_prefix(".visible")
        .or_else(|| h.strip_prefix(".weak"))
        .unwrap_or(&h)
        .trim_start();
    (!h.is_empty()).then(|| format!(".extern {h};"))
}

#[cfg(test)]
mod tests {
    use super::{cut, root_crate};

    #[test]
    fn reads_the_crate_a_mangled_path_starts_in() {
        for (name, krate) in [
            ("_RNvNtCs9X4uHhVP99d_4core3fmt5write", Some("core")),
            ("_RNvNtNtCsaBc_12gpuio_device5print8print_to", Some("gpuio_device")),
            // An impl: the module it is written in.
            (
                "_RNvXs1_NtNtCs9X4uHhVP99d_4core5panic10panic_infoNtB5_12PanicMessageNtNtB9_3fmt7Display3fmt",
                Some("core"),
            ),
            // A closure inside a function of the user's crate.
            ("_RNCNvCsfLfy6EI15iL_6mykern4main0B3_", Some("mykern")),
            ("_ZN12gpuio_device5print8print_to17h0123456789abcdefE", Some("gpuio_device")),
            ("_RNvCsfLfy6EI15iL_7___rustc17rust_begin_unwind", Some("__rustc")),
            // `<gpuio_device::LineBuf as core::fmt::Write>::write_fmt`: the type's crate.
            (
                "_RNvYNtNtNtCs5wtlmf0miMb_12gpuio_device8protocol5print7LineBufNtNtCs9X4uHhVP99d_4core3fmt5Write9write_fmtB8_",
                Some("gpuio_device"),
            ),
            // `<u8 as Trait>`, a C name: not read.
            ("_RNvYhNtNtCs1_4core3fmt7Display3fmt", None),
            ("vprintf", None),
        ] {
            assert_eq!(root_crate(name), krate, "{name}");
        }
    }

    const PTX: &str = "//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 7.8\n.target sm_90\n\
        .address_size 64\n\n\
        .extern .shared .align 16 .b8 gpuio_dynamic_shared[];\n\
        .func _RNvNtCs1_12gpuio_device5print5print\n(\n\t.param .b64 p_0\n)\n;\n\
        .func  (.param .b32 func_retval0) _RNvNtCs2_4core3fmt7display\n(\n\t.param .b64 d_0\n)\n;\n\
        .func _RNvCs3_6mykern7display()\n;\n\
        .global .align 8 .u64 anon_$_1[3] = {_RNvNtCs2_4core3fmt7display, _RNvCs3_6mykern7display, 4};\n\
        .visible .global .align 8 .b8 gpuio_context[8];\n\
        .visible .global .align 8 .b8 gpuio_layout[8] = {7, 0, 0, 111, 77, 117, 112, 103};\n\
        \t// .globl\tone // -- Begin function one\n\
        .visible .entry one(\n\t.param .u32 one_param_0\n)\n{\n\tmov.u64 %rd1, anon_$_1;\n\t{ // callseq 0\n\
        \tcall.uni _RNvNtCs1_12gpuio_device5print5print, (%rd1);\n\t} // callseq 0\n\
        \t{ // callseq 2\n\tcall.uni _RNvCs3_6mykern6helper, ();\n\t}\n\tret;\n}\n\
        \t// -- End function\n\
        .func _RNvCs3_6mykern6helper()\n{\n\tret;\n}\n\
        .func _RNvCs3_6mykern7display()\n{\n\tret;\n}\n\
        .func _RNvNtCs1_12gpuio_device5print5print(\n\t.param .b64 p_0\n)\n{\n\tmov.u64 %rd1, gpuio_context;\n\
        \tmov.u64 %rd2, anon_$_1;\n\t{ // callseq 1\n\tcall.uni _RNvCs3_6mykern6helper, ();\n\t}\n\tret;\n}\n\
        .func  (.param .b32 func_retval0) _RNvNtCs2_4core3fmt7display(\n\t.param .b64 d_0\n)\n{\n\tret;\n}\n";

    #[test]
    fn the_library_goes_apart_and_names_across_the_cut_are_linked() {
        let (user, lib) = cut(PTX).expect("a module with library functions is cut");
        for part in [&user, &lib] {
            assert!(
                part.contains(".target sm_90") && part.contains(".extern .shared"),
                "{part}"
            );
        }
        // The user's part: the entry, the variables, the function the entry calls (made
        // visible: the library calls it too), the library's functions declared `.extern`.
        assert!(
            user.contains(".visible .entry one(") && user.contains("gpuio_layout[8] = "),
            "{user}"
        );
        assert!(user.contains(".visible .func _RNvCs3_6mykern6helper()\n{"), "{user}");
        assert!(
            user.contains(".extern .func _RNvNtCs1_12gpuio_device5print5print(\n\t.param .b64 p_0\n);"),
            "{user}"
        );
        assert!(
            user.contains(".extern .func  (.param .b32 func_retval0) _RNvNtCs2_4core3fmt7display"),
            "a function a table holds is declared: {user}"
        );
        assert!(!user.contains("mov.u64 %rd1, gpuio_context"), "{user}");
        // The library's part: its two functions, visible; what it uses of the user's, extern.
        assert!(
            lib.contains(".visible .func _RNvNtCs1_12gpuio_device5print5print(\n"),
            "{lib}"
        );
        assert!(
            lib.contains(".visible .func  (.param .b32 func_retval0) _RNvNtCs2_4core3fmt7display(\n"),
            "{lib}"
        );
        assert!(lib.contains(".extern .global .align 8 .b8 gpuio_context[8];"), "{lib}");
        assert!(lib.contains(".extern .global .align 8 .u64 anon_$_1[3];"), "{lib}");
        // The user's `Display`, which only a table names, is the library's: capped.
        assert!(lib.contains(".visible .func _RNvCs3_6mykern7display()\n{"), "{lib}");
        assert!(user.contains(".extern .func _RNvCs3_6mykern7display();"), "{user}");
        assert!(!user.contains("_RNvCs3_6mykern7display()\n{"), "{user}");
        assert!(lib.contains(".extern .func _RNvCs3_6mykern6helper();"), "{lib}");
        assert!(!lib.contains(".entry") && !lib.contains("gpuio_layout"), "{lib}");
    }

    #[test]
    fn reads_direct_calls_not_loads() {
        let text =
            "\tmov.u64 %rd1, loaded;\n\t{ // callseq 0\n\tcall.uni (retval0), \n\tfirst, \n\t(\n\tparam0\n\t);\n\
            \t} // callseq 0\n\tcall.uni second, (param0);\n\tcall (retval0), %rd4, (param0), prototype_1;\n";
        assert_eq!(super::callees(text), ["first", "second"]);
    }

    /// A C++ kernel's module joined with the device library: the C ABI's print and write,
    /// the write reaching the bulk copy; `ENTRY` is the kernel's body.
    fn joined(entry: &str) -> String {
        format!(
            ".version 7.8\n.target sm_90\n.address_size 64\n\n\
            .func _ZN12gpuio_device8protocol4copy4bulk17h0123456789abcdefE()\n;\n\
            .global .align 8 .u64 writers[1] = {{gpuio_pwrite}};\n\
            .visible .entry k()\n{{\n{entry}\tret;\n}}\n\
            .visible .func  (.param .b32 func_retval0) gpuio_printf_args()\n{{\n\tret;\n}}\n\
            .visible .func  (.param .b64 func_retval0) gpuio_pwrite()\n{{\n\
            \t{{ // callseq 0\n\tcall.uni _ZN12gpuio_device8protocol4copy4bulk17h0123456789abcdefE, ();\n\t}}\n\tret;\n}}\n\
            .func _ZN12gpuio_device8protocol4copy4bulk17h0123456789abcdefE()\n{{\n\tret;\n}}\n"
        )
    }

    #[test]
    fn file_io_is_a_copy_a_kernel_reaches() {
        let prints = joined("\t{ // callseq 1\n\tcall.uni (retval0), gpuio_printf_args, ();\n\t}\n");
        assert!(!super::does_file_io(&prints), "a kernel that only prints: {prints}");
        let writes = joined("\t{ // callseq 1\n\tcall.uni (retval0), gpuio_pwrite, ();\n\t}\n");
        assert!(super::does_file_io(&writes), "a kernel that writes: {writes}");
        let through_a_table = joined("\tmov.u64 %rd1, writers;\n");
        assert!(
            super::does_file_io(&through_a_table),
            "a kernel that loads a table of writers: {through_a_table}"
        );
        // The C ABI goes with the library, capped.
        let (user, lib) = cut(&prints).expect("cut");
        assert!(
            lib.contains(".visible .func  (.param .b32 func_retval0) gpuio_printf_args()\n{"),
            "{lib}"
        );
        assert!(
            user.contains(".extern .func  (.param .b32 func_retval0) gpuio_printf_args()"),
            "{user}"
        );
    }

    #[test]
    fn the_c_abi_is_the_device_headers() {
        let header = include_str!("../../../../device/include/gpuio/device.h");
        let mut declared: Vec<&str> = header
            .lines()
            .filter_map(|l| l.strip_prefix("GPUIO_DEVICE "))
            // Declarations: the library defines them (the header's inline C++ helpers not).
            .filter(|l| l.trim_end().ends_with(");"))
            .filter_map(|l| l.split('(').next()?.split_whitespace().last())
            .map(|name| name.trim_start_matches('*'))
            .collect();
        declared.sort_unstable();
        let mut listed = super::C_ABI.to_vec();
        listed.sort_unstable();
        assert_eq!(declared, listed, "device.h's functions against library.rs's C_ABI");
    }

    #[test]
    fn a_module_without_library_functions_is_not_cut() {
        let plain = ".version 7.8\n.target sm_90\n.address_size 64\n\n\
            .visible .entry one()\n{\n\tret;\n}\n";
        assert!(cut(plain).is_none());
    }
}
