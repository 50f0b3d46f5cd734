//! `Builder::build`'s steps: the settings checked and resolved, the backend opened, the
//! rings opened (`open_rings`), the shared memory laid out under the sandbox (`share`),
//! the waker started.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuio_device::protocol::context::MAX_RINGS;
use gpuio_device::protocol::context::STREAMS;

use super::rescue::Rescue;
use super::resolve::{or_env, Resolved};
use crate::backend::cpu::Cpu;
use crate::backend::{self, Backend, Device};
use crate::consumer::affinity;
use crate::consumer::submission::{self, Queue, Submission};
use crate::consumer::uring::{UringConfig, MAX_CQ_ENTRIES};
use crate::consumer::waker::Waker;
use crate::consumer::{io_threads, restrictions};
use crate::error::{Error, Result};
use crate::runtime::{Gpu, Runtime};
use crate::sandbox::Sandbox;
use crate::scheduling::Scheduling;
use crate::settings;
use crate::shared::{Shared, SharedConfig};
use crate::watchdog::HangPolicy;
use gpuio_device::protocol::arch::host::Doorbell;

use super::{say_once, Builder, MAX_LOG_BYTES};

impl Builder {
    /// Creates the runtime: the settings checked, the backend opened, the rings opened, the
    /// shared memory laid out under the sandbox, the waker started.
    pub fn build(self) -> Result<Runtime> {
        self.check()?;
        let settings = self.resolve()?;
        let hang = self.hang_policy(settings.hang_timeout);
        let (device, backend_notice) = backend::open(settings.backend, settings.gpu)?;
        let log_bytes = self.log_sizes(device.is_some())?;
        let rings = self.open_rings(device.as_ref(), &settings)?;
        let backend = match &device {
            None => Backend::Cpu,
            Some(device) => {
                device.set_stack_size(self.gpu_stack_bytes)?;
                device.backend()
            }
        };
        let (shared, sandbox) = self.share(rings.queues, rings.solo, log_bytes, device.clone())?;
        let shared = Arc::new(shared);
        for n in &sandbox.notices {
            say_once(n);
        }
        // On rings without SQPOLL (the CPU backend's) the waker submits, and its requests
        // (and the io-wq workers it starts) run with its credentials: it is made where the
        // rings were, with the short slice and confined to the file root, if any; where
        // asked for, a launch that crowds the cores makes it and those workers real-time
        // until one that fits them (consumer/realtime.rs). Else it only wakes consumers; on
        // the CPU backend (SQPOLL asked for) it gets the slice by its id.
        let entered = shared.entered();
        let waker = if entered {
            io_threads::on_the_ring_thread(self.file_root.as_deref(), true, || {
                start_waker(&shared, settings.real_time_waker)
            })?
        } else {
            start_waker(&shared, false)?
        };
        if device.is_none() && !entered {
            if let Some(tid) = waker.thread_id {
                // Best effort, as for the rings' consumers (consumer/io_threads.rs).
                let _ = io_threads::shorten(tid);
            }
        }
        if entered {
            let _ = shared.doorbell.set(waker.doorbell().expect("the waker runs"));
        }
        for n in backend_notice.iter().chain(&rings.notices) {
            say_once(n);
        }
        Ok(Runtime {
            shared,
            waker,
            backend,
            cpu: Cpu::new(self.cpu_stack_bytes),
            hang,
            gpu: device.map(Gpu::new),
            settled: Mutex::new([0; STREAMS]),
            sandbox: sandbox.policy,
            fixed_files: sandbox.fixed_files,
            fixed_logs: sandbox.fixed_logs,
            fixed_transfers: sandbox.fixed_transfers,
            lockstep: settings.lockstep,
            jit: settings.jit,
            sqpoll_cpus: rings.sqpoll_cpus,
            _sqpoll_claim: rings.sqpoll_claim,
            print_files: crate::runtime::print_files::PrintFiles::claim(&[self.stdout_fd, self.stderr_fd]),
        })
    }

