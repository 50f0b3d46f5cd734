//! The `io_uring_register(2)` operations a sandbox takes on each ring ([`Register`], on
//! io_uring and the host-thread fallback alike), and steps 2 and 3 of `crate::sandbox`'s
//! list: the print outputs as fixed files, gpuio's memory as buffers ([`register`]).

use std::io;
use std::os::fd::RawFd;

use gpuio_device::protocol::arena::buffer;
use gpuio_device::protocol::uapi::*;

use crate::consumer::fallback::HostRing;
use crate::consumer::submission::Queue;
use crate::consumer::uring::Uring;
use crate::error::{Error, Result};
use crate::sandbox::Sandbox;

/// gpuio's memory that a sandbox registers as the rings' buffers, as (address, length)
/// pairs at the kernel's addresses, laid out by `gpuio_device::protocol::arena::buffer`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Memory {
    /// stdout's and stderr's logs.
    pub(crate) logs: [(u64, u64); 2],
    /// The arena, whole.
    pub(crate) arena: (u64, u64),
    /// The solo ring's staging buffer ((0, 0) without a solo ring).
    pub(crate) solo_stage: (u64, u64),
}

impl Memory {
    /// The buffers ring `ring` (0 carries the prints) registers under `want`, if any:
    /// `PrintOnly`, ring 0 the logs; `FileIo`, every ring the whole table, the logs on ring
    /// 0 only (the others' log slots, and every ring's host-buffer slots, empty).
    pub(crate) fn table(&self, want: Sandbox, ring: usize) -> Option<Vec<(u64, u64)>> {
        match want {
            Sandbox::Off => None,
            Sandbox::PrintOnly => (ring == 0).then(|| self.logs.to_vec()),
            Sandbox::FileIo => {
                let mut t = vec![(0, 0); buffer::COUNT];
                if ring == 0 {
                    t[buffer::LOG as usize..][..2].copy_from_slice(&self.logs);
                }
                t[buffer::ARENA as usize] = self.arena;
                t[buffer::SOLO_STAGE as usize] = self.solo_stage;
                Some(t)
            }
        }
    }
}

/// The most one registered buffer may hold (`io_buffer_validate`: `EFAULT` past it).
pub(crate) const MAX_BUFFER: u64 = 1 << 30;

/// The `io_uring_register(2)` operations the sandbox needs (a trait, so that tests can play
/// a kernel that refuses them).
pub(crate) trait Register {
    /// Whether the ring was created disabled and is not enabled yet.
    fn is_disabled(&self) -> bool;
    /// `IORING_REGISTER_FILES` (-1: an empty slot).
    fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()>;
    /// `IORING_REGISTER_BUFFERS` of (address, length) pairs ((0, 0): an empty slot).
    fn register_buffers(&mut self, bufs: &[(u64, u64)]) -> io::Result<()>;
    /// `IORING_REGISTER_RESTRICTIONS`.
    fn register_restrictions(&mut self, r: &[Restriction]) -> io::Result<()>;
    /// `IORING_REGISTER_ENABLE_RINGS` (nothing if the ring is enabled).
    fn enable(&mut self) -> io::Result<()>;
    /// The highest opcode the ring knows (`IORING_REGISTER_PROBE`), where it can say:
    /// restrictions naming a later one are refused whole (`EINVAL`).
    fn last_op(&mut self) -> Option<u8> {
        None
    }
}

impl Register for HostRing {
    fn is_disabled(&self) -> bool {
        HostRing::is_disabled(self)
    }
    fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        HostRing::register_files(self, fds)
    }
    fn register_buffers(&mut self, bufs: &[(u64, u64)]) -> io::Result<()> {
        HostRing::register_buffers(self, bufs);
        Ok(())
    }
    fn register_restrictions(&mut self, r: &[Restriction]) -> io::Result<()> {
        HostRing::register_restrictions(self, r)
    }
    fn enable(&mut self) -> io::Result<()> {
        HostRing::enable(self);
        Ok(())
    }
}

impl Register for Uring {
    fn is_disabled(&self) -> bool {
        self.disabled
    }
    fn last_op(&mut self) -> Option<u8> {
        Uring::last_op(self).ok()
    }
    fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        // SAFETY: REGISTER_FILES reads `nr` i32 fds from `arg`.
        unsafe { self.register(IORING_REGISTER_FILES, fds.as_ptr().cast(), fds.len() as u32) }.map(drop)
    }
    fn register_buffers(&mut self, bufs: &[(u64, u64)]) -> io::Result<()> {
        let iov = crate::consumer::uring::iovecs(bufs);
        // SAFETY: REGISTER_BUFFERS reads `nr` iovecs from `arg` and pins the memory they
        // name (the logs, which outlive the ring: `Shared` drops its queues first).
        unsafe { self.register(IORING_REGISTER_BUFFERS, iov.as_ptr().cast(), iov.len() as u32) }.map(drop)
    }
    fn register_restrictions(&mut self, r: &[Restriction]) -> io::Result<()> {
        // SAFETY: REGISTER_RESTRICTIONS reads `nr` io_uring_restriction structs from `arg`.
        unsafe { self.register(IORING_REGISTER_RESTRICTIONS, r.as_ptr().cast(), r.len() as u32) }.map(drop)
    }
    fn enable(&mut self) -> io::Result<()> {
        Uring::enable(self)
    }
}

