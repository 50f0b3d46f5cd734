//! Which CPU each ring's SQPOLL thread runs on (`IORING_SETUP_SQ_AFF`).
//!
//! An SQPOLL thread does the copies between the page cache and the GPU-visible buffers
//! itself, so where it runs matters once several of them work at once: each on its own
//! physical core (hyperthread siblings share one core's execution units and caches), and
//! on the CPUs nearest the GPU (its PCI device's `local_cpulist`: the socket whose memory
//! and root complex the GPU's traffic goes through).
//!
//! The choice, ring `i` on `cpus[i]`:
//! - [`Builder::sqpoll_cpus`](crate::Builder::sqpoll_cpus), else `GPUIO_SQPOLL_CPUS` (a
//!   CPU list as sysfs writes them, `2-5` or `8,10,12,14`): one CPU per ring, as given.
//! - Otherwise one ring, and any number on the CPU backend (whose kernel threads are the
//!   application's own, on any core), are left unbound, as io_uring leaves them: the
//!   scheduler places them.
//! - Otherwise, for `N` rings on a GPU: the CPUs near the GPU (every CPU where sysfs does
//!   not say) that this process may run on, one per physical core, taken from the end of
//!   that list (an application's own threads tend to start at its front). If that leaves
//!   fewer than `N + 1` cores, the threads stay unbound: binding them to every core the
//!   process may use would leave none free for the application, and binding two to one
//!   core would halve both. Every runtime of a process, and every process, picks the same
//!   cores this way: give each its own with `GPUIO_SQPOLL_CPUS` when several run at once.
//!
//! A CPU chosen here that the kernel refuses (`IORING_SETUP_SQ_AFF`: `EINVAL`) leaves the
//! rings unbound; one named by the builder or `GPUIO_SQPOLL_CPUS` is an error.

use std::path::Path;

use crate::error::{Error, Result};

/// The CPU for each of `rings` SQPOLL threads (`None`: unbound), and whether they were
/// named (by the builder or `GPUIO_SQPOLL_CPUS`) rather than chosen here; see the module
/// docs. `explicit` is what the builder was given; `gpu` says whether kernels run on a GPU,
/// and `pci_bus_id` names it where the backend says.
pub(crate) fn choose(
    rings: usize,
    explicit: Option<&[u32]>,
    gpu: bool,
    pci_bus_id: Option<&str>,
) -> Result<(Vec<Option<u32>>, bool)> {
    let explicit = match explicit {
        Some(cpus) => Some(cpus.to_vec()),
        None => match std::env::var("GPUIO_SQPOLL_CPUS") {
            Ok(list) => Some(parse_cpu_list(&list).map_err(|e| Error::Config(format!("GPUIO_SQPOLL_CPUS: {e}")))?),
            Err(std::env::VarError::NotPresent) => None,
            Err(e) => return Err(Error::Config(format!("GPUIO_SQPOLL_CPUS: {e}"))),
        },
    };
    if let Some(cpus) = explicit {
        if cpus.len() != rings {
            return Err(Error::Config(format!(
                "sqpoll_cpus names {} CPU(s) ({cpus:?}) for {rings} ring(s): one per ring",
                cpus.len()
            )));
        }
        return Ok((cpus.into_iter().map(Some).collect(), true));
    }
    if rings == 1 || !gpu {
        return Ok((vec![None; rings], false));
    }
    let allowed = allowed_cpus();
    let near = pci_bus_id
        .and_then(|bus| read_cpu_list(&Path::new("/sys/bus/pci/devices").join(bus).join("local_cpulist")))
        .map(|near| allowed.iter().copied().filter(|c| near.contains(c)).collect::<Vec<_>>())
        .filter(|near| !near.is_empty())
        .unwrap_or(allowed);
    Ok((pick(rings, &near, core_of), false))
}

/// One CPU per core for each of `rings` rings, from the end of `candidates`, or all
/// unbound if fewer than `rings + 1` cores are there (see the module docs). `core` names
/// a CPU's physical core.
fn pick(rings: usize, candidates: &[u32], core: impl Fn(u32) -> String) -> Vec<Option<u32>> {
    let mut cores = Vec::new();
    let mut chosen = Vec::new();
    for &cpu in candidates.iter().rev() {
        let c = core(cpu);
        if !cores.contains(&c) {
            cores.push(c);
            if chosen.len() < rings {
                chosen.push(cpu);
            }
        }
    }
    if cores.len() <= rings {
        return vec![None; rings];
    }
    chosen.into_iter().map(Some).collect()
}

/// The physical core `cpu` belongs to: its hyperthread siblings, as sysfs lists them (the
/// CPU itself where sysfs does not say).
fn core_of(cpu: u32) -> String {
    std::fs::read_to_string(format!(
        "/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    ))
    .map(|s| s.trim().to_string())
    .unwrap_or_else(|_| cpu.to_string())
}

/// The CPUs this process may run on (`sched_getaffinity`); CPU 0 alone if that fails.
fn allowed_cpus() -> Vec<u32> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // its size into it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        set
    };
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads a bit of a valid set, below its size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect()
}

fn read_cpu_list(path: &Path) -> Option<Vec<u32>> {
    parse_cpu_list(&std::fs::read_to_string(path).ok()?).ok()
}

/// Parses a CPU list as sysfs and `taskset -c` write them: `0-3,8,10-11`.
pub(crate) fn parse_cpu_list(list: &str) -> std::result::Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("{list:?}: {s:?} is not a CPU number (expected a list such as 0-3,8)"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (num(lo)?, num(hi)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi || hi >= libc::CPU_SETSIZE as u32 {
            return Err(format!("{list:?}: bad range {part:?}"));
        }
        cpus.extend(lo..=hi);
    }
    if cpus.is_empty() {
        return Err(format!("{list:?} names no CPU"));
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n").unwrap(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("5").unwrap(), [5]);
        for bad in ["", "a", "3-1", "1-", "99999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn picks_one_cpu_per_core_from_the_end_and_leaves_a_core_free() {
        // 8 CPUs, hyperthread pairs (0,4) (1,5) (2,6) (3,7).
        let ht = |c: u32| (c % 4).to_string();
        assert_eq!(pick(2, &(0..8).collect::<Vec<_>>(), ht), [Some(7), Some(6)]);
        assert_eq!(pick(3, &(0..8).collect::<Vec<_>>(), ht), [Some(7), Some(6), Some(5)]);
        // Four cores for four rings: none left for the application, so unbound.
        assert_eq!(pick(4, &(0..8).collect::<Vec<_>>(), ht), [None; 4]);
        // No hyperthreads: each CPU its own core.
        let own = |c: u32| c.to_string();
        assert_eq!(
            pick(4, &(0..16).collect::<Vec<_>>(), own),
            [Some(15), Some(14), Some(13), Some(12)]
        );
        assert_eq!(pick(2, &[0, 1], own), [None, None]);
    }

    #[test]
    fn explicit_cpus_need_one_per_ring() {
        assert_eq!(
            choose(2, Some(&[3, 1]), false, None).unwrap(),
            (vec![Some(3), Some(1)], true)
        );
        assert!(matches!(choose(2, Some(&[3]), true, None), Err(Error::Config(m)) if m.contains("one per ring")));
        // Unnamed: unbound on the CPU backend, whatever the count.
        if std::env::var_os("GPUIO_SQPOLL_CPUS").is_none() {
            assert_eq!(choose(4, None, false, None).unwrap(), (vec![None; 4], false));
        }
    }
}
