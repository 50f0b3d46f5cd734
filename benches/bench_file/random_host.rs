//! The host's side of the random-read workload: a fio-like loop on host io_uring, one
//! thread and one SQPOLL ring per ring of the runtime, each read timed from its submission to
//! its completion and its first 8 bytes checked.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Barrier;
use std::time::Instant;

use gpuio_device::protocol::uapi::{Sqe, IORING_OP_READ};
use gpuio_test_kernels as k;

use crate::setup::pattern;
use crate::uring::{self, SQ_IDLE_MS};

/// What one run of a random-read loop measured.
#[derive(Default)]
pub(crate) struct RandomRun {
    /// Wall time, seconds.
    pub(crate) secs: f64,
    /// The round trips of the reads that succeeded, ns.
    pub(crate) lat_ns: Vec<u64>,
    /// Reads that failed or came back short.
    pub(crate) failed: u64,
    /// Reads whose bytes were not the file's.
    pub(crate) wrong: u64,
}

/// The host's random-read loop, fio-like: `rings` threads, one SQPOLL ring each, together
/// keeping `depth` 4 KiB reads of `file` (`pages` pages) in flight, `total` reads in all.
pub(crate) fn host_random(file: &File, pages: u64, rings: u32, depth: u32, total: u64) -> std::io::Result<RandomRun> {
    let n = rings as u64;
    let start = Barrier::new(rings as usize + 1);
    let fd = file.as_raw_fd();
    let (secs, runs) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..n)
            .map(|r| {
                let depth = (depth as u64 / n + u64::from(r < depth as u64 % n)) as usize;
                let reads = total / n + u64::from(r < total % n);
                let start = &start;
                s.spawn(move || ring_loop(fd, pages, depth, reads, u64::MAX - r, start))
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let runs: Vec<_> = threads.into_iter().map(|t| t.join().expect("ring thread")).collect();
        (t0.elapsed().as_secs_f64(), runs)
    });
    let mut all = RandomRun {
        secs,
        ..RandomRun::default()
    };
    for r in runs {
        let r = r?;
        all.lat_ns.extend(r.lat_ns);
        all.failed += r.failed;
        all.wrong += r.wrong;
    }
    Ok(all)
}

/// One host ring thread of [`host_random`]: keeps `depth` 4 KiB reads of `fd` in flight at
/// random pages (stream `stream` of [`k::random_page`]) until `reads` are done. Sets up
/// its ring and buffers, then waits at `start` with the others.
fn ring_loop(
    fd: i32,
    pages: u64,
    depth: usize,
    reads: u64,
    stream: u64,
    start: &Barrier,
) -> std::io::Result<RandomRun> {
    let page = k::RANDOM_READ as usize;
    let ring = uring::Ring::new((2 * depth).next_power_of_two() as u32, SQ_IDLE_MS);
    let mut l = Loop {
        fd,
        pages,
        stream,
        // One 4 KiB buffer per slot, touched now so that no read faults a page in.
        bufs: vec![1u8; depth * page],
        sent: vec![(Instant::now(), 0u64); depth],
        run: RandomRun {
            lat_ns: Vec::with_capacity(reads as usize),
            ..RandomRun::default()
        },
        done_slots: Vec::with_capacity(depth),
    };
    start.wait();
    let mut ring = ring?;
    if let Err(e) = l.drive(&mut ring, depth, reads) {
        // Reads may still be in flight into `bufs` after the ring's fd is closed (the
        // kernel tears a ring down asynchronously): leave the buffers to them.
        std::mem::forget(l.bufs);
        return Err(e);
    }
    Ok(l.run)
}

/// One ring thread's state in [`ring_loop`].
struct Loop {
    fd: i32,
    pages: u64,
    stream: u64,
    /// One 4 KiB buffer per slot.
    bufs: Vec<u8>,
    /// When each slot's read was issued, and its offset.
    sent: Vec<(Instant, u64)>,
    run: RandomRun,
    /// The slots whose reads the last reap completed.
    done_slots: Vec<usize>,
}

impl Loop {
    /// Pushes read `i` of this ring into `slot`.
    fn issue(&mut self, ring: &mut uring::Ring, i: u64, slot: usize) -> std::io::Result<()> {
        let page = k::RANDOM_READ as usize;
        let off = k::random_page(self.stream, i, self.pages) * page as u64;
        let sqe = Sqe {
            opcode: IORING_OP_READ,
            fd: self.fd,
            off,
            addr: self.bufs[slot * page..].as_mut_ptr() as u64,
            len: page as u32,
            user_data: slot as u64,
            ..Sqe::default()
        };
        self.sent[slot] = (Instant::now(), off);
        // SQPOLL moves the SQ head only after a whole batch, and a page-cached read of
        // that batch completes (and is reaped, and its slot reissued here) before: so up to
        // `depth` consumed SQEs plus the `depth` in flight may be behind the head, which
        // the SQ's `2 * depth` entries hold. Should they not, publish what is pushed and
        // wait for the head.
        while !ring.push(&sqe) {
            ring.submit()?;
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Issues the first `depth` reads, then reaps and reissues until `reads` are done.
    fn drive(&mut self, ring: &mut uring::Ring, depth: usize, reads: u64) -> std::io::Result<()> {
        let page = k::RANDOM_READ as usize;
        let first = depth.min(reads as usize);
        for slot in 0..first {
            self.issue(ring, slot as u64, slot)?;
        }
        ring.submit()?;
        let (mut done, mut issued) = (0u64, first as u64);
        let mut want = [0u8; 8];
        while done < reads {
            let (sent, bufs, run, done_slots) = (&self.sent, &self.bufs, &mut self.run, &mut self.done_slots);
            let n = ring.reap(|cqe| {
                let slot = cqe.user_data as usize;
                let (t0, off) = sent[slot];
                if cqe.res == page as i32 {
                    run.lat_ns.push(t0.elapsed().as_nanos() as u64);
                    pattern(off as usize, &mut want);
                    if bufs[slot * page..slot * page + 8] != want {
                        run.wrong += 1;
                    }
                } else {
                    run.failed += 1;
                }
                done_slots.push(slot);
            });
            if n == 0 {
                ring.wait()?;
                continue;
            }
            done += n as u64;
            // Taken out for the loop, and put back with its capacity.
            let mut slots = std::mem::take(&mut self.done_slots);
            for slot in slots.drain(..) {
                if issued < reads {
                    self.issue(ring, issued, slot)?;
                    issued += 1;
                }
            }
            self.done_slots = slots;
            ring.submit()?;
        }
        Ok(())
    }
}
