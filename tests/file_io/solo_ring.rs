//! The solo ring: a lone thread's requests that one SQE carries take it, on every path
//! that has one; many threads' small round trips share it with the other rings.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use gpuio::device::fs::OpenOptions;
use gpuio::device::io::{self, Errno};

use crate::common::dirs::{create, TempDir};
use crate::common::{watchdog, Suite};
use crate::{assert_no_failures, create_rw, fail, random_bytes, runtime, Failures};

/// One thread alone: each request that one SQE can carry (a staged transfer of up to
/// `SOLO_STAGE` bytes, `open`, `fsync`, `close`) goes through the solo ring when the runtime
/// has one, and a larger transfer through the shared rings, in arena-block pieces; the
/// bytes are right either way, and an error comes back through the solo ring as through the
/// others.
pub(crate) fn a_lone_threads_requests_take_the_solo_ring(sub: Suite) {
    let _w = watchdog("a_lone_threads_requests_take_the_solo_ring", 60);
    let dir = TempDir::new("solo");
    let path = dir.str("solo");
    let rt = runtime(sub, 64 << 10, 4096);
    let stage = gpuio::device::protocol::solo::SOLO_STAGE as usize;
    let failures: Failures = Arc::default();
    let (p, f) = (path.clone(), failures.clone());
    rt.launch(1, 1, move || {
        let run = || -> Result<(), String> {
            let file = create_rw(&p)?;
            let small = random_bytes(1, 64);
            let page = random_bytes(2, stage);
            let more = random_bytes(3, stage + 1);
            for (data, at) in [(&small, 0), (&page, 64), (&more, 64 + stage as u64)] {
                let n = file
                    .write_at(data, at)
                    .map_err(|e| format!("write {}: {e}", data.len()))?;
                if n != data.len() {
                    return Err(format!("wrote {n} of {}", data.len()));
                }
            }
            file.sync_all().map_err(|e| format!("fsync: {e}"))?;
            let mut back = [0u8; 64];
            match file.read_at(&mut back, 0) {
                Ok(64) if back[..] == small[..] => {}
                other => return Err(format!("read back {other:?}, equal {}", back[..] == small[..])),
            }
            // Past the end: a short count, then 0.
            let end = 64 + 2 * stage as u64 + 1;
            let mut tail = [0u8; 8];
            match (file.read_at(&mut tail, end - 3), file.read_at(&mut tail, end)) {
                (Ok(3), Ok(0)) if tail[..3] == more[stage - 2..] => {}
                other => return Err(format!("reads at the end: {other:?}")),
            }
            // An error through the solo ring: a bad fd.
            match io::pwrite(-1, &small, 0) {
                Err(Errno::EBADF) => {}
                other => return Err(format!("pwrite to fd -1: {other:?}")),
            }
            file.close().map_err(|e| format!("close: {e}"))?;
            // A path shorter than what the buffer last held (a page of the writes above):
            // it must end at its own NUL.
            let short = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&format!("{p}2"))
                .map_err(|e| format!("open a second file: {e}"))?;
            short.close().map_err(|e| format!("close the second file: {e}"))
        };
        if let Err(e) = run() {
            fail(&f, e);
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_no_failures(&failures);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.len() == 2 && names.contains(&"solo2".to_string()),
        "the files made: {names:?}"
    );
    let mut want = random_bytes(1, 64);
    want.extend(random_bytes(2, stage));
    want.extend(random_bytes(3, stage + 1));
    assert!(std::fs::read(&path).unwrap() == want, "the file holds other bytes");
    // open, two writes, fsync, three reads, the bad write, close, and the second file's
    // open and close: 11 requests of one SQE; the write of one byte more than the solo
    // ring's buffer goes in two blocks' pieces.
    let stats = rt.stats();
    assert_eq!(stats.solo, sub.solo);
    assert_eq!(
        stats.solo_waits_on_results,
        stats.solo && cfg!(target_arch = "x86_64") && !sub.solo_on_tail
    );
    if stats.solo {
        assert_eq!((stats.solo_requests, stats.sqes), (11, 2), "{stats:?}");
    } else {
        assert_eq!((stats.solo_requests, stats.sqes), (0, 13), "{stats:?}");
    }
}

/// The lone thread's requests on the host-thread fallback's solo ring (the suite's
/// `host_thread::*` cases run without one).
#[test]
fn the_host_thread_fallback_serves_the_solo_ring() {
    a_lone_threads_requests_take_the_solo_ring(Suite::HOST_THREAD.with_solo(true));
}

/// The lone thread's requests on a solo ring whose holder waits on the CQ tail, as it does
/// on hosts other than x86-64 (the suite's cases wait on each CQE's result there).
#[test]
fn the_solo_ring_waiting_on_the_cq_tail_serves_a_lone_thread() {
    a_lone_threads_requests_take_the_solo_ring(Suite::IO_URING.with_solo_on_tail());
}

/// Many threads' small round trips, the solo ring's holder waiting on the CQ tail.
#[test]
fn the_solo_ring_waiting_on_the_cq_tail_serves_many_threads() {
    small_requests_of_many_threads_share_the_solo_ring_and_the_others(Suite::IO_URING.with_solo_on_tail());
}

/// 128 threads make small round trips at once (a write of 100 bytes, a read of them back,
/// 20 times each): whoever finds the solo ring free takes it, the others go through the
/// shared rings, and every thread reads its own bytes back. (Which thread took it is up to
/// the scheduler; with 128 threads both ways are taken in practice.)
pub(crate) fn small_requests_of_many_threads_share_the_solo_ring_and_the_others(sub: Suite) {
    let _w = watchdog("small_requests_of_many_threads_share_the_solo_ring_and_the_others", 120);
    let dir = TempDir::new("solo-many");
    let path = dir.str("many");
    let file = create(&path);
    let fd = file.as_raw_fd();
    const PER: usize = 100;
    const ROUNDS: u64 = 20;
    let rt = runtime(sub, 64 << 10, 4096);
    let failures: Failures = Arc::default();
    let f = failures.clone();
    rt.launch(4, 32, move || {
        let t = gpuio::device::global_thread_idx();
        for r in 0..ROUNDS {
            let data = random_bytes(t * ROUNDS + r, PER);
            let off = (t * ROUNDS + r) * PER as u64;
            match io::pwrite(fd, &data, off) {
                Ok(PER) => {}
                other => return fail(&f, format!("thread {t}: pwrite {other:?}")),
            }
            let mut back = [0u8; PER];
            match io::pread(fd, &mut back, off) {
                Ok(PER) if back[..] == data[..] => {}
                other => {
                    return fail(
                        &f,
                        format!("thread {t}: pread {other:?}, equal {}", back[..] == data[..]),
                    )
                }
            }
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_no_failures(&failures);
    let on_disk = std::fs::read(&path).unwrap();
    for i in 0..128 * ROUNDS {
        let at = i as usize * PER;
        assert!(on_disk[at..at + PER] == random_bytes(i, PER)[..], "write {i} differs");
    }
    let stats = rt.stats();
    assert_eq!(stats.solo_requests + stats.sqes as u64, 2 * 128 * ROUNDS, "{stats:?}");
    if !stats.solo {
        assert_eq!(stats.solo_requests, 0);
    }
}
