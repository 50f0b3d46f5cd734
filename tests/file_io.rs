//! Device file I/O (`gpuio_device::io`, `gpuio_device::fs`) against this machine's kernel,
//! on the CPU backend: the device code runs on host threads, the requests go through the
//! real io_uring (tests `io_uring::*`) or the host-thread fallback (tests `host_thread::*`),
//! and results come back through the device's own completion routing.

#[allow(dead_code)]
mod common;

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::child::{child_mode, run_child};
use common::dirs::{create, TempDir};
use common::{skip, watchdog, Suite};
use gpuio::device::fs::{Error as FsError, File, OpenOptions};
use gpuio::device::io::{self, Errno};
use gpuio::{Backend, Error, Runtime, Sandbox, Submission};

/// A file-I/O runtime, its ring consumed by `sub`, with a small arena, so that transfers split into many pieces.
fn runtime(sub: Suite, arena: usize, block: usize) -> Runtime {
    Runtime::builder()
        .backend(Backend::Cpu)
        .submission(sub.submission)
        .sqpoll(sub.sqpoll)
        .rings(sub.rings)
        .solo(sub.solo)
        .solo_waits_on_tail(sub.solo_on_tail)
        .sandbox(Sandbox::FileIo)
        .arena_bytes(arena)
        .arena_block_bytes(block)
        .build()
        .expect("runtime")
}

over_submissions!(
    per_thread_files_write_fsync_read_back,
    shared_file_distinct_offsets,
    file_larger_than_the_arena,
    end_of_file_is_reported_with_the_count,
    errors_reach_the_caller,
    permission_denied,
    host_buffer_is_read_and_written_directly,
    async_transfers_overlap,
    print_only_sandbox_refuses_file_io_and_reports_it,
    a_lone_threads_requests_take_the_solo_ring,
    small_requests_of_many_threads_share_the_solo_ring_and_the_others,
    std_habits_cursor_write_macros_and_a_buffered_writer,
    directories_renames_removals_and_lengths_as_std_has_them,
    a_files_length_its_end_and_nested_directories,
    a_files_length_takes_the_requests_its_docs_say_and_ends_on_a_growing_file_or_a_pipe,
    create_dir_all_over_symlinks_fifos_and_files_as_std_and_its_request_counts,
);

/// Deterministic pseudo-random bytes, different for each seed: the generator the kernels
/// crate's file kernels use (`gpuio_test_kernels::random_fill`).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    gpuio_test_kernels::random_fill(seed, &mut v);
    v
}

/// Failures the kernel threads saw, for the test thread to assert on.
type Failures = Arc<Mutex<Vec<String>>>;

fn fail(failures: &Failures, msg: String) {
    failures.lock().unwrap().push(msg);
}

fn assert_no_failures(failures: &Failures) {
    let f = failures.lock().unwrap();
    assert!(
        f.is_empty(),
        "{} thread(s) failed, first: {:?}",
        f.len(),
        &f[..f.len().min(4)]
    );
}

fn per_thread_files_write_fsync_read_back(sub: Suite) {
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
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| format!("open: {e}"))?;
            file.write_all_at(&data, 0).map_err(|e| format!("write: {e}"))?;
            file.sync_all().map_err(|e| format!("fsync: {e}"))?;
            let mut back = vec![0u8; data.len()];
            file.read_exact_at(&mut back, 0).map_err(|e| format!("read: {e}"))?;
            if back != data {
                return Err("read back other bytes".into());
            }
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

