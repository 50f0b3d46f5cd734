//! The sandbox against this machine's kernel (CPU backend), over io_uring, the host-thread
//! fallback and inline alike (`over_submissions!`): requests a policy forbids are refused
//! with `EACCES`, never executed, and reported by `synchronize`; device writes cannot read
//! outside the print logs (`WRITE_FIXED` from registered logs, `EFAULT` elsewhere); the
//! requests it allows run. Each refusal test has a control that runs the same SQE where it
//! is allowed, so an `EACCES` cannot come from a malformed SQE.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuio::device::println;
use gpuio::device::protocol::arena::buffer;
use gpuio::device::protocol::context::Context;
use gpuio::device::protocol::ring::Ring;
use gpuio::device::protocol::uapi::*;
use gpuio::{Error, Runtime, Sandbox};

#[allow(dead_code)]
mod common;
use common::dirs::{create, TempDir};
use common::{skip, Suite};

use common::suite_builder as builder;

over_submissions!(
    print_only_refuses_openat_and_unlinkat_reports_them_and_runs_neither,
    print_only_refuses_writes_that_do_not_come_from_the_logs_to_a_registered_file,
    file_io_allows_file_requests_and_transfers_of_its_own_memory_and_refuses_the_rest,
    off_runs_what_the_policies_refuse,
    a_closed_stdout_is_reported_at_synchronize_with_or_without_fixed_files,
    fixed_files_keep_the_file_the_fd_named_at_build,
    file_io_with_a_root_opens_only_beneath_it,
    no_device_request_opens_into_or_closes_the_print_files_slots,
    a_file_root_confines_what_it_says_and_the_docs_say_the_rest,
);

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Runs `f` while a kernel runs, so that the runtime's waker keeps SQPOLL awake (or, on
/// rings without it, submits) for the requests `f` submits by hand.
fn while_a_kernel_runs<R>(rt: &Runtime, f: impl FnOnce(&Context) -> R) -> R {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    rt.launch(1, 1, move || {
        while !d.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
    .unwrap();
    let r = f(rt.context().expect("CPU backend"));
    done.store(true, Ordering::Release);
    r
}

/// Submits `sqe` to ring 0 and returns its CQE's result (the caller's `user_data`; nothing
/// else is in flight).
fn run(ctx: &Context, sqe: Sqe) -> i32 {
    run_on(&ctx.rings[0], sqe)
}

/// [`run`] on `ring`.
fn run_on(ring: &Ring, sqe: Sqe) -> i32 {
    ring.submit(&sqe, &mut || {});
    let until = Instant::now() + Duration::from_secs(20);
    let mut res = None;
    while res.is_none() {
        assert!(Instant::now() < until, "no completion for {sqe:?}");
        ring.reap(|cqes| {
            for cqe in cqes {
                assert_eq!(cqe.user_data, sqe.user_data, "a completion of another request");
                res = Some(cqe.res);
            }
            false // nothing published: the head store keeps its own release
        });
        std::thread::yield_now();
    }
    res.unwrap()
}

fn openat_create(path: &CString, user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_OPENAT,
        fd: libc::AT_FDCWD,
        addr: path.as_ptr() as u64,
        len: 0o644,
        rw_flags: (libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC) as u32,
        user_data,
        ..Sqe::default()
    }
}

fn read_only(path: &CString, user_data: u64) -> Sqe {
    Sqe {
        rw_flags: (libc::O_RDONLY | libc::O_CLOEXEC) as u32,
        ..openat_create(path, user_data)
    }
}

/// `STATX` of `path` into `buf` (256 bytes): a write to an address the SQE names, which no
/// sandbox allows.
fn statx(path: &CString, buf: &mut [u8; 256], user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_STATX,
        fd: libc::AT_FDCWD,
        addr: path.as_ptr() as u64,
        len: 0x7ff, // STATX_BASIC_STATS
        off: buf.as_mut_ptr() as u64,
        user_data,
        ..Sqe::default()
    }
}

fn unlinkat(path: &CString, user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_UNLINKAT,
        fd: libc::AT_FDCWD,
        addr: path.as_ptr() as u64,
        user_data,
        ..Sqe::default()
    }
}

fn write(fd: i32, flags: u8, bytes: &[u8], user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_WRITE,
        flags,
        fd,
        off: 0,
        addr: bytes.as_ptr() as u64,
        len: bytes.len() as u32,
        user_data,
        ..Sqe::default()
    }
}

