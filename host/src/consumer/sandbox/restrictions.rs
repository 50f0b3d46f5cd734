//! The io_uring side of the sandbox: registering the print outputs as fixed files,
//! restricting a ring created disabled to a [`Sandbox`] policy, and enabling it (the
//! steps the [module documentation](super) lists).

use std::io;
use std::os::fd::RawFd;

use gpuio_device::uapi::*;

use super::Sandbox;
use crate::consumer::uring::Uring;
use crate::error::{Error, Result};

/// What the runtime set up: the policy and fixed files actually in force, and notices
/// about what the kernel refused.
#[derive(Debug)]
pub(crate) struct Setup {
    pub(crate) policy: Sandbox,
    pub(crate) fixed_files: bool,
    pub(crate) notices: Vec<String>,
}

/// The `io_uring_register(2)` operations the sandbox needs (a trait, so that tests can play
/// a kernel that refuses them).
pub(crate) trait Register {
    /// Whether the ring was created disabled and is not enabled yet.
    fn is_disabled(&self) -> bool;
    /// `IORING_REGISTER_FILES` (-1: an empty slot).
    fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()>;
    /// `IORING_REGISTER_RESTRICTIONS`.
    fn register_restrictions(&mut self, r: &[Restriction]) -> io::Result<()>;
    /// `IORING_REGISTER_ENABLE_RINGS` (nothing if the ring is enabled).
    fn enable(&mut self) -> io::Result<()>;
}

impl Register for Uring {
    fn is_disabled(&self) -> bool {
        self.disabled
    }
    fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        // SAFETY: REGISTER_FILES reads `nr` i32 fds from `arg`.
        unsafe { self.register(IORING_REGISTER_FILES, fds.as_ptr().cast(), fds.len() as u32) }.map(drop)
    }
    fn register_restrictions(&mut self, r: &[Restriction]) -> io::Result<()> {
        // SAFETY: REGISTER_RESTRICTIONS reads `nr` io_uring_restriction structs from `arg`.
        unsafe { self.register(IORING_REGISTER_RESTRICTIONS, r.as_ptr().cast(), r.len() as u32) }.map(drop)
    }
    fn enable(&mut self) -> io::Result<()> {
        Uring::enable(self)
    }
}

/// The restrictions that implement `policy` (not `Off`). No `REGISTER_OP` entry: once
/// enabled, the ring refuses every `io_uring_register` call.
pub(crate) fn restrictions(policy: Sandbox, fixed_files: bool) -> Vec<Restriction> {
    let entry = |opcode, arg| Restriction {
        opcode,
        arg,
        ..Restriction::default()
    };
    let mut r: Vec<Restriction> = policy
        .opcodes()
        .unwrap_or(&[])
        .iter()
        .map(|&op| entry(IORING_RESTRICTION_SQE_OP, op))
        .collect();
    // The flags the device's SQEs use: IOSQE_FIXED_FILE and IOSQE_IO_DRAIN on print
    // writes (drain: appending ones, `stream.rs`), nothing else.
    let flags = IOSQE_IO_DRAIN | if fixed_files { IOSQE_FIXED_FILE } else { 0 };
    r.push(entry(IORING_RESTRICTION_SQE_FLAGS_ALLOWED, flags));
    if policy == Sandbox::PrintOnly && fixed_files {
        r.push(entry(IORING_RESTRICTION_SQE_FLAGS_REQUIRED, IOSQE_FIXED_FILE));
    }
    r
}

/// The registered-file table for `fds`: a closed fd becomes an empty slot (-1), so that
/// writes to it fail with `EBADF` at run time, as they would without fixed files.
pub(crate) fn file_slots(fds: [RawFd; 2]) -> [RawFd; 2] {
    fds.map(|fd| {
        // SAFETY: F_GETFD only queries the descriptor.
        if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            -1
        } else {
            fd
        }
    })
}