fn shared_file_distinct_offsets(sub: Suite) {
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

/// One thread alone: each request that one SQE can carry (a staged transfer of up to
/// `SOLO_STAGE` bytes, `open`, `fsync`, `close`) goes through the solo ring when the runtime
/// has one, and a larger transfer through the shared rings, in arena-block pieces; the
/// bytes are right either way, and an error comes back through the solo ring as through the
/// others.
fn a_lone_threads_requests_take_the_solo_ring(sub: Suite) {
    let _w = watchdog("a_lone_threads_requests_take_the_solo_ring", 60);
    let dir = TempDir::new("solo");
    let path = dir.str("solo");
    let rt = runtime(sub, 64 << 10, 4096);
    let stage = gpuio::device::protocol::solo::SOLO_STAGE as usize;
    let failures: Failures = Arc::default();
    let (p, f) = (path.clone(), failures.clone());
    rt.launch(1, 1, move || {
        let run = || -> Result<(), String> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&p)
                .map_err(|e| format!("open: {e}"))?;
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
fn small_requests_of_many_threads_share_the_solo_ring_and_the_others(sub: Suite) {
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

fn file_larger_than_the_arena(sub: Suite) {
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

fn end_of_file_is_reported_with_the_count(sub: Suite) {
    let _w = watchdog("end_of_file_is_reported_with_the_count", 60);
    let dir = TempDir::new("eof");
    let path = dir.str("ten");
    std::fs::write(&path, b"0123456789").unwrap();
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (p, s) = (path.clone(), seen.clone());
    rt.launch(1, 1, move || {
        let file = File::open(&p).unwrap();
        let mut buf = [0u8; 8];
        let mut big = vec![0u8; 20_000]; // several pieces, the first short
        let mut out = s.lock().unwrap();
        out.push(format!("{:?}", file.read_at(&mut buf, 6))); // short read: 4
        out.push(format!("{:?}", &buf[..4]));
        out.push(format!("{:?}", file.read_at(&mut buf, 10))); // at EOF: 0
        out.push(format!("{:?}", file.read_at(&mut buf, 1 << 40))); // far past: 0
        out.push(format!("{:?}", file.read_exact_at(&mut buf, 4))); // 6 then EOF
        out.push(format!("{:?}", file.read_at(&mut big, 0))); // 10 of 20,000
    })
    .unwrap();
    rt.synchronize().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(
        *seen,
        [
            "Ok(4)",
            "[54, 55, 56, 57]",
            "Ok(0)",
            "Ok(0)",
            &format!("{:?}", Err::<(), _>(FsError::UnexpectedEof { done: 6 })),
            "Ok(10)",
        ]
    );
}

fn errors_reach_the_caller(sub: Suite) {
    let _w = watchdog("errors_reach_the_caller", 60);
    let dir = TempDir::new("errors");
    let exists = dir.str("exists");
    std::fs::write(&exists, b"x").unwrap();
    let readonly = std::fs::File::open(&exists).unwrap();
    let ro_fd = readonly.as_raw_fd();
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (d, s) = (dir.str(""), seen.clone());
    let exists2 = exists.clone();
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        let mut buf = [0u8; 4];
        out.push(io::pread(987_654, &mut buf, 0).err()); // invalid fd
        out.push(io::pwrite(-1, b"x", 0).err());
        out.push(io::pwrite(ro_fd, b"x", 0).err()); // not open for writing
        out.push(io::close(987_654).err());
        out.push(io::fsync(987_654).err());
        out.push(File::open(&format!("{d}/missing")).err().map(Errno::from)); // missing path
        out.push(File::open(&format!("{d}/no/such/dir/f")).err().map(Errno::from));
        out.push(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&exists2)
                .err()
                .map(Errno::from),
        ); // exists
        out.push(File::create(&d).err().map(Errno::from)); // a directory
        out.push(File::open("a\0b").err().map(Errno::from)); // NUL in the path
        out.push(File::open(&"x".repeat(5000)).err().map(Errno::from)); // too long
        out.push(OpenOptions::new().open(&exists2).err().map(Errno::from)); // neither read nor write
        out.push(io::pwrite(ro_fd, b"x", u64::MAX - 1).err()); // offset overflows

        // Ends one past i64::MAX without overflowing u64: refused before the kernel sees
        // the fd; ending at i64::MAX is passed on (and the kernel refuses the fd).
        let last = i64::MAX as u64;
        out.push(io::pwrite(ro_fd, b"xy", last - 1).err());
        out.push(io::pread(ro_fd, &mut buf, last - 3).err());
        out.push(io::pwrite(ro_fd, b"x", last - 1).err());
    })
    .unwrap();
    rt.synchronize().unwrap();
    let e = |n| Some(Errno(n));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            e(libc::EBADF),
            e(libc::EBADF),
            e(libc::EBADF),
            e(libc::EBADF),
            e(libc::EBADF),
            e(libc::ENOENT),
            e(libc::ENOENT),
            e(libc::EEXIST),
            e(libc::EISDIR),
            e(libc::EINVAL),
            e(libc::ENAMETOOLONG),
            e(libc::EINVAL),
            e(libc::EINVAL),
            e(libc::EINVAL),
            e(libc::EINVAL),
            e(libc::EBADF),
        ]
    );
    drop(readonly);
}

/// Permission denied needs a user the file's mode excludes: as root (CI), a child process
/// of this test binary drops to `nobody` before it creates its runtime (the SQPOLL thread
/// takes the ring creator's credentials).
fn permission_denied(sub: Suite) {
    let _w = watchdog("permission_denied", 60);
    let dir = TempDir::new("perm");
    let secret = dir.str("secret");
    std::fs::write(&secret, b"secret").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // SAFETY: geteuid only reads.
    if unsafe { libc::geteuid() } != 0 {
        // Not root: the mode already excludes us... unless we own the file, which we do.
        // Make it 000 instead (owners without CAP_DAC_OVERRIDE are refused).
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
        assert_eq!(open_in_kernel(sub, &secret), Some(Errno(libc::EACCES)));
        return;
    }
    // The directory must be searchable by nobody.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run_child(
        "permission_child",
        &secret,
        &[("GPUIO_URING", Some(sub.submission.name()))],
        Duration::from_secs(60),
    );
    let text = out.stdout + &out.stderr;
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(
        text.contains("child saw Some(EACCES: Permission denied (os error 13))"),
        "child output:\n{text}"
    );
}

