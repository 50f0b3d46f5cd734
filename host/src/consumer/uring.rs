//! Creating the io_uring: raw syscalls, `SQPOLL | NO_MMAP | NO_SQARRAY`, on memory we own
//! (on the CPU backend, where it takes io_uring at all, by default without `SQPOLL`: the
//! waker enters the ring, see [`UringConfig::sqpoll`]; its default is no io_uring, the
//! kernel threads performing the requests inline).
//!
//! The `io-uring` crate cannot do `NO_MMAP`, hides the ring pointers and writes its cached
//! SQ tail back on drop (it would clobber the device's tail), so we talk to the kernel
//! directly. Our own UAPI copy lives in `gpuio_device::protocol::uapi`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use gpuio_device::protocol::uapi::*;

pub use crate::consumer::waker::Look;
use crate::error::{Error, Result};
use crate::memory::{page_size, round_up, Mapping};

/// Size the kernel gives `struct io_rings` before the CQE array, with slack: the kernel
/// reports the real offsets after setup and we check them against what we mapped.
const RINGS_HEADER: usize = 4096;

/// A live io_uring whose rings live in memory we mapped.
pub struct Uring {
    /// Rings first, so the kernel releases its pins before we unmap.
    fd: OwnedFd,
    /// `io_uring_setup`'s output.
    pub params: Params,
    /// SQE array.
    pub sqes: Mapping,
    /// Heads, tails, flags and CQEs.
    pub rings: Mapping,
    /// Created with `IORING_SETUP_R_DISABLED` and not enabled yet: SQPOLL consumes nothing
    /// until [`Uring::enable`] (see `crate::sandbox`).
    pub disabled: bool,
    /// The errno of the last wake-up of SQPOLL that failed (0: none did). A hang report
    /// names it: output stops when SQPOLL sleeps and cannot be woken.
    wake_errno: std::sync::atomic::AtomicI32,
    /// Made with SQPOLL; otherwise the waker submits with `io_uring_enter`.
    sqpoll: bool,
}

/// Ring configuration.
#[derive(Clone, Copy, Debug)]
pub struct UringConfig {
    /// SQ entries (power of two).
    pub sq_entries: u32,
    /// CQ entries (power of two, >= sq_entries).
    pub cq_entries: u32,
    /// Milliseconds of idleness before SQPOLL sleeps.
    pub sq_thread_idle_ms: u32,
    /// The CPU to bind the SQPOLL thread to (`IORING_SETUP_SQ_AFF`); `None`: unbound.
    pub sq_thread_cpu: Option<u32>,
    /// Create the ring disabled (`IORING_SETUP_R_DISABLED`), so that restrictions can be
    /// registered before it runs anything. A kernel that refuses the flag (before 5.10)
    /// gets an enabled ring; [`Uring::disabled`] says which it is.
    pub start_disabled: bool,
    /// Made with `IORING_SETUP_SQPOLL`, a kernel thread polling the SQ: what a GPU needs,
    /// since it cannot make a syscall. Without it (`false`, the default of the CPU backend's
    /// io_uring rings) nothing polls: the host's waker submits what kernel threads published
    /// (`io_uring_enter` with `to_submit`), when their doorbell unparks it or at its next
    /// look. On a busy CPU that is the more prompt consumer: SQPOLL polls for its whole
    /// fair share of a core and then waits for the scheduler's tick, while a thread that
    /// sleeps until there is work is run soon after it is woken.
    pub sqpoll: bool,
}

#[cfg(test)]
impl UringConfig {
    /// Rings of `sq_entries` and `cq_entries` as the tests make them: SQPOLL, idle after 1 ms,
    /// unbound, enabled.
    pub(crate) const fn sized(sq_entries: u32, cq_entries: u32) -> UringConfig {
        UringConfig {
            sq_entries,
            cq_entries,
            sq_thread_idle_ms: 1,
            sq_thread_cpu: None,
            start_disabled: false,
            sqpoll: true,
        }
    }
}

