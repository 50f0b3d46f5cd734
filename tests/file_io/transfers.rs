//! Bytes through the arena and back: a file per thread, one file at distinct offsets, a file
//! larger than the arena, host buffers read and written directly, async requests that
//! overlap; and `group_copy`, the staging copy the lanes of a warp share.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use gpuio::device::fs::File;
use gpuio::device::io;

use crate::common::dirs::{create, TempDir};
use crate::common::{self, watchdog, Suite};
use crate::{assert_no_failures, create_rw, fail, random_bytes, reads_back, runtime, Failures};

pub(crate) fn per_thread_files_write_fsync_read_back(sub: Suite) {
    let _w = watchdog("per_thread_files_write_fsync_read_back", 120);
    let dir = Arc::new(TempDir::new("per-thread"));
    // 64 KiB of arena in 4 KiB blocks, 64 threads of 10-50 KB each: pieces, waits for
    // blocks, completions for other threads.
    let rt = runtime(sub, 64 << 10, 4096);
    let failures: Failures = Arc::default();
    let (d, f) = (dir.clone(), failures.clone());
    rt.launch(8, 8, move || {
        let t = gpuio::device::global_thread_idx();
        let data = random_bytes(t, 10_000 + (t as usize * 641) % 40_000);
        let path = d.str(&format!("t{t}"));
        let run = || -> Result<(), String> {
            let file = create_rw(&path)?;
            file.write_all_at(&data, 0).map_err(|e| format!("write: {e}"))?;
            file.sync_all().map_err(|e| format!("fsync: {e}"))?;
            reads_back(&file, &data)?;
            file.close().map_err(|e| format!("close: {e}"))
        };
        if let Err(e) = run() {
            fail(&f, format!("thread {t}: {e}"));
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_no_failures(&failures);
    // And the host sees the same bytes.
    for t in 0..64u64 {
        let on_disk = std::fs::read(dir.str(&format!("t{t}"))).unwrap();
        assert!(
            on_disk == random_bytes(t, 10_000 + (t as usize * 641) % 40_000),
            "file t{t} differs"
        );
    }
}

pub(crate) fn shared_file_distinct_offsets(sub: Suite) {
    let _w = watchdog("shared_file_distinct_offsets", 120);
    let dir = TempDir::new("shared");
    let path = dir.str("shared");
    let file = create(&path);
    let fd = file.as_raw_fd();
    const PER: usize = 12_345; // not block-aligned: pieces straddle blocks
    let rt = runtime(sub, 128 << 10, 4096);
    let failures: Failures = Arc::default();
    let f = failures.clone();
    rt.launch(4, 32, move || {
        let t = gpuio::device::global_thread_idx();
        let data = random_bytes(1000 + t, PER);
        let off = t * PER as u64;
        match io::pwrite(fd, &data, off) {
            Ok(n) if n == PER => {}
            other => return fail(&f, format!("thread {t}: pwrite {other:?}")),
        }
        if let Err(e) = io::fsync(fd) {
            return fail(&f, format!("thread {t}: fsync {e}"));
        }
        // Read back a neighbour's range (written before or after ours: only our own is
        // sure to be there, so read our own, then check the whole file on the host).
        let mut back = vec![0u8; PER];
        match io::pread(fd, &mut back, off) {
            Ok(n) if n == PER && back == data => {}
            other => fail(&f, format!("thread {t}: pread {other:?}, equal {}", back == data)),
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_no_failures(&failures);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 128 * PER);
    for t in 0..128u64 {
        let at = t as usize * PER;
        assert!(
            on_disk[at..at + PER] == random_bytes(1000 + t, PER)[..],
            "range of thread {t} differs"
        );
    }
}

pub(crate) fn file_larger_than_the_arena(sub: Suite) {
    let _w = watchdog("file_larger_than_the_arena", 120);
    let dir = TempDir::new("large");
    let path = dir.str("large");
    // 16 KiB of arena; 3 MiB + 5 bytes through it, one thread, both ways.
    let rt = runtime(sub, 16 << 10, 4096);
    let failures: Failures = Arc::default();
    let (p, f) = (path.clone(), failures.clone());
    rt.launch(1, 1, move || {
        let data = random_bytes(7, (3 << 20) + 5);
        let file = File::create(&p).unwrap();
        match file.write_at(&data, 0) {
            Ok(n) if n == data.len() => {}
            other => return fail(&f, format!("write_at: {other:?}")),
        }
        drop(file);
        let file = File::open(&p).unwrap();
        let mut back = vec![0u8; data.len() + 100];
        match file.read_at(&mut back, 0) {
            Ok(n) if n == data.len() && back[..n] == data[..] => {}
            other => fail(&f, format!("read_at: {other:?}")),
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_no_failures(&failures);
    assert!(std::fs::read(&path).unwrap() == random_bytes(7, (3 << 20) + 5));
}

pub(crate) fn host_buffer_is_read_and_written_directly(sub: Suite) {
    let _w = watchdog("host_buffer_is_read_and_written_directly", 60);
    let dir = TempDir::new("direct");
    let path = dir.str("direct");
    let data = random_bytes(99, 200_000);
    std::fs::write(&path, &data).unwrap();
    // A 4 KiB arena of one block: a staged 200 KB read would need 49 pieces; the direct
    // one needs one. The test checks the bytes, and that the arena was never used (its
    // one block is then still free: a read of a missing fd stages nothing either way).
    let rt = runtime(sub, 4096, 4096);
    let mut buf = rt.host_buffer(data.len()).unwrap();
    let (at, len) = (buf.device_ptr(), buf.len());
    let file = std::fs::File::open(&path).unwrap();
    let fd = file.as_raw_fd();
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    rt.launch(1, 1, move || {
        // SAFETY: the host buffer outlives the kernel (synchronize before it is dropped).
        let bytes = unsafe { std::slice::from_raw_parts_mut(at as *mut u8, len) };
        *s.lock().unwrap() = Some(io::pread(fd, bytes, 0));
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Ok(data.len())));
    assert!(buf.as_slice() == &data[..], "host buffer holds other bytes");
    let stats = rt.stats();
    assert_eq!(
        (stats.direct_bytes, stats.staged_bytes),
        (data.len() as u64, 0),
        "not a direct read"
    );
    // And a write from it.
    buf.as_mut_slice()[..5].copy_from_slice(b"HELLO");
    let out = create(dir.str("out"));
    let ofd = out.as_raw_fd();
    rt.launch(1, 1, move || {
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
        io::pwrite(ofd, &bytes[..5], 0).unwrap();
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(std::fs::read(dir.str("out")).unwrap(), b"HELLO");
    assert_eq!(rt.stats().staged_bytes, 0, "the write was staged");
    // The same read into memory that is not a host buffer is staged.
    let s2 = seen.clone();
    rt.launch(1, 1, move || {
        let mut v = vec![0u8; 10_000];
        *s2.lock().unwrap() = Some(io::pread(fd, &mut v, 0));
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(rt.stats().staged_bytes, 10_000);
}

pub(crate) fn async_transfers_overlap(sub: Suite) {
    let _w = watchdog("async_transfers_overlap", 60);
    let dir = TempDir::new("async");
    let path = dir.str("async");
    let file = create(&path);
    let fd = file.as_raw_fd();
    let rt = runtime(sub, 64 << 10, 4096);
    let failures: Failures = Arc::default();
    let f = failures.clone();
    rt.launch(2, 4, move || {
        let t = gpuio::device::global_thread_idx();
        let a = random_bytes(t, 5000);
        let b = random_bytes(t + 100, 7000);
        // SAFETY: each Pending is waited for below, never leaked.
        let (pa, pb) = unsafe {
            (
                io::pwrite_async(fd, &a, t * 12_000),
                io::pwrite_async(fd, &b, t * 12_000 + 5000),
            )
        };
        let (ra, rb) = (pb.wait(), pa.wait()); // out of order
        if ra != Ok(7000) || rb != Ok(5000) {
            return fail(&f, format!("thread {t}: writes {ra:?} {rb:?}"));
        }
        let mut back = vec![0u8; 12_000];
        // SAFETY: waited for at once.
        let r = unsafe { io::pread_async(fd, &mut back, t * 12_000) }.wait();
        if r != Ok(12_000) || back[..5000] != a[..] || back[5000..] != b[..] {
            fail(&f, format!("thread {t}: read back {r:?}"));
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_no_failures(&failures);
}

/// `copy::group_copy`, the staging copy that the lanes of a warp share, over a simulated warp
/// (the CPU backend's own warp has one lane, so this is its only test off a GPU): every
/// lane's bytes land whole, for lengths on both sides of a 16-byte unit and of a batch (a
/// lane's last, partial batch included), ranges aligned or not, and lanes with nothing to
/// copy; the bytes around each destination stay as they were.
#[test]
fn group_copy_moves_every_lanes_bytes_and_no_other() {
    use common::warp::{Lane, SimWarp};
    let _wd = watchdog("group_copy_moves_every_lanes_bytes_and_no_other", 120);
    // What lane `lane` copies in case `case`: (length, source offset, destination offset).
    let shape = |case: usize, lane: usize| -> (usize, usize, usize) {
        const LENS: [usize; 12] = [0, 1, 15, 16, 17, 100, 512, 4096, 4103, 16 * 33, 20_000, 70_001];
        let len = match case % 3 {
            0 => LENS[(case / 3) % LENS.len()], // every lane the same
            1 => LENS[(case + lane) % LENS.len()],
            _ => LENS[(case * 7 + lane * 5) % LENS.len()],
        };
        let unaligned = (case / 5 + lane) % 4 == 3;
        (
            len,
            if unaligned { 1 + lane % 15 } else { 0 },
            if unaligned { 3 } else { 0 },
        )
    };
    // Past each destination, room for a whole stray batch of the widest warp here (19
    // lanes x 32 units of 16 bytes), so that a store past the end lands in the guard and
    // is reported rather than in another allocation.
    const GUARD: usize = 19 * 32 * 16;
    let bad = Mutex::new(Vec::new());
    for lanes in [2usize, 3, 8, 9, 19] {
        let warp = SimWarp::new(lanes);
        std::thread::scope(|s| {
            for lane in 0..lanes {
                let (warp, bad) = (&warp, &bad);
                s.spawn(move || {
                    let g = Lane { warp, lane };
                    for case in 0..48 {
                        let (len, so, d_o) = shape(case, lane);
                        // 16-byte aligned buffers (u128), so that the offsets decide alignment.
                        let mut src = vec![0u128; (so + len).div_ceil(16) + 1];
                        let mut dst = vec![0u128; (GUARD + d_o + len + GUARD).div_ceil(16) + 1];
                        // SAFETY: u128 buffers viewed as their bytes.
                        let (src, dst) = unsafe {
                            (
                                std::slice::from_raw_parts_mut(src.as_mut_ptr() as *mut u8, src.len() * 16),
                                std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut u8, dst.len() * 16),
                            )
                        };
                        for (i, b) in src.iter_mut().enumerate() {
                            *b = (i * 31 + lane * 7 + case) as u8;
                        }
                        dst.fill(0xEE);
                        // SAFETY: `len` bytes at `so` of src and at `GUARD + d_o` of dst, both in
                        // bounds, this lane's own buffers; every lane of the warp makes the call.
                        unsafe {
                            gpuio::device::protocol::copy::group_copy(
                                &g,
                                dst.as_mut_ptr().add(GUARD + d_o),
                                src.as_ptr().add(so),
                                len,
                            )
                        };
                        // A lane that panicked would leave its siblings in the warp's
                        // barrier: note what is wrong and go on; the test fails below.
                        let at = GUARD + d_o;
                        if dst[at..at + len] != src[so..so + len] {
                            bad.lock().unwrap().push(format!(
                                "{lanes} lanes, case {case}, lane {lane}: {len} bytes from offset {so} to {d_o} differ"
                            ));
                        }
                        if !dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0xEE) {
                            bad.lock().unwrap().push(format!(
                                "{lanes} lanes, case {case}, lane {lane}: a byte outside the destination was written"
                            ));
                        }
                    }
                });
            }
        });
    }
    let bad = bad.into_inner().unwrap();
    assert!(bad.is_empty(), "{} wrong copies, the first: {}", bad.len(), bad[0]);
}