/// Opens `path` read-only from a one-thread kernel; returns the error, if any.
fn open_in_kernel(sub: Suite, path: &str) -> Option<Errno> {
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(None));
    let (p, s) = (path.to_string(), seen.clone());
    rt.launch(1, 1, move || *s.lock().unwrap() = File::open(&p).err().map(Errno::from))
        .unwrap();
    rt.synchronize().unwrap();
    let e = *seen.lock().unwrap();
    e
}

#[test]
#[ignore = "runs as a child process of permission_denied"]
fn permission_child() {
    let Some(path) = child_mode() else {
        return;
    };
    // The parent's path, given as GPUIO_URING.
    let submission = Submission::from_env().unwrap().expect("GPUIO_URING");
    let sub = Suite {
        submission,
        ..Suite::HOST_THREAD
    };
    // SAFETY: plain syscalls that change this process's credentials.
    unsafe {
        assert_eq!(libc::setgid(65534), 0, "setgid");
        assert_eq!(libc::setuid(65534), 0, "setuid");
    }
    println!("child saw {:?}", open_in_kernel(sub, &path));
}

fn host_buffer_is_read_and_written_directly(sub: Suite) {
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

fn async_transfers_overlap(sub: Suite) {
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

fn print_only_sandbox_refuses_file_io_and_reports_it(sub: Suite) {
    let _w = watchdog("print_only_sandbox_refuses_file_io_and_reports_it", 60);
    let dir = TempDir::new("refused");
    let path = dir.str("must-not-exist");
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(sub.submission)
        .sqpoll(sub.sqpoll)
        .rings(sub.rings)
        .solo(sub.solo)
        .build()
        .unwrap();
    if rt.stats().sandbox != Sandbox::PrintOnly {
        skip(
            "print_only_sandbox_refuses_file_io_and_reports_it",
            &format!("this kernel cannot restrict rings (sandbox {:?})", rt.stats().sandbox),
        );
        return;
    }
    let seen = Arc::new(Mutex::new(None));
    let (p, s) = (path.clone(), seen.clone());
    rt.launch(1, 1, move || {
        *s.lock().unwrap() = Some(File::create(&p).err().map(Errno::from))
    })
    .unwrap();
    match rt.synchronize() {
        Err(Error::Refused(r)) => {
            assert_eq!(r.errno, libc::EACCES);
            assert_eq!(r.requests, 1);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(*seen.lock().unwrap(), Some(Some(Errno(libc::EACCES))));
    assert!(!Path::new(&path).exists(), "the refused open was executed");
    rt.synchronize().expect("reported once");
}

#[test]
fn outside_a_kernel_calls_fail_cleanly() {
    let mut buf = [0u8; 4];
    assert_eq!(io::pread(0, &mut buf, 0), Err(Errno::ENOSYS));
    assert_eq!(File::open("/etc/hostname").err().map(Errno::from), Some(Errno::ENOSYS));
}

#[test]
fn bad_arena_configuration_is_refused() {
    for (arena, block) in [
        (1 << 20, 1000),
        (1 << 20, 2048),
        (4096, 8192),
        (3 << 20, 4096),
        (1 << 40, 4096),
    ] {
        let r = Runtime::builder()
            .backend(Backend::Cpu)
            .arena_bytes(arena)
            .arena_block_bytes(block)
            .build();
        assert!(matches!(r, Err(Error::Config(_))), "{arena}/{block} accepted");
    }
}

/// A block's requests go to ring `block_idx % rings`, each ring with its own SQPOLL thread;
/// prints go through ring 0 whatever the block. Three blocks over three rings: blocks 0
/// and 1 do file I/O, on rings 0 and 1; block 2 only prints, so ring 2 carries nothing;
/// every byte written reads back and every line comes out.
#[test]
fn requests_go_to_their_blocks_ring_and_prints_to_ring_0() {
    let _w = watchdog("requests_go_to_their_blocks_ring_and_prints_to_ring_0", 120);
    let dir = Arc::new(TempDir::new("rings"));
    let (out, out_path) = common::temp_file("rings-out.txt");
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::IoUring)
        .rings(3)
        .sandbox(Sandbox::FileIo)
        .arena_bytes(64 << 10)
        .arena_block_bytes(4096)
        .stdout_fd(out.as_raw_fd())
        .build()
        .expect("runtime");
    assert_eq!(rt.stats().rings, 3);
    assert_eq!(rt.sqpoll_cpus().len(), 3);
    let failures: Failures = Arc::default();
    let (d, f) = (dir.clone(), failures.clone());
    rt.launch(3, 8, move || {
        let t = gpuio::device::global_thread_idx();
        if gpuio::device::block_idx() == 2 {
            gpuio::device::println!("block 2 thread {t}");
            return;
        }
        let data = random_bytes(t, 5_000 + t as usize * 977);
        let path = d.str(&format!("r{t}"));
        let run = || -> Result<(), String> {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| format!("open: {e}"))?;
            file.write_all_at(&data, 0).map_err(|e| format!("write: {e}"))?;
            let mut back = vec![0u8; data.len()];
            file.read_exact_at(&mut back, 0).map_err(|e| format!("read: {e}"))?;
            if back != data {
                return Err("read back other bytes".into());
            }
            file.close().map_err(|e| format!("close: {e}"))
        };
        if let Err(e) = run() {
            fail(&f, format!("thread {t}: {e}"));
        }
        gpuio::device::println!("block {} thread {t}", gpuio::device::block_idx());
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_no_failures(&failures);
    // sq_tail: SQEs each ring's SQPOLL thread was given.
    let tails: Vec<u32> = (0..3).map(|i| rt.ring_words_of(i)[1]).collect();
    // Blocks 0 and 1, 8 threads each: at least open, write, read, close (more where a
    // transfer split into arena blocks). Every print's write on ring 0.
    assert!(
        tails[0] >= 32 && tails[1] >= 32 && tails[2] == 0,
        "SQEs per ring: {tails:?}"
    );
    assert_eq!(rt.stats().sqes, tails.iter().sum::<u32>());
    drop(rt);
    let mut lines: Vec<String> = std::fs::read_to_string(&out_path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    let want: Vec<String> = {
        let mut w: Vec<String> = (0..24).map(|t| format!("block {} thread {t}", t / 8)).collect();
        w.sort();
        w
    };
    assert_eq!(lines, want);
}

#[test]
fn bad_ring_counts_and_cpus_are_refused() {
    for n in [0, 9] {
        let r = Runtime::builder().backend(Backend::Cpu).rings(n).build();
        assert!(
            matches!(&r, Err(Error::Config(m)) if m.contains("rings must be 1 to 8")),
            "{n} rings: {:?}",
            r.err()
        );
    }
    let r = Runtime::builder()
        .backend(Backend::Cpu)
        .rings(2)
        .sqpoll_cpus(&[0])
        .build();
    assert!(
        matches!(&r, Err(Error::Config(m)) if m.contains("one per ring")),
        "{:?}",
        r.err()
    );
    // Without a ring count, one ring per CPU named: at most 8.
    let r = Runtime::builder()
        .backend(Backend::Cpu)
        .sqpoll_cpus(&(0..9).collect::<Vec<u32>>())
        .build();
    assert!(
        matches!(&r, Err(Error::Config(m)) if m.contains("names 9 CPUs") && m.contains("1 to 8")),
        "{:?}",
        r.err()
    );
    // Only the CQ's size given: the SQ takes the default or the CQ's size, whichever is less.
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .cq_entries(64)
        .build()
        .expect("a CQ of 64 and no SQ size");
    assert_eq!(rt.stats().sq_entries, 64);
    drop(rt);
    // CPUs for SQPOLL threads with SQPOLL off: refused, saying so. (Named alone, they turn
    // SQPOLL on, which the CPU backend's rings otherwise go without.)
    let r = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::IoUring)
        .sqpoll(false)
        .sqpoll_cpus(&[0])
        .build();
    assert!(
        matches!(&r, Err(Error::Config(m)) if m.contains("sqpoll is off")),
        "{:?}",
        r.err()
    );
    let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
    assert!(
        !rt.stats().sqpoll,
        "the CPU backend's default (inline, or io_uring unasked): no SQPOLL"
    );
    drop(rt);
    // A CPU the kernel does not have: refused, naming it.
    let r = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::IoUring)
        .rings(1)
        .sqpoll_cpus(&[1000])
        .build();
    assert!(
        matches!(&r, Err(Error::Config(m)) if m.contains("CPU 1000")),
        "{:?}",
        r.err()
    );
    // A CPU this process may run on.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    let cpu: u32 = allowed.trim().split([',', '-']).next().unwrap().parse().unwrap();
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::IoUring)
        .rings(1)
        .sqpoll_cpus(&[cpu])
        .build()
        .unwrap();
    assert_eq!(rt.sqpoll_cpus(), [Some(cpu)]);
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

/// std's habits on a device `File`: a cursor (`write_all`, `read`, `read_exact`, `seek`,
/// `stream_position`), `write!`/`writeln!` (one request per 256 formatted bytes), a
/// `BufWriter` that gathers a loop of `writeln!` into a few writes, and errors as std shows
/// them.
fn std_habits_cursor_write_macros_and_a_buffered_writer(sub: Suite) {
    let _w = watchdog("std_habits_cursor_write_macros_and_a_buffered_writer", 60);
    // Both `Write` traits in scope, as a kernel that writes generic code has them: `write!`
    // takes each type's own `write_fmt` (the traits unused, which is the point: were one
    // trait's `write_fmt` chosen, with both in scope `write!` here would not compile).
    #[allow(unused_imports)]
    use core::fmt::Write as _;
    use gpuio::device::fs::{BufWriter, SeekFrom};
    #[allow(unused_imports)]
    use gpuio::device::io::Write as _;
    let dir = TempDir::new("habits");
    let (a, b) = (dir.str("a.txt"), dir.str("b.txt"));
    // dbg! writes to the runtime's stderr: a file here.
    let err_path = dir.str("stderr.txt");
    let err = create(Path::new(&err_path));
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(sub.submission)
        .sqpoll(sub.sqpoll)
        .rings(sub.rings)
        .sandbox(Sandbox::FileIo)
        .stderr_fd(err.as_raw_fd())
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (pa, pb, s) = (a.clone(), b.clone(), seen.clone());
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&pa)
            .unwrap();
        writeln!(f, "x = {}, y = {:?}", 42, "two").unwrap();
        f.write_all(b"raw\n").unwrap();
        // A text longer than the formatting chunk: several requests, one text.
        writeln!(f, "{}", "z".repeat(600)).unwrap();
        out.push(format!("pos {}", f.stream_position()));
        out.push(format!("seek {:?}", f.seek(SeekFrom::Start(4))));
        let mut two = [0u8; 2];
        f.read_exact(&mut two).unwrap();
        out.push(format!(
            "read {:?} pos {}",
            std::str::from_utf8(&two).unwrap(),
            f.stream_position()
        ));
        out.push(format!("back {:?}", f.seek(SeekFrom::Current(-6))));
        let mut all = [0u8; 13];
        out.push(format!("read {:?}", f.read(&mut all)));
        out.push(format!("end {:?}", f.seek(SeekFrom::End(0))));
        out.push(format!("before 0 {:?}", f.seek(SeekFrom::Current(-1_000))));
        let mut g = File::create(&pb).unwrap();
        let mut w = BufWriter::<4096>::new(&mut g);
        for i in 0..100 {
            writeln!(w, "{i} {}", i * i).unwrap();
        }
        // Code generic over the io traits takes the buffered writer too.
        out.push(format!("generic {:?}", end_through_io_write(&mut w)));
        out.push(format!("flush {:?}", w.flush()));
        drop(w);
        // Through the trait, a buffered writer's `write` returns the error its write out
        // met (a read-only file: EBADF).
        let mut r = File::open(&pa).unwrap();
        let mut w = BufWriter::<16>::new(&mut r);
        let refused = gpuio::device::io::Write::write(&mut w, &[b'x'; 20]);
        out.push(format!("read-only {:?}", refused.map_err(|e| e.errno())));
        drop(w);
        let missing = File::open("/nonexistent/gpuio-habits").unwrap_err();
        out.push(format!("missing: {missing}"));
        let long = "d/".repeat(150);
        out.push(format!("long: {:?}", File::open(&long).unwrap_err()));
        out.push(format!("dbg {}", gpuio::device::dbg!(6 * 7)));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let seen = seen.lock().unwrap().clone();
    let text = std::fs::read_to_string(&a).unwrap();
    assert_eq!(text, format!("x = 42, y = \"two\"\nraw\n{}\n", "z".repeat(600)));
    assert_eq!(
        seen,
        [
            format!("pos {}", text.len()),
            "seek Ok(4)".to_string(),
            "read \"42\" pos 6".to_string(),
            "back Ok(0)".to_string(),
            "read Ok(13)".to_string(),
            format!("end Ok({})", text.len()),
            format!("before 0 Err({:?})", Errno::EINVAL),
            "generic Ok(())".to_string(),
            "flush Ok(())".to_string(),
            format!("read-only Err({:?})", Some(Errno::EBADF)),
            "missing: No such file or directory (os error 2): \"/nonexistent/gpuio-habits\"".to_string(),
            format!(
                "long: No such file or directory (os error 2): {:?}...",
                "d/".repeat(100)
            ),
            "dbg 42".to_string(),
        ]
    );
    let squares: String = (0..100).map(|i| format!("{i} {}\n", i * i)).collect();
    assert_eq!(std::fs::read_to_string(&b).unwrap(), squares + "end of 100\n");
    drop(rt);
    let said = std::fs::read_to_string(&err_path).unwrap();
    assert!(
        said.starts_with("[tests/file_io.rs:") && said.ends_with("] 6 * 7 = 42\n"),
        "dbg! as std's: {said:?}"
    );
}

/// Ends a table through `io::Write` alone: `write_all`, `write` of what is left, `flush`.
fn end_through_io_write<W: gpuio::device::io::Write>(w: &mut W) -> Result<(), W::Error> {
    w.write_all(b"end of ")?;
    let mut rest: &[u8] = b"100\n";
    while !rest.is_empty() {
        let n = w.write(rest)?;
        rest = &rest[n..];
    }
    w.flush()
}

/// `fs::create_dir`, `rename`, `remove_file`, `remove_dir` and `File::set_len` from a kernel,
/// on both submission paths: each does what std's does to the host's file system, and each
/// failure names its errno and path. `set_len` goes through io_uring's `FTRUNCATE`, which
/// Linux has from 6.9 (this machine's kernel is newer; the fallback calls `ftruncate`).
fn directories_renames_removals_and_lengths_as_std_has_them(sub: Suite) {
    let _w = watchdog("directories_renames_removals_and_lengths_as_std_has_them", 60);
    use gpuio::device::fs;
    let dir = TempDir::new("dirs");
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (d, s) = (dir.path().to_str().unwrap().to_string(), seen.clone());
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        let p = |name: &str| format!("{d}/{name}");
        out.push(format!("mkdir {:?}", fs::create_dir(&p("sub"))));
        out.push(format!(
            "mkdir again {:?}",
            fs::create_dir(&p("sub")).map_err(|e| e.errno)
        ));
        let mut f = fs::File::create(&p("sub/a.tmp")).unwrap();
        f.write_all(b"0123456789").unwrap();
        out.push(format!("shorten {:?}", f.set_len(4)));
        out.push(format!("extend {:?}", f.set_len(6)));
        drop(f);
        out.push(format!("rename {:?}", fs::rename(&p("sub/a.tmp"), &p("sub/a"))));
        out.push(format!(
            "rename to empty {:?}",
            fs::rename(&p("sub/a"), "").map_err(|e| e.errno)
        ));
        out.push(format!(
            "rmdir full {:?}",
            fs::remove_dir(&p("sub")).map_err(|e| e.errno)
        ));
        out.push(format!(
            "rm dir as file {:?}",
            fs::remove_file(&p("sub")).map_err(|e| e.errno)
        ));
        out.push(format!("rm missing: {}", fs::remove_file(&p("sub/none")).unwrap_err()));
        out.push(format!(
            "rename missing {:?}",
            fs::rename(&p("none"), &p("x")).map_err(|e| e.errno)
        ));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let at = |name: &str| dir.join(name);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "mkdir Ok(())".to_string(),
            format!("mkdir again Err({:?})", Errno::EEXIST),
            "shorten Ok(())".to_string(),
            "extend Ok(())".to_string(),
            "rename Ok(())".to_string(),
            format!("rename to empty Err({:?})", Errno::ENOENT),
            format!("rmdir full Err({:?})", Errno(libc::ENOTEMPTY)),
            format!("rm dir as file Err({:?})", Errno(libc::EISDIR)),
            format!(
                "rm missing: No such file or directory (os error 2): {:?}",
                dir.str("sub/none")
            ),
            format!("rename missing Err({:?})", Errno::ENOENT),
        ]
    );
    assert!(!at("sub/a.tmp").exists());
    assert_eq!(std::fs::read(at("sub/a")).unwrap(), b"0123\0\0");
    // Then removed, from a kernel, leaving nothing.
    let (d, s) = (dir.path().to_str().unwrap().to_string(), seen.clone());
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        out.clear();
        out.push(format!("{:?}", fs::remove_file(&format!("{d}/sub/a"))));
        out.push(format!("{:?}", fs::remove_dir(&format!("{d}/sub"))));
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), ["Ok(())", "Ok(())"]);
    assert!(!at("sub").exists());
}

