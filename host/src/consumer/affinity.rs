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
//! - How many rings, where nobody says: [`default_rings`].
//! - Otherwise one ring, and any number on the CPU backend (whose kernel threads are the
//!   application's own, on any core), are left unbound, as io_uring leaves them: the
//!   scheduler places them.
//! - Otherwise, for `N` rings on a GPU: the CPUs near the GPU (every CPU where sysfs does
//!   not say) that this process may run on, one per physical core, taken from the end of
//!   that list (an application's own threads tend to start at its front). If that leaves
//!   fewer than `N + 1` cores, the threads stay unbound: binding them to every core the
//!   process may use would leave none free for the application, and binding two to one
//!   core would halve both. The runtimes of one process (one per GPU) take cores no other
//!   live runtime of the process holds ([`Claim`]); processes know nothing of each other:
//!   give each its own with `GPUIO_SQPOLL_CPUS` when several run at once.
//!
//! A CPU chosen here that the kernel refuses (`IORING_SETUP_SQ_AFF`: `EINVAL`) leaves the
//! rings unbound; one named by the builder or `GPUIO_SQPOLL_CPUS` is an error.

use std::path::Path;
use std::sync::Mutex;

use crate::error::{Error, Result};

/// The CPUs chosen here for the SQPOLL threads of this process's live runtimes, one entry
/// per thread.
static CLAIMED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// A runtime's hold on the CPUs chosen for its SQPOLL threads: while it lives, no other
/// runtime of the process is given their cores. Dropping it releases them. CPUs named by
/// the builder or `GPUIO_SQPOLL_CPUS` are not claimed: what is named is used as named.
#[derive(Debug, Default)]
pub(crate) struct Claim(Vec<u32>);

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        for cpu in &self.0 {
            if let Some(i) = claimed.iter().position(|c| c == cpu) {
                claimed.swap_remove(i);
            }
        }
    }
}

/// The CPU for each of `rings` SQPOLL threads (`None`: unbound), whether they were named
/// (by the builder or `GPUIO_SQPOLL_CPUS`) rather than chosen here, and the claim on those
/// chosen here; see the module docs. `rings` is the count asked for (`None`: one per CPU
/// named, else [`default_rings`]'s); `explicit` is the CPUs named (the builder's, else the
/// environment's); `gpu` says whether kernels run on a GPU, and `pci_bus_id` names it
/// where the backend says.
pub(crate) fn choose(
    rings: Option<usize>,
    explicit: Option<&[u32]>,
    gpu: bool,
    pci_bus_id: Option<&str>,
) -> Result<(Vec<Option<u32>>, bool, Claim)> {
    if let Some(cpus) = explicit.map(<[u32]>::to_vec) {
        match rings {
            Some(rings) if cpus.len() != rings => {
                return Err(Error::Config(format!(
                    "sqpoll_cpus names {} CPU(s) ({cpus:?}) for {rings} ring(s): one per ring \
                     (name {rings} CPUs, or leave the ring count unset to get one ring per CPU named)",
                    cpus.len()
                )))
            }
            // One ring per CPU named, within the builder's limit (checked by the caller).
            _ => return Ok((cpus.into_iter().map(Some).collect(), true, Claim::default())),
        }
    }
    if !gpu {
        return Ok((vec![None; rings.unwrap_or(1)], false, Claim::default()));
    }
    let near = near_cpus(pci_bus_id);
    // Counting, choosing and claiming under one lock: two runtimes built at once get
    // distinct cores, and each a count from the cores the other left.
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    let rings = rings.unwrap_or_else(|| default_rings(&near, &claimed, core_of));
    if rings == 1 {
        return Ok((vec![None], false, Claim::default()));
    }
    let cpus = pick_unclaimed(rings, &near, &claimed, core_of);
    let mine: Vec<u32> = cpus.iter().flatten().copied().collect();
    claimed.extend(&mine);
    Ok((cpus, false, Claim(mine)))
}