/// The most SQ entries the kernel accepts (`IORING_MAX_ENTRIES`).
pub const MAX_SQ_ENTRIES: u32 = 32768;
/// The most CQ entries the kernel accepts (`IORING_MAX_CQ_ENTRIES`).
pub const MAX_CQ_ENTRIES: u32 = 2 * MAX_SQ_ENTRIES;

impl Uring {
    /// Creates the ring (see the module docs).
    pub fn new(cfg: UringConfig) -> Result<Uring> {
        Uring::create(cfg, None)
    }

    /// Creates a ring served by `to`'s SQPOLL thread (`IORING_SETUP_ATTACH_WQ`): no thread
    /// of its own, so `cfg.sq_thread_cpu` is ignored (the thread is bound where `to`'s is).
    pub fn attached(cfg: UringConfig, to: &Uring) -> Result<Uring> {
        Uring::create(
            UringConfig {
                sq_thread_cpu: None,
                ..cfg
            },
            Some(to.fd()),
        )
    }

    /// Maps the SQE array and the rings, sets the ring up over them (attached to `attach`'s
    /// SQPOLL thread if given), and checks what the kernel made of it.
    fn create(cfg: UringConfig, attach: Option<RawFd>) -> Result<Uring> {
        check_sizes(&cfg)?;
        let sqes = Mapping::new(cfg.sq_entries as usize * size_of::<Sqe>()).map_err(|e| Error::Os {
            what: "mmap of the SQE array",
            source: e,
        })?;
        let rings_len = round_up(RINGS_HEADER + cfg.cq_entries as usize * size_of::<Cqe>(), page_size());
        let rings = Mapping::new(rings_len).map_err(|e| Error::Os {
            what: "mmap of the rings",
            source: e,
        })?;
        let (mut fd, mut p, mut err) = setup(&cfg, attach, cfg.start_disabled, &sqes, &rings);
        let mut disabled = cfg.start_disabled;
        if fd < 0 && disabled && err.raw_os_error() == Some(libc::EINVAL) {
            // R_DISABLED is older (5.10) than NO_MMAP (6.6), but say so rather than guess.
            (fd, p, err) = setup(&cfg, attach, false, &sqes, &rings);
            disabled = false;
        }
        if fd < 0 {
            return Err(setup_failed(&cfg, attach, err));
        }
        // SAFETY: the syscall returned a new file descriptor that we alone own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        check_layout(&cfg, &p, &rings)?;
        Ok(Uring {
            fd,
            params: p,
            sqes,
            rings,
            disabled,
            wake_errno: std::sync::atomic::AtomicI32::new(0),
            sqpoll: cfg.sqpoll,
        })
    }