/// `File::len` (found by reads, no `STATX`), `SeekFrom::End`, and `fs::create_dir_all`, as
/// std's: lengths around the 64-byte read the search makes, a write-only file refused with
/// `EBADF`; directories nested, made again, under a file, and by 16 threads at once.
fn a_files_length_its_end_and_nested_directories(sub: Suite) {
    let _w = watchdog("a_files_length_its_end_and_nested_directories", 60);
    use gpuio::device::fs::{self, SeekFrom};
    let dir = TempDir::new("lengths");
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (d, s) = (dir.path().to_str().unwrap().to_string(), seen.clone());
    let lengths = [0usize, 1, 10, 63, 64, 65, 128, 192, 256, 512, 1000, 4097, (1 << 20) + 3];
    rt.launch(1, 1, move || {
        let mut out = s.lock().unwrap();
        let p = |name: &str| format!("{d}/{name}");
        for len in lengths {
            std::fs::write(p(&format!("len{len}")), vec![7u8; len]).unwrap();
            let f = File::open(&p(&format!("len{len}"))).unwrap();
            out.push(format!("{len}: {:?} {:?}", f.len(), f.is_empty()));
        }
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&p("end"))
            .unwrap();
        f.write_all(b"0123456789").unwrap();
        out.push(format!("end {:?}", f.seek(SeekFrom::End(0))));
        out.push(format!("end-3 {:?}", f.seek(SeekFrom::End(-3))));
        let mut three = [0u8; 3];
        f.read_exact(&mut three).unwrap();
        out.push(format!("read {:?}", std::str::from_utf8(&three).unwrap()));
        out.push(format!("end+5 {:?}", f.seek(SeekFrom::End(5))));
        f.write_all(b"!").unwrap();
        out.push(format!("grown {:?}", f.len()));
        out.push(format!("end-17 {:?}", f.seek(SeekFrom::End(-17))));
        let w = File::create(&p("write-only")).unwrap();
        out.push(format!("write-only {:?}", w.len()));
        out.push(format!("nested {:?}", fs::create_dir_all(&p("a/b//c/"))));
        out.push(format!("again {:?}", fs::create_dir_all(&p("a/b/c"))));
        out.push(format!("a parent {:?}", fs::create_dir_all(&p("a"))));
        out.push(format!(
            "a file {:?}",
            fs::create_dir_all(&p("end")).map_err(|e| e.errno)
        ));
        out.push(format!(
            "under a file {:?}",
            fs::create_dir_all(&p("end/x")).map_err(|e| e.errno)
        ));
        out.push(format!("empty {:?}", fs::create_dir_all("")));
    })
    .unwrap();
    rt.synchronize().unwrap();
    let mut want: Vec<String> = lengths
        .iter()
        .map(|l| format!("{l}: Ok({l}) Ok({})", *l == 0))
        .collect();
    want.extend([
        "end Ok(10)".to_string(),
        "end-3 Ok(7)".to_string(),
        "read \"789\"".to_string(),
        "end+5 Ok(15)".to_string(),
        "grown Ok(16)".to_string(),
        format!("end-17 Err({:?})", Errno::EINVAL),
        format!("write-only Err({:?})", Errno::EBADF),
        "nested Ok(())".to_string(),
        "again Ok(())".to_string(),
        "a parent Ok(())".to_string(),
        format!("a file Err({:?})", Errno::EEXIST),
        format!("under a file Err({:?})", Errno(libc::ENOTDIR)),
        "empty Ok(())".to_string(),
    ]);
    assert_eq!(*seen.lock().unwrap(), want);
    assert!(dir.join("a/b/c").is_dir());
    let mut grown = std::fs::read(dir.join("end")).unwrap();
    assert_eq!(grown.split_off(10), b"\0\0\0\0\0!");
    // Sixteen threads make the same directories at once: each finds the others' or makes its own.
    let (d, s) = (dir.path().to_str().unwrap().to_string(), seen.clone());
    s.lock().unwrap().clear();
    rt.launch(4, 4, move || {
        let r = fs::create_dir_all(&format!("{d}/race/x/y/z")).map_err(|e| e.to_string());
        s.lock().unwrap().push(format!("{r:?}"));
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec!["Ok(())"; 16]);
    assert!(dir.join("race/x/y/z").is_dir());
}