/// The most rings a runtime on a GPU gets when nobody says how many ([`default_rings`]).
pub(crate) const DEFAULT_MAX_RINGS: usize = 4;

/// How many rings a runtime gets when neither the builder nor `GPUIO_RINGS` says, nor a
/// list of CPUs: on a GPU, one per four physical cores of `near` (the CPUs near it that
/// this process may use) that no other live runtime of the process holds (`claimed`),
/// from 1 to [`DEFAULT_MAX_RINGS`]; on the CPU backend 1 ([`choose`]).
///
/// Why: one ring's SQPOLL thread copies file data at about one host thread's rate, so a
/// single ring makes a GPU's bulk `pread` no faster than a host thread doing it. Four
/// rings on 16 cores leave three quarters of them to the application. What an extra ring
/// costs: its SQPOLL thread spins a core while its ring has work and for
/// `sq_thread_idle_ms` (50 ms) after, then sleeps; prints use ring 0 alone, so a kernel
/// that only prints wakes none of the others. On the CPU backend the kernel's threads are
/// the application's, competing for the same cores as the SQPOLL threads.
fn default_rings(near: &[u32], claimed: &[u32], core: impl Fn(u32) -> String) -> usize {
    rings_for_cores(cores(&unclaimed(near, claimed, &core), core))
}

/// One ring per four cores, 1 to [`DEFAULT_MAX_RINGS`].
fn rings_for_cores(cores: usize) -> usize {
    (cores / 4).clamp(1, DEFAULT_MAX_RINGS)
}

/// The CPUs near the GPU on PCI bus `pci_bus_id` (sysfs' `local_cpulist`) that this process
/// may run on; every CPU it may run on where sysfs does not say.
fn near_cpus(pci_bus_id: Option<&str>) -> Vec<u32> {
    let allowed = allowed_cpus();
    pci_bus_id
        .and_then(|bus| read_cpu_list(&Path::new("/sys/bus/pci/devices").join(bus).join("local_cpulist")))
        .map(|near| allowed.iter().copied().filter(|c| near.contains(c)).collect::<Vec<_>>())
        .filter(|near| !near.is_empty())
        .unwrap_or(allowed)
}

/// The CPUs of `candidates` whose cores hold none of the `claimed` CPUs.
fn unclaimed(candidates: &[u32], claimed: &[u32], core: impl Fn(u32) -> String) -> Vec<u32> {
    let taken: Vec<String> = claimed.iter().map(|&c| core(c)).collect();
    candidates
        .iter()
        .copied()
        .filter(|&c| !taken.contains(&core(c)))
        .collect()
}

/// How many physical cores `cpus` span.
fn cores(cpus: &[u32], core: impl Fn(u32) -> String) -> usize {
    let mut seen: Vec<String> = cpus.iter().map(|&c| core(c)).collect();
    seen.sort();
    seen.dedup();
    seen.len()
}

