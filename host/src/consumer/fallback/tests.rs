//! The fallback against the kernel's behaviour: each operation, EPIPE, a full CQ, parking, sizes.

use std::thread;
use std::time::Instant;

use super::execute::IORING_FSYNC_DATASYNC;
use super::*;

fn ring(sq: u32, cq: u32) -> HostRing {
    HostRing::new(UringConfig::sized(sq, cq)).unwrap()
}

/// Drives a HostRing as the device would, one SQE at a time.
struct Driver<'a> {
    r: &'a HostRing,
    tail: u32,
    cq_head: u32,
}

impl Driver<'_> {
    fn push(&mut self, sqe: Sqe) {
        let p = self.r.params;
        let slot = (self.tail & (p.sq_entries - 1)) as usize;
        // SAFETY: the tests never push more than the SQ holds unconsumed.
        unsafe { (self.r.sqes.as_ptr() as *mut Sqe).add(slot).write(sqe) };
        self.tail += 1;
        // Release: as the device publisher.
        self.r.word(p.sq_off.tail).store(self.tail, Ordering::Release);
    }

    /// Waits for the CQE at the current head, consumes it, returns (user_data, res).
    fn pop(&mut self) -> (u64, i32) {
        let p = self.r.params;
        let until = Instant::now() + Duration::from_secs(10);
        while self.r.word(p.cq_off.tail).load(Ordering::Acquire) == self.cq_head {
            assert!(Instant::now() < until, "no completion");
            self.r.wake_if_needed();
            thread::sleep(Duration::from_micros(100));
        }
        let slot = (self.cq_head & (p.cq_entries - 1)) as usize;
        // SAFETY: published by the acquire above.
        let cqe = unsafe {
            (self.r.rings.as_ptr().add(p.cq_off.cqes as usize) as *const Cqe)
                .add(slot)
                .read()
        };
        self.cq_head += 1;
        self.r.word(p.cq_off.head).store(self.cq_head, Ordering::Release);
        (cqe.user_data, cqe.res)
    }

    fn run(&mut self, sqe: Sqe) -> i32 {
        let ud = sqe.user_data;
        self.push(sqe);
        let (got, res) = self.pop();
        assert_eq!(got, ud);
        res
    }
}

fn sqe(opcode: u8, fd: i32, addr: *const u8, len: u32, off: u64, user_data: u64) -> Sqe {
    Sqe {
        opcode,
        fd,
        addr: addr as u64,
        len,
        off,
        user_data,
        ..Sqe::default()
    }
}