/// `File::len`'s cost and ends, as its docs state them: 1 request under 64 bytes, at most
/// 2 log2(len / 64) + 4 for a longer file (1 GiB: 48 here) (counted by the runtime's `Stats`, less what an open
/// and a close take); on a file another thread appends to, it ends, each answer between the
/// lengths before and after it and none smaller than the one before; on a pipe (which it
/// is not for), the same on every path: it takes the bytes waiting there.
fn a_files_length_takes_the_requests_its_docs_say_and_ends_on_a_growing_file_or_a_pipe(sub: Suite) {
    let _w = watchdog(
        "a_files_length_takes_the_requests_its_docs_say_and_ends_on_a_growing_file_or_a_pipe",
        60,
    );
    let dir = TempDir::new("len-cost");
    let rt = runtime(sub, 16 << 10, 4096);
    let requests = |rt: &Runtime| {
        let s = rt.stats();
        s.sqes as u64 + s.solo_requests
    };
    // What a kernel that opens a file and lets it close takes, without `len`.
    let path = dir.str("base");
    std::fs::write(&path, b"x").unwrap();
    let before = requests(&rt);
    let p = path.clone();
    rt.launch(1, 1, move || drop(File::open(&p).unwrap())).unwrap();
    rt.synchronize().unwrap();
    let open_close = requests(&rt) - before;
    for len in [0u64, 1, 63, 64, 65, 200, 4096, 1 << 20, 1 << 30] {
        let path = dir.str(&format!("len{len}"));
        // A sparse file: its holes read as zeros, as its bytes would.
        std::fs::File::create(&path).unwrap().set_len(len).unwrap();
        let seen = Arc::new(Mutex::new(None));
        let before = requests(&rt);
        let s = seen.clone();
        rt.launch(1, 1, move || {
            *s.lock().unwrap() = Some(File::open(&path).unwrap().len())
        })
        .unwrap();
        rt.synchronize().unwrap();
        let took = requests(&rt) - before - open_close;
        assert_eq!(*seen.lock().unwrap(), Some(Ok(len)));
        let bound = if len < 64 { 1 } else { 2 * (len / 64).ilog2() as u64 + 4 };
        assert!(
            took <= bound && (len >= 64 || took == 1),
            "len() of a {len}-byte file took {took} requests, its docs allow {bound}"
        );
    }
    // A file another thread appends to while a kernel asks its length 30 times.
    let grow = dir.str("growing");
    std::fs::write(&grow, vec![b'g'; 100]).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let (grow, stop) = (grow.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(&grow).unwrap();
            // At most 4 MiB, a write every 20 us: growing while the kernel asks, without
            // taking a core from it or filling the disk.
            for _ in 0..(4 << 20) / 37 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                f.write_all(&[b'g'; 37]).unwrap();
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        })
    };
    let answers = Arc::new(Mutex::new(Vec::new()));
    let (g, a) = (grow.clone(), answers.clone());
    let first = std::fs::metadata(&grow).unwrap().len();
    rt.launch(1, 1, move || {
        let f = File::open(&g).unwrap();
        for _ in 0..30 {
            let len = f.len();
            a.lock().unwrap().push(len);
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    appender.join().unwrap();
    let last = std::fs::metadata(&grow).unwrap().len();
    let answers: Vec<u64> = answers.lock().unwrap().iter().map(|r| r.unwrap()).collect();
    assert_eq!(answers.len(), 30);
    assert!(
        answers.windows(2).all(|w| w[0] <= w[1]) && answers[0] >= first && answers[29] <= last,
        "lengths of a growing file ({first} before, {last} after): {answers:?}"
    );
    // A pipe, which `len` is not for, as its docs say: on every path a read at an offset
    // reads on, so it takes the bytes waiting there and returns their count.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[1] is the pipe's write end, open, and `b"queued"` 6 readable bytes.
    assert_eq!(unsafe { libc::write(fds[1], b"queued".as_ptr().cast(), 6) }, 6);
    let seen = Arc::new(Mutex::new(None));
    let (s, read_end) = (seen.clone(), fds[0]);
    rt.launch(1, 1, move || {
        // SAFETY: the test keeps the pipe's read end open until after the synchronize, and
        // `into_raw_fd` hands it back unclosed.
        let f = unsafe { File::from_raw_fd(read_end) };
        *s.lock().unwrap() = Some(f.len());
        let _ = f.into_raw_fd();
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Ok(6)));
    let mut back = [0u8; 16];
    // SAFETY: both ends are open; `back` has room for 16 bytes; nothing uses the ends after
    // their close. With the write end closed, the read ends at once: 0 where `len` took all.
    let n = unsafe {
        libc::close(fds[1]);
        let n = libc::read(fds[0], back.as_mut_ptr().cast(), back.len());
        libc::close(fds[0]);
        n
    };
    assert_eq!(n, 0, "the pipe still held {:?}", &back[..n.max(0) as usize]);
}

/// `fs::create_dir_all` where the path meets symlinks (to a directory, to a file, dangling),
/// a FIFO or a file: the same `Ok` or errno as std's on a twin tree. And the requests its
/// docs state: one for a directory whose parent exists, two more per missing parent, one
/// more where the path exists.
fn create_dir_all_over_symlinks_fifos_and_files_as_std_and_its_request_counts(sub: Suite) {
    let _w = watchdog(
        "create_dir_all_over_symlinks_fifos_and_files_as_std_and_its_request_counts",
        60,
    );
    use std::os::unix::fs::symlink;
    let dir = TempDir::new("dir-all");
    let make = |root: &Path| {
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::fs::write(root.join("file"), b"f").unwrap();
        symlink(root.join("real"), root.join("to-dir")).unwrap();
        symlink(root.join("file"), root.join("to-file")).unwrap();
        symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        let fifo = std::ffi::CString::new(root.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: `fifo` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    };
    let (std_root, dev_root) = (dir.path().join("std"), dir.path().join("dev"));
    make(&std_root);
    make(&dev_root);
    let paths = [
        "to-dir",
        "to-dir/x/y",
        "to-dir/inner",
        "to-file",
        "to-file/x",
        "dangling",
        "dangling/x",
        "fifo",
        "fifo/x/y",
        "file",
        "real/../real/z",
    ];
    let by_std: Vec<String> = paths
        .iter()
        .map(|p| match std::fs::create_dir_all(std_root.join(p)) {
            Ok(()) => "Ok".to_string(),
            Err(e) => format!("errno {}", e.raw_os_error().unwrap()),
        })
        .collect();
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (root, s) = (dev_root.to_str().unwrap().to_string(), seen.clone());
    rt.launch(1, 1, move || {
        for p in paths {
            let r = match gpuio::device::fs::create_dir_all(&format!("{root}/{p}")) {
                Ok(()) => "Ok".to_string(),
                Err(e) => format!("errno {}", e.errno.0),
            };
            s.lock().unwrap().push(r);
        }
    })
    .unwrap();
    rt.synchronize().unwrap();
    let by_gpuio = seen.lock().unwrap().clone();
    for ((p, a), b) in paths.iter().zip(&by_std).zip(&by_gpuio) {
        assert_eq!(a, b, "create_dir_all({p:?}): std {a}, gpuio {b}");
    }
    for p in ["to-dir/x/y", "real/z"] {
        assert!(dev_root.join(p).is_dir(), "{p} is no directory");
    }
    // Requests, less nothing: a kernel that makes no request takes none.
    let requests = |rt: &Runtime| {
        let s = rt.stats();
        s.sqes as u64 + s.solo_requests
    };
    for (path, want) in [("new", 1), ("new", 2), ("a/b/c", 5), ("to-dir/x/y/z/w", 3)] {
        let before = requests(&rt);
        let p = format!("{}/{path}", dev_root.to_str().unwrap());
        rt.launch(1, 1, move || gpuio::device::fs::create_dir_all(&p).unwrap())
            .unwrap();
        rt.synchronize().unwrap();
        assert_eq!(requests(&rt) - before, want, "create_dir_all({path:?})'s requests");
    }
}
