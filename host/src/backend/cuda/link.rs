//! PTX modules joined into one text ([`link_ptx`]): a C++ kernel's relocatable PTX (`nvcc
//! -rdc=true -ptx`) with the device library's (the C ABI its calls name), so that the
//! driver compiles them as one module, as it does gpuio's own.
//!
//! Joined as text, not by the driver's linker: a module for a target before sm_70 (the
//! lockstep build) must be compiled whole, or it runs with independent thread scheduling
//! (`module.rs`), and the whole path takes one text. Every module keeps its items in its
//! order; an `.extern` declaration of a name another module defines is left out.

use std::collections::{HashMap, HashSet};

use super::split::{items, Item, Kind};
use crate::error::{Error, Result};

/// One PTX text of `modules`' items, under one header: the highest `.version` of theirs,
/// their `.target` and `.address_size` (which must agree), each module's items in order
/// but its `.extern` declarations of names another module defines (and of a name declared
/// already). Refused ([`Error::Config`]) where the targets differ, a name is defined twice
/// (two C++ modules: nvcc names each one's strings `$str` alike), a module uses a name
/// that a later module defines (put the device library first), or a text is not PTX this
/// reader follows (debug info, for one: build without `-G`/`-lineinfo`).
///
/// ```no_run
/// # fn main() -> Result<(), gpuio_host::Error> {
/// # let rt = gpuio_host::Runtime::builder().gpu(0).build()?;
/// // The device library (gpuio's C ABI) and a kernel from `nvcc -rdc=true -ptx -arch=sm_90`.
/// let library = std::fs::read_to_string("gpuio_device_library-sm_90.ptx").unwrap();
/// let kernel = std::fs::read_to_string("my_kernel.ptx").unwrap();
/// let module = rt.load_module(&gpuio_host::link_ptx(&[&library, &kernel])?)?;
/// # Ok(())
/// # }
/// ```
pub fn link_ptx(modules: &[&str]) -> Result<String> {
    let mut parsed = Vec::with_capacity(modules.len());
    for (i, m) in modules.iter().enumerate() {
        let text = m.strip_suffix('\0').unwrap_or(m);
        parsed.push(items(text).ok_or_else(|| {
            refuse(format!(
                "module {i} is not PTX text this reader follows (PTX with debug info, `.file` \
                 and `.loc`, is not taken: build it without -G and -lineinfo)"
            ))
        })?);
    }
    let mut out = header(&parsed)?;
    let defined = definitions(&parsed)?;
    let mut externs = HashSet::new();
    for items in &parsed {
        for item in items {
            let keep = match item.kind {
                Kind::Header => false,
                Kind::Extern => match extern_name(item.text) {
                    Some(n) => !defined.contains_key(n) && externs.insert(n),
                    None => true,
                },
                _ => true,
            };
            if keep {
                out.push_str(item.text);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

/// [`link_ptx`]'s refusal of what it was given.
fn refuse(why: String) -> Error {
    Error::Config(format!("cannot join these PTX modules: {why}"))
}

/// The joined text's header: the highest `.version` of the modules', and their `.target`
/// and `.address_size`, which must agree.
fn header(parsed: &[Vec<Item<'_>>]) -> Result<String> {
    let directive = |items: &[Item<'_>], directive: &str| -> Option<String> {
        items
            .iter()
            .filter(|i| i.kind == Kind::Header)
            .flat_map(|i| i.text.lines())
            .map(str::trim)
            .find(|l| l.starts_with(directive))
            .map(|l| l[directive.len()..].trim().to_string())
    };
    let mut version = (0u32, 0u32);
    let (mut target, mut address_size) = (None::<String>, None::<String>);
    for (i, items) in parsed.iter().enumerate() {
        let v = directive(items, ".version").ok_or_else(|| refuse(format!("module {i} has no .version")))?;
        let (major, minor) = v
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .ok_or_else(|| refuse(format!("module {i}'s .version {v} is not major.minor")))?;
        version = version.max((major, minor));
        for (what, seen) in [(".target", &mut target), (".address_size", &mut address_size)] {
            let value = directive(items, what).ok_or_else(|| refuse(format!("module {i} has no {what}")))?;
            match seen {
                Some(first) if *first != value => {
                    return Err(refuse(format!(
                        "module {i}'s {what} is {value}, an earlier one's {first}: build every \
                         module for the same GPU target"
                    )))
                }
                Some(_) => {}
                None => *seen = Some(value),
            }
        }
    }
    Ok(format!(
        ".version {}.{}\n.target {}\n.address_size {}\n\n",
        version.0,
        version.1,
        target.unwrap_or_default(),
        address_size.unwrap_or_default()
    ))
}

/// Every name some module defines, once, and which module; refused where a name is
/// defined twice, or a module declares (`.extern`) a name that a later module defines.
fn definitions<'a>(parsed: &[Vec<Item<'a>>]) -> Result<HashMap<&'a str, usize>> {
    let mut defined = HashMap::new();
    for (m, items) in parsed.iter().enumerate() {
        for item in items {
            if matches!(item.kind, Kind::Function | Kind::Entry | Kind::Variable(_))
                && defined.insert(item.name, m).is_some()
            {
                return Err(refuse(format!(
                    "`{}` is defined twice (one C++ module at a time: nvcc names each one's \
                     strings alike)",
                    item.name
                )));
            }
        }
    }
    // A module's calls must follow a declaration: an `.extern` left out for a definition
    // further on would leave them with none.
    for (m, items) in parsed.iter().enumerate() {
        for name in items
            .iter()
            .filter(|i| i.kind == Kind::Extern)
            .filter_map(|i| extern_name(i.text))
        {
            if let Some(&d) = defined.get(name).filter(|&&d| d > m) {
                return Err(refuse(format!(
                    "module {m} uses `{name}`, which module {d} defines: put module {d} first \
                     (the device library before the kernels)"
                )));
            }
        }
    }
    Ok(defined)
}

/// The name an `.extern` declaration declares: the identifier after `.func` and its return
/// list, or the last word before an initializer, array or `;` for a variable.
fn extern_name(text: &str) -> Option<&str> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%');
    if let Some(at) = text.find(".func") {
        let mut rest = text[at + ".func".len()..].trim_start();
        if rest.starts_with('(') {
            rest = rest[rest.find(')')? + 1..].trim_start();
        }
        let end = rest.find(|c: char| !is_name(c)).unwrap_or(rest.len());
        return (end > 0).then(|| &rest[..end]);
    }
    let head = text.split([';', '[', '=']).next()?;
    head.split_whitespace().last()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBRARY: &str = ".version 7.8\n.target sm_90\n.address_size 64\n\n\
        .visible .global .align 8 .b8 gpuio_context[8];\n\
        .visible .func  (.param .b32 func_retval0) gpuio_puts(\n\t.param .b64 gpuio_puts_param_0\n)\n{\n\tret;\n}\n";
    const KERNEL: &str = "//\n// nvcc\n//\n.version 9.0\n.target sm_90\n.address_size 64\n\n\
        .extern .func  (.param .b32 func_retval0) gpuio_puts\n(\n\t.param .b64 gpuio_puts_param_0\n)\n;\n\
        .extern .func  (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 a,\n\t.param .b64 b\n)\n;\n\
        .visible .entry hello()\n{\n\tret;\n}\n";

    #[test]
    fn a_kernel_joins_the_library_its_externs_name() {
        let joined = link_ptx(&[LIBRARY, KERNEL]).unwrap();
        assert!(
            joined.starts_with(".version 9.0\n.target sm_90\n.address_size 64\n"),
            "{joined}"
        );
        assert!(
            !joined.contains(".extern .func  (.param .b32 func_retval0) gpuio_puts"),
            "{joined}"
        );
        assert!(
            joined.contains(".extern .func  (.param .b32 func_retval0) vprintf"),
            "{joined}"
        );
        assert!(joined.find("gpuio_puts(").unwrap() < joined.find(".entry hello").unwrap());
        assert_eq!(joined.matches(".version").count(), 1);
    }

    #[test]
    fn targets_that_differ_and_names_defined_twice_are_refused() {
        let sm60 = KERNEL.replace(".target sm_90", ".target sm_60");
        let e = link_ptx(&[LIBRARY, &sm60]).unwrap_err().to_string();
        assert!(e.contains(".target is sm_60, an earlier one's sm_90"), "{e}");
        let e = link_ptx(&[LIBRARY, LIBRARY]).unwrap_err().to_string();
        assert!(e.contains("`gpuio_context` is defined twice"), "{e}");
        let e = link_ptx(&[
            LIBRARY,
            ".version 9.0\n.target sm_90\n.address_size 64\n.file 1 \"x.cu\"\n",
        ]);
        assert!(e.unwrap_err().to_string().contains("without -G and -lineinfo"));
        let e = link_ptx(&[KERNEL, LIBRARY]).unwrap_err().to_string();
        assert!(
            e.contains("module 0 uses `gpuio_puts`, which module 1 defines: put module 1 first"),
            "{e}"
        );
    }

    #[test]
    fn extern_names_are_read() {
        assert_eq!(
            extern_name(".extern .func  (.param .b32 r) gpuio_puts\n(\n.param .b64 p\n)\n;"),
            Some("gpuio_puts")
        );
        assert_eq!(extern_name(".extern .func vprintf(.param .b64 a);"), Some("vprintf"));
        assert_eq!(
            extern_name(".extern .shared .align 16 .b8 gpuio_dynamic_shared[];"),
            Some("gpuio_dynamic_shared")
        );
    }
}
