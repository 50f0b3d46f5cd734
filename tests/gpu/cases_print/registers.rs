//! A print leaves a kernel its registers: the example kernels hold no more than gpuio's cap
//! (CUDA: compiled separately, and compiled whole as the lockstep build always is).

use crate::harness::{Config, Scratch};
use crate::Outcome;

/// Why the register case cannot run in `config`, if it cannot: registers are a GPU's;
/// `GPUIO_PRINT_REGISTERS=off` leaves gpuio's functions uncapped; `GPUIO_MAX_REGISTERS`
/// caps every kernel,
/// so a count under it would prove nothing; under `GPUIO_BLOCK_THREADS` the JIT may take
/// more registers than a kernel's own code needs.
pub(crate) fn print_registers_unavailable(config: Config) -> Option<String> {
    let set = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_ascii_lowercase())
            .filter(|v| !v.is_empty())
    };
    match config {
        Config::Cpu => Some("registers are a GPU's; the cpu configuration has none".into()),
        _ if set("GPUIO_PRINT_REGISTERS").as_deref() == Some("off") => {
            Some("GPUIO_PRINT_REGISTERS=off: no cap to check".into())
        }
        _ if set("GPUIO_MAX_REGISTERS").is_some() => {
            Some("GPUIO_MAX_REGISTERS caps every kernel: the count would prove nothing".into())
        }
        _ if set("GPUIO_BLOCK_THREADS").is_some() => Some(
            "GPUIO_BLOCK_THREADS lets the JIT give a kernel more registers than its own code needs: no count to hold it to"
                .into(),
        ),
        Config::Cuda | Config::Lockstep => None,
    }
}

/// The cap `GPUIO_PRINT_REGISTERS` sets: 32 unset (the example kernels do no file I/O).
fn print_cap() -> u32 {
    std::env::var("GPUIO_PRINT_REGISTERS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(32)
}

/// A print leaves a kernel its occupancy: the example kernels, which print (core's float
/// formatting alone uses 253 registers compiled with them) and do no file I/O, hold no more
/// registers than the larger of their own code's count and gpuio's cap, read from the
/// driver.
pub(crate) fn a_print_leaves_a_kernel_its_registers(config: Config, _: &Scratch) -> Outcome {
    let cap = print_cap();
    let rt = config.builder().build().map_err(|e| format!("runtime: {e}"))?;
    let kernels = rt
        .kernels(gpuio_kernels_gpu::NVPTX)
        .map_err(|e| format!("loading the example kernels: {e}"))?;
    let module = kernels.module().ok_or("no module: not a GPU")?;
    let mut seen = Vec::new();
    // Their own code needs fewer than 32 (ptxas, compiled alone: 28 for `stress`).
    for name in ["hello", "stress", "literal"] {
        let r = module
            .resources(name)
            .map_err(|e| format!("{name}: {e}"))?
            .ok_or_else(|| format!("{name}: the CUDA backend did not tell its resources"))?;
        if r.registers > cap {
            return Err(format!(
                "{name} holds {} registers, more than the cap of {cap} on gpuio's functions ({} bytes of local memory)",
                r.registers, r.local_bytes
            ));
        }
        seen.push(format!(
            "{name}: {} registers, {} bytes local",
            r.registers, r.local_bytes
        ));
    }
    Ok(format!("at most {cap}: {}", seen.join("; ")))
}
