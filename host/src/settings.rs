//! The environment variables a runtime reads, in one table ([`SETTINGS`]), and how they
//! are read.
//!
//! Each setting is resolved the same way: the [`Builder`](crate::Builder)'s value if the
//! program gave one, else the environment variable, else the backend's default; then the
//! builder validates it. The builder resolves them all in one step when it builds a
//! runtime (`Builder::resolve`, `builder/resolve.rs`), and hands the result to what it opens
//! (the backend, the rings, the watchdog, the CUDA JIT). The JIT's register caps and block
//! size (`GPUIO_MAX_REGISTERS`, `GPUIO_PRINT_REGISTERS`, `GPUIO_BLOCK_THREADS`) are checked
//! there too, on every backend, and read again where a CUDA module loads.
//! The readers here turn an unset or empty variable into `None`, and any value they cannot
//! take into an [`Error::Config`] that names the variable, the value and what it expects
//! (the table's `values`). docs/USAGE.md's "Environment" section is this table (a test
//! compares them). `GPUIO_QUIET` alone is read where a notice is said, since notices come
//! also from outside a runtime.

use std::str::FromStr;

use crate::error::{Error, Result};

/// One environment variable: its name, the builder method it stands in for, the values it
/// takes and what an unset one means.
pub(crate) struct Setting {
    pub(crate) name: &'static str,
    /// For docs/USAGE.md's table (its test reads it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) builder: &'static str,
    pub(crate) values: &'static str,
    /// For docs/USAGE.md's table.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) unset: &'static str,
}

/// Every variable a runtime reads (the build's own, `GPUIO_GPU_TARGETS` and
/// `GPUIO_SKIP_GPU_BUILD`, are the linker's and `gpuio-kernels-gpu`'s).
pub(crate) const SETTINGS: &[Setting] = &[
    Setting {
        name: "GPUIO_BACKEND",
        builder: "backend",
        values: "cpu, cuda, hsa or auto",
        unset: "auto: a GPU if the machine has one, else the CPU backend",
    },
    Setting {
        name: "GPUIO_GPU",
        builder: "gpu",
        values: "a GPU index (0, 1, ...)",
        unset: "0",
    },
    Setting {
        name: "GPUIO_LOCKSTEP",
        builder: "lockstep",
        values: "1 (lockstep) or 0 (independent)",
        unset: "0: the GPU's own scheduling",
    },
    Setting {
        name: "GPUIO_URING",
        builder: "submission",
        values: "on, off, auto or inline (CPU backend: the kernel threads perform the requests)",
        unset: "inline on the CPU backend, unless a file root or SQPOLL (or CPUs for it) is asked for; else auto: io_uring, or a host thread where io_uring is unavailable",
    },
    Setting {
        name: "GPUIO_RINGS",
        builder: "rings",
        values: "1 to 8",
        unset: "one per CPU of sqpoll_cpus if given; else on a GPU, one per 4 free cores near it (1 to 4); on the CPU backend, 1",
    },
    Setting {
        name: "GPUIO_SOLO",
        builder: "solo",
        values: "1 (a solo ring) or 0 (none)",
        unset: "1 where the kernel allows it",
    },
    Setting {
        name: "GPUIO_SQPOLL",
        builder: "sqpoll",
        values: "1 (a kernel thread polls each ring; on the CPU backend, io_uring rather than inline) or 0 (CPU backend only: inline by default, else the waker enters the io_uring rings)",
        unset: "1 on a GPU, or where sqpoll_cpus names CPUs; else 0",
    },
    Setting {
        name: "GPUIO_REAL_TIME_WAKER",
        builder: "real_time_waker",
        values: "1 (SCHED_FIFO while launches crowd the cores, where the kernel allows it) or 0 (the fair scheduler)",
        unset: "0 (it matters on the CPU backend's io_uring rings without SQPOLL alone: inline, the waker is off the data path)",
    },
    Setting {
        name: "GPUIO_SQPOLL_CPUS",
        builder: "sqpoll_cpus",
        values: "a CPU list, one CPU per ring (2-5, or 2,4,6)",
        unset: "on a GPU, free cores near it, one per ring; on the CPU backend, unbound",
    },
    Setting {
        name: "GPUIO_HANG_TIMEOUT",
        builder: "hang_timeout",
        values: "a number of seconds (such as 2 or 0.5), or 0 or off for no timeout",
        unset: "none: synchronize waits, warning after 30 s without progress",
    },
    Setting {
        name: "GPUIO_JIT",
        builder: "-",
        values: "whole or separate",
        unset: "separate (CUDA: how the driver compiles PTX)",
    },
    Setting {
        name: "GPUIO_BLOCK_THREADS",
        builder: "-",
        values: "1 to 1024",
        unset: "none (CUDA: the most threads a block of the kernels gpuio loads will have, which the JIT then compiles for; for register-heavy kernels a never-taken print slows, at a cost to others: see \"What a print costs your kernel\"; a larger block is refused)",
    },
    Setting {
        name: "GPUIO_MAX_REGISTERS",
        builder: "-",
        values: "16 to 255",
        unset: "no cap (CUDA: the registers per thread of every kernel gpuio loads, the kernels' own code included)",
    },
    Setting {
        name: "GPUIO_PRINT_REGISTERS",
        builder: "-",
        values: "16 to 255, or off",
        unset: "32 where the module does no file I/O from device code, else none (CUDA, compiled separately: the registers per thread of gpuio's and core's device functions, so a kernel with a print gets the larger of its own count and this)",
    },
    Setting {
        name: "GPUIO_QUIET",
        builder: "-",
        values: "any value",
        unset: "notices are logged (target gpuio) or printed on stderr",
    },
];

