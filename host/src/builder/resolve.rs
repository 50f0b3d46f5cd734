//! The settings a runtime is built with, resolved in one step (`Builder::resolve`): for
//! each, the builder's value if the program gave one, else its variable's
//! (`settings::SETTINGS`), read only then, else `None` for the backend's default, which
//! what the builder opens (the backend, the rings, the watchdog, the CUDA JIT) fills in.
//! Nothing below the builder reads a variable for a runtime.

use std::time::Duration;

use crate::backend::cuda::Jit;
use crate::backend::Backend;
use crate::consumer::submission::Submission;
use crate::error::Result;

/// What a runtime is built with, before the backend's defaults.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// `None`: the first available.
    pub(crate) backend: Option<Backend>,
    /// `None`: the backend's first GPU.
    pub(crate) gpu: Option<u32>,
    pub(crate) lockstep: bool,
    /// `None`: the backend's default (`Builder::open_rings`).
    pub(crate) submission: Option<Submission>,
    /// `None`: chosen from the machine (`affinity::default_rings`).
    pub(crate) rings: Option<u32>,
    /// `None`: on where the kernel allows it.
    pub(crate) solo: Option<bool>,
    /// `None`: on on a GPU, or where `sqpoll_cpus` names CPUs; off on the CPU backend.
    pub(crate) sqpoll: Option<bool>,
    /// On rings the waker enters, where the kernel allows it.
    pub(crate) real_time_waker: bool,
    /// `None`: chosen (`affinity::choose`).
    pub(crate) sqpoll_cpus: Option<Vec<u32>>,
    /// `None`: never give up.
    pub(crate) hang_timeout: Option<Duration>,
    pub(crate) jit: Jit,
}

/// The program's value `given`, else the environment's (`read`, called only then: a
/// variable the program overrides is not looked at, so a bad value there is no error).
pub(crate) fn or_env<T>(given: Option<T>, read: impl FnOnce() -> Result<Option<T>>) -> Result<Option<T>> {
    match given {
        Some(v) => Ok(Some(v)),
        None => read(),
    }
}
