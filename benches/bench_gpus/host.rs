//! The host alone: its copy out of the page cache with the SQPOLL threads' count of
//! threads, and how that copy scales as threads are added, bound or not, beside a plain copy
//! between two host buffers.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use crate::common::{self, median, write_table};

/// The host alone doing what the SQPOLL threads do in the pread case: `threads` threads per
/// file `pread` 1 MiB chunks of `files` (chunk `j` by thread `j % threads`) into a host
/// buffer of the file's size each, all files at once; seconds. With `pins`, the `k`-th
/// thread started runs on CPU `pins[k % pins.len()]` only.
pub(crate) fn host_reads(files: &[&File], threads: usize, size: usize, dst: &mut [Vec<u8>], pins: &[usize]) -> f64 {
    const CHUNK: usize = 1 << 20;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let mut k = 0;
        for (file, buf) in files.iter().zip(dst.iter_mut()) {
            // Each thread's chunks, as disjoint slices of the buffer.
            let mut mine: Vec<Vec<(usize, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
            for (j, c) in buf[..size].chunks_mut(CHUNK).enumerate() {
                mine[j % threads].push((j * CHUNK, c));
            }
            for chunks in mine {
                let pin = (!pins.is_empty()).then(|| pins[k % pins.len()]);
                k += 1;
                s.spawn(move || {
                    if let Some(cpu) = pin {
                        pin_to(cpu);
                    }
                    for (at, c) in chunks {
                        file.read_exact_at(c, at as u64).expect("host pread");
                    }
                });
            }
        }
    });
    t0.elapsed().as_secs_f64()
}

/// Binds the calling thread to `cpu` (a failure is reported and ignored: the thread runs
/// where the scheduler puts it).
fn pin_to(cpu: usize) {
    // SAFETY: sched_setaffinity reads the set we own, zeroed and then given one CPU below
    // CPU_SETSIZE (the caller's CPUs come from sched_getaffinity).
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        eprintln!(
            "bench_gpus: binding a thread to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// `threads` threads copy `src` into `dst` in 1 MiB chunks (chunk `j` by thread
/// `j % threads`), as [`host_reads`] does from a file but in user space (the kernel copies
/// out of the page cache with its own routine, so this is a reference, not the same
/// copy); seconds.
fn host_copies(src: &[u8], dst: &mut [u8], threads: usize) -> f64 {
    const CHUNK: usize = 1 << 20;
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let mut mine: Vec<Vec<(&[u8], &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
        for (j, (a, b)) in src.chunks(CHUNK).zip(dst.chunks_mut(CHUNK)).enumerate() {
            mine[j % threads].push((a, b));
        }
        for chunks in mine {
            s.spawn(move || {
                for (a, b) in chunks {
                    b.copy_from_slice(a);
                }
            });
        }
    });
    t0.elapsed().as_secs_f64()
}

/// How the host's copy out of the page cache scales as threads are added, 1, 2, 4, ... up
/// to 32 or the CPUs this process may use: GB/s of [`host_reads`] of one page-cached file
/// into host memory, unbound, bound to that many CPUs from the end of the list one after
/// the other (where the runtimes put their SQPOLL threads), and bound to every other CPU
/// from the end (while there are enough); beside a plain copy of as many bytes between two
/// host buffers ([`host_copies`]). Medians of `reps`, the ways taking turns. A thread that
/// slows as others are added, in every column, points at what they share (memory, caches,
/// or the physical cores under a VM's vCPUs); one that slows only on adjacent CPUs, at
/// vCPUs that share a core. Prints the table and the CPU topology sysfs shows.
/// `dst[0]` is overwritten; `dst[1]` (the other GPU's bytes) is the copies' source.
pub(crate) fn host_scaling(file: &File, size: usize, reps: usize, dst: &mut [Vec<u8>]) {
    // CPU 0 alone where the set cannot be read: one row, unbound and bound alike.
    let cpus = common::allowed_cpus().unwrap_or_else(|_| vec![0]);
    let (first, rest) = dst.split_at_mut(1);
    let (copy_dst, src) = (&mut first[0], &rest[0]);
    let mut rows = Vec::new();
    let (mut base_copy, mut base_read) = (0.0, 0.0);
    let mut threads = 1;
    while threads <= cpus.len().min(32) {
        let adjacent: Vec<usize> = cpus.iter().rev().take(threads).copied().collect();
        let spread: Vec<usize> = cpus.iter().rev().step_by(2).take(threads).copied().collect();
        let spread = (spread.len() == threads).then_some(spread);
        let (mut c, mut r, mut ra, mut rs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            c.push(size as f64 / host_copies(&src[..size], &mut copy_dst[..size], threads) / 1e9);
            let mut read = |pins: &[usize]| {
                size as f64 / host_reads(&[file], threads, size, std::slice::from_mut(copy_dst), pins) / 1e9
            };
            r.push(read(&[]));
            ra.push(read(&adjacent));
            if let Some(spread) = &spread {
                rs.push(read(spread));
            }
        }
        let (c, r, ra) = (median(c), median(r), median(ra));
        if threads == 1 {
            (base_copy, base_read) = (c, r);
        }
        let list = |v: &[usize]| match v {
            [one] => one.to_string(),
            _ => format!("{}..{}", v[0], v[v.len() - 1]),
        };
        rows.push(vec![
            threads.to_string(),
            format!("{r:.2}"),
            format!("{:.2}x", r / base_read),
            format!("{ra:.2} ({})", list(&adjacent)),
            match &spread {
                Some(sp) => format!("{:.2} ({}, every other)", median(rs), list(sp)),
                None => "-".to_string(),
            },
            format!("{c:.2}"),
            format!("{:.2}x", c / base_copy),
        ]);
        threads *= 2;
    }
    println!();
    println!(
        "## the host's copy as threads are added: {} MiB in 1 MiB chunks, GB/s, medians of {reps}",
        size >> 20
    );
    write_table(
        &mut std::io::stdout(),
        &[
            "threads",
            "pread of a page-cached file",
            "vs 1",
            "bound to CPUs side by side",
            "bound to every other CPU",
            "memory to memory",
            "vs 1",
        ],
        rows,
        1,
    );
    println!("CPU topology (sysfs): {}", common::topology());
}