#[test]
fn performs_each_operation_like_the_kernel() {
    let r = ring(4, 8);
    let mut d = Driver {
        r: &r,
        tail: 0,
        cq_head: 0,
    };
    let dir = std::env::temp_dir().join(format!("gpuio-fallback-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = std::ffi::CString::new(dir.join("ops.txt").to_str().unwrap()).unwrap();
    let mut open = sqe(
        IORING_OP_OPENAT,
        libc::AT_FDCWD,
        path.as_ptr() as *const u8,
        0o600,
        0,
        1,
    );
    open.rw_flags = (libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC) as u32;
    let fd = d.run(open);
    assert!(fd >= 0, "openat: {fd}");
    let cur = OFF_CURRENT_POSITION;
    assert_eq!(d.run(sqe(IORING_OP_WRITE, fd, b"hello ".as_ptr(), 6, cur, 2)), 6);
    assert_eq!(d.run(sqe(IORING_OP_WRITE, fd, b"world\n".as_ptr(), 6, cur, 3)), 6);
    assert_eq!(d.run(sqe(IORING_OP_WRITE, fd, b"W".as_ptr(), 1, 6, 4)), 1, "pwrite");
    let mut fsync = sqe(IORING_OP_FSYNC, fd, std::ptr::null(), 0, 0, 5);
    assert_eq!(d.run(fsync), 0);
    fsync.rw_flags = IORING_FSYNC_DATASYNC;
    assert_eq!(d.run(fsync), 0);
    let mut buf = [0u8; 16];
    assert_eq!(d.run(sqe(IORING_OP_READ, fd, buf.as_mut_ptr(), 16, 0, 6)), 12, "pread");
    assert_eq!(&buf[..12], b"hello World\n");
    // The current position is after the two writes (pwrite/pread do not move it).
    assert_eq!(
        d.run(sqe(IORING_OP_READ, fd, buf.as_mut_ptr(), 16, cur, 7)),
        0,
        "read at EOF"
    );
    assert_eq!(d.run(sqe(IORING_OP_NOP, -1, std::ptr::null(), 0, 0, 8)), 0);
    assert_eq!(
        d.run(sqe(200, fd, std::ptr::null(), 0, 0, 9)),
        -libc::EINVAL,
        "unknown opcode"
    );
    let mut linked = sqe(IORING_OP_NOP, -1, std::ptr::null(), 0, 0, 10);
    linked.flags = 1 << 2; // IOSQE_IO_LINK: not supported
    assert_eq!(d.run(linked), -libc::EINVAL);
    let mut fixed = sqe(IORING_OP_WRITE, 0, b"!".as_ptr(), 1, 12, 11);
    fixed.flags = IOSQE_FIXED_FILE;
    assert_eq!(d.run(fixed), -libc::EBADF, "no registered files");
    r.register_files(&[fd]).unwrap();
    assert_eq!(d.run(fixed), 1, "fixed file 0");
    // Closed twice, then written: EBADF. On a high fd number of its own: once closed, a
    // low number is soon taken by another test of this binary (run in parallel), and a
    // write to that would fail otherwise.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct; dup2 onto a number no other test uses (tests
    // take the lowest free numbers).
    let high = unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        let high = (limit.rlim_cur.saturating_sub(1)).min(4095) as i32;
        assert_eq!(libc::dup2(fd, high), high, "dup2 to {high}");
        high
    };
    assert_eq!(d.run(sqe(IORING_OP_CLOSE, fd, std::ptr::null(), 0, 0, 12)), 0);
    assert_eq!(d.run(sqe(IORING_OP_CLOSE, high, std::ptr::null(), 0, 0, 13)), 0);
    assert_eq!(
        d.run(sqe(IORING_OP_CLOSE, high, std::ptr::null(), 0, 0, 14)),
        -libc::EBADF
    );
    let bad = b"x".as_ptr();
    assert_eq!(d.run(sqe(IORING_OP_WRITE, high, bad, 1, cur, 15)), -libc::EBADF);
    assert_eq!(std::fs::read(dir.join("ops.txt")).unwrap(), b"hello World\n!");
    let _ = std::fs::remove_dir_all(dir);
}

/// An `OPENAT` or `CLOSE` with a `file_index` acts on the ring's own fixed-file table, as
/// the kernel's `io_fixed_fd_install`/`io_fixed_fd_remove` do, never on a descriptor of the
/// process: `ENXIO` without a table (`ENFILE` for `IORING_FILE_INDEX_ALLOC`), `EINVAL` past
/// its end or with `O_CLOEXEC` or a descriptor beside the slot, `EBADF` for an empty slot.
#[test]
fn opens_into_and_closes_fixed_file_slots_like_the_kernel() {
    let r = ring(4, 8);
    let mut d = Driver {
        r: &r,
        tail: 0,
        cq_head: 0,
    };
    let dir = std::env::temp_dir().join(format!("gpuio-fallback-slots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = |name: &str| std::ffi::CString::new(dir.join(name).to_str().unwrap()).unwrap();
    let (first, second, third) = (c("first"), c("second"), c("third"));
    let open_into = |path: &std::ffi::CString, file_index: u32, user_data| Sqe {
        rw_flags: (libc::O_WRONLY | libc::O_CREAT) as u32,
        splice_fd_in: file_index as i32,
        ..sqe(
            IORING_OP_OPENAT,
            libc::AT_FDCWD,
            path.as_ptr().cast(),
            0o600,
            0,
            user_data,
        )
    };
    let close_slot = |file_index: u32, user_data| Sqe {
        splice_fd_in: file_index as i32,
        ..sqe(IORING_OP_CLOSE, 0, std::ptr::null(), 0, 0, user_data)
    };
    let write_slot = |slot: i32, bytes: &'static [u8], user_data| Sqe {
        flags: IOSQE_FIXED_FILE,
        ..sqe(IORING_OP_WRITE, slot, bytes.as_ptr(), bytes.len() as u32, 0, user_data)
    };
    // No table: the file is opened (created) and let go; nothing else happens.
    assert_eq!(d.run(open_into(&first, 1, 1)), -libc::ENXIO);
    assert!(dir.join("first").exists(), "the kernel opens before it installs");
    assert_eq!(d.run(open_into(&first, u32::MAX, 2)), -libc::ENFILE);
    assert_eq!(d.run(close_slot(1, 3)), -libc::ENXIO);
    // A table of two slots, the second empty.
    let held = std::fs::File::create(dir.join("held")).unwrap();
    r.register_files(&[std::os::fd::AsRawFd::as_raw_fd(&held), -1]).unwrap();
    assert_eq!(d.run(open_into(&first, 3, 4)), -libc::EINVAL, "past the table");
    let mut cloexec = open_into(&first, 1, 5);
    cloexec.rw_flags |= libc::O_CLOEXEC as u32;
    assert_eq!(d.run(cloexec), -libc::EINVAL, "a slot has no O_CLOEXEC");
    assert_eq!(d.run(open_into(&second, 1, 6)), 0, "replaces slot 0");
    assert_eq!(d.run(write_slot(0, b"second\n", 7)), 7);
    assert_eq!(d.run(open_into(&third, u32::MAX, 8)), 1, "the free slot");
    assert_eq!(d.run(write_slot(1, b"third\n", 9)), 6);
    assert_eq!(d.run(open_into(&third, u32::MAX, 10)), -libc::ENFILE, "none free");
    let mut both = close_slot(2, 11);
    both.fd = 5;
    assert_eq!(d.run(both), -libc::EINVAL, "a slot and a descriptor");
    assert_eq!(d.run(close_slot(2, 12)), 0);
    assert_eq!(d.run(close_slot(2, 13)), -libc::EBADF, "an empty slot");
    assert_eq!(d.run(write_slot(1, b"gone\n", 14)), -libc::EBADF);
    assert_eq!(d.run(close_slot(3, 15)), -libc::EINVAL);
    // The process's own descriptor of the first file it held is untouched.
    // SAFETY: F_GETFD only queries the descriptor.
    assert!(unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&held), libc::F_GETFD) } >= 0);
    assert_eq!(std::fs::read_to_string(dir.join("second")).unwrap(), "second\n");
    assert_eq!(std::fs::read_to_string(dir.join("third")).unwrap(), "third\n");
    assert_eq!(std::fs::read_to_string(dir.join("held")).unwrap(), "");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_pipe_without_reader_is_epipe_not_sigpipe() {
    let r = ring(2, 4);
    let mut d = Driver {
        r: &r,
        tail: 0,
        cq_head: 0,
    };
    let mut fds = [0; 2];
    // SAFETY: pipe fills two fds that we own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: our own read end.
    unsafe { libc::close(fds[0]) };
    // SIGPIPE is ignored in Rust test binaries anyway; with the default disposition the
    // blocked signal would stay pending on the fallback thread, harmlessly.
    let res = d.run(sqe(IORING_OP_WRITE, fds[1], b"x".as_ptr(), 1, OFF_CURRENT_POSITION, 1));
    assert_eq!(res, -libc::EPIPE);
    // SAFETY: our own write end.
    unsafe { libc::close(fds[1]) };
}

