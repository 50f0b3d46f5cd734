//! Who consumes the submission queue: [`Submission`] says, and [`open_rings`] makes the
//! rings for it.

use std::io;

use gpuio_device::protocol::context::STREAMS;
use gpuio_device::protocol::stream::flight_stream;
use gpuio_device::protocol::uapi::{Cqe, Params};

use crate::consumer::fallback::HostRing;
use crate::consumer::uring::{diagnose_setup, Uring, UringConfig};
use crate::consumer::waker::Look;
use crate::error::{Error, Result};
use crate::memory::Mapping;

/// Who consumes the submission queue: io_uring (the kernel's SQPOLL thread, or on the CPU
/// backend `io_uring_enter` from the runtime's waker: `Builder::sqpoll`), the host-thread
/// fallback where io_uring is unavailable, or, the CPU backend's default, the kernel
/// threads themselves ([`Submission::Inline`]).
///
/// `GPUIO_URING=on|off|auto|inline` (or [`crate::Builder::submission`]) chooses. Unset, the
/// CPU backend performs inline, unless a file root or SQPOLL (or CPUs for SQPOLL threads) is
/// asked for (then `auto`);
/// a GPU takes `auto`. `auto` tries io_uring and falls back to the host thread only when io_uring itself is
/// unavailable to this process: `io_uring_setup` fails with `ENOSYS` (no io_uring in the
/// kernel) or `EPERM` (`kernel.io_uring_disabled`, or a seccomp filter such as Docker's
/// default profile). It then prints a one-line notice on stderr (unless `GPUIO_QUIET` is
/// set). Other failures, say `EINVAL` from a kernel older than 6.6 that has io_uring but not
/// `NO_MMAP`, stay errors that name the cause, with a hint that `GPUIO_URING=off` works
/// there: they usually mean the machine should be fixed, not silently served slower.
/// `on` never falls back; `off` never tries io_uring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Submission {
    /// io_uring where it is available, else the host thread (`GPUIO_URING=auto`).
    /// `Submission::default()`: so on the CPU backend asking for it means io_uring (the
    /// waker entering the rings), unlike leaving [`crate::Builder::submission`] unasked,
    /// which performs inline there.
    #[default]
    Auto,
    /// io_uring (with SQPOLL as [`crate::Builder::sqpoll`] says), or an error
    /// (`GPUIO_URING=on`).
    IoUring,
    /// A host thread performs the requests with ordinary syscalls (`GPUIO_URING=off`).
    HostThread,
    /// CPU backend only: the kernel threads perform the requests themselves, with the same
    /// ordinary syscalls, in SQ order, each when it publishes a request or waits
    /// (`GPUIO_URING=inline`). No thread hands a request to another: a request costs its
    /// syscall and no wakeup, and other processes are treated as beside a plain program's
    /// threads (`bench_neighbour`). The runtime's waker looks every 10 ms and performs
    /// what computing threads left (their last lines). The CPU backend's default where no
    /// file root is given (performing threads are not confined to one: use `auto`, which
    /// confines the thread that submits) and SQPOLL is not asked for.
    Inline,
}

impl Submission {
    /// The `GPUIO_URING` value that selects it.
    pub fn name(self) -> &'static str {
        match self {
            Submission::Auto => "auto",
            Submission::IoUring => "on",
            Submission::HostThread => "off",
            Submission::Inline => "inline",
        }
    }

    /// Parses a `GPUIO_URING` value (`on`, `off`, `auto`, `inline`; the empty string parses
    /// as `auto`, but an empty `GPUIO_URING` counts as unset: [`Submission::from_env`] says
    /// `None`, and the builder's default applies).
    pub fn parse(s: &str) -> Result<Submission> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Submission::Auto),
            "on" | "io_uring" => Ok(Submission::IoUring),
            "off" | "host" => Ok(Submission::HostThread),
            "inline" => Ok(Submission::Inline),
            other => Err(crate::settings::invalid("GPUIO_URING", other)),
        }
    }

    /// What `GPUIO_URING` asks for, if it is set (an empty or blank value counts as unset).
    pub fn from_env() -> Result<Option<Submission>> {
        crate::settings::var("GPUIO_URING")?
            .map(|v| Submission::parse(&v))
            .transpose()
    }
}

/// The ring and whoever consumes it.
pub(crate) enum Queue {
    Uring(Uring),
    Host(HostRing),
}

impl Queue {
    /// The ring's geometry and word offsets.
    pub(crate) fn params(&self) -> &Params {
        match self {
            Queue::Uring(u) => &u.params,
            Queue::Host(h) => &h.params,
        }
    }

