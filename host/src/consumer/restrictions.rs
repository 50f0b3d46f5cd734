//! The io_uring side of the sandbox: registering the print outputs as fixed files,
//! restricting a ring created disabled to a [`Sandbox`] policy, and enabling it (the
//! steps the [module documentation](super) lists).
//!
//! **No device SQE changes gpuio's own fixed files.** `IORING_REGISTER_RESTRICTIONS`
//! filters requests by opcode and SQE flags only: it cannot look at an `OPENAT`'s or a
//! `CLOSE`'s `file_index`, with which the request opens a file into, or closes, slot
//! `file_index - 1` of the ring's fixed files (and Linux 6.18 has no other filter of
//! io_uring requests). So the rule is kept by what the rings hold, which the kernel
//! enforces: `PrintOnly` registers stdout and stderr (slots 0 and 1) and allows neither
//! opcode; `FileIo`, which allows both, registers no file on any ring (the solo ring
//! included), so such a request gets the kernel's own `ENXIO` (no table; `ENFILE` for
//! `IORING_FILE_INDEX_ALLOC`) and touches nothing, and its prints name the raw fds. What
//! that costs `FileIo`'s prints: a later `dup2` onto the fds redirects them (as with
//! `Builder::fixed_files(false)`), and a device `CLOSE` of fd 1 stops them; but the same
//! raw `CLOSE` (and an `OPENAT` that takes the freed number) already reaches the process's
//! own stdout under `FileIo`, which confines no descriptor, so fixed files kept nothing
//! safe there. `Off` registers them and restricts nothing: a device request may replace
//! them. The fallback performs `file_index` as the kernel does, on its own table
//! (`consumer::fallback`), never on a descriptor of the process.

use std::io;
use std::os::fd::RawFd;

use gpuio_device::protocol::arena::buffer;
use gpuio_device::protocol::uapi::*;

use crate::consumer::fallback::HostRing;
use crate::consumer::submission::Queue;
use crate::consumer::uring::Uring;
use crate::error::{Error, Result};
use crate::sandbox::Sandbox;

/// What the runtime set up: the policy, fixed files and buffers actually in force, and
/// notices about what the kernel refused.
#[derive(Debug)]
pub(crate) struct Setup {
    pub(crate) policy: Sandbox,
    pub(crate) fixed_files: bool,
    /// The print logs are ring 0's registered buffers and prints are `WRITE_FIXED` from
    /// them: the kernel refuses any other address.
    pub(crate) fixed_logs: bool,
    /// Every ring holds the whole buffer table (`FileIo` only) and device transfers are
    /// `READ_FIXED`/`WRITE_FIXED` naming it: the kernel refuses any other address.
    pub(crate) fixed_transfers: bool,
    /// The highest opcode every ring's kernel knows: the policy's later ones are not
    /// allowed (`u8::MAX`: no limit known).
    pub(crate) last_op: u8,
    pub(crate) notices: Vec<String>,
}

impl Setup {
    /// The device context's `allowed_ops` word: the policy's opcodes that the kernel knows.
    pub(crate) fn allowed_ops(&self) -> u64 {
        let ops = self.policy.allowed_ops(self.fixed_buffers());
        if ops == u64::MAX || self.last_op >= 63 {
            ops
        } else {
            ops & ((2u64 << self.last_op) - 1)
        }
    }

    /// Whether the buffers the policy registers are in force (the restrictions and the
    /// device's opcodes follow it): `PrintOnly`'s logs, `FileIo`'s whole table.
    pub(crate) fn fixed_buffers(&self) -> bool {
        match self.policy {
            Sandbox::FileIo => self.fixed_transfers,
            _ => self.fixed_logs,
        }
    }
}

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

/// The restrictions that implement `policy` (not `Off`), with prints named by fixed file
/// or not, and the policy's buffers registered or not ([`Setup::fixed_buffers`]). One
/// `REGISTER_OP` entry at most, `FileIo`'s buffer updates (for host buffers made later):
/// once enabled, the ring refuses every other `io_uring_register` call.
#[cfg(test)]
pub(crate) fn restrictions(policy: Sandbox, fixed_files: bool, fixed_buffers: bool) -> Vec<Restriction> {
    restrictions_up_to(policy, fixed_files, fixed_buffers, u8::MAX)
}