fn print_only_refuses_openat_and_unlinkat_reports_them_and_runs_neither(sub: Suite) {
    let dir = TempDir::new("print-only");
    let out_path = dir.join("out.txt");
    let out = create(&out_path);
    let rt = builder(sub).stdout_fd(out.as_raw_fd()).build().unwrap();
    let stats = rt.stats();
    assert_eq!(
        (stats.sandbox, stats.fixed_files),
        (Sandbox::PrintOnly, true),
        "the default"
    );

    // Refused, and seen as such by hand: the file is not created.
    let created = dir.join("created");
    let created_c = c_path(&created);
    let res = while_a_kernel_runs(&rt, |ctx| run(ctx, openat_create(&created_c, 7)));
    assert_eq!(res, -libc::EACCES);
    assert!(!created.exists(), "a refused OPENAT created the file");

    // Refused, and reported by the runtime: the file is not unlinked.
    let victim = dir.join("victim");
    create(&victim);
    let victim_c = c_path(&victim);
    let ctx = rt.context().unwrap();
    ctx.rings[0].submit(&unlinkat(&victim_c, 8), &mut || {});
    match rt.synchronize() {
        Err(Error::Refused(r)) => {
            assert_eq!((r.requests, r.errno, r.sandbox), (1, libc::EACCES, Sandbox::PrintOnly));
            let msg = Error::Refused(r).to_string();
            assert!(msg.contains("Permission denied") && msg.contains("PrintOnly"), "{msg}");
        }
        other => panic!("expected the refusal to be reported, got {other:?}"),
    }
    assert!(victim.exists(), "a refused UNLINKAT removed the file");
    // Reported once; a refusal is no protocol bug; printing goes on.
    rt.synchronize().unwrap();
    let stats = rt.stats();
    assert_eq!((stats.refused_requests, stats.stray_completions), (0, 0));
    rt.launch(1, 2, || println!("still printing")).unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    assert_eq!(
        std::fs::read_to_string(&out_path).unwrap(),
        "still printing\n".repeat(2)
    );
}

/// A device write that tries to leave the print logs or the registered files: a raw fd, a
/// flag the device never uses, a plain `WRITE` (it could read any host address: here a
/// secret on the test's stack), a `WRITE_FIXED` from outside the log, or from the log
/// into an empty slot.
fn print_only_refuses_writes_that_do_not_come_from_the_logs_to_a_registered_file(sub: Suite) {
    let dir = TempDir::new("raw-write");
    let out_path = dir.join("out.txt");
    let out = create(&out_path);
    let other_path = dir.join("other.txt");
    let other = create(&other_path);
    let rt = builder(sub).stdout_fd(out.as_raw_fd()).build().unwrap();
    let stats = rt.stats();
    assert_eq!(
        (stats.sandbox, stats.fixed_files, stats.fixed_logs),
        (Sandbox::PrintOnly, true, true),
        "the default (this machine's locked-memory limit takes the logs)"
    );
    let secret = *b"secret of the host process\n";
    let fixed = |addr: u64, len: u32, fd: i32, user_data: u64| Sqe {
        opcode: IORING_OP_WRITE_FIXED,
        flags: IOSQE_FIXED_FILE,
        fd,
        addr,
        len,
        buf_index: 0,
        user_data,
        ..Sqe::default()
    };
    let (raw, fixed_async, plain, outside, straddle, bad_index, from_log) = while_a_kernel_runs(&rt, |ctx| {
        let log = &ctx.streams[0];
        // The log's last 6 bytes (nothing printed yet: zeros), and a range that runs past it.
        let (tail, end) = (log.io_base + log.cap - 6, log.io_base + log.cap);
        (
            // A raw fd, without IOSQE_FIXED_FILE.
            run(ctx, write(other.as_raw_fd(), 0, b"leak\n", 1)),
            // The registered stdout, with a flag the device never uses.
            run(ctx, write(0, IOSQE_FIXED_FILE | IOSQE_ASYNC, b"async\n", 2)),
            // A plain WRITE to the registered stdout, from the host's memory.
            run(ctx, write(0, IOSQE_FIXED_FILE, &secret, 3)),
            // WRITE_FIXED of the secret: outside the registered log.
            run(ctx, fixed(secret.as_ptr() as u64, secret.len() as u32, 0, 4)),
            // WRITE_FIXED from the log's end on past it.
            run(ctx, fixed(end - 2, 8, 0, 5)),
            // From the log, to an index past the two registered files: no file there.
            run(ctx, fixed(tail, 6, 7, 6)),
            // What print writes look like: allowed.
            run(ctx, fixed(tail, 6, 0, 7)),
        )
    });
    assert_eq!(raw, -libc::EACCES, "a WRITE to a raw fd");
    assert_eq!(fixed_async, -libc::EACCES, "a WRITE with IOSQE_ASYNC");
    assert_eq!(plain, -libc::EACCES, "a plain WRITE, from any address");
    assert_eq!(outside, -libc::EFAULT, "a WRITE_FIXED from outside the log");
    assert_eq!(straddle, -libc::EFAULT, "a WRITE_FIXED that runs past the log");
    assert_eq!(bad_index, -libc::EBADF, "a WRITE_FIXED to an empty fixed-file slot");
    assert_eq!(from_log, 6, "a WRITE_FIXED from the log to the registered stdout");
    rt.synchronize().unwrap(); // the CQEs were taken by hand above
    drop(rt);
    assert_eq!(
        std::fs::read_to_string(&other_path).unwrap(),
        "",
        "a refused WRITE wrote"
    );
    assert_eq!(
        std::fs::read(&out_path).unwrap(),
        [0u8; 6],
        "only the log's bytes reached stdout"
    );
}

