//! Doorbells and performers: how a CPU-backend thread that published SQEs gets them
//! consumed (it rings the host's doorbell, or, as a performer of its ring, performs them
//! itself), and how a thread that has waited long dozes.

extern crate std;

std::thread_local! {
    static DOORBELL: core::cell::RefCell<Option<Doorbell>> = const { core::cell::RefCell::new(None) };
    static PERFORMER: core::cell::RefCell<Option<Doorbell>> = const { core::cell::RefCell::new(None) };
}

/// What a thread calls after it published SQEs to a ring that no thread of its own consumes
/// (the CPU backend's: io_uring without SQPOLL, `gpuio_host`'s `Builder::sqpoll`, or
/// performed inline, its default): the host's, which makes sure the ring is consumed soon
/// (a thread's unparks the host's waker; the waker's own submits, or performs, at once).
/// Inline, kernel threads are performers ([`install_performer`]) and perform instead of
/// ringing; the program's threads, which never perform, ring. Cheap when nothing sleeps:
/// it runs after every submission.
pub type Doorbell = std::sync::Arc<dyn Fn() + Send + Sync>;

/// After a thread published SQEs, and while it waits for an SQ slot (which on an io_uring
/// ring without SQPOLL only the waker frees; on a ring performed inline, a performing
/// kernel thread or the waker): rings the doorbell installed on this thread
/// ([`install_doorbell`]), if any.
///
/// On a performer ([`install_performer`]) it performs them instead.
#[inline]
pub fn ring_doorbell() {
    if !perform() {
        call(&DOORBELL);
    }
}

/// After a flush published a print stream's write: [`ring_doorbell`], except on a
/// performer, which leaves the write for its next wait, or for the host's waker's next
/// look (`HostRing::consume`), whichever comes first. Lines printed in the meantime go
/// out in the same write: a thread that prints alone and performed each flush at once
/// made a system call per line (0.57 M lines/s against 5.3 M).
#[inline]
pub fn ring_doorbell_for_lines() {
    if !is_performer() {
        call(&DOORBELL);
    }
}

/// Calls the hook in `slot` in place, if one is installed. `try_with`: a thread-local
/// being destroyed (a thread's exit) has none. In place, not cloned: every kernel thread's
/// clone would bump one shared count.
#[inline]
fn call(slot: &'static HookSlot) -> bool {
    slot.try_with(|d| match &*d.borrow() {
        Some(hook) => {
            hook();
            true
        }
        None => false,
    })
    .unwrap_or(false)
}

/// Performs what this thread's rings hold, if it is a performer; says whether it is.
#[inline]
pub(super) fn perform() -> bool {
    call(&PERFORMER)
}

/// Whether the host made this thread a performer ([`install_performer`]).
#[inline]
fn is_performer() -> bool {
    PERFORMER.try_with(|p| p.borrow().is_some()).unwrap_or(false)
}

/// Runs `f` with this thread no performer (the one it was is back after): a wait inside
/// it leaves its rings' requests to the host's waker, which its doorbell wakes. For a wait
/// that must stay bounded (`entry::report_panic`): a performer's write to a pipe nobody
/// reads would block it.
pub fn without_performing<T>(f: impl FnOnce() -> T) -> T {
    let _was = install_performer(None);
    f()
}

/// Makes this thread a *performer* until the guard drops: `perform` consumes the rings
/// (on the CPU backend's default rings, which no thread of their own consumes: the host's
/// `HostRing::consume`). A performer performs the requests it published at once
/// ([`ring_doorbell`]), what waits whenever it waits ([`relax`](super::relax)), and leaves print
/// streams' writes for then ([`ring_doorbell_for_lines`]). `None` makes it none.
pub fn install_performer(perform: Option<Doorbell>) -> HookGuard {
    HookGuard::install(&PERFORMER, perform)
}

/// Installs `bell` as this thread's doorbell until the guard drops (then the previous one
/// is back). `None` installs none.
pub fn install_doorbell(bell: Option<Doorbell>) -> HookGuard {
    HookGuard::install(&DOORBELL, bell)
}

/// One of a thread's hook slots (its doorbell, its performer).
type HookSlot = std::thread::LocalKey<core::cell::RefCell<Option<Doorbell>>>;

/// Puts a thread's previous hook back in its slot when dropped ([`install_doorbell`],
/// [`install_performer`]); it stays on the thread it was made on (it restores that
/// thread's hook).
pub struct HookGuard {
    slot: &'static HookSlot,
    prev: Option<Doorbell>,
    _this_thread: core::marker::PhantomData<*const ()>,
}

impl HookGuard {
    fn install(slot: &'static HookSlot, hook: Option<Doorbell>) -> HookGuard {
        HookGuard {
            slot,
            prev: slot.with(|h| h.replace(hook)),
            _this_thread: core::marker::PhantomData,
        }
    }
}

impl Drop for HookGuard {
    fn drop(&mut self) {
        let prev = self.prev.take();
        // `try_with`: at a thread's exit the slot may be gone already.
        let _ = self.slot.try_with(|h| h.replace(prev));
    }
}

/// What a thread that has spun for a long time does (a slow pipe reader, say): a wait of 50 µs.
/// A performer ([`install_performer`]) first performs what its rings hold, as in [`relax`](super::relax).
#[inline]
pub fn doze() {
    perform();
    nap();
}

/// A wait of 50 µs on a condition variable nobody signals, performing nothing ([`doze`]'s).
///
/// Not `std::thread::sleep`, which restarts an interrupted sleep with the time the kernel
/// says is left, counting the timer slack (50 µs by default) as left too: under signals
/// more frequent than that (100,000 a second into the process) it never ends. A condition
/// variable's wait has an absolute deadline, which ends however often it is interrupted;
/// unlike `park_timeout` it takes no unpark meant for the kernel's own code. A spurious
/// early return is harmless: the caller looks again.
#[inline]
fn nap() {
    std::thread_local! {
        static DOZING: (std::sync::Mutex<()>, std::sync::Condvar) =
            const { (std::sync::Mutex::new(()), std::sync::Condvar::new()) };
    }
    DOZING.with(|(lock, never)| {
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let _ = never.wait_timeout(guard, std::time::Duration::from_micros(50));
    });
}
