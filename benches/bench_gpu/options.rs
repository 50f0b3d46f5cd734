//! Command-line options: the cases to run and how.

use std::path::PathBuf;
use std::time::Duration;

use crate::{fail, CLI};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A fresh file in `--dir` (tmpfs).
    Shm,
    /// `/dev/null`.
    Null,
}

impl Target {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Target::Shm => "shm",
            Target::Null => "null",
        }
    }
}

/// The kernel the gpuio children time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// `stress(L, W)`: formatted lines (`t=.. i=..` padded to W bytes).
    Stress,
    /// `literal(L)`: a 32-byte literal line, no `core::fmt`: the print path without
    /// formatting. Only `--widths 32 --targets null` (its lines are not `stress`'s).
    Literal,
    /// `cpp_stress(L, W)` of `stress.cu`: `stress`'s lines from a CUDA C++ kernel through
    /// `gpuio_printf`; its printf twin `cpp_printf_stress` is the same source with printf.
    Cpp,
}

impl Kernel {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernel::Stress => "stress",
            Kernel::Literal => "literal",
            Kernel::Cpp => "cpp_stress",
        }
    }

    /// The kernel printing the same lines through CUDA's printf, if there is one.
    pub(crate) fn printf_twin(self) -> Option<&'static str> {
        match self {
            Kernel::Stress => Some("printf_stress"),
            Kernel::Literal => None,
            Kernel::Cpp => Some("cpp_printf_stress"),
        }
    }
}

pub(crate) struct Config {
    pub(crate) kernel: Kernel,
    /// The module the children load: a PTX file (`--kernel cpp`: stress.cu joined with the
    /// device library, built by `main`), or `None`: the example kernels' PTX.
    pub(crate) module: Option<PathBuf>,
    pub(crate) total: u64,
    pub(crate) lines: Vec<u32>,
    pub(crate) widths: Vec<u32>,
    pub(crate) targets: Vec<Target>,
    pub(crate) dir: PathBuf,
    pub(crate) block: u32,
    pub(crate) reps: u32,
    pub(crate) cold_reps: u32,
    pub(crate) timeout: Duration,
    pub(crate) log_mib: u64,
    pub(crate) fifo_mib: Option<u64>,
    pub(crate) skip_printf_above: u64,
}

pub(crate) fn list<T: std::str::FromStr>(args: &[String], name: &str, default: &str) -> Vec<T> {
    let s: String = CLI.opt(args, name).unwrap_or_else(|| default.into());
    s.split(',')
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| fail(&format!("{name}: bad value {v:?}")))
        })
        .collect()
}

pub(crate) fn parse_config(args: &[String]) -> Config {
    let known = [
        "--kernel",
        "--total",
        "--lines",
        "--widths",
        "--targets",
        "--dir",
        "--block",
        "--reps",
        "--cold-reps",
        "--timeout-s",
        "--log-mib",
        "--printf-fifo-mib",
        "--skip-printf-above",
    ];
    CLI.only_known(args, &known);
    let targets = list::<String>(args, "--targets", "shm,null")
        .iter()
        .map(|t| match t.as_str() {
            "shm" | "tmpfs" => Target::Shm,
            "null" => Target::Null,
            _ => fail(&format!("--targets: {t:?} is neither shm nor null")),
        })
        .collect();
    let kernel = match CLI.opt::<String>(args, "--kernel").as_deref() {
        None | Some("stress") => Kernel::Stress,
        Some("literal") => Kernel::Literal,
        Some("cpp") => Kernel::Cpp,
        Some(k) => fail(&format!("--kernel: {k:?} is not stress, literal or cpp")),
    };
    let cfg = Config {
        kernel,
        module: None,
        total: CLI.opt(args, "--total").unwrap_or(16_777_216),
        lines: list(args, "--lines", "1,16"),
        widths: list(args, "--widths", "32,128"),
        targets,
        dir: CLI.opt(args, "--dir").unwrap_or_else(|| "/dev/shm".into()),
        block: CLI.opt(args, "--block").unwrap_or(256),
        reps: CLI.opt(args, "--reps").unwrap_or(3),
        cold_reps: CLI.opt(args, "--cold-reps").unwrap_or(3),
        timeout: Duration::from_secs(CLI.opt(args, "--timeout-s").unwrap_or(120)),
        log_mib: CLI.opt(args, "--log-mib").unwrap_or(0),
        fifo_mib: CLI.opt(args, "--printf-fifo-mib"),
        skip_printf_above: CLI.opt(args, "--skip-printf-above").unwrap_or(0),
    };
    if cfg.reps == 0 {
        fail("--reps must be at least 1");
    }
    if cfg.timeout.is_zero() {
        fail("--timeout-s must be at least 1");
    }
    if cfg.block == 0 || cfg.block > 1024 {
        fail("--block must be 1..=1024");
    }
    if cfg.log_mib != 0 && !cfg.log_mib.is_power_of_two() {
        fail("--log-mib must be a power of two");
    }
    if cfg.kernel == Kernel::Literal && (cfg.widths != [32] || cfg.targets != [Target::Null]) {
        fail("--kernel literal prints 32-byte lines that cannot be checked: give --widths 32 --targets null");
    }
    for &l in &cfg.lines {
        let threads = cfg.total / u64::from(l.max(1));
        if l == 0 || threads * u64::from(l) != cfg.total || !threads.is_multiple_of(u64::from(cfg.block)) {
            fail(&format!(
                "--total {} must be L x T with T a multiple of --block {} (L = {l})",
                cfg.total, cfg.block
            ));
        }
        if threads / u64::from(cfg.block) > i32::MAX as u64 {
            fail(&format!("L = {l}: {threads} threads is more than a grid holds"));
        }
    }
    cfg
}
