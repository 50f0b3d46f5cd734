//! The sandbox's registration and restriction steps against a kernel that refuses them
//! (a `Register` of the tests' own) and against the real io_uring.

use std::io;

use gpuio_device::protocol::arena::buffer;

use super::*;
use crate::consumer::uring::Uring;
use crate::consumer::uring::UringConfig;

#[test]
fn restrictions_match_the_policy() {
    let r = restrictions(Sandbox::PrintOnly, true, true);
    let ops: Vec<u8> = r
        .iter()
        .filter(|e| e.opcode == IORING_RESTRICTION_SQE_OP)
        .map(|e| e.arg)
        .collect();
    assert_eq!(ops, [IORING_OP_WRITE_FIXED]);
    // Where the logs could not be registered: plain writes.
    let unfixed = restrictions(Sandbox::PrintOnly, true, false);
    assert!(unfixed
        .iter()
        .any(|e| e.opcode == IORING_RESTRICTION_SQE_OP && e.arg == IORING_OP_WRITE));
    let find = |r: &[Restriction], op| r.iter().find(|e| e.opcode == op).map(|e| e.arg);
    assert_eq!(find(&r, IORING_RESTRICTION_SQE_FLAGS_REQUIRED), Some(IOSQE_FIXED_FILE));
    assert_eq!(
        find(&r, IORING_RESTRICTION_SQE_FLAGS_ALLOWED),
        Some(IOSQE_FIXED_FILE | IOSQE_IO_DRAIN)
    );
    assert_eq!(find(&r, IORING_RESTRICTION_REGISTER_OP), None);
    // Without fixed files: writes to any fd, no flag but the drain.
    let r = restrictions(Sandbox::PrintOnly, false, true);
    assert_eq!(find(&r, IORING_RESTRICTION_SQE_FLAGS_REQUIRED), None);
    assert_eq!(find(&r, IORING_RESTRICTION_SQE_FLAGS_ALLOWED), Some(IOSQE_IO_DRAIN));
    // FileIo: OPENAT refuses IOSQE_FIXED_FILE, so it is allowed, never required.
    let r = restrictions(Sandbox::FileIo, true, true);
    let ops: Vec<u8> = r
        .iter()
        .filter(|e| e.opcode == IORING_RESTRICTION_SQE_OP)
        .map(|e| e.arg)
        .collect();
    assert_eq!(Some(&ops[..]), Sandbox::FileIo.opcodes());
    assert_eq!(find(&r, IORING_RESTRICTION_SQE_FLAGS_REQUIRED), None);
    assert_eq!(
        find(&r, IORING_RESTRICTION_SQE_FLAGS_ALLOWED),
        Some(IOSQE_FIXED_FILE | IOSQE_IO_DRAIN)
    );
}

/// A kernel that refuses what it is told to.
#[derive(Default)]
struct Fake {
    disabled: bool,
    refuse_files: Option<i32>,
    refuse_restrictions: Option<i32>,
    refuse_buffers: Option<i32>,
    files: Vec<RawFd>,
    buffers: Vec<(u64, u64)>,
    restrictions: usize,
    enabled: bool,
    /// The kernel's last opcode: restrictions naming a later one are refused (EINVAL).
    last_op: Option<u8>,
    /// The SQE opcodes the restrictions allowed.
    allowed: Vec<u8>,
}

impl Fake {
    fn disabled() -> Fake {
        Fake {
            disabled: true,
            ..Fake::default()
        }
    }
}

impl Register for Fake {
    fn is_disabled(&self) -> bool {
        self.disabled
    }
    fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        self.files = fds.to_vec();
        self.refuse_files
            .map_or(Ok(()), |e| Err(io::Error::from_raw_os_error(e)))
    }
    fn register_buffers(&mut self, bufs: &[(u64, u64)]) -> io::Result<()> {
        self.buffers = bufs.to_vec();
        self.refuse_buffers
            .map_or(Ok(()), |e| Err(io::Error::from_raw_os_error(e)))
    }
    fn last_op(&mut self) -> Option<u8> {
        self.last_op
    }
    fn register_restrictions(&mut self, r: &[Restriction]) -> io::Result<()> {
        let ops = r
            .iter()
            .filter(|e| e.opcode == IORING_RESTRICTION_SQE_OP)
            .map(|e| e.arg);
        if ops.clone().any(|op| op > self.last_op.unwrap_or(u8::MAX)) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.allowed = ops.collect();
        self.restrictions = r.len();
        self.refuse_restrictions
            .map_or(Ok(()), |e| Err(io::Error::from_raw_os_error(e)))
    }
    fn enable(&mut self) -> io::Result<()> {
        self.disabled = false;
        self.enabled = true;
        Ok(())
    }
}