    /// The settings that need no backend: each in range, and consistent with the others.
    fn check(&self) -> Result<()> {
        if self.file_root.is_some() && self.sandbox != Sandbox::FileIo {
            return Err(Error::Config(format!(
                "file_root confines Sandbox::FileIo, but the sandbox is {:?}: add .sandbox(Sandbox::FileIo)",
                self.sandbox
            )));
        }
        if self.cpu_stack_bytes < crate::backend::cpu::MIN_STACK_BYTES {
            return Err(Error::Config(format!(
                "cpu_stack_bytes must be at least {} (16 KiB), not {}",
                crate::backend::cpu::MIN_STACK_BYTES,
                self.cpu_stack_bytes
            )));
        }
        if let Some(n) = self.max_flights.filter(|&n| !n.is_power_of_two() || n > MAX_CQ_ENTRIES) {
            return Err(Error::Config(format!(
                "max_flights must be a power of two up to {MAX_CQ_ENTRIES} (no more writes can be \
                 in flight than the largest CQ holds), not {n}"
            )));
        }
        let block = self.arena_block_bytes;
        if !block.is_power_of_two() || !(4096..=1 << 30).contains(&block) {
            return Err(Error::Config(format!(
                "arena_block_bytes must be a power of two from 4096 to 2^30, not {block}"
            )));
        }
        if !self.arena_bytes.is_power_of_two() || !(block..=1 << 36).contains(&self.arena_bytes) {
            return Err(Error::Config(format!(
                "arena_bytes must be a power of two from arena_block_bytes ({block}) to 2^36, not {}",
                self.arena_bytes
            )));
        }
        Ok(())
    }

    /// When `synchronize` warns and gives up: the builder's, else `GPUIO_HANG_TIMEOUT`.
    fn hang_policy(&self, timeout: Option<Duration>) -> HangPolicy {
        let mut hang = HangPolicy::new(timeout);
        if let Some((first, every)) = self.hang_warnings {
            (hang.warn_first, hang.warn_every) = (first, every);
        }
        hang
    }

    /// Each setting that has a variable: the builder's value, else the environment's
    /// (`resolve.rs` beside this file).
    fn resolve(&self) -> Result<Resolved> {
        let hang_timeout = match self.hang_timeout {
            Some(Some(t)) if t.is_zero() => {
                return Err(Error::Config(
                    "hang_timeout must be longer than zero (None: never give up)".into(),
                ))
            }
            Some(t) => t,
            None => crate::watchdog::timeout_from_env()?,
        };
        Ok(Resolved {
            backend: or_env(self.backend, Backend::from_env)?,
            gpu: or_env(self.gpu, || settings::number("GPUIO_GPU"))?,
            lockstep: or_env(self.lockstep, Scheduling::lockstep_from_env)?.unwrap_or(false),
            submission: or_env(self.submission, Submission::from_env)?,
            rings: or_env(self.rings, || settings::number("GPUIO_RINGS"))?,
            solo: or_env(self.solo, || settings::switch("GPUIO_SOLO"))?,
            sqpoll: or_env(self.sqpoll, || settings::switch("GPUIO_SQPOLL"))?,
            real_time_waker: or_env(self.real_time_waker, || settings::switch("GPUIO_REAL_TIME_WAKER"))?
                .unwrap_or(false),
            sqpoll_cpus: or_env(self.sqpoll_cpus.clone(), || {
                settings::parsed("GPUIO_SQPOLL_CPUS", affinity::parse_cpu_list)
            })?,
            hang_timeout,
            jit: {
                crate::backend::cuda::jit::check_settings()?;
                crate::backend::cuda::Jit::from_env()?
            },
        })
    }

    /// stdout's and stderr's log sizes: the builder's, else the backend's defaults (larger
    /// on a GPU, whose threads print more at once), checked.
    fn log_sizes(&self, gpu: bool) -> Result<[usize; STREAMS]> {
        let stdout = self.log_bytes.unwrap_or(if gpu { 32 << 20 } else { 4 << 20 });
        let stderr = self
            .stderr_log_bytes
            .or(self.log_bytes)
            .unwrap_or(if gpu { 8 << 20 } else { 4 << 20 });
        // (The upper bounds keep the sizes computed from these from overflowing, and
        // absurd values from mapping and populating gigabytes.)
        for (what, n) in [("log_bytes", stdout), ("stderr_log_bytes", stderr)] {
            if !n.is_power_of_two() || !(64..=MAX_LOG_BYTES).contains(&n) {
                return Err(Error::Config(format!(
                    "{what} must be a power of two from 64 to 2^40, not {n}"
                )));
            }
        }
        Ok([stdout, stderr])
    }

