//! The scheduling a configuration asks for is the one its module runs with.

use gpuio_test_kernels as k;

use crate::harness::{Config, Scratch};
use crate::kernels::{build, sync, Kernels, Mem};
use crate::Outcome;

/// The configuration's scheduling is the one asked for: a spin lock taken the way that
/// needs independent scheduling completes on every lane with it, and makes lanes give up
/// in lockstep. (On the CPU backend the threads are preemptible, so a lane could give up
/// behind a descheduled holder: skipped.)
pub(crate) fn scheduling_is_the_one_asked_for(config: Config, _: &Scratch) -> Outcome {
    if !config.gpu() {
        return Ok("CPU threads are independent by construction: nothing to probe".into());
    }
    let rt = build(config.builder())?;
    let k = Kernels::load(&rt)?;
    let (mut lock, mut out) = (Mem::zeroed(&k, 4), Mem::zeroed(&k, 8));
    let (grid, block, tries) = (4u32, 64u32, 2_000_000u32);
    k.launch(k::lockstep_probe, grid, block, (lock.addr(), out.addr(), tries))?;
    sync(&rt)?;
    let words = out.read();
    let ran = u32::from_ne_bytes(words[0..4].try_into().unwrap());
    let gave_up = u32::from_ne_bytes(words[4..8].try_into().unwrap());
    let detail = format!(
        "{ran} of {} lanes took the lock, {gave_up} gave up after {tries} tries",
        grid * block
    );
    match (config, gave_up) {
        (Config::Lockstep, 0) => Err(format!("{detail}: this is not lockstep scheduling")),
        (Config::Cuda, n) if n > 0 => Err(format!("{detail}: this is not independent scheduling")),
        _ if ran + gave_up != grid * block => Err(format!("{detail}: lanes are missing")),
        _ => Ok(detail),
    }
}