/// FileIo: OPENAT, CLOSE, UNLINKAT and transfers from and into gpuio's memory run; a
/// transfer from or into any other host address does not (a plain WRITE is refused, a
/// `*_FIXED` one outside its buffer faults), nor a STATX (it writes where the SQE says),
/// and a host buffer is a buffer only while it lives.
fn file_io_allows_file_requests_and_transfers_of_its_own_memory_and_refuses_the_rest(sub: Suite) {
    let dir = TempDir::new("file-io");
    let out_path = dir.join("out.txt");
    let out = create(&out_path);
    let rt = builder(sub)
        .stdout_fd(out.as_raw_fd())
        .sandbox(Sandbox::FileIo)
        .build()
        .unwrap();
    let stats = rt.stats();
    assert_eq!(
        (stats.sandbox, stats.fixed_logs, stats.fixed_transfers),
        (Sandbox::FileIo, true, true),
        "this machine's locked-memory limit takes gpuio's memory"
    );
    let created = dir.join("created");
    let created_c = c_path(&created);
    let victim = dir.join("victim");
    create(&victim);
    let victim_c = c_path(&victim);
    let source = dir.join("source");
    std::fs::write(&source, b"from the file").unwrap();
    let source_c = c_path(&source);
    let mut secret = *b"secret of the host process\n";
    let mut stat = [0u8; 256];
    let host = rt.host_buffer(4096).unwrap();
    let host_at = host.as_slice().as_ptr() as u64;
    let fixed = |opcode, fd: i32, addr: u64, len: u32, buf_index: u16, user_data: u64| Sqe {
        opcode,
        fd,
        addr,
        len,
        buf_index,
        user_data,
        ..Sqe::default()
    };
    let close = |fd, user_data| Sqe {
        opcode: IORING_OP_CLOSE,
        fd,
        user_data,
        ..Sqe::default()
    };
    let arena = buffer::ARENA;
    let region = buffer::REGION; // the first host buffer's slot
    let r = while_a_kernel_runs(&rt, |ctx| {
        let fd = run(ctx, openat_create(&created_c, 1));
        assert!(fd >= 0, "OPENAT failed: {fd}");
        let arena_at = ctx.arena.io_base;
        // SAFETY: block 0's bytes, which no device transfer uses while this kernel (which
        // makes none) runs; the kernel reads them only after the submission below.
        unsafe { std::ptr::copy_nonoverlapping(b"raw\n".as_ptr(), ctx.arena.buf as *mut u8, 4) };
        let src = run(ctx, read_only(&source_c, 20));
        assert!(src >= 0, "OPENAT of the source failed: {src}");
        [
            // A plain WRITE, from the host's memory.
            run(ctx, write(fd, 0, &secret, 2)),
            // WRITE_FIXED of the secret, naming the arena: outside it.
            run(
                ctx,
                fixed(IORING_OP_WRITE_FIXED, fd, secret.as_ptr() as u64, 8, arena, 3),
            ),
            // WRITE_FIXED from the arena: what device transfers look like.
            run(ctx, fixed(IORING_OP_WRITE_FIXED, fd, arena_at, 4, arena, 4)),
            // READ_FIXED into the secret, naming the host buffer: outside it.
            run(
                ctx,
                fixed(IORING_OP_READ_FIXED, src, secret.as_mut_ptr() as u64, 8, region, 5),
            ),
            // READ_FIXED into the host buffer.
            run(ctx, fixed(IORING_OP_READ_FIXED, src, host_at, 13, region, 6)),
            // Into an empty host-buffer slot.
            run(ctx, fixed(IORING_OP_READ_FIXED, src, host_at, 13, region + 1, 7)),
            run(ctx, close(fd, 8)),
            run(ctx, close(src, 9)),
            run(ctx, statx(&victim_c, &mut stat, 10)),
            run(ctx, unlinkat(&victim_c, 11)),
        ]
    });
    assert_eq!(r[0], -libc::EACCES, "a plain WRITE");
    assert_eq!(r[1], -libc::EFAULT, "a WRITE_FIXED from outside the arena");
    assert_eq!(r[2], 4, "a WRITE_FIXED from the arena");
    assert_eq!(r[3], -libc::EFAULT, "a READ_FIXED into the host's memory");
    assert_eq!(r[4], 13, "a READ_FIXED into the host buffer");
    assert_eq!(r[5], -libc::EFAULT, "a READ_FIXED naming an empty slot");
    assert_eq!((r[6], r[7]), (0, 0), "CLOSE is allowed");
    assert_eq!(r[8], -libc::EACCES, "STATX writes where the SQE says");
    assert!(stat.iter().all(|&b| b == 0), "a refused STATX wrote");
    assert_eq!(r[9], 0, "UNLINKAT is allowed");
    assert!(!victim.exists());
    assert_eq!(&secret, b"secret of the host process\n", "a refused read wrote");
    assert_eq!(std::fs::read_to_string(&created).unwrap(), "raw\n");
    assert_eq!(&host.as_slice()[..13], b"from the file");
    rt.synchronize().unwrap(); // the CQEs were taken by hand above
    drop(host); // from now on nobody's buffer
    let gone = while_a_kernel_runs(&rt, |ctx| {
        let src = run(ctx, read_only(&source_c, 30));
        assert!(src >= 0, "OPENAT of the source failed: {src}");
        let res = run(ctx, fixed(IORING_OP_READ_FIXED, src, host_at, 13, region, 31));
        run(ctx, close(src, 32));
        res
    });
    assert_eq!(gone, -libc::EFAULT, "a READ_FIXED into a dropped host buffer");
    // Through the device's own call (as a kernel makes requests): refused, and reported.
    let called = while_a_kernel_runs(&rt, |ctx| ctx.call(statx(&source_c, &mut stat, 0)));
    assert_eq!(called, -libc::EACCES);
    assert!(stat.iter().all(|&b| b == 0), "a refused STATX wrote");
    match rt.synchronize() {
        Err(Error::Refused(r)) => {
            assert_eq!((r.requests, r.errno, r.sandbox), (1, libc::EACCES, Sandbox::FileIo))
        }
        other => panic!("expected FileIo's refusal to be reported, got {other:?}"),
    }
    // Prints still work (naming the raw fd: FileIo's rings hold no file).
    rt.launch(1, 1, || println!("file io")).unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    assert_eq!(std::fs::read_to_string(&out_path).unwrap(), "file io\n");
}