    /// `io_uring_register(2)`: `op` with `nr` arguments at `arg`; returns the result.
    ///
    /// # Safety
    /// `arg` points to what `op` reads (and writes): `nr` elements of its argument type.
    pub unsafe fn register(&self, op: u32, arg: *const std::ffi::c_void, nr: u32) -> io::Result<i32> {
        // SAFETY: the caller's contract on `arg`; the fd is our ring.
        let r = unsafe { libc::syscall(libc::SYS_io_uring_register, self.fd(), op, arg, nr) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as i32)
        }
    }

    /// `IORING_REGISTER_BUFFERS_UPDATE`: registered buffers `offset..` become `bufs`
    /// ((address, length); (0, 0) empties a slot). The kernel keeps a replaced buffer pinned
    /// until the requests that use it complete.
    pub fn update_buffers(&self, offset: u32, bufs: &[(u64, u64)]) -> io::Result<()> {
        let iov = iovecs(bufs);
        let up = RsrcUpdate {
            offset,
            data: iov.as_ptr() as u64,
            nr: iov.len() as u32,
            ..RsrcUpdate::default()
        };
        // SAFETY: BUFFERS_UPDATE reads one io_uring_rsrc_update2 (its size is `nr`) and the
        // `up.nr` iovecs it points to, and pins the memory they name: the caller's, which
        // it keeps mapped until the slot is emptied again.
        unsafe {
            self.register(
                IORING_REGISTER_BUFFERS_UPDATE,
                (&raw const up).cast(),
                size_of::<RsrcUpdate>() as u32,
            )
        }
        .map(drop)
    }

    /// `IORING_REGISTER_ENABLE_RINGS`: a ring created disabled starts running (its SQPOLL
    /// thread, created with the ring, starts consuming SQEs).
    pub fn enable(&mut self) -> io::Result<()> {
        if self.disabled {
            // SAFETY: ENABLE_RINGS takes no argument.
            unsafe { self.register(IORING_REGISTER_ENABLE_RINGS, std::ptr::null(), 0) }?;
            self.disabled = false;
        }
        Ok(())
    }

    /// Checks that this process may make the two calls the runtime needs after setup:
    /// `io_uring_enter` (to wake SQPOLL when it sleeps) and `io_uring_register` (files,
    /// logs, restrictions). A seccomp filter can block either alone; without the first,
    /// output would stop the first time SQPOLL went to sleep, without the second the
    /// sandbox could not be set. Returns the blocked call and its error.
    pub fn check_calls(&self) -> std::result::Result<(), (&'static str, io::Error)> {
        // No submissions, no flags: a call that does nothing (a disabled ring answers
        // EBADFD, which still shows the call reached io_uring).
        // SAFETY: io_uring_enter with no arguments touches no memory.
        let r = unsafe { libc::syscall(libc::SYS_io_uring_enter, self.fd(), 0u32, 0u32, 0u32, 0usize, 0usize) };
        let err = io::Error::last_os_error();
        if r < 0 && matches!(err.raw_os_error(), Some(libc::EPERM | libc::ENOSYS | libc::EACCES)) {
            return Err(("io_uring_enter", err));
        }
        // IORING_REGISTER_PROBE into a zeroed header with room for no opcodes: reads nothing
        // but the header, changes nothing.
        let mut probe = [0u8; 16];
        // SAFETY: REGISTER_PROBE reads and writes `size_of(io_uring_probe) + nr * 8` bytes
        // at `arg`: 16 bytes for nr 0, ours and writable.
        match unsafe { self.register(IORING_REGISTER_PROBE, probe.as_mut_ptr().cast(), 0) } {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS | libc::EACCES)) => {
                Err(("io_uring_register", e))
            }
            _ => Ok(()),
        }
    }

    /// The highest opcode this kernel knows (`IORING_REGISTER_PROBE`'s `last_op`).
    pub fn last_op(&self) -> io::Result<u8> {
        let mut probe = [0u8; 16];
        // SAFETY: as in `check_calls`: 16 bytes for nr 0, ours and writable.
        unsafe { self.register(IORING_REGISTER_PROBE, probe.as_mut_ptr().cast(), 0) }?;
        Ok(probe[0])
    }

    /// The ring's file descriptor.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Address of a u32 in the rings region at `off`.
    pub fn ring_word(&self, off: u32) -> *mut u32 {
        // SAFETY: `off` is one of the kernel's offsets, checked against the mapping in new.
        unsafe { self.rings.as_ptr().add(off as usize) as *mut u32 }
    }

    /// Wakes the SQPOLL thread (`IORING_ENTER_SQ_WAKEUP`). A failure is kept for the hang
    /// report ([`Uring::wake_error`]).
    pub fn wake_sqpoll(&self) {
        // SAFETY: no submissions: the call touches no memory of ours.
        unsafe { self.enter(0, IORING_ENTER_SQ_WAKEUP) }
    }

    /// Submits up to `n` SQEs from the ring (one without SQPOLL): `io_uring_enter` with
    /// `to_submit`, no wait. The kernel takes what lies between its head and the tail and
    /// issues each request (at once where it can without blocking, else on its io-wq
    /// workers). A failure is kept for the hang report ([`Uring::wake_error`]).
    pub(crate) fn submit(&self, n: u32) {
        // SAFETY: the SQEs below the tail were published whole by the device (invariant 1),
        // and the memory they name (payloads, read destinations) stays valid, and owned by
        // the request, until its completion is reaped: the protocol keeps it so.
        unsafe { self.enter(n, 0) }
    }

    /// `io_uring_enter(fd, to_submit, 0, flags)` without an argument pointer; a failure's
    /// errno is kept for the hang report ([`Uring::wake_error`]).
    ///
    /// # Safety
    /// With `to_submit` > 0 the kernel performs the SQEs below the tail: reads and writes
    /// the buffers they name and posts CQEs into our CQ. Those SQEs must be whole and their
    /// buffers valid until their completions are reaped.
    unsafe fn enter(&self, to_submit: u32, flags: u32) {
        // SAFETY: the caller vouches for the SQEs; no wait and no argument pointer, so the
        // call reads nothing else of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                self.fd(),
                to_submit,
                0u32,
                flags,
                0usize,
                0usize,
            )
        };
        if r < 0 {
            let errno = io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            // Relaxed: a diagnostic, read by the hang report.
            self.wake_errno.store(errno, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The kernel-maintained u32 at `off` in the rings region (the SQ's head, tail, flags).
    fn word(&self, off: u32, order: std::sync::atomic::Ordering) -> u32 {
        // SAFETY: `off` is one of the kernel's offsets of an aligned u32 in our mapping,
        // which lives as long as `self`; the kernel and the device change it only atomically.
        unsafe { &*(self.ring_word(off) as *const std::sync::atomic::AtomicU32) }.load(order)
    }

    /// Whether SQEs wait unconsumed (the kernel's SQ head is behind the tail): two loads.
    pub(crate) fn sq_waiting(&self) -> bool {
        // Relaxed: a hint for whether to wake the waker; nothing is read through it.
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        self.word(self.params.sq_off.tail, relaxed) != self.word(self.params.sq_off.head, relaxed)
    }

    /// Whether the ring was made with SQPOLL ([`UringConfig::sqpoll`]).
    pub fn sqpoll(&self) -> bool {
        self.sqpoll
    }

    /// The errno of the last failed wake-up of SQPOLL (or submission), if one failed.
    pub fn wake_error(&self) -> Option<std::num::NonZeroI32> {
        std::num::NonZeroI32::new(self.wake_errno.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl Uring {
    /// Wakes SQPOLL if it sleeps while SQEs wait (invariant 9), or, on a ring without
    /// SQPOLL, submits the SQEs that wait. Reads only the kernel's head, tail and flags: it
    /// never touches data, and makes no syscall unless SQEs wait for it. Says what it saw
    /// and whether it woke SQPOLL (or submitted).
    pub fn wake_if_needed(&self) -> Look {
        // Acquire: pairs with the Release stores of these words (the device's of the tail,
        // the kernel's of the head and flags); only the words themselves are used.
        let word = |off: u32| self.word(off, std::sync::atomic::Ordering::Acquire);
        let p = &self.params;
        let tail = word(p.sq_off.tail);
        let head = word(p.sq_off.head);
        let waiting = tail != head;
        if !self.sqpoll {
            if waiting {
                self.submit(tail.wrapping_sub(head));
            }
            return Look {
                tail,
                waiting,
                woke: waiting,
            };
        }
        let woke = waiting && word(p.sq_off.flags) & IORING_SQ_NEED_WAKEUP != 0;
        if woke {
            self.wake_sqpoll();
        }
        Look { tail, waiting, woke }
    }
}

/// `/proc/sys/kernel/io_uring_disabled`, if readable.
fn read_io_uring_disabled() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Explains why `io_uring_setup` failed, naming the cause.
pub fn diagnose_setup(err: io::Error, io_uring_disabled: Option<u32>) -> Error {
    let why = match err.raw_os_error() {
        Some(libc::ENOSYS) => "io_uring_setup returned ENOSYS: this kernel has no io_uring support".to_string(),
        Some(libc::EPERM) => match io_uring_disabled {
            Some(2) => {
                "io_uring_setup returned EPERM: io_uring is disabled system-wide (sysctl kernel.io_uring_disabled=2)"
                    .to_string()
            }
            Some(1) => "io_uring_setup returned EPERM: io_uring is limited to the group in kernel.io_uring_group \
                        (sysctl kernel.io_uring_disabled=1) and this process is not in it"
                .to_string(),
            _ => "io_uring_setup returned EPERM: blocked by a seccomp filter or security module \
                  (Docker's default seccomp profile does this)"
                .to_string(),
        },
        Some(libc::EINVAL) => "io_uring_setup returned EINVAL: the kernel rejects SQPOLL|NO_MMAP|NO_SQARRAY \
                               (these need Linux 6.6 or newer)"
            .to_string(),
        Some(libc::ENOMEM) => "io_uring_setup returned ENOMEM: out of memory or over RLIMIT_MEMLOCK".to_string(),
        _ => format!("io_uring_setup failed: {err}"),
    };
    Error::UringUnavailable(why)
}

/// Refuses ring sizes the kernel would refuse, before anything is mapped: a larger size
/// would have us map and populate gigabytes, only for the kernel to refuse it with an
/// EINVAL we would blame on the setup flags.
fn check_sizes(cfg: &UringConfig) -> Result<()> {
    if !cfg.sq_entries.is_power_of_two()
        || !cfg.cq_entries.is_power_of_two()
        || cfg.cq_entries < cfg.sq_entries
        || cfg.sq_entries > MAX_SQ_ENTRIES
        || cfg.cq_entries > MAX_CQ_ENTRIES
    {
        return Err(Error::Config(format!(
            "ring sizes must be powers of two with cq >= sq, sq <= {MAX_SQ_ENTRIES} and cq <= \
             {MAX_CQ_ENTRIES} (the kernel's limits): sq {}, cq {}",
            cfg.sq_entries, cfg.cq_entries
        )));
    }
    Ok(())
}

/// `io_uring_setup` over our `sqes` and `rings` (`IORING_SETUP_NO_MMAP`), `disabled` or
/// not: the fd (negative on failure), the params the kernel filled in, and errno.
fn setup(
    cfg: &UringConfig,
    attach: Option<RawFd>,
    disabled: bool,
    sqes: &Mapping,
    rings: &Mapping,
) -> (libc::c_long, Params, io::Error) {
    let mut p = Params {
        flags: IORING_SETUP_NO_MMAP | IORING_SETUP_NO_SQARRAY | IORING_SETUP_CQSIZE,
        cq_entries: cfg.cq_entries,
        ..Params::default()
    };
    if cfg.sqpoll {
        p.flags |= IORING_SETUP_SQPOLL;
        p.sq_thread_idle = cfg.sq_thread_idle_ms;
    } else {
        // One refused SQE (a sandbox refusal) must not hold the rest until the next look.
        p.flags |= IORING_SETUP_SUBMIT_ALL;
    }
    if disabled {
        p.flags |= IORING_SETUP_R_DISABLED;
    }
    // Without SQPOLL there is no thread to share (and io-wq is per submitting thread).
    if let Some(fd) = attach.filter(|_| cfg.sqpoll) {
        p.flags |= IORING_SETUP_ATTACH_WQ;
        p.wq_fd = fd as u32;
    }
    if let Some(cpu) = cfg.sq_thread_cpu.filter(|_| cfg.sqpoll) {
        p.flags |= IORING_SETUP_SQ_AFF;
        p.sq_thread_cpu = cpu;
    }
    p.sq_off.user_addr = sqes.as_ptr() as u64;
    p.cq_off.user_addr = rings.as_ptr() as u64;
    // SAFETY: io_uring_setup reads and writes `p` (a valid io_uring_params) and pins the two
    // mappings, which outlive the fd (`Uring`'s field order drops the fd first).
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, cfg.sq_entries, &mut p as *mut Params) };
    (fd, p, io::Error::last_os_error())
}

/// Why `io_uring_setup` failed with `err`, as a person can act on it.
fn setup_failed(cfg: &UringConfig, attach: Option<RawFd>, err: io::Error) -> Error {
    if attach.is_some() {
        return Error::Os {
            what: "io_uring_setup of the solo ring (with SQPOLL, attached to ring 0's SQPOLL thread: IORING_SETUP_ATTACH_WQ)",
            source: err,
        };
    }
    if let (Some(cpu), Some(libc::EINVAL)) = (cfg.sq_thread_cpu, err.raw_os_error()) {
        // Is it the CPU? Ask again without it.
        let unbound = UringConfig {
            sq_thread_cpu: None,
            ..*cfg
        };
        if Uring::new(unbound).is_ok() {
            return Error::Config(format!(
                "the kernel refused to bind SQPOLL to CPU {cpu} (IORING_SETUP_SQ_AFF: EINVAL): it is \
                 offline or outside this process's CPUs (sqpoll_cpus, GPUIO_SQPOLL_CPUS)"
            ));
        }
    }
    diagnose_setup(err, read_io_uring_disabled())
}

/// Checks that the kernel made the rings as asked and laid them out inside `rings`, and
/// that it never drops completions.
fn check_layout(cfg: &UringConfig, p: &Params, rings: &Mapping) -> Result<()> {
    if p.sq_entries != cfg.sq_entries || p.cq_entries != cfg.cq_entries {
        return Err(Error::Config(format!(
            "the kernel resized the rings (sq {} -> {}, cq {} -> {})",
            cfg.sq_entries, p.sq_entries, cfg.cq_entries, p.cq_entries
        )));
    }
    let cq_end = p.cq_off.cqes as usize + p.cq_entries as usize * size_of::<Cqe>();
    let hdr_max = [
        p.sq_off.head,
        p.sq_off.tail,
        p.sq_off.flags,
        p.cq_off.head,
        p.cq_off.tail,
    ]
    .into_iter()
    .max()
    .unwrap_or(0) as usize;
    if cq_end > rings.len() || hdr_max + 4 > rings.len() {
        return Err(Error::Config(format!(
            "the kernel's ring layout ({cq_end} bytes) exceeds the {} bytes mapped",
            rings.len()
        )));
    }
    if p.features & IORING_FEAT_NODROP == 0 {
        return Err(Error::UringUnavailable(
            "the kernel lacks IORING_FEAT_NODROP (Linux 5.5+), so completions could be lost".into(),
        ));
    }
    Ok(())
}

/// `(address, length)` pairs as the `iovec`s that buffer registration reads.
pub(crate) fn iovecs(bufs: &[(u64, u64)]) -> Vec<libc::iovec> {
    bufs.iter()
        .map(|&(base, len)| libc::iovec {
            iov_base: base as *mut _,
            iov_len: len as usize,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_errors_name_their_cause() {
        let msg = |errno, sysctl| diagnose_setup(io::Error::from_raw_os_error(errno), sysctl).to_string();
        assert!(msg(libc::ENOSYS, None).contains("no io_uring support"));
        assert!(msg(libc::EPERM, Some(2)).contains("io_uring_disabled=2"));
        assert!(msg(libc::EPERM, Some(1)).contains("io_uring_group"));
        assert!(msg(libc::EPERM, Some(0)).contains("seccomp"));
        assert!(msg(libc::EINVAL, Some(0)).contains("6.6"));
    }

    #[test]
    fn rejects_bad_sizes() {
        let e = Uring::new(UringConfig::sized(3, 8));
        assert!(matches!(e, Err(Error::Config(_))));
        let e = Uring::new(UringConfig::sized(16, 8));
        assert!(matches!(e, Err(Error::Config(_))));
        // Past the kernel's limits: refused at once, before mapping gigabytes (a 2^26-entry
        // SQ took 11 s and 6 GiB, then failed with a misleading EINVAL diagnosis).
        for (sq, cq) in [
            (MAX_SQ_ENTRIES * 2, MAX_CQ_ENTRIES * 2),
            (1 << 26, 1 << 27),
            (8, MAX_CQ_ENTRIES * 2),
        ] {
            let started = std::time::Instant::now();
            let e = Uring::new(UringConfig::sized(sq, cq));
            assert!(
                matches!(&e, Err(Error::Config(m)) if m.contains("the kernel's limits")),
                "sq {sq} cq {cq}"
            );
            assert!(started.elapsed() < std::time::Duration::from_millis(100));
        }
    }
}
