//! The harness's pieces: the configurations, each case's scratch directory, and the
//! watchdog that aborts a case that hangs.

use std::path::PathBuf;
use std::time::Duration;

use gpuio::{Backend, Builder, Runtime};

use crate::common::{watchdog_saying, Watchdog};

/// A configuration of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Config {
    Cpu,
    Cuda,
    Lockstep,
}

impl Config {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Config::Cpu => "cpu",
            Config::Cuda => "cuda",
            Config::Lockstep => "lockstep",
        }
    }

    pub(crate) fn gpu(self) -> bool {
        self != Config::Cpu
    }

    /// A builder for this configuration, with a hang timeout: a hang fails the case with
    /// a report of what was outstanding, instead of hanging the run.
    pub(crate) fn builder(self) -> Builder {
        let b = Runtime::builder().backend(if self.gpu() { Backend::Cuda } else { Backend::Cpu });
        b.lockstep(self == Config::Lockstep)
            .hang_timeout(Some(Duration::from_secs(30)))
    }

    /// `gpu` on the GPU configurations, `cpu` on the CPU backend (which runs one host
    /// thread per GPU thread).
    pub(crate) fn pick(self, gpu: u32, cpu: u32) -> u32 {
        if self.gpu() {
            gpu
        } else {
            cpu
        }
    }
}

/// A directory for the case's files (tmpfs when there is one), emptied per case.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn file(&self, name: &str) -> (std::fs::File, PathBuf) {
        let path = self.0.join(name);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        (f, path)
    }
}

/// Aborts the process if a case runs longer than `secs`: a hang the runtime did not catch
/// fails the run, naming the case (on stdout, beside the cases' lines, and on stderr),
/// instead of hanging it.
pub(crate) fn watchdog(what: String, secs: u64) -> Watchdog {
    watchdog_saying(secs, move || {
        let words = format!("gpu suite: {what} did not finish in {secs} s");
        // Past libtest's capture of the print macros, which the abort would lose.
        let _ = std::io::Write::write_all(&mut std::io::stdout(), format!("{words}: aborting\n").as_bytes());
        words
    })
}