/// [`restrictions`], leaving out opcodes past `last_op`, which the kernel does not know
/// (it refuses a restriction array that names one, whole).
pub(crate) fn restrictions_up_to(
    policy: Sandbox,
    fixed_files: bool,
    fixed_buffers: bool,
    last_op: u8,
) -> Vec<Restriction> {
    let entry = |opcode, arg| Restriction {
        opcode,
        arg,
        ..Restriction::default()
    };
    let mut r: Vec<Restriction> = policy
        .opcodes_with(fixed_buffers)
        .unwrap_or(&[])
        .iter()
        .filter(|&&op| op <= last_op)
        .map(|&op| entry(IORING_RESTRICTION_SQE_OP, op))
        .collect();
    if policy == Sandbox::FileIo && fixed_buffers {
        r.push(entry(
            IORING_RESTRICTION_REGISTER_OP,
            IORING_REGISTER_BUFFERS_UPDATE as u8,
        ));
    }
    // The flags the device's SQEs use: IOSQE_FIXED_FILE and IOSQE_IO_DRAIN on print
    // writes (drain: appending ones, `stream.rs`), nothing else. FileIo allows the first
    // although its rings hold no file table (`configure_all`): it then names no file, and
    // the request fails with EBADF, a plain error on io_uring and the fallback alike rather
    // than a refusal that the device's count (`Context::call`, by opcode) would miss.
    let flags = IOSQE_IO_DRAIN
        | if fixed_files || policy == Sandbox::FileIo {
            IOSQE_FIXED_FILE
        } else {
            0
        };
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

/// Steps 2 and 3 (see the module docs): registers the print outputs (`fds`: stdout,
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

/// Steps 4 and 5: restricts the ring to `want` (nothing under `Off`), its buffers in force
/// or not (`fixed_buffers`), and enables it. A kernel that refuses the restrictions cannot
/// enforce the sandbox: an error that says so.
pub(crate) fn restrict_and_enable(
    ring: &mut impl Register,
    want: Sandbox,
    fixed_files: bool,
    fixed_buffers: bool,
    last_op: u8,
) -> Result<()> {
    if want != Sandbox::Off {
        ring.register_restrictions(&restrictions_up_to(want, fixed_files, fixed_buffers, last_op))
            .map_err(|e| {
                Error::Config(format!(
                    "the kernel refused io_uring restrictions ({e}), so it cannot enforce sandbox \
                     {want:?}: use Submission::HostThread, whose thread enforces it, or Sandbox::Off \
                     to run without one"
                ))
            })?;
    }
    ring.enable().map_err(|e| Error::Os {
        what: "IORING_REGISTER_ENABLE_RINGS",
        source: e,
    })
}

/// [`register`], then [`restrict_and_enable`], for the rings of one runtime (ring 0, the
/// printing one, first): each registers `memory.table(want, i)`; the policy's buffers are
/// in force only where every ring that needed them took them (`PrintOnly`: ring 0's logs;
/// `FileIo`: every ring's table), and every ring is restricted alike. Under `FileIo` no
/// ring registers files, whatever `fixed_files` says (see the module docs).
pub(crate) fn configure_all<R: Register>(
    rings: &mut [&mut R],
    want: Sandbox,
    fixed_files: bool,
    fds: [RawFd; 2],
    memory: &Memory,
) -> Result<Setup> {
    // FileIo's rings take device OPENATs and CLOSEs, which may name a fixed-file slot
    // (`file_index`) that no restriction can forbid: with no table there, the kernel
    // answers ENXIO and no slot of gpuio's can be replaced or emptied.
    let fixed_files = fixed_files && want != Sandbox::FileIo;
    let mut regs = Vec::with_capacity(rings.len());
    // The opcodes every ring's kernel knows: a newer one (FTRUNCATE came with Linux 6.9) is
    // left out of the restrictions, so the kernel refuses it (EACCES) instead of refusing
    // the whole sandbox.
    let mut last_op = u8::MAX;
    for (i, ring) in rings.iter_mut().enumerate() {
        regs.push(register(
            *ring,
            want,
            fixed_files,
            fds,
            memory.table(want, i).as_deref(),
        )?);
        last_op = last_op.min(ring.last_op().unwrap_or(u8::MAX));
    }
    let first = &regs[0];
    // Prints name fixed files on ring 0 only, so its registration decides `fixed_files`; a
    // ring that took its restrictions without them would let a device write go to any fd
    // there.
    if let Some(other) = regs
        .iter()
        .find(|r| want != Sandbox::Off && r.fixed_files != first.fixed_files)
    {
        let why = first.notices.iter().chain(&other.notices).cloned().collect::<Vec<_>>();
        return Err(Error::Config(format!(
            "registering stdout/stderr as fixed files worked on one ring and not on another ({}), \
             so sandbox {want:?} cannot hold on every ring: use one ring (Builder::rings(1)) or \
             .fixed_files(false)",
            why.join("; ")
        )));
    }
    let fixed_logs = want != Sandbox::Off && first.buffers;
    let fixed_transfers = want == Sandbox::FileIo && regs.iter().all(|r| r.buffers);
    let mut setup = Setup {
        policy: want,
        fixed_files: first.fixed_files,
        fixed_logs,
        fixed_transfers,
        last_op,
        notices: Vec::new(),
    };
    for n in regs.iter().flat_map(|r| &r.notices) {
        if !setup.notices.contains(n) {
            setup.notices.push(n.clone());
        }
    }
    if let Some((e, _)) = regs.iter().find_map(|r| r.buffers_refused.as_ref()) {
        let total = regs
            .iter()
            .filter_map(|r| r.buffers_refused.as_ref().map(|b| b.1))
            .max()
            .unwrap_or(0);
        setup.notices.push(buffers_notice(want, total, rings.len(), e));
    }
    let fixed_buffers = setup.fixed_buffers();
    for ring in rings.iter_mut() {
        restrict_and_enable(*ring, want, setup.fixed_files, fixed_buffers, last_op)?;
    }
    Ok(setup)
}

/// What a failed registration of gpuio's memory (`bytes` on one ring, `rings` rings)
/// means, and the way out.
fn buffers_notice(want: Sandbox, bytes: u64, rings: usize, e: &io::Error) -> String {
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

/// The one-ring form of [`configure_all`].
#[cfg(test)]
pub(crate) fn configure(
    ring: &mut impl Register,
    want: Sandbox,
    fixed_files: bool,
    fds: [RawFd; 2],
    memory: &Memory,
) -> Result<Setup> {
    configure_all(&mut [ring], want, fixed_files, fds, memory)
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