fn off_runs_what_the_policies_refuse(sub: Suite) {
    let dir = TempDir::new("off");
    let other_path = dir.join("other.txt");
    let other = create(&other_path);
    let rt = builder(sub).sandbox(Sandbox::Off).build().unwrap();
    assert_eq!(rt.stats().sandbox, Sandbox::Off);
    let created = dir.join("created");
    let created_c = c_path(&created);
    let victim = dir.join("victim");
    create(&victim);
    let victim_c = c_path(&victim);
    let (fd, unlinked, written) = while_a_kernel_runs(&rt, |ctx| {
        (
            run(ctx, openat_create(&created_c, 1)),
            run(ctx, unlinkat(&victim_c, 2)),
            run(ctx, write(other.as_raw_fd(), 0, b"leak\n", 3)),
        )
    });
    assert!(fd >= 0, "OPENAT: {fd}");
    // SAFETY: the fd OPENAT returned, ours to close.
    unsafe { libc::close(fd) };
    assert!(created.exists());
    assert_eq!(unlinked, 0);
    assert!(!victim.exists());
    assert_eq!(written, 5);
    assert_eq!(std::fs::read_to_string(&other_path).unwrap(), "leak\n");
}

fn a_closed_stdout_is_reported_at_synchronize_with_or_without_fixed_files(sub: Suite) {
    let dir = TempDir::new("closed");
    let f = create(dir.join("f"));
    let closed = 1_000_000 + f.as_raw_fd(); // beyond any open descriptor
    for fixed in [true, false] {
        let rt = builder(sub).stdout_fd(closed).fixed_files(fixed).build().unwrap();
        assert_eq!(
            rt.stats().fixed_files,
            fixed,
            "a closed fd is an empty slot, not a build error"
        );
        rt.launch(1, 2, || println!("lost")).unwrap();
        match rt.synchronize() {
            Err(Error::Print(p)) => {
                assert_eq!(p.outputs.len(), 1, "{p}");
                assert_eq!((p.outputs[0].fd, p.outputs[0].errno), (closed, libc::EBADF));
                assert_eq!(p.outputs[0].lost_lines, 2);
            }
            other => panic!("fixed files {fixed}: expected a print error, got {other:?}"),
        }
    }
}