    /// The SQE array.
    pub(crate) fn sqes(&self) -> &Mapping {
        match self {
            Queue::Uring(u) => &u.sqes,
            Queue::Host(h) => &h.sqes,
        }
    }

    /// Heads, tails, flags and CQEs.
    pub(crate) fn rings(&self) -> &Mapping {
        match self {
            Queue::Uring(u) => &u.rings,
            Queue::Host(h) => &h.rings,
        }
    }

    /// `IORING_REGISTER_BUFFERS_UPDATE` (see [`Uring::update_buffers`]).
    pub(crate) fn update_buffers(&self, offset: u32, bufs: &[(u64, u64)]) -> std::io::Result<()> {
        match self {
            Queue::Uring(u) => u.update_buffers(offset, bufs),
            Queue::Host(h) => h.update_buffers(offset, bufs),
        }
    }

    /// Address of a ring word at `off` in [`Queue::rings`].
    pub(crate) fn ring_word(&self, off: u32) -> *mut u32 {
        match self {
            Queue::Uring(u) => u.ring_word(off),
            Queue::Host(h) => h.ring_word(off),
        }
    }

    /// The bytes each print stream's writes wrote, by the completions in the CQ that no
    /// reaper has taken yet (indexed by stream): a look, for a hang report, that consumes
    /// nothing. Those lines are out, though the device has not yet seen it.
    pub(crate) fn unreaped_stream_bytes(&self) -> [u64; STREAMS] {
        let p = self.params();
        // SAFETY: ring words inside the queue's mapping, which lives as long as the queue; a
        // volatile read of a word others write is what the kernel's side allows.
        let word = |off| unsafe { std::ptr::read_volatile(self.ring_word(off)) };
        let (head, tail) = (word(p.cq_off.head), word(p.cq_off.tail));
        let mut bytes = [0u64; STREAMS];
        for k in 0..tail.wrapping_sub(head).min(p.cq_entries) {
            let slot = head.wrapping_add(k) & (p.cq_entries - 1);
            // SAFETY: slot `slot` of the CQE array, inside the mapping (the kernel's offset,
            // checked at setup); the kernel wrote it before it released the tail we read,
            // and it is not reused before the reaper moves the head past it. A volatile
            // read: a look that takes nothing.
            let cqe = unsafe {
                std::ptr::read_volatile(
                    (self.rings().as_ptr().add(p.cq_off.cqes as usize) as *const Cqe).add(slot as usize),
                )
            };
            if let Some(i) = flight_stream(cqe.user_data) {
                if cqe.res > 0 && (i as usize) < STREAMS {
                    bytes[i as usize] += cqe.res as u64;
                }
            }
        }
        bytes
    }

    /// Wakes the consumer if it sleeps while SQEs wait (invariant 9): SQPOLL through
    /// `IORING_ENTER_SQ_WAKEUP`, the fallback thread by unparking it (no syscall on a ring
    /// fd: it has none). Says what it saw and whether it woke it.
    pub(crate) fn wake_if_needed(&self) -> Look {
        match self {
            Queue::Uring(u) => u.wake_if_needed(),
            Queue::Host(h) => h.wake_if_needed(),
        }
    }

    /// The errno of the last failed wake-up of the consumer (io_uring's SQPOLL; the
    /// fallback's thread is unparked, which cannot fail).
    pub(crate) fn wake_error(&self) -> Option<std::num::NonZeroI32> {
        match self {
            Queue::Uring(u) => u.wake_error(),
            Queue::Host(_) => None,
        }
    }

    /// Whether SQEs wait unconsumed on a ring the waker consumes ([`Queue::entered`]).
    pub(crate) fn sq_waiting(&self) -> bool {
        match self {
            Queue::Uring(u) => !u.sqpoll() && u.sq_waiting(),
            Queue::Host(h) => h.is_inline() && h.sq_waiting(),
        }
    }

    /// Whether no consumer thread of its own polls it, so that the waker (or a kernel
    /// thread) must: io_uring without SQPOLL, which the waker enters, or a ring performed
    /// inline ([`Submission::Inline`]).
    pub(crate) fn entered(&self) -> bool {
        match self {
            Queue::Uring(u) => !u.sqpoll(),
            Queue::Host(h) => h.is_inline(),
        }
    }

    /// Whether it is performed inline ([`Submission::Inline`]).
    pub(crate) fn inline(&self) -> bool {
        matches!(self, Queue::Host(h) if h.is_inline())
    }

