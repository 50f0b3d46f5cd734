//! The print files' fixed slots: a closed stdout reported with or without fixed files, the
//! file an fd named at build kept after a `dup2`, and no device request opening into or
//! closing the slots under any policy.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::Path;

use gpuio::device::println;
use gpuio::device::protocol::uapi::*;
use gpuio::{Error, Sandbox};

use crate::common::dirs::{create, TempDir};
use crate::common::suite_builder as builder;
use crate::common::Suite;
use crate::sqes::{c_path, openat_create, run_on, while_a_kernel_runs};

pub(crate) fn a_closed_stdout_is_reported_at_synchronize_with_or_without_fixed_files(sub: Suite) {
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

pub(crate) fn fixed_files_keep_the_file_the_fd_named_at_build(sub: Suite) {
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
pub(crate) fn no_device_request_opens_into_or_closes_the_print_files_slots(sub: Suite) {
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