fn fixed_files_keep_the_file_the_fd_named_at_build(sub: Suite) {
    let dir = TempDir::new("dup2");
    let (first, second) = (dir.join("first"), dir.join("second"));
    for fixed in [true, false] {
        let a = create(&first);
        let b = create(&second);
        let rt = builder(sub)
            .stdout_fd(a.as_raw_fd())
            .fixed_files(fixed)
            .build()
            .unwrap();
        // SAFETY: dup2 onto an fd this test owns.
        assert!(unsafe { libc::dup2(b.as_raw_fd(), a.as_raw_fd()) } >= 0);
        rt.launch(1, 1, || println!("where")).unwrap();
        rt.synchronize().unwrap();
        drop(rt);
        let (in_first, in_second) = (
            std::fs::read_to_string(&first).unwrap(),
            std::fs::read_to_string(&second).unwrap(),
        );
        if fixed {
            assert_eq!((in_first.as_str(), in_second.as_str()), ("where\n", ""));
        } else {
            assert_eq!((in_first.as_str(), in_second.as_str()), ("", "where\n"));
        }
    }
}

/// `Sandbox::FileIo` with a root: the kernel opens and creates files beneath it and
/// nothing else (`..`, absolute paths, /proc/self/mem), on io_uring's SQPOLL and the
/// fallback's thread alike; the program's own threads are not confined.
fn file_io_with_a_root_opens_only_beneath_it(sub: Suite) {
    let dir = TempDir::new("file-root");
    let root = dir.join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("given.txt"), "given\n").unwrap();
    std::fs::write(dir.join("outside.txt"), "outside\n").unwrap();
    let paths: Vec<(String, i32)> = vec![
        (root.join("given.txt").display().to_string(), libc::O_RDONLY),
        (
            root.join("made.txt").display().to_string(),
            libc::O_CREAT | libc::O_WRONLY,
        ),
        (dir.join("outside.txt").display().to_string(), libc::O_RDONLY),
        (root.join("../outside.txt").display().to_string(), libc::O_RDONLY),
        (
            root.join("../escaped.txt").display().to_string(),
            libc::O_CREAT | libc::O_WRONLY,
        ),
        ("/proc/self/mem".to_string(), libc::O_RDONLY),
    ];
    let open_all = |rt: &Runtime| -> Vec<i32> {
        let (p, got) = (paths.clone(), Arc::new(std::sync::Mutex::new(Vec::new())));
        let g = got.clone();
        rt.launch(1, 1, move || {
            for (path, flags) in &p {
                let r = match gpuio::device::io::open(path, *flags, 0o644) {
                    Ok(fd) => {
                        let _ = gpuio::device::io::close(fd);
                        0
                    }
                    Err(e) => e.0,
                };
                g.lock().unwrap().push(r);
            }
        })
        .unwrap();
        rt.synchronize().unwrap();
        let v = got.lock().unwrap().clone();
        v
    };
    if refuses_a_root(sub, &root) {
        return;
    }
    let rt = builder(sub).sandbox(Sandbox::FileIo).file_root(&root).build().unwrap();
    let confined = open_all(&rt);
    assert_eq!(
        confined,
        [0, 0, libc::EACCES, libc::EACCES, libc::EACCES, libc::EACCES],
        "beneath the root: read, create; outside: read, `..`, create through `..`, /proc/self/mem"
    );
    assert!(root.join("made.txt").exists() && !dir.join("escaped.txt").exists());
    // The program's own threads are not confined.
    assert_eq!(std::fs::read_to_string(dir.join("outside.txt")).unwrap(), "outside\n");
    drop(rt);
    // The control: without a root, the same kernel opens them all (as root, even /proc).
    let rt = builder(sub).sandbox(Sandbox::FileIo).build().unwrap();
    let free = open_all(&rt);
    assert_eq!(&free[..5], [0, 0, 0, 0, 0], "{free:?}");
    // A root is for FileIo only, and must exist.
    let e = builder(sub)
        .file_root(&root)
        .build()
        .err()
        .expect("PrintOnly with a root");
    assert!(e.to_string().contains("add .sandbox(Sandbox::FileIo)"), "{e}");
    let e = builder(sub)
        .sandbox(Sandbox::FileIo)
        .file_root(dir.join("nowhere"))
        .build()
        .err()
        .expect("a root that does not exist");
    assert!(e.to_string().contains("must be an existing directory"), "{e}");
}