    /// The rings: how many (the builder's, else `GPUIO_RINGS`, else from the machine), their SQPOLL
    /// threads' CPUs, io_uring's or the fallback's, and the solo ring; each made on a thread
    /// confined to the file root, if any (landlock.rs). Disabled under a sandbox, which
    /// `share` sets up.
    fn open_rings(&self, device: Option<&Device>, settings: &Resolved) -> Result<OpenRings> {
        let pci_bus_id = device.and_then(|d| d.pci_bus_id());
        let asked = settings.rings;
        let in_range = |n: usize| (1..=MAX_RINGS).contains(&n);
        if let Some(n) = asked.filter(|&n| !in_range(n as usize)) {
            return Err(Error::Config(format!("rings must be 1 to {MAX_RINGS}, not {n}")));
        }
        // The count asked for, else one per CPU named, else one from the machine's cores.
        let (mut sqpoll_cpus, named, mut sqpoll_claim) = affinity::choose(
            asked.map(|n| n as usize),
            settings.sqpoll_cpus.as_deref(),
            device.is_some(),
            pci_bus_id,
        )?;
        let rings = sqpoll_cpus.len();
        if !in_range(rings) {
            return Err(Error::Config(format!(
                "sqpoll_cpus names {rings} CPUs, and with no ring count given that is one ring \
                 each: name 1 to {MAX_RINGS}"
            )));
        }
        // A GPU's default SQ, or less where only the CQ was given (the CQ holds at least
        // as many entries as the SQ).
        let default_sq = if device.is_some() { 1024 } else { 256 };
        let sq_entries = self
            .sq_entries
            .unwrap_or_else(|| self.cq_entries.map_or(default_sq, |cq| cq.min(default_sq)));
        // SQPOLL: on a GPU; on the CPU backend where asked for, or where the program named
        // CPUs for SQPOLL threads.
        let sqpoll = settings.sqpoll.unwrap_or(device.is_some() || named);
        let root = self.file_root.as_deref();
        let submission = choose_submission(settings, device.is_some(), root.is_some(), sqpoll, named)?;
        let cfg = UringConfig {
            sq_entries,
            cq_entries: self.cq_entries.unwrap_or(sq_entries.saturating_mul(2)),
            sq_thread_idle_ms: self.sq_thread_idle_ms,
            sq_thread_cpu: None,
            start_disabled: self.sandbox != Sandbox::Off,
            sqpoll,
        };
        let simulate = self.simulate_uring_errno;
        let short = device.is_none();
        let open = |cpus: &[Option<u32>]| {
            io_threads::on_the_ring_thread(root, short, || submission::open_rings(cfg, cpus, submission, simulate))
        };
        let (queues, queue_notice) = match open(&sqpoll_cpus) {
            // A CPU chosen here that the kernel refuses: unbound instead (affinity.rs).
            Err(Error::Config(why)) if !named && why.contains("refused to bind SQPOLL") => {
                sqpoll_cpus = vec![None; rings];
                sqpoll_claim = Default::default();
                open(&sqpoll_cpus)?
            }
            other => other?,
        };
        let (solo, solo_notice) = solo_ring(settings.solo, || {
            io_threads::on_the_ring_thread(root, short, || submission::open_solo(&queues[0], cfg))
        })?;
        if root.is_some() {
            // The fallback's threads also refuse what Landlock does not check (landlock.rs).
            for q in queues.iter().chain(&solo) {
                if let Queue::Host(h) = q {
                    h.confine_to_root();
                }
            }
        }
        if matches!(queues[0], Queue::Host(_)) || !sqpoll {
            // The fallback's threads are not bound (`HostRing` ignores `sq_thread_cpu`), and
            // a ring without SQPOLL has no thread to bind.
            sqpoll_cpus = vec![None; rings];
            sqpoll_claim = Default::default();
        }
        Ok(OpenRings {
            queues,
            solo,
            notices: [queue_notice, solo_notice].into_iter().flatten().collect(),
            sqpoll_cpus,
            sqpoll_claim,
        })
    }

    /// The shared memory over the rings, and the sandbox: files, buffers, restrictions,
    /// then enable, before anything can submit (inside `Shared::new`, once the memory
    /// exists). The host-thread fallback takes the same registrations and restrictions as
    /// io_uring, and enforces them itself.
    fn share(
        &self,
        queues: Vec<Queue>,
        solo: Option<Queue>,
        log_bytes: [usize; STREAMS],
        device: Option<Device>,
    ) -> Result<(Shared, restrictions::Setup)> {
        let fds = [self.stdout_fd, self.stderr_fd];
        let (want, fixed_files) = (self.sandbox, self.fixed_files);
        let configure = move |mut queues: Vec<&mut Queue>, memory: &restrictions::Memory| {
            restrictions::configure_all(&mut queues, want, fixed_files, fds, memory)
        };
        let config = SharedConfig {
            log_bytes,
            max_flights: self.max_flights.unwrap_or(if device.is_none() { 1 } else { 16 }),
            arena_bytes: self.arena_bytes,
            arena_block_bytes: self.arena_block_bytes,
            fds,
            // Only x86-64's stores are seen in order by every agent (`Solo::waiting_on_results`).
            solo_waits_on_results: cfg!(target_arch = "x86_64") && !self.solo_on_tail,
        };
        Shared::new(queues, solo, &config, device, configure)
    }
}

