//! The io_uring side of the sandbox: the steps `crate::sandbox`'s documentation lists, on
//! each ring of a runtime ([`configure_all`]). The policy is here: which restrictions a
//! [`Sandbox`] makes, what the rings' registrations leave in force ([`Setup`]), restricting
//! a ring created disabled and enabling it; the `io_uring_register(2)` calls themselves
//! (fixed files, buffers) are `register`'s, on io_uring and the fallback alike.
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

use std::os::fd::RawFd;

use gpuio_device::protocol::uapi::*;

use crate::error::{Error, Result};
use crate::sandbox::Sandbox;

mod register;

use register::{buffers_notice, register};
pub(crate) use register::{Memory, Register};

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

/// [`register()`], then [`restrict_and_enable`], for the rings of one runtime (ring 0, the
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
mod tests;