/// An `OPENAT` of `path` (created, write-only) into fixed-file slot `file_index - 1`
/// instead of a descriptor (no `O_CLOEXEC`: the kernel refuses it with a slot).
fn openat_into_slot(path: &CString, file_index: u32, user_data: u64) -> Sqe {
    Sqe {
        rw_flags: (libc::O_CREAT | libc::O_WRONLY) as u32,
        splice_fd_in: file_index as i32,
        ..openat_create(path, user_data)
    }
}

/// A `CLOSE` of fixed-file slot `file_index - 1` (its `fd` must be 0).
fn close_slot(file_index: u32, user_data: u64) -> Sqe {
    Sqe {
        opcode: IORING_OP_CLOSE,
        splice_fd_in: file_index as i32,
        user_data,
        ..Sqe::default()
    }
}

/// What the host's fds 0, 1 and 2 are: (device, inode) of each, `None` where closed.
fn host_stdio() -> [Option<(u64, u64)>; 3] {
    std::array::from_fn(|fd| {
        // SAFETY: all-zero bytes are a valid `stat`, which fstat overwrites.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes one `stat` into `st`.
        (unsafe { libc::fstat(fd as i32, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    })
}

/// A device `OPENAT` with `file_index` 1 (into slot 0, stdout's where gpuio registered the
/// print files) and a `CLOSE` with `file_index` 2 (stderr's slot), on every ring and the
/// solo ring: they cannot move or stop the prints, nor touch the host's fds 0, 1 and 2.
/// `PrintOnly` refuses both opcodes; `FileIo`'s rings hold no file table, so the kernel
/// answers `ENXIO` (the open has created its file by then, as the kernel's does); the
/// fallback does exactly the same, never acting on a descriptor of the process. The
/// control is `Off`, where gpuio registers the print files and restricts nothing: the same
/// SQEs do what the kernel does with them there (stdout's lines go to the file opened into
/// slot 0, stderr's fail with `EBADF`), on the fallback too.
fn no_device_request_opens_into_or_closes_the_print_files_slots(sub: Suite) {
    for policy in [Sandbox::PrintOnly, Sandbox::FileIo, Sandbox::Off] {
        let dir = TempDir::new("file-slots");
        let (out_path, err_path) = (dir.join("out.txt"), dir.join("err.txt"));
        let (out, err) = (create(&out_path), create(&err_path));
        let rt = sub
            .builder_with_solo()
            .stdout_fd(out.as_raw_fd())
            .stderr_fd(err.as_raw_fd())
            .sandbox(policy)
            .build()
            .unwrap();
        let stats = rt.stats();
        assert_eq!(
            (stats.sandbox, stats.fixed_files, stats.solo),
            (policy, policy != Sandbox::FileIo, sub.solo),
            "FileIo registers no file on any ring"
        );
        let slot_file = |ring: &str| dir.join(&format!("slot-{ring}"));
        let stdio = host_stdio();
        // SAFETY: F_DUPFD_CLOEXEC only makes new descriptors, copies of fds 0, 1 and 2 to
        // put back should the requests below close them (other tests of this binary run
        // meanwhile and would take the number).
        let copies: [i32; 3] = std::array::from_fn(|fd| unsafe { libc::fcntl(fd as i32, libc::F_DUPFD_CLOEXEC, 3) });
        let results = while_a_kernel_runs(&rt, |ctx| {
            let mut r = Vec::new();
            for (i, ring) in ctx.rings[..ctx.ring_count as usize].iter().enumerate() {
                let path = c_path(&slot_file(&format!("ring{i}")));
                let open = run_on(ring, openat_into_slot(&path, 1, 1));
                r.push((format!("ring {i}"), open, run_on(ring, close_slot(2, 2))));
            }
            let path = c_path(&slot_file("solo"));
            let solo = |sqe: Sqe| ctx.solo.try_call(|_, _| sqe, |_, _| ());
            if let Some(open) = solo(openat_into_slot(&path, 1, 0)) {
                r.push(("the solo ring".to_string(), open, solo(close_slot(2, 0)).unwrap()));
            }
            r
        });
        let now = host_stdio();
        for (fd, &copy) in copies.iter().enumerate().filter(|(_, &copy)| copy >= 0) {
            if now != stdio {
                // SAFETY: dup2 of our copy back onto the number it was copied from.
                unsafe { libc::dup2(copy, fd as i32) };
            }
            // SAFETY: our own copy, closed once.
            unsafe { libc::close(copy) };
        }
        assert_eq!(
            now, stdio,
            "{policy:?}: a device request changed the host's fds 0, 1 and 2"
        );
        assert_eq!(results.len(), stats.rings as usize + sub.solo as usize, "{results:?}");
        let expected = match policy {
            Sandbox::PrintOnly => (-libc::EACCES, -libc::EACCES),
            Sandbox::FileIo => (-libc::ENXIO, -libc::ENXIO),
            Sandbox::Off => (0, 0),
        };
        for (ring, open, close) in &results {
            assert_eq!(
                (*open, *close),
                expected,
                "{policy:?}, {ring}: OPENAT into slot 0, CLOSE of slot 1"
            );
        }
        rt.launch(1, 1, || {
            println!("out");
            gpuio::device::eprintln!("err");
        })
        .unwrap();
        let synced = rt.synchronize();
        drop(rt);
        let read = |p: &Path| std::fs::read_to_string(p).ok();
        let ring0 = read(&slot_file("ring0"));
        match policy {
            Sandbox::Off => {
                match synced {
                    Err(Error::Print(p)) => {
                        assert_eq!(p.outputs.len(), 1, "{p}");
                        assert_eq!((p.outputs[0].fd, p.outputs[0].errno), (err.as_raw_fd(), libc::EBADF));
                    }
                    other => panic!("Off: stderr's slot closed, expected EBADF, got {other:?}"),
                }
                assert_eq!(
                    ring0.as_deref(),
                    Some("out\n"),
                    "Off: stdout's slot holds the file opened into it"
                );
                assert_eq!(
                    (read(&out_path), read(&err_path)),
                    (Some(String::new()), Some(String::new()))
                );
            }
            _ => {
                synced.unwrap_or_else(|e| panic!("{policy:?}: {e}"));
                assert_eq!(
                    (read(&out_path).unwrap(), read(&err_path).unwrap()),
                    ("out\n".to_string(), "err\n".to_string()),
                    "{policy:?}: the prints stay where they were"
                );
                // FileIo: opened, then not installed (as the kernel does); PrintOnly: refused.
                let made = (policy == Sandbox::FileIo).then(String::new);
                assert_eq!(ring0, made, "{policy:?}: the file the OPENAT named");
            }
        }
    }
}

/// Inline (the kernel threads perform the requests, and run the program's code too)
/// takes no file root: the build says so and names the way out, and the caller's case
/// ends there (true). Other configurations: false.
fn refuses_a_root(sub: Suite, root: &Path) -> bool {
    if sub.submission != gpuio::Submission::Inline {
        return false;
    }
    let e = builder(sub)
        .sandbox(Sandbox::FileIo)
        .file_root(root)
        .build()
        .err()
        .expect("Inline with a file root");
    assert!(
        e.to_string().contains("cannot confine requests to a file root") && e.to_string().contains("use auto"),
        "{e}"
    );
    // Unasked, a root makes the CPU backend submit through io_uring, whose submitting
    // thread is confined. "Unasked" includes the environment, which the builder reads:
    // where GPUIO_URING or GPUIO_SQPOLL is set (a CI leg choosing a configuration), this
    // build tests that setting, not the default, so it is skipped.
    if std::env::var_os("GPUIO_URING").is_some() || std::env::var_os("GPUIO_SQPOLL").is_some() {
        return true;
    }
    let rt = gpuio::Runtime::builder()
        .backend(gpuio::Backend::Cpu)
        .sandbox(Sandbox::FileIo)
        .file_root(root);
    match rt.build() {
        Ok(rt) => assert_ne!(rt.submission(), gpuio::Submission::Inline),
        Err(e) => assert!(e.to_string().contains("needs Landlock"), "{e}"),
    }
    true
}

/// What `Builder::file_root` confines beyond the paths Landlock checks, and what it does
/// not (the docs say both): the fallback's thread refuses an `O_PATH` open (which would
/// tell whether a path outside the root exists, and what it is) and creating a file with a
/// set-id bit, with `EACCES`; io_uring, which has no executor of gpuio's, lets both through
/// (Landlock checks neither). On both, a hard link that someone else placed inside the root
/// reaches its inode outside it (a kernel cannot make one: no `LINKAT`).
fn a_file_root_confines_what_it_says_and_the_docs_say_the_rest(sub: Suite) {
    let dir = TempDir::new("root-leaks");
    let root = dir.join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(dir.join("outside-dir")).unwrap();
    std::fs::write(dir.join("outside.txt"), "outside\n").unwrap();
    std::fs::write(dir.join("linked.txt"), "").unwrap();
    std::fs::hard_link(dir.join("linked.txt"), root.join("link.txt")).unwrap();
    if refuses_a_root(sub, &root) {
        return;
    }
    let rt = match builder(sub).sandbox(Sandbox::FileIo).file_root(&root).build() {
        Err(e) if e.to_string().contains("needs Landlock") => {
            return skip(
                &format!(
                    "{}::a_file_root_confines_what_it_says_and_the_docs_say_the_rest",
                    sub.name()
                ),
                &e.to_string(),
            );
        }
        other => other.unwrap(),
    };
    let s = |p: &Path| p.display().to_string();
    let o_path = libc::O_PATH | libc::O_CLOEXEC;
    let attempts: Vec<(String, i32, u32)> = vec![
        (s(&dir.join("outside.txt")), o_path, 0),
        (s(&dir.join("missing")), o_path, 0),
        (s(&dir.join("outside-dir")), o_path | libc::O_DIRECTORY, 0),
        (s(&dir.join("outside.txt")), o_path | libc::O_DIRECTORY, 0),
        (
            s(&root.join("setuid")),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o4755,
        ),
        (
            s(&root.join("setgid")),
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o2755,
        ),
    ];
    let link = s(&root.join("link.txt"));
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (g, a) = (got.clone(), attempts.clone());
    rt.launch(1, 1, move || {
        use gpuio::device::io;
        let mut r: Vec<i32> = a
            .iter()
            .map(|(path, flags, mode)| match io::open(path, *flags, *mode) {
                Ok(fd) => {
                    let _ = io::close(fd);
                    0
                }
                Err(e) => e.0,
            })
            .collect();
        r.push(match io::open(&link, libc::O_WRONLY | libc::O_CLOEXEC, 0) {
            Ok(fd) => {
                let w = io::pwrite(fd, b"through the link\n", 0).map_or_else(|e| e.0, |_| 0);
                let _ = io::close(fd);
                w
            }
            Err(e) => e.0,
        });
        *g.lock().unwrap() = r;
    })
    .unwrap();
    rt.synchronize().unwrap();
    drop(rt);
    let got = got.lock().unwrap().clone();
    let set_id = |name: &str, bit: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(root.join(name))
            .map(|m| m.permissions().mode() & bit != 0)
            .ok()
    };
    if sub.submission == gpuio::Submission::HostThread {
        assert_eq!(
            got,
            [
                libc::EACCES,
                libc::EACCES,
                libc::EACCES,
                libc::EACCES,
                libc::EACCES,
                libc::EACCES,
                0
            ],
            "the fallback refuses O_PATH and set-id creation; the hard link reaches outside"
        );
        assert_eq!(
            (set_id("setuid", 0o4000), set_id("setgid", 0o2000)),
            (None, None),
            "created"
        );
    } else {
        // The leaks the docs state: existence (ENOENT), type (ENOTDIR), set-id files.
        assert_eq!(
            got,
            [0, libc::ENOENT, 0, libc::ENOTDIR, 0, 0, 0],
            "io_uring: Landlock checks no O_PATH open and no mode; the hard link reaches outside"
        );
        assert_eq!(set_id("setuid", 0o4000), Some(true), "S_ISUID on the created file");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("linked.txt")).unwrap(),
        "through the link\n",
        "written through the hard link inside the root"
    );
}