const LOGS: Memory = Memory {
    logs: [(1 << 20, 4096), (2 << 20, 4096)],
    arena: (3 << 20, 1 << 16),
    solo_stage: (4 << 20, 4096),
};

#[test]
fn a_kernel_that_refuses_restrictions_is_an_error_not_a_silent_off() {
    let mut k = Fake {
        disabled: true,
        refuse_restrictions: Some(libc::EINVAL),
        ..Fake::default()
    };
    let e = configure(&mut k, Sandbox::PrintOnly, true, [1, 2], &LOGS).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("refused io_uring restrictions"), "{text}");
    assert!(
        text.contains("Submission::HostThread") && text.contains("Sandbox::Off"),
        "{text}"
    );
    assert!(!k.enabled, "an unrestricted ring must not be enabled");
    // Off asks for nothing, and gets it.
    let mut k = Fake {
        disabled: true,
        refuse_restrictions: Some(libc::EINVAL),
        ..Fake::default()
    };
    let s = configure(&mut k, Sandbox::Off, true, [1, 2], &LOGS).unwrap();
    assert_eq!((s.policy, s.fixed_logs, k.restrictions), (Sandbox::Off, false, 0));
    assert!(k.enabled);
}

#[test]
fn a_kernel_without_r_disabled_is_an_error_not_a_silent_off() {
    let mut k = Fake::default(); // created enabled: the kernel refused R_DISABLED
    let text = configure(&mut k, Sandbox::FileIo, true, [1, 2], &LOGS)
        .unwrap_err()
        .to_string();
    assert_eq!(k.restrictions, 0);
    assert!(text.contains("R_DISABLED"), "{text}");
}

#[test]
fn logs_are_registered_on_the_printing_ring_and_the_others_restricted_alike() {
    let (mut k, mut other) = (Fake::disabled(), Fake::disabled());
    let s = configure_all(&mut [&mut k, &mut other], Sandbox::PrintOnly, true, [1, 2], &LOGS).unwrap();
    assert!(s.fixed_logs && !s.fixed_transfers && s.notices.is_empty(), "{s:?}");
    assert_eq!(k.buffers, LOGS.logs);
    assert!(other.buffers.is_empty());
    assert_eq!(other.restrictions, restrictions(Sandbox::PrintOnly, true, true).len());
}

/// FileIo: every ring holds the whole table (the logs on ring 0 alone), and may update
/// it; a ring that refuses it leaves every ring's transfers unconfined, said once.
#[test]
fn file_io_registers_the_whole_table_on_every_ring_or_says_why_not() {
    let (mut k, mut other) = (Fake::disabled(), Fake::disabled());
    let s = configure_all(&mut [&mut k, &mut other], Sandbox::FileIo, true, [1, 2], &LOGS).unwrap();
    assert!(s.fixed_logs && s.fixed_transfers && s.notices.is_empty(), "{s:?}");
    assert_eq!(k.buffers.len(), buffer::COUNT);
    assert_eq!(k.buffers[..2], LOGS.logs);
    assert_eq!(other.buffers[..2], [(0, 0); 2]);
    for t in [&k.buffers, &other.buffers] {
        assert_eq!(t[buffer::ARENA as usize], LOGS.arena);
        assert_eq!(t[buffer::SOLO_STAGE as usize], LOGS.solo_stage);
        assert!(t[buffer::REGION as usize..].iter().all(|&b| b == (0, 0)));
    }
    let r = restrictions(Sandbox::FileIo, true, true);
    let register_ops: Vec<u8> = r
        .iter()
        .filter(|e| e.opcode == IORING_RESTRICTION_REGISTER_OP)
        .map(|e| e.arg)
        .collect();
    assert_eq!(register_ops, [IORING_REGISTER_BUFFERS_UPDATE as u8]);
    assert_eq!(other.restrictions, r.len());
    // The second ring refuses: nobody's transfers are fixed, prints still are.
    let (mut k, mut other) = (Fake::disabled(), Fake::disabled());
    other.refuse_buffers = Some(libc::ENOMEM);
    let s = configure_all(&mut [&mut k, &mut other], Sandbox::FileIo, true, [1, 2], &LOGS).unwrap();
    assert!(s.fixed_logs && !s.fixed_transfers, "{s:?}");
    assert_eq!(s.notices.len(), 1, "{:?}", s.notices);
    let n = &s.notices[0];
    assert!(
        n.contains("on each of 2 rings") && n.contains("Builder::arena_bytes"),
        "{n}"
    );
    assert!(n.contains("may read or write any host address"), "{n}");
    assert_eq!(k.restrictions, restrictions(Sandbox::FileIo, true, false).len());
    // A buffer over 1 GiB is never offered to the kernel.
    let big = Memory {
        arena: (3 << 20, 2 << 30),
        ..LOGS
    };
    let mut k = Fake::disabled();
    let s = configure(&mut k, Sandbox::FileIo, true, [1, 2], &big).unwrap();
    assert!(!s.fixed_transfers && k.buffers.is_empty(), "{s:?}");
    assert!(s.notices[0].contains("over the 1 GiB"), "{:?}", s.notices);
}

