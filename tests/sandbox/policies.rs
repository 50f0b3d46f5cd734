//! The policies: `PrintOnly` (the default) refuses opens, unlinks and writes that do not
//! come from the logs; `FileIo` allows file requests and transfers of gpuio's own memory
//! and refuses the rest; `Off` runs what both refuse.

use std::os::fd::AsRawFd;

use gpuio::device::println;
use gpuio::device::protocol::arena::buffer;
use gpuio::device::protocol::uapi::*;
use gpuio::{Error, Sandbox};

use crate::common::dirs::{create, TempDir};
use crate::common::suite_builder as builder;
use crate::common::Suite;
use crate::sqes::{c_path, openat_create, read_only, run, statx, unlinkat, while_a_kernel_runs, write};

pub(crate) fn print_only_refuses_openat_and_unlinkat_reports_them_and_runs_neither(sub: Suite) {
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
pub(crate) fn print_only_refuses_writes_that_do_not_come_from_the_logs_to_a_registered_file(sub: Suite) {
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
pub(crate) fn file_io_allows_file_requests_and_transfers_of_its_own_memory_and_refuses_the_rest(sub: Suite) {
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

pub(crate) fn off_runs_what_the_policies_refuse(sub: Suite) {
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