/// What `Builder::open_rings` opened.
struct OpenRings {
    queues: Vec<Queue>,
    solo: Option<Queue>,
    /// Why a ring is not what it could have been (the fallback, no solo ring).
    notices: Vec<String>,
    sqpoll_cpus: Vec<Option<u32>>,
    sqpoll_claim: affinity::Claim,
}

/// The waker: on each look it rescues print streams on the CPU backend (`builder/rescue.rs`), then
/// wakes a sleeping ring consumer with work waiting, or, on rings without SQPOLL, submits
/// what waits (so a rescue's SQEs go out in the same look). On those rings the waker is
/// the only thread that enters them, and its own doorbell submits at once.
fn start_waker(shared: &Arc<Shared>, real_time: bool) -> Result<Waker> {
    let (consumer, mut rescue) = (shared.clone(), Rescue::default());
    let entered = shared.entered();
    let bell = entered.then(|| {
        let shared = shared.clone();
        Arc::new(move || {
            shared.wake_if_needed();
        }) as Doorbell
    });
    Waker::start(
        move || {
            rescue.look(&consumer);
            consumer.wake_if_needed()
        },
        bell,
        real_time,
        shared.inline(),
    )
    .map_err(|e| Error::Os {
        what: "starting the waker thread",
        source: e,
    })
}

/// How the rings' requests are submitted: what was asked for, else inline on the CPU
/// backend where nothing asks for a thread that submits (a file root, SQPOLL, CPUs named
/// for SQPOLL threads), else io_uring where available; refused where it contradicts the
/// rest (`gpu`: the rings are a GPU's; `root`: requests are confined to a file root;
/// `named`: CPUs were named for SQPOLL threads).
fn choose_submission(settings: &Resolved, gpu: bool, root: bool, sqpoll: bool, named: bool) -> Result<Submission> {
    // Unasked: inline on the CPU backend, where nothing asks for a thread that submits
    // (one confined to a file root, or SQPOLL, or CPUs named for SQPOLL threads); else
    // io_uring where available.
    let submission = settings.submission.unwrap_or(if !gpu && !root && !sqpoll && !named {
        Submission::Inline
    } else {
        Submission::Auto
    });
    if submission == Submission::Inline {
        if gpu {
            return Err(Error::Config(
                "Submission::Inline (GPUIO_URING=inline) needs the CPU backend: a GPU's threads \
                 make no syscalls; use auto, on or off"
                    .into(),
            ));
        }
        if root {
            return Err(Error::Config(
                "Submission::Inline (GPUIO_URING=inline) cannot confine requests to a file root: \
                 the kernel threads that perform them run your code too; use auto (io_uring, \
                 submitted by a confined thread) or off"
                    .into(),
            ));
        }
        if settings.sqpoll == Some(true) || named {
            return Err(Error::Config(
                "Submission::Inline (GPUIO_URING=inline) has no SQPOLL thread: turn sqpoll off \
                 (and name no sqpoll_cpus), or use auto or on"
                    .into(),
            ));
        }
    }
    let by_a_thread = matches!(submission, Submission::HostThread | Submission::Inline);
    if !sqpoll && named && !by_a_thread {
        return Err(Error::Config(
            "sqpoll_cpus (or GPUIO_SQPOLL_CPUS) binds SQPOLL threads, but sqpoll is off \
             (Builder::sqpoll(false), else GPUIO_SQPOLL=0): turn it on, or name no CPUs"
                .into(),
        ));
    }
    if gpu && !sqpoll && !by_a_thread {
        return Err(Error::Config(
            "sqpoll is off (Builder::sqpoll(false), else GPUIO_SQPOLL=0), but a GPU cannot \
             enter a ring (it makes no syscalls): its rings need SQPOLL; turn it on (or unset \
             GPUIO_SQPOLL), use the CPU backend, or serve the rings from a host thread \
             (GPUIO_URING=off)"
                .into(),
        ));
    }
    Ok(submission)
}

/// The solo ring, made by `open`: asked for (or refused) by the builder or `GPUIO_SOLO`,
/// else made where it can be. One that cannot be made by default is done without, with a
/// notice that says why.
fn solo_ring(asked: Option<bool>, open: impl Fn() -> Result<Queue>) -> Result<(Option<Queue>, Option<String>)> {
    Ok(match asked {
        Some(false) => (None, None),
        Some(true) => (Some(open()?), None),
        None => match open() {
            Ok(q) => (Some(q), None),
            Err(e) => (
                None,
                Some(format!(
                    "gpuio: no solo ring ({e}); a lone thread's requests go through the shared rings"
                )),
            ),
        },
    })
}