/// FileIo's rings take device OPENATs and CLOSEs, whose `file_index` no restriction
/// sees: none of them holds a file (so the kernel answers ENXIO), whatever
/// `fixed_files` says; PrintOnly, which allows neither opcode, keeps stdout and stderr
/// on every ring.
#[test]
fn file_io_registers_no_file_on_any_ring() {
    let (mut k, mut other) = (Fake::disabled(), Fake::disabled());
    let s = configure_all(&mut [&mut k, &mut other], Sandbox::FileIo, true, [1, 2], &LOGS).unwrap();
    assert!(!s.fixed_files && s.notices.is_empty(), "{s:?}");
    assert!(
        k.files.is_empty() && other.files.is_empty(),
        "{:?} {:?}",
        k.files,
        other.files
    );
    let (mut k, mut other) = (Fake::disabled(), Fake::disabled());
    let s = configure_all(&mut [&mut k, &mut other], Sandbox::PrintOnly, true, [1, 2], &LOGS).unwrap();
    assert!(s.fixed_files);
    assert_eq!((&k.files[..], &other.files[..]), (&[1, 2][..], &[1, 2][..]));
    assert!(!Sandbox::PrintOnly.allows(IORING_OP_OPENAT) && !Sandbox::PrintOnly.allows(IORING_OP_CLOSE));
}

/// A kernel older than an opcode FileIo allows (FTRUNCATE, Linux 6.9) refuses a
/// restriction array that names it, whole: it is left out, and refused at run time.
#[test]
fn opcodes_the_kernel_does_not_know_are_left_out_not_fatal() {
    let mut k = Fake {
        last_op: Some(IORING_OP_FTRUNCATE - 1),
        ..Fake::disabled()
    };
    let s = configure(&mut k, Sandbox::FileIo, true, [1, 2], &LOGS).unwrap();
    assert!(
        k.enabled && !k.allowed.contains(&IORING_OP_FTRUNCATE),
        "{:?}",
        k.allowed
    );
    assert!(k.allowed.contains(&IORING_OP_RENAMEAT), "{:?}", k.allowed);
    assert_eq!(s.allowed_ops() & (1 << IORING_OP_FTRUNCATE), 0);
    assert_ne!(s.allowed_ops() & (1 << IORING_OP_RENAMEAT), 0);
    // A kernel that knows it keeps it.
    let mut k = Fake::disabled();
    let s = configure(&mut k, Sandbox::FileIo, true, [1, 2], &LOGS).unwrap();
    assert!(k.allowed.contains(&IORING_OP_FTRUNCATE));
    assert_ne!(s.allowed_ops() & (1 << IORING_OP_FTRUNCATE), 0);
}

#[test]
fn logs_the_memlock_limit_refuses_are_said_with_the_way_out() {
    let mut k = Fake {
        disabled: true,
        refuse_buffers: Some(libc::ENOMEM),
        ..Fake::default()
    };
    let s = configure(&mut k, Sandbox::PrintOnly, true, [1, 2], &LOGS).unwrap();
    assert_eq!((s.policy, s.fixed_logs), (Sandbox::PrintOnly, false));
    assert_eq!(s.notices.len(), 1, "{:?}", s.notices);
    let n = &s.notices[0];
    assert!(
        n.contains("registering the print logs (1 MiB)") && n.contains("ulimit -l"),
        "{n}"
    );
    assert!(n.contains("may read any host address"), "{n}");
}

#[test]
fn unregistrable_files_fall_back_to_raw_fds_with_a_notice() {
    let mut k = Fake {
        disabled: true,
        refuse_files: Some(libc::EMFILE),
        ..Fake::default()
    };
    let s = configure(&mut k, Sandbox::PrintOnly, true, [1, 2], &LOGS).unwrap();
    assert!(!s.fixed_files);
    // Writes only, and no FIXED_FILE required: the prints name raw fds.
    assert_eq!(s.policy, Sandbox::PrintOnly);
    assert_eq!(k.restrictions, restrictions(Sandbox::PrintOnly, false, true).len());
    assert!(s.notices[0].contains("fixed files"), "{:?}", s.notices);
    assert!(k.enabled);
}