/// [`pick`] among the cores of `candidates` that hold none of the `claimed` CPUs.
fn pick_unclaimed(rings: usize, candidates: &[u32], claimed: &[u32], core: impl Fn(u32) -> String) -> Vec<Option<u32>> {
    pick(rings, &unclaimed(candidates, claimed, &core), core)
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
    fn a_second_runtime_takes_the_cores_the_first_left() {
        // 16 CPUs, hyperthread pairs (c, c + 8): 8 cores.
        let ht = |c: u32| (c % 8).to_string();
        let all: Vec<u32> = (0..16).collect();
        let first = pick_unclaimed(2, &all, &[], ht);
        assert_eq!(first, [Some(15), Some(14)]);
        // Cores 7 and 6 are held: the second takes 5 and 4 (by CPUs 13 and 12).
        assert_eq!(pick_unclaimed(2, &all, &[15, 14], ht), [Some(13), Some(12)]);
        // A claim on one hyperthread holds the core's sibling too.
        assert_eq!(pick_unclaimed(2, &all, &[7], ht), [Some(14), Some(13)]);
        // Too few cores left (3 free for 3 rings): unbound, never doubled up.
        assert_eq!(pick_unclaimed(3, &all, &[15, 14, 13, 12, 11], ht), [None; 3]);
    }

    #[test]
    fn unnamed_ring_counts_follow_the_free_cores() {
        assert_eq!(
            [0, 3, 4, 7, 8, 15, 16, 64].map(rings_for_cores),
            [1, 1, 1, 1, 2, 3, 4, 4]
        );
        // 16 CPUs in hyperthread pairs are 8 cores: 2 rings; 6 of them claimed leave 1.
        let ht = |c: u32| (c % 8).to_string();
        let all: Vec<u32> = (0..16).collect();
        assert_eq!(cores(&all, ht), 8);
        assert_eq!(cores(&unclaimed(&all, &[15, 14, 13, 12, 11, 10], ht), ht), 2);
        // 16 cores of their own: 4 rings; 6 of them held by another runtime: 2.
        let own = |c: u32| c.to_string();
        let sixteen: Vec<u32> = (0..16).collect();
        assert_eq!(default_rings(&sixteen, &[], own), 4);
        assert_eq!(default_rings(&sixteen, &[15, 14, 13, 12, 11, 10], own), 2);
        // The CPU backend: one unbound ring, whatever the machine.
        let (cpus, named, _) = choose(None, None, false, None).unwrap();
        assert_eq!((cpus, named), (vec![None], false));
    }

    #[test]
    fn a_cpu_list_without_a_ring_count_gives_one_ring_per_cpu() {
        let (cpus, named, _) = choose(None, Some(&[7]), true, None).unwrap();
        assert_eq!((cpus, named), (vec![Some(7)], true));
        let (cpus, _, _) = choose(None, Some(&[2, 3, 4, 5]), true, None).unwrap();
        assert_eq!(cpus, [Some(2), Some(3), Some(4), Some(5)]);
        // With a count that differs, the error says both ways out.
        let e = choose(Some(2), Some(&[7]), true, None).unwrap_err().to_string();
        assert!(
            e.contains("one per ring") && e.contains("leave the ring count unset"),
            "{e}"
        );
    }

    #[test]
    fn explicit_cpus_need_one_per_ring() {
        let (cpus, named, claim) = choose(Some(2), Some(&[3, 1]), false, None).unwrap();
        assert_eq!((cpus, named, claim.0.clone()), (vec![Some(3), Some(1)], true, vec![]));
        assert!(matches!(choose(Some(2), Some(&[3]), true, None), Err(Error::Config(m)) if m.contains("one per ring")));
        // Unnamed: unbound on the CPU backend, whatever the count.
        let (cpus, named, claim) = choose(Some(4), None, false, None).unwrap();
        assert_eq!((cpus, named, claim.0.clone()), (vec![None; 4], false, vec![]));
    }

    #[test]
    fn runtimes_of_one_process_get_distinct_cores_until_one_lets_go() {
        let cores = |cpus: &[Option<u32>]| cpus.iter().flatten().map(|&c| core_of(c)).collect::<Vec<_>>();
        let (a, _, claim_a) = choose(Some(2), None, true, None).unwrap();
        let (b, _, claim_b) = choose(Some(2), None, true, None).unwrap();
        if a.iter().all(Option::is_some) && b.iter().all(Option::is_some) {
            assert!(
                cores(&b).iter().all(|c| !cores(&a).contains(c)),
                "{a:?} and {b:?} share a core"
            );
        }
        // Too few cores for the second (this machine has few): it is left unbound, not
        // put on the first one's cores.
        if a.iter().all(Option::is_some) && b.iter().all(Option::is_none) {
            assert!(claim_b.0.is_empty());
        }
        drop(claim_a);
        drop(claim_b);
        // Released: no longer held (other tests of this binary claim no cores).
        let claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            a.iter().chain(&b).flatten().all(|c| !claimed.contains(c)),
            "{claimed:?}"
        );
    }
}