impl Register for Queue {
    fn is_disabled(&self) -> bool {
        match self {
            Queue::Uring(u) => Register::is_disabled(u),
            Queue::Host(h) => Register::is_disabled(h),
        }
    }
    fn register_files(&mut self, fds: &[RawFd]) -> io::Result<()> {
        match self {
            Queue::Uring(u) => Register::register_files(u, fds),
            Queue::Host(h) => Register::register_files(h, fds),
        }
    }
    fn register_buffers(&mut self, bufs: &[(u64, u64)]) -> io::Result<()> {
        match self {
            Queue::Uring(u) => Register::register_buffers(u, bufs),
            Queue::Host(h) => Register::register_buffers(h, bufs),
        }
    }
    fn register_restrictions(&mut self, r: &[Restriction]) -> io::Result<()> {
        match self {
            Queue::Uring(u) => Register::register_restrictions(u, r),
            Queue::Host(h) => Register::register_restrictions(h, r),
        }
    }
    fn enable(&mut self) -> io::Result<()> {
        match self {
            Queue::Uring(u) => Register::enable(u),
            Queue::Host(h) => Register::enable(h),
        }
    }
    fn last_op(&mut self) -> Option<u8> {
        match self {
            Queue::Uring(u) => Register::last_op(u),
            Queue::Host(h) => Register::last_op(h),
        }
    }
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

/// What one ring took of the registrations ([`register`]).
#[derive(Debug)]
pub(crate) struct Registered {
    /// The print outputs are its fixed files.
    pub(crate) fixed_files: bool,
    /// Its buffer table was registered (`true` where it was given none).
    pub(crate) buffers: bool,
    /// Why the buffers were not registered, and how many bytes they were.
    pub(crate) buffers_refused: Option<(io::Error, u64)>,
    pub(crate) notices: Vec<String>,
}

/// Steps 2 and 3 (`crate::sandbox` lists them): registers the print outputs (`fds`: stdout,
/// stderr; slots 0 and 1) if `fixed_files`, and `table` as the ring's buffers. Files the
/// kernel does not take are done without, with a notice; buffers it does not take (or over
/// [`MAX_BUFFER`]) are reported in [`Registered::buffers_refused`], for the caller to say
/// once for every ring ([`buffers_notice`]). A sandbox on a ring that was not created
/// disabled cannot be enforced: an error that says so (never a silent `Off`).
pub(crate) fn register(
    ring: &mut impl Register,
    want: Sandbox,
    fixed_files: bool,
    fds: [RawFd; 2],
    table: Option<&[(u64, u64)]>,
) -> Result<Registered> {
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
    if want != Sandbox::Off && !ring.is_disabled() {
        return Err(Error::Config(format!(
            "this kernel cannot create an io_uring disabled (IORING_SETUP_R_DISABLED, Linux 5.10), so \
             it cannot enforce sandbox {want:?}: use Submission::HostThread, whose thread enforces \
             it, or Sandbox::Off to run without one"
        )));
    }
    let buffers_refused = match table {
        None => None,
        Some(bufs) => {
            let total = bufs.iter().map(|b| b.1).sum();
            if bufs.iter().any(|b| b.1 > MAX_BUFFER) {
                Some((io::Error::from_raw_os_error(libc::EFAULT), total))
            } else {
                ring.register_buffers(bufs).err().map(|e| (e, total))
            }
        }
    };
    Ok(Registered {
        fixed_files,
        buffers: buffers_refused.is_none(),
        buffers_refused,
        notices,
    })
}

/// What a failed registration of gpuio's memory (`bytes` on one ring, `rings` rings)
/// means, and the way out.
pub(super) fn buffers_notice(want: Sandbox, bytes: u64, rings: usize, e: &io::Error) -> String {
    let mib = |b: u64| b.div_ceil(1 << 20);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `limit`.
    let memlock = match unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } {
        0 if limit.rlim_cur != libc::RLIM_INFINITY => format!(" (RLIMIT_MEMLOCK is {} MiB)", mib(limit.rlim_cur)),
        _ => String::new(),
    };
    let (what, loose, smaller) = match want {
        Sandbox::FileIo => (
            "gpuio's memory (the print logs, the file-I/O arena, the solo ring's buffer)",
            "a device print or file transfer may read or write any host address",
            "the logs or the arena smaller (Builder::log_bytes, Builder::arena_bytes) or fewer rings",
        ),
        _ => (
            "the print logs",
            "a device write may read any host address",
            "the logs smaller (Builder::log_bytes)",
        ),
    };
    let on = if rings > 1 && want == Sandbox::FileIo {
        format!(" on each of {rings} rings")
    } else {
        String::new()
    };
    let total = bytes * if want == Sandbox::FileIo { rings as u64 } else { 1 };
    if e.raw_os_error() == Some(libc::EFAULT) {
        return format!(
            "gpuio: {what} cannot be io_uring buffers: one is over the 1 GiB a registered buffer may \
             hold; sandbox {want:?} still limits opcodes and files, but {loose}. To confine it, make \
             {smaller}"
        );
    }
    format!(
        "gpuio: registering {what} ({} MiB{on}) as io_uring buffers failed ({e}){memlock}; sandbox \
         {want:?} still limits opcodes and files, but {loose}. To confine it, raise the locked-memory \
         limit above {} MiB (ulimit -l), give the process CAP_IPC_LOCK, or make {smaller}",
        mib(bytes),
        mib(total)
    )
}