/// The row of `name` in [`SETTINGS`].
fn setting(name: &str) -> &'static Setting {
    SETTINGS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is not in settings::SETTINGS: add it there"))
}

/// The error for a value `name` cannot take.
pub(crate) fn invalid(name: &str, value: &str) -> Error {
    Error::Config(format!("{name}={value:?}: expected {}", setting(name).values))
}

/// The value of `name`, trimmed; `None` where it is unset or empty.
pub(crate) fn var(name: &str) -> Result<Option<String>> {
    let _ = setting(name);
    match std::env::var(name) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v.trim().to_string())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(Error::Config(format!("{name}: {e}"))),
    }
}

/// Whether `name` is set at all (any value, even one that is not UTF-8).
pub(crate) fn is_set(name: &str) -> bool {
    let _ = setting(name);
    std::env::var_os(name).is_some()
}

/// An on/off variable: `1`/`on`/`true`/`yes` or `0`/`off`/`false`/`no`.
pub(crate) fn switch(name: &str) -> Result<Option<bool>> {
    var(name)?
        .map(|v| match v.to_ascii_lowercase().as_str() {
            "1" | "on" | "true" | "yes" => Ok(true),
            "0" | "off" | "false" | "no" => Ok(false),
            _ => Err(invalid(name, &v)),
        })
        .transpose()
}

/// A variable that `T::from_str` parses (a number).
pub(crate) fn number<T: FromStr>(name: &str) -> Result<Option<T>> {
    var(name)?.map(|v| v.parse().map_err(|_| invalid(name, &v))).transpose()
}

/// `value` (of `name`) as a whole number in `range`, or the error [`invalid`] makes.
pub(crate) fn in_range(name: &str, value: &str, range: std::ops::RangeInclusive<u32>) -> Result<u32> {
    match value.trim().parse::<u32>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(invalid(name, value)),
    }
}

/// `name`'s value parsed by `parse`, whose error says why (added to the variable's name).
pub(crate) fn parsed<T>(name: &str, parse: impl FnOnce(&str) -> std::result::Result<T, String>) -> Result<Option<T>> {
    var(name)?
        .map(|v| parse(&v).map_err(|why| Error::Config(format!("{name}={v:?}: {why}"))))
        .transpose()
}

/// [`SETTINGS`] as the Markdown table of docs/USAGE.md's "Environment" section.
#[cfg(test)]
fn markdown_table() -> String {
    let mut t = String::from("| variable | `Builder` method | values | unset |\n|---|---|---|---|\n");
    for s in SETTINGS {
        let builder = if s.builder == "-" {
            "-".to_string()
        } else {
            format!("`{}`", s.builder)
        };
        t += &format!("| `{}` | {builder} | {} | {} |\n", s.name, s.values, s.unset);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// USAGE.md's environment table is [`SETTINGS`]: a setting added to one and not the
    /// other fails here. (Read at run time: a packaged crate has no docs/ beside it, and
    /// says so.)
    #[test]
    fn usage_documents_every_setting() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/USAGE.md");
        let Ok(usage) = std::fs::read_to_string(path) else {
            eprintln!("SKIPPED usage_documents_every_setting: no {path} (a packaged crate)");
            return;
        };
        let table = markdown_table();
        assert!(
            usage.contains(&table),
            "docs/USAGE.md's \"Environment\" section should hold exactly this table:\n{table}"
        );
    }

    #[test]
    fn every_variable_the_host_reads_is_in_the_table() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut stack = vec![std::path::PathBuf::from(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(
                    p.ends_with("settings.rs") || !text.contains("env::var"),
                    "{} reads the environment itself: read it through settings.rs",
                    p.display()
                );
            }
        }
    }

    #[test]
    fn a_refused_value_names_the_variable_and_what_it_takes() {
        let e = invalid("GPUIO_SOLO", "maybe").to_string();
        assert!(
            e.contains("GPUIO_SOLO=\"maybe\"") && e.contains("1 (a solo ring) or 0 (none)"),
            "{e}"
        );
    }

    #[test]
    fn the_rings_row_says_the_builders_limit() {
        assert_eq!(
            setting("GPUIO_RINGS").values,
            format!("1 to {}", gpuio_device::protocol::context::MAX_RINGS)
        );
    }
}
