//! Errors as the caller sees them: a short read at the end of a file, each errno with its
//! cause, permission denied (as `nobody`), the `PrintOnly` sandbox's refusal, and calls
//! made outside a kernel.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuio::device::fs::{Error as FsError, File, OpenOptions};
use gpuio::device::io::{self, Errno};
use gpuio::{Backend, Error, Runtime, Sandbox};

use crate::common::child::run_child;
use crate::common::dirs::TempDir;
use crate::common::{skip, watchdog, Suite};
use crate::runtime;

pub(crate) fn end_of_file_is_reported_with_the_count(sub: Suite) {
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

pub(crate) fn errors_reach_the_caller(sub: Suite) {
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
pub(crate) fn permission_denied(sub: Suite) {
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
pub(crate) fn open_in_kernel(sub: Suite, path: &str) -> Option<Errno> {
    let rt = runtime(sub, 16 << 10, 4096);
    let seen = Arc::new(Mutex::new(None));
    let (p, s) = (path.to_string(), seen.clone());
    rt.launch(1, 1, move || *s.lock().unwrap() = File::open(&p).err().map(Errno::from))
        .unwrap();
    rt.synchronize().unwrap();
    let e = *seen.lock().unwrap();
    e
}

pub(crate) fn print_only_sandbox_refuses_file_io_and_reports_it(sub: Suite) {
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