#[test]
fn closed_fds_become_empty_slots() {
    let mut k = Fake {
        disabled: true,
        ..Fake::default()
    };
    let s = configure(&mut k, Sandbox::PrintOnly, true, [1, 1 << 30], &LOGS).unwrap();
    assert!(s.fixed_files && s.notices.is_empty(), "{s:?}");
    assert_eq!(k.files, [1, -1]);
}

fn ring(start_disabled: bool) -> Uring {
    Uring::new(UringConfig {
        sq_entries: 8,
        cq_entries: 16,
        sq_thread_idle_ms: 10,
        sq_thread_cpu: None,
        start_disabled,
        sqpoll: true,
    })
    .unwrap()
}

/// Against this machine's kernel: an SQPOLL ring created disabled has its SQ thread
/// already (it goes idle and sets NEED_WAKEUP), consumes nothing while disabled, refuses
/// io_uring_enter (EBADFD), and runs what waits once enabled, without a wakeup call.
#[test]
fn a_disabled_sqpoll_ring_consumes_nothing_until_enabled() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};
    let mut r = ring(true);
    let word = |r: &Uring, off: u32| {
        // SAFETY: a kernel-maintained u32 of the ring, at the kernel's offset.
        unsafe { &*(r.ring_word(off) as *const AtomicU32) }.load(Ordering::Acquire)
    };
    let (head, flags, cq_tail) = (r.params.sq_off.head, r.params.sq_off.flags, r.params.cq_off.tail);
    // Idle is 10 ms: the SQ thread sleeps by now, and says so.
    let until = Instant::now() + Duration::from_secs(10);
    while word(&r, flags) & IORING_SQ_NEED_WAKEUP == 0 {
        assert!(Instant::now() < until, "no SQ thread went idle on the disabled ring");
        std::thread::sleep(Duration::from_millis(5));
    }
    let nop = Sqe {
        opcode: IORING_OP_NOP,
        user_data: 42,
        ..Sqe::default()
    };
    // SAFETY: slot 0 of our SQE array; the kernel reads it only after the tail moves.
    unsafe { (r.sqes.as_ptr() as *mut Sqe).write(nop) };
    // SAFETY: as `word`; the release publishes the SQE.
    unsafe { &*(r.ring_word(r.params.sq_off.tail) as *const AtomicU32) }.store(1, Ordering::Release);
    r.wake_sqpoll();
    // SAFETY: io_uring_enter with no arguments touches no memory.
    let e = unsafe {
        libc::syscall(
            libc::SYS_io_uring_enter,
            r.fd(),
            0u32,
            0u32,
            IORING_ENTER_SQ_WAKEUP,
            0usize,
            0usize,
        )
    };
    assert_eq!(
        (e, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EBADFD))
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(word(&r, head), 0, "a disabled ring consumed an SQE");
    r.enable().unwrap();
    while word(&r, cq_tail) != 1 {
        assert!(
            Instant::now() < until + Duration::from_secs(10),
            "enabling did not start SQPOLL"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(word(&r, head), 1);
}

/// Against this machine's kernel: a disabled SQPOLL ring takes restrictions, files and
/// enabling, and refuses every `io_uring_register` call afterwards.
#[test]
fn the_kernel_takes_the_sandbox_and_locks_registration() {
    let mut r = ring(true);
    assert!(r.disabled, "this kernel (6.6+, for NO_MMAP) supports R_DISABLED");
    let buf = vec![0u8; 8192];
    let at = |i: u64| (buf.as_ptr() as u64 + i * 4096, 4096);
    let memory = Memory {
        logs: [at(0), at(1)],
        arena: (0, 0),
        solo_stage: (0, 0),
    };
    let s = configure(&mut r, Sandbox::PrintOnly, true, [1, 2], &memory).unwrap();
    assert!(s.fixed_logs, "{:?}", s.notices);
    assert_eq!((s.policy, s.fixed_files), (Sandbox::PrintOnly, true), "{:?}", s.notices);
    assert!(!r.disabled);
    let e = r.register_files(&[1]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    // Restrictions only on a disabled ring: an enabled one says EBADFD.
    let mut plain = ring(false);
    let e = plain
        .register_restrictions(&restrictions(Sandbox::PrintOnly, false, true))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADFD), "{e}");
}
