//! What both GPU targets (`amdgcn.rs`, `nvptx.rs`) do alike because no host thread is on
//! their data path (invariant 9): their rings are consumed by SQPOLL, their flushes see
//! their flights through themselves, the host hands them the runtime context in a device
//! global, and their threads never perform requests. The CPU backend's versions are in
//! `host/`.

/// After a thread published SQEs: nothing on a GPU, whose rings SQPOLL consumes (a GPU
/// cannot make the syscall that would do more).
#[inline(always)]
pub fn ring_doorbell() {}

/// After a flush published a print stream's write: as [`ring_doorbell`].
#[inline(always)]
pub fn ring_doorbell_for_lines() {}

/// Whether a flush that finds every flight out, with no print in progress, waits for one
/// to land and sends what is left itself (`Stream::flush_work`): yes. No host thread is on
/// the data path (invariant 9), so nobody else would.
#[inline(always)]
pub const fn flusher_sees_flights_through() -> bool {
    true
}

/// The runtime context. The host writes this global before launch (CUDA:
/// `cuModuleGetGlobal`; HSA: through the executable's symbol).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut gpuio_context: *const () = core::ptr::null();

/// The context the host installed (a `*const Context`: [`crate::protocol::context::current`] gives it
/// its type), or null.
#[inline(always)]
pub fn installed_context() -> *const () {
    // SAFETY: the host writes the global only while no kernel of this module (code object)
    // runs.
    unsafe { core::ptr::read_volatile(&raw const gpuio_context) }
}

/// Ends a kernel thread whose body returned `Err`: `print` puts `report` out, then the trap
/// a panic ends in ([`abort`]), which ends the kernel (see the host's version).
///
/// [`abort`]: super::abort
#[inline(always)]
pub fn end_failed_thread(report: &dyn core::fmt::Display, print: impl FnOnce(&dyn core::fmt::Display)) -> ! {
    without_performing(|| print(report));
    super::abort()
}

/// Runs `f`: a GPU thread never performs its rings' requests (see the host's version).
#[inline(always)]
pub fn without_performing<T>(f: impl FnOnce() -> T) -> T {
    f()
}