    /// Inline: performs what waits on the calling thread ([`HostRing::consume`]); else
    /// nothing.
    pub(crate) fn perform(&self) {
        if let Queue::Host(h) = self {
            h.consume();
        }
    }

    /// Whether a kernel thread polls the SQ (io_uring made with SQPOLL); if not, the waker
    /// submits (io_uring without it) or unparks the fallback's thread.
    pub(crate) fn sqpoll(&self) -> bool {
        matches!(self, Queue::Uring(u) if u.sqpoll())
    }

    /// [`Submission::IoUring`], [`Submission::HostThread`] or [`Submission::Inline`].
    pub(crate) fn submission(&self) -> Submission {
        match self {
            Queue::Uring(_) => Submission::IoUring,
            Queue::Host(h) if h.is_inline() => Submission::Inline,
            Queue::Host(_) => Submission::HostThread,
        }
    }
}

/// Creates the ring: `requested` (the builder's, else `GPUIO_URING`'s, else auto: see the
/// module docs). `simulate` makes io_uring setup fail with that errno (tests of the auto
/// choice). Returns the queue and, when auto fell back, the notice to print.
pub(crate) fn open(cfg: UringConfig, requested: Submission, simulate: Option<i32>) -> Result<(Queue, Option<String>)> {
    // The error, and the errno of a plain setup when ours failed (boxed: it keeps the
    // closure's result small).
    let uring = || {
        match simulate {
        Some(errno) => Err(Box::new((
            simulated(diagnose_setup(io::Error::from_raw_os_error(errno), None)),
            Some(errno),
        ))),
        None => Uring::new(cfg)
            .map_err(|e| {
                // Only setup failures can mean "unavailable"; ask the kernel once more, plainly.
                let errno = matches!(e, Error::UringUnavailable(_)).then(probe).flatten();
                Box::new((e, errno))
            })
            .and_then(|u| match u.check_calls() {
                Ok(()) => Ok(u),
                // Set up, but not usable: as unavailable as a failed setup.
                Err((call, e)) => Err(Box::new((
                    Error::UringUnavailable(format!(
                        "{call} is refused ({e}), as a seccomp filter that allows io_uring_setup \
                         but not {call} does; without it {}",
                        if call == "io_uring_enter" {
                            "nothing could be submitted (the CPU backend's rings), nor the kernel's SQ thread woken once it sleeps"
                        } else {
                            "the ring's files, logs and sandbox could not be set"
                        }
                    )),
                    e.raw_os_error(),
                ))),
            }),
    }
    };
    match requested {
        Submission::IoUring => uring().map(|u| (Queue::Uring(u), None)).map_err(|b| b.0),
        Submission::HostThread => Ok((Queue::Host(HostRing::new(cfg)?), None)),
        Submission::Inline => Ok((Queue::Host(HostRing::new_inline(cfg)?), None)),
        Submission::Auto => match uring().map_err(|b| *b) {
            Ok(u) => Ok((Queue::Uring(u), None)),
            Err((e, Some(errno))) if unavailable(errno) => {
                let host = HostRing::new(cfg)?;
                Ok((
                    Queue::Host(host),
                    Some(format!(
                        "gpuio: {e}; serving the ring from a host thread instead (slower; GPUIO_URING=on refuses this)"
                    )),
                ))
            }
            Err((Error::UringUnavailable(why), _)) => Err(Error::UringUnavailable(format!(
                "{why} (GPUIO_URING=off serves the ring from a host thread instead)"
            ))),
            Err((e, _)) => Err(e),
        },
    }
}

/// Creates one ring per entry of `cpus` (each one's SQPOLL thread bound to that CPU, or
/// unbound): the first as [`open`] does, the others of the same kind. Returns them and
/// the first one's notice.
pub(crate) fn open_rings(
    cfg: UringConfig,
    cpus: &[Option<u32>],
    requested: Submission,
    simulate: Option<i32>,
) -> Result<(Vec<Queue>, Option<String>)> {
    let on = |cpu: Option<u32>| UringConfig {
        sq_thread_cpu: cpu,
        ..cfg
    };
    let (first, notice) = open(on(cpus[0]), requested, simulate)?;
    let mut queues = vec![first];
    for &cpu in &cpus[1..] {
        queues.push(match &queues[0] {
            Queue::Uring(_) => Queue::Uring(Uring::new(on(cpu))?),
            Queue::Host(h) if h.is_inline() => Queue::Host(HostRing::new_inline(on(cpu))?),
            Queue::Host(_) => Queue::Host(HostRing::new(on(cpu))?),
        });
    }
    Ok((queues, notice))
}