#[test]
fn a_full_cq_holds_sqes_back_instead_of_overflowing() {
    // The device must never have more in flight than the CQ holds; if it does, the
    // fallback waits for the reaper rather than overwrite a CQE.
    let r = ring(2, 2);
    let p = r.params;
    let mut d = Driver {
        r: &r,
        tail: 0,
        cq_head: 0,
    };
    let nop = |ud| sqe(IORING_OP_NOP, -1, std::ptr::null(), 0, 0, ud);
    d.push(nop(1));
    d.push(nop(2));
    let until = Instant::now() + Duration::from_secs(10);
    while r.word(p.sq_off.head).load(Ordering::Acquire) != 2 {
        assert!(Instant::now() < until);
        thread::sleep(Duration::from_millis(1));
    }
    d.push(nop(3)); // the SQ has room, the CQ has none
                    // Until the thread has seen the full CQ (however slowly it is scheduled; wake it if
                    // it parked, as the waker would).
    let until = Instant::now() + Duration::from_secs(10);
    while r.cq_full_waits() == 0 {
        assert!(Instant::now() < until, "the thread never looked at the SQE");
        r.wake_if_needed();
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(r.word(p.cq_off.tail).load(Ordering::Acquire), 2, "the CQ overflowed");
    assert_eq!(
        r.word(p.sq_off.head).load(Ordering::Acquire),
        2,
        "consumed an SQE it could not complete"
    );
    assert_eq!(d.pop(), (1, 0));
    assert_eq!(d.pop(), (2, 0));
    assert_eq!(d.pop(), (3, 0), "the held-back SQE completes once the CQ has room");
    assert_eq!(r.completed(), 3);
}

#[test]
fn a_parked_thread_is_woken_and_drop_does_not_hang() {
    let r = ring(2, 4);
    let mut d = Driver {
        r: &r,
        tail: 0,
        cq_head: 0,
    };
    // sq_thread_idle_ms is 1: the thread parks soon after start.
    let until = Instant::now() + Duration::from_secs(10);
    while !r.state.sleeping.load(Ordering::SeqCst) {
        assert!(Instant::now() < until, "never parked");
        thread::sleep(Duration::from_millis(1));
    }
    let look = r.wake_if_needed();
    assert!(!look.woke && !look.waiting, "woken with nothing to do: {look:?}");
    assert_eq!(look.tail, 0);
    d.push(sqe(IORING_OP_NOP, -1, std::ptr::null(), 0, 0, 7));
    assert_eq!(d.pop(), (7, 0));
    drop(r); // stops and joins the parked thread
}

#[test]
fn rejects_sizes_io_uring_would() {
    for (sq, cq) in [(3, 8), (16, 8), (65536, 131072)] {
        let e = HostRing::new(UringConfig::sized(sq, cq));
        assert!(matches!(e, Err(Error::Config(_))), "sq {sq} cq {cq}");
    }
}

#[test]
fn an_appending_write_lands_at_the_end_and_leaves_the_offset() {
    let r = ring(4, 8);
    let mut d = Driver {
        r: &r,
        tail: 0,
        cq_head: 0,
    };
    let path = std::env::temp_dir().join(format!("gpuio-fallback-append-{}", std::process::id()));
    std::fs::write(&path, b"0123456789").unwrap();
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    let mut append = sqe(IORING_OP_WRITE, fd, b"ab".as_ptr(), 2, 0, 1);
    append.rw_flags = RWF_APPEND;
    assert_eq!(d.run(append), 2);
    // SAFETY: lseek only queries the offset.
    let offset = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
    assert_eq!(offset, 0, "the fd's offset stays");
    let mut other = append;
    other.rw_flags = 0x4; // RWF_SYNC: not taken
    assert_eq!(d.run(other), -libc::EOPNOTSUPP);
    assert_eq!(std::fs::read(&path).unwrap(), b"0123456789ab");
    let _ = std::fs::remove_file(&path);
}
