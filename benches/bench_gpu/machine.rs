//! The machine and settings header.

use std::process::{Command, Stdio};

use crate::common::{self, statfs};
use crate::fail;
use crate::options::{Config, Target};

pub(crate) fn machine_info(cfg: &Config, gpu: &str) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = common::cpu_model();
    println!("date (UTC):     {}", common::utc_date());
    println!("kernel:         {}", common::uname_release());
    println!("cpu:            {model} ({cpus} CPUs)");
    println!("gpu:            {gpu}");
    let smi = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,memory.total,persistence_mode,pci.bus_id",
            "--format=csv,noheader",
        ])
        .stderr(Stdio::null())
        .output();
    match smi {
        Ok(o) if o.status.success() => {
            for l in String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| !l.trim().is_empty())
            {
                println!("nvidia-smi:     {} (name, driver, memory, persistence, bus)", l.trim());
            }
        }
        _ => println!("nvidia-smi:     not available (driver version not shown)"),
    }
    if cfg.targets.contains(&Target::Shm) {
        let fs = match statfs(&cfg.dir) {
            Ok((tmpfs, free)) => format!(
                "{}, {:.1} GiB free",
                if tmpfs { "tmpfs" } else { "NOT tmpfs" },
                free as f64 / (1u64 << 30) as f64
            ),
            Err(e) => fail(&format!("statfs {}: {e}", cfg.dir.display())),
        };
        println!("dir:            {} ({fs})", cfg.dir.display());
    }
    println!(
        "gpuio runtime:  CUDA backend, Builder defaults{}",
        if cfg.log_mib > 0 {
            format!(" except log_bytes {} MiB", cfg.log_mib)
        } else {
            " (logs: stdout 32 MiB, stderr 8 MiB)".into()
        }
    );
    println!(
        "work:           {} lines per case, blocks of {} threads; gpuio: median of {} reps after a warm-up; \
         printf: 1 run after a warm-up; timeout {} s per child",
        cfg.total,
        cfg.block,
        cfg.reps,
        cfg.timeout.as_secs()
    );
    println!();
}