/// SQEs of the solo ring (`gpuio_device::protocol::solo`): it holds one request at a time, so any
/// small power of two does; its CQ is twice that.
pub(crate) const SOLO_ENTRIES: u32 = 4;

/// Creates the solo ring beside `first` (ring 0) and of its kind: io_uring served by
/// `first`'s SQPOLL thread (`IORING_SETUP_ATTACH_WQ`: no thread of its own) or, without
/// SQPOLL, by the waker, or a fallback thread of its own. `cfg` is the rings' (its sizes are replaced).
pub(crate) fn open_solo(first: &Queue, cfg: UringConfig) -> Result<Queue> {
    let cfg = UringConfig {
        sq_entries: SOLO_ENTRIES,
        cq_entries: 2 * SOLO_ENTRIES,
        sq_thread_cpu: None,
        ..cfg
    };
    Ok(match first {
        Queue::Uring(u) => Queue::Uring(Uring::attached(cfg, u)?),
        Queue::Host(h) if h.is_inline() => Queue::Host(HostRing::new_inline(cfg)?),
        Queue::Host(_) => Queue::Host(HostRing::new(cfg)?),
    })
}

/// Whether an `io_uring_setup` errno means io_uring is unavailable to this process.
fn unavailable(errno: i32) -> bool {
    errno == libc::ENOSYS || errno == libc::EPERM || errno == libc::EACCES
}

fn simulated(e: Error) -> Error {
    match e {
        Error::UringUnavailable(why) => Error::UringUnavailable(format!("{why} (simulated)")),
        e => e,
    }
}

/// Sets up the plainest ring (one entry, no flags, kernel-allocated memory) and closes it:
/// `None` if that works, else the errno. When our ring fails and this one fails with
/// `ENOSYS` or `EPERM` too, io_uring is unavailable as such, not just a feature of it.
fn probe() -> Option<i32> {
    let mut p = Params::default();
    // SAFETY: io_uring_setup reads and writes `p`, a valid io_uring_params.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, &mut p as *mut Params) };
    if fd < 0 {
        return io::Error::last_os_error().raw_os_error();
    }
    // SAFETY: a new fd that we alone own.
    unsafe { libc::close(fd as libc::c_int) };
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: UringConfig = UringConfig::sized(8, 16);

    #[test]
    fn parses_gpuio_uring() {
        assert_eq!(Submission::parse("").unwrap(), Submission::Auto);
        assert_eq!(Submission::parse(" AUTO ").unwrap(), Submission::Auto);
        assert_eq!(Submission::parse("on").unwrap(), Submission::IoUring);
        assert_eq!(Submission::parse("Off").unwrap(), Submission::HostThread);
        assert!(matches!(Submission::parse("maybe"), Err(Error::Config(m)) if m.contains("expected on, off")));
        for s in [Submission::Auto, Submission::IoUring, Submission::HostThread] {
            assert_eq!(Submission::parse(s.name()).unwrap(), s);
        }
    }

    #[test]
    fn auto_falls_back_only_when_io_uring_is_unavailable() {
        // This machine has io_uring (the test suite runs against it): auto takes it.
        let (q, notice) = open(CFG, Submission::Auto, None).unwrap();
        assert_eq!((q.submission(), notice), (Submission::IoUring, None));
        for errno in [libc::ENOSYS, libc::EPERM] {
            let (q, notice) = open(CFG, Submission::Auto, Some(errno)).unwrap();
            assert_eq!(q.submission(), Submission::HostThread);
            let notice = notice.expect("a notice");
            assert!(
                notice.contains("host thread") && notice.contains("simulated"),
                "{notice}"
            );
            assert!(!notice.contains('\n'), "one line: {notice}");
        }
        // io_uring exists but lacks a feature: an error that names the cause and the way out.
        match open(CFG, Submission::Auto, Some(libc::EINVAL)) {
            Err(Error::UringUnavailable(why)) => {
                assert!(why.contains("6.6") && why.contains("GPUIO_URING=off"), "{why}")
            }
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("fell back on EINVAL"),
        }
        // Forced io_uring never falls back; forced host thread never tries io_uring.
        assert!(matches!(
            open(CFG, Submission::IoUring, Some(libc::ENOSYS)),
            Err(Error::UringUnavailable(_))
        ));
        let (q, notice) = open(CFG, Submission::HostThread, Some(libc::ENOSYS)).unwrap();
        assert_eq!((q.submission(), notice), (Submission::HostThread, None));
    }
}