/// Registers the print outputs (`fds`: stdout, stderr; slots 0 and 1) if `fixed_files`,
/// restricts the ring to `want` if it was created disabled, and enables it. What the
/// kernel refuses is turned off with a notice; only a failure to enable is an error.
pub(crate) fn configure(ring: &mut impl Register, want: Sandbox, fixed_files: bool, fds: [RawFd; 2]) -> Result<Setup> {
    let mut notices = Vec::new();
    let fixed_files = fixed_files
        && match ring.register_files(&file_slots(fds)) {
            Ok(()) => true,
            Err(e) => {
                notices.push(format!(
                    "gpuio: registering stdout/stderr as io_uring fixed files failed ({e}); prints name raw fds"
                ));
                false
            }
        };
    let policy = match want {
        Sandbox::Off => Sandbox::Off,
        _ if !ring.is_disabled() => {
            notices.push(format!(
                "gpuio: this kernel cannot create an io_uring disabled (IORING_SETUP_R_DISABLED, Linux 5.10); \
                 sandbox {want:?} is off"
            ));
            Sandbox::Off
        }
        _ => match ring.register_restrictions(&restrictions(want, fixed_files)) {
            Ok(()) => want,
            Err(e) => {
                notices.push(format!(
                    "gpuio: the kernel refused io_uring restrictions ({e}); sandbox {want:?} is off"
                ));
                Sandbox::Off
            }
        },
    };
    ring.enable().map_err(|e| Error::Os {
        what: "IORING_REGISTER_ENABLE_RINGS",
        source: e,
    })?;
    Ok(Setup {
        policy,
        fixed_files,
        notices,
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::uring::UringConfig;

    #[test]
    fn restrictions_match_the_policy() {
        let r = restrictions(Sandbox::PrintOnly, true);
        let ops: Vec<u8> = r
            .iter()
            .filter(|e| e.opcode == IORING_RESTRICTION_SQE_OP)
            .map(|e| e.arg)
            .collect();
        assert_eq!(ops, [IORING_OP_WRITE]);
        let find = |r: &[Restriction], op| r.iter().find(|e| e.opcode == op).map(|e| e.arg);
        assert_eq!(find(&r, IORING_RESTRICTION_SQE_FLAGS_REQUIRED), Some(IOSQE_FIXED_FILE));
        assert_eq!(
            find(&r, IORING_RESTRICTION_SQE_FLAGS_ALLOWED),
            Some(IOSQE_FIXED_FILE | IOSQE_IO_DRAIN)
        );
        assert_eq!(find(&r, IORING_RESTRICTION_REGISTER_OP), None);
        // Without fixed files: writes to any fd, no flag but the drain.
        let r = restrictions(Sandbox::PrintOnly, false);
        assert_eq!(find(&r, IORING_RESTRICTION_SQE_FLAGS_REQUIRED), None);
        assert_eq!(find(&r, IORING_RESTRICTION_SQE_FLAGS_ALLOWED), Some(IOSQE_IO_DRAIN));
        // FileIo: OPENAT refuses IOSQE_FIXED_FILE, so it is allowed, never required.
        let r = restrictions(Sandbox::FileIo, true);
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
        files: Vec<RawFd>,
        restrictions: usize,
        enabled: bool,
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
        fn register_restrictions(&mut self, r: &[Restriction]) -> io::Result<()> {
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

    #[test]
    fn a_kernel_that_refuses_restrictions_leaves_the_sandbox_off_with_a_notice() {
        let mut k = Fake {
            disabled: true,
            refuse_restrictions: Some(libc::EINVAL),
            ..Fake::default()
        };
        let s = configure(&mut k, Sandbox::PrintOnly, true, [1, 2]).unwrap();
        assert_eq!(s.policy, Sandbox::Off);
        assert!(s.fixed_files);
        assert_eq!(s.notices.len(), 1, "{:?}", s.notices);
        assert!(
            s.notices[0].contains("refused io_uring restrictions"),
            "{}",
            s.notices[0]
        );
        assert!(k.enabled, "the ring must still be enabled");
    }

    #[test]
    fn a_kernel_without_r_disabled_leaves_the_sandbox_off_with_a_notice() {
        let mut k = Fake::default(); // created enabled: the kernel refused R_DISABLED
        let s = configure(&mut k, Sandbox::FileIo, true, [1, 2]).unwrap();
        assert_eq!(s.policy, Sandbox::Off);
        assert_eq!(k.restrictions, 0);
        assert!(s.notices[0].contains("R_DISABLED"), "{:?}", s.notices);
    }

    #[test]
    fn unregistrable_files_fall_back_to_raw_fds_with_a_notice() {
        let mut k = Fake {
            disabled: true,
            refuse_files: Some(libc::EMFILE),
            ..Fake::default()
        };
        let s = configure(&mut k, Sandbox::PrintOnly, true, [1, 2]).unwrap();
        assert!(!s.fixed_files);
        // Writes only, and no FIXED_FILE required: the prints name raw fds.
        assert_eq!(s.policy, Sandbox::PrintOnly);
        assert_eq!(k.restrictions, restrictions(Sandbox::PrintOnly, false).len());
        assert!(s.notices[0].contains("fixed files"), "{:?}", s.notices);
        assert!(k.enabled);
    }

    #[test]
    fn closed_fds_become_empty_slots() {
        let mut k = Fake {
            disabled: true,
            ..Fake::default()
        };
        let s = configure(&mut k, Sandbox::PrintOnly, true, [1, 1 << 30]).unwrap();
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
        let s = configure(&mut r, Sandbox::PrintOnly, true, [1, 2]).unwrap();
        assert_eq!((s.policy, s.fixed_files), (Sandbox::PrintOnly, true), "{:?}", s.notices);
        assert!(!r.disabled);
        let e = r.register_files(&[1]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
        // Restrictions only on a disabled ring: an enabled one says EBADFD.
        let mut plain = ring(false);
        let e = plain
            .register_restrictions(&restrictions(Sandbox::PrintOnly, false))
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADFD), "{e}");
    }
}
