//! The host CPU: the CPU backend runs device code on ordinary threads, and the tests and
//! the host's drain run the very same protocol code.
//!
//! This is the one arch module that links `std`: it needs thread-locals (each host thread
//! plays one GPU thread, with its own ids and context) and the scheduler (`yield_now`,
//! `sleep`) so that 64 spinning "GPU threads" on 2 cores still make progress.

extern crate std;

use core::cell::Cell;

use crate::protocol::group::SingleLane;

/// Host atomics.
///
/// x86-64 and AArch64 atomics are coherent across every agent in the system (the other
/// cores and the kernel's SQPOLL thread, which reads the rings with `smp_load_acquire`),
/// so core's atomics are already system scope.
pub mod atomic {
    pub use core::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64};
    /// An atomic that only the "GPU" threads use while a kernel runs: on the CPU backend
    /// those are host threads, and every atomic is the same.
    pub use core::sync::atomic::{fence as device_fence, AtomicU64 as DeviceAtomicU64};
}

/// On the CPU backend a warp is one thread.
pub type Warp = SingleLane;

/// Host threads are scheduled independently: each leaves a wait on its own.
pub type WaitGroup = SingleLane;

/// What a spinning thread does: give the core away. Many more "GPU threads" than cores
/// run here, and the one we wait for may need this core. A thread that
/// [`relax_by_dozing`] dozes instead.
///
/// A performer ([`install_performer`]) first performs what its rings hold: what it waits
/// for may be a request no one else would perform.
#[inline]
pub fn relax() {
    perform();
    if DOZE_TO_RELAX.get() {
        doze();
    } else {
        std::thread::yield_now();
    }
}

std::thread_local! {
    static DOZE_TO_RELAX: Cell<bool> = const { Cell::new(false) };
}

/// Makes this thread's [`relax`] a [`doze`] for good: for a real-time thread (the host's
/// waker, where the kernel lets it have `SCHED_FIFO`), whose `yield_now` gives the core
/// only to other real-time threads, never to the thread of the fair scheduler it waits for
/// (a kernel thread that holds an SQ ticket or the reaping turn).
pub fn relax_by_dozing() {
    DOZE_TO_RELAX.set(true);
}

/// Reads `*p`, memory another agent published to us (its last write happens-before this
/// read through an acquire the caller made): a plain load, which the acquire orders.
///
/// # Safety
/// `p` is valid and aligned for `T`, and no agent writes `*p` concurrently.
#[inline(always)]
pub unsafe fn read_published<T: Copy>(p: *const T) -> T {
    // SAFETY: forwarded from our caller.
    unsafe { core::ptr::read(p) }
}

/// Whether a flush that finds every flight out, with no print in progress, waits for one
/// to land and sends what is left itself (`Stream::flush_work`): not on the CPU backend,
/// where the host's waker sends what kernel threads left once it has sat there a moment
/// (`gpuio_host`'s `rescue`). An OS preempts threads: a flusher waiting there, if
/// preempted while more threads compute than there are cores, held every later line for a
/// scheduler round among its peers (tens to hundreds of milliseconds); and a thread
/// printing alone waited for each of its writes, one line per write. Under loom, which
/// checks the protocol as the GPUs run it, yes.
#[inline]
pub const fn flusher_sees_flights_through() -> bool {
    cfg!(loom)
}

mod doorbell;

use doorbell::perform;
pub use doorbell::{
    doze, install_doorbell, install_performer, ring_doorbell, ring_doorbell_for_lines, without_performing, Doorbell,
    HookGuard,
};

/// What a thread does while another reaps for it (`Context::waiting`): nothing more than
/// its backoff. CPU threads are not lanes sharing an issue slot (see the NVIDIA version).
#[inline]
pub fn yield_to_siblings() {}

/// Runs `round` for the threads that call this together (`Context::waiting`): a CPU
/// thread is a group of one, so it runs it itself.
#[inline(always)]
pub fn by_one_lane<T>(round: impl FnOnce() -> Option<T>) -> Option<T> {
    round()
}

/// Whether `p` points into memory private to the calling GPU thread. A CPU-backend thread's
/// stack is ordinary memory that every thread can address, so never.
#[inline]
pub fn is_thread_private(_p: *const u8) -> bool {
    false
}

/// A nanosecond clock (monotonic, from the first call in this process), for measurements.
pub fn clock_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

/// The ids of one CPU-backend thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadIds {
    /// Index of the thread in its block.
    pub thread_idx: crate::dim::Dim3,
    /// Index of the block in the grid.
    pub block_idx: crate::dim::Dim3,
    /// Threads per block.
    pub block_dim: crate::dim::Dim3,
    /// Blocks in the grid.
    pub grid_dim: crate::dim::Dim3,
    /// What the threads of its block share ([`Block`]), or null (a thread of its own: a
    /// direct call, a test); it outlives the thread's time in the kernel.
    pub block: *const Block,
}

// SAFETY: `block` points to a `Block`, which is `Sync`, and whoever makes the ids keeps it
// alive for the thread that uses them (`ThreadIds::block`); the rest are plain numbers.
unsafe impl Send for ThreadIds {}

impl ThreadIds {
    /// Thread `thread_idx` of block `block_idx` in a 1-D launch of `grid_dim` blocks of
    /// `block_dim` threads.
    pub const fn linear(thread_idx: u32, block_idx: u32, block_dim: u32, grid_dim: u32) -> ThreadIds {
        ThreadIds {
            thread_idx: crate::dim::Dim3::new(thread_idx, 0, 0),
            block_idx: crate::dim::Dim3::new(block_idx, 0, 0),
            block_dim: crate::dim::Dim3::new(block_dim, 1, 1),
            grid_dim: crate::dim::Dim3::new(grid_dim, 1, 1),
            block: core::ptr::null(),
        }
    }
}

/// What the threads of one CPU-backend block share: its dynamic shared memory and its
/// barrier ([`sync_threads`]). The CPU backend makes one per block and hands each of the
/// block's threads a pointer to it ([`ThreadIds::block`]).
pub struct Block {
    /// The dynamic shared memory: zeroed, 16-byte aligned (`u128` words), its length in bytes
    /// `bytes`.
    memory: std::boxed::Box<[core::cell::UnsafeCell<u128>]>,
    bytes: usize,
    /// The barrier's state.
    barrier: std::sync::Mutex<Barrier>,
    turned: std::sync::Condvar,
}

/// A [`Block`]'s barrier: a round ends when every member still in the kernel has arrived.
/// A thread that leaves the kernel (returns, or panics) stops being a member, as a GPU's
/// barrier stops waiting for threads that exited.
struct Barrier {
    /// Threads of the block still in the kernel.
    members: u32,
    /// Members arrived in this round.
    arrived: u32,
    /// Rounds completed.
    round: u64,
    /// The launch could not start every thread of the block.
    abandoned: bool,
}

impl Barrier {
    /// Ends the round if every member has arrived (and one has).
    fn turn_if_complete(&mut self, turned: &std::sync::Condvar) {
        if self.arrived > 0 && self.arrived >= self.members {
            self.arrived = 0;
            self.round = self.round.wrapping_add(1);
            turned.notify_all();
        }
    }
}

// SAFETY: the memory is the kernel's shared memory: its threads access it through raw
// pointers, under the same rules as a GPU block's (the kernel's code synchronizes them with
// `sync_threads` or atomics); the barrier's state is behind a mutex.
unsafe impl Sync for Block {}

impl Block {
    /// A block of `threads` threads with `bytes` of dynamic shared memory.
    pub fn new(threads: u32, bytes: usize) -> Block {
        Block {
            memory: (0..bytes.div_ceil(16))
                .map(|_| core::cell::UnsafeCell::new(0))
                .collect(),
            bytes,
            barrier: std::sync::Mutex::new(Barrier {
                members: threads,
                arrived: 0,
                round: 0,
                abandoned: false,
            }),
            turned: std::sync::Condvar::new(),
        }
    }

    /// Its dynamic shared memory.
    pub fn memory(&self) -> *mut [u8] {
        core::ptr::slice_from_raw_parts_mut(self.memory.as_ptr() as *mut u8, self.bytes)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Barrier> {
        self.barrier.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Releases every thread waiting at the barrier, now and later, with a panic: the
    /// launch could not start every thread of the block, so they would wait forever.
    pub fn abandon(&self) {
        self.state().abandoned = true;
        self.turned.notify_all();
    }

    /// A thread of the block left the kernel (returned or panicked): the barrier no longer
    /// waits for it.
    pub fn leave(&self) {
        let mut b = self.state();
        b.members = b.members.saturating_sub(1);
        b.turn_if_complete(&self.turned);
    }

    /// Waits until every member of the block has called it (or panics if the block was
    /// abandoned).
    pub fn wait(&self) {
        let mut b = self.state();
        let round = b.round;
        b.arrived += 1;
        b.turn_if_complete(&self.turned);
        while b.round == round && !b.abandoned {
            b = self.turned.wait(b).unwrap_or_else(|e| e.into_inner());
        }
        if b.round == round {
            std::panic!(
                "sync_threads: the launch could not start every thread of this block, so the \
                 barrier cannot complete"
            );
        }
    }
}

std::thread_local! {
    /// How many `print_to` calls this thread is inside (a panic hook must not print then).
    static IN_PRINT: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread is inside a print (formatting or writing a line): a panic there
/// must not print through the same stream.
pub fn in_print() -> bool {
    IN_PRINT.with(|c| c.get() > 0)
}

/// Marks this thread as inside a print until dropped.
pub struct InPrint(());

impl InPrint {
    /// Enters a print.
    pub fn enter() -> InPrint {
        IN_PRINT.with(|c| c.set(c.get() + 1));
        InPrint(())
    }
}

impl Drop for InPrint {
    fn drop(&mut self) {
        IN_PRINT.with(|c| c.set(c.get() - 1));
    }
}

std::thread_local! {
    /// A byte whose address names the calling thread ([`thread_key`]).
    static KEY: u8 = const { 0 };
}

/// Two words that no other thread running now has (the second never 0): here, the address
/// of a thread-local byte, and 1. A print uses it to find its own mark among the threads
/// formatting a long line in place (`in_place::InPlaceLines`).
pub fn thread_key() -> (u64, u64) {
    (KEY.with(|k| k as *const u8 as u64), 1)
}

std::thread_local! {
    static CURRENT: Cell<(*const (), ThreadIds)> =
        const { Cell::new((core::ptr::null(), ThreadIds::linear(0, 0, 1, 1))) };
}

/// The context of the kernel this thread runs (a `*const Context`: [`crate::protocol::context::current`]
/// gives it its type), or null outside a kernel.
#[inline]
pub fn installed_context() -> *const () {
    CURRENT.with(|c| c.get().0)
}

fn ids() -> ThreadIds {
    CURRENT.with(|c| c.get().1)
}

/// Index of the calling thread in its block (x).
pub fn thread_idx() -> u32 {
    ids().thread_idx.x
}
/// Index of the calling thread's block (x).
pub fn block_idx() -> u32 {
    ids().block_idx.x
}
/// Threads per block (x).
pub fn block_dim() -> u32 {
    ids().block_dim.x
}
/// Blocks in the grid (x).
pub fn grid_dim() -> u32 {
    ids().grid_dim.x
}
/// Index of the calling thread in its block, in x, y and z.
pub fn thread_idx_3d() -> crate::dim::Dim3 {
    ids().thread_idx
}
/// Index of the calling thread's block, in x, y and z.
pub fn block_idx_3d() -> crate::dim::Dim3 {
    ids().block_idx
}
/// Threads per block, in x, y and z.
pub fn block_dim_3d() -> crate::dim::Dim3 {
    ids().block_dim
}
/// Blocks in the grid, in x, y and z.
pub fn grid_dim_3d() -> crate::dim::Dim3 {
    ids().grid_dim
}

/// The dynamic shared memory of the calling thread's block (empty outside a CPU-backend
/// launch).
pub fn dynamic_shared_memory() -> *mut [u8] {
    let block = ids().block;
    if block.is_null() {
        return core::ptr::slice_from_raw_parts_mut(core::ptr::null_mut(), 0);
    }
    // SAFETY: a block pointer outlives its threads' time in the kernel (`ThreadIds::block`).
    unsafe { &*block }.memory()
}

/// Waits until every thread of the calling thread's block reached it (a thread outside a
/// CPU-backend launch is a block of its own: it returns at once).
pub fn sync_threads() {
    let block = ids().block;
    if !block.is_null() {
        // SAFETY: as in `dynamic_shared_memory`.
        unsafe { &*block }.wait();
    }
}

/// Makes the calling host thread a "GPU thread" of a kernel until the guard drops.
///
/// The CPU backend calls this on each thread it starts; tests call it to run device code.
///
/// # Safety
/// `ctx` must point to an initialised [`Context`](crate::protocol::context::Context) that
/// outlives the guard, and `ids.block` be null or point to a [`Block`] that outlives it
/// (`sync_threads` and `dynamic_shared_memory` use it).
/// [`crate::protocol::context::enter`] is the typed form.
pub unsafe fn enter(ctx: *const (), ids: ThreadIds) -> EnterGuard {
    let prev = CURRENT.with(|c| c.replace((ctx, ids)));
    EnterGuard { prev }
}

/// Restores the thread's previous context when dropped.
pub struct EnterGuard {
    prev: (*const (), ThreadIds),
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.prev));
    }
}

/// Outside any kernel (no context installed), host-built device code prints with std.
/// Through std's own macros, so that a test harness captures it as it captures std's.
pub fn print_without_context(stderr: bool, newline: bool, args: core::fmt::Arguments) {
    let nl: &str = if newline { "\n" } else { "" };
    if stderr {
        std::eprint!("{args}{nl}");
    } else {
        std::print!("{args}{nl}");
    }
}

/// Ends a kernel thread whose body returned `Err`: `print` puts `report` out, then the
/// thread unwinds as a panic does, but past std's panic hook (the report is printed
/// already), carrying a [`KernelFailed`] with the report's text, by which the CPU backend
/// counts it failed. A GPU thread traps instead.
pub fn end_failed_thread(report: &dyn core::fmt::Display, print: impl FnOnce(&dyn core::fmt::Display)) -> ! {
    // Formatted once, the text printed being the text carried; with the thread no
    // performer, as the report's wait needs (`entry::report_and_wait`), also while the
    // error's Display runs (it may print).
    let text = without_performing(|| {
        let text = std::string::ToString::to_string(report);
        print(&text);
        text
    });
    std::panic::resume_unwind(std::boxed::Box::new(KernelFailed(text)))
}

/// What a kernel thread whose body returned `Err` unwinds with (host builds): its report,
/// `kernel thread T (block B, thread I) of KERNEL returned Err: ERROR`.
#[derive(Debug)]
pub struct KernelFailed(pub std::string::String);

/// Ends the process (GPU targets end the kernel; the host has no kernel to end alone, and
/// the CPU backend's panics unwind instead: only a panic handler calls this).
pub fn abort() -> ! {
    std::process::abort()
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::Block;

    #[test]
    fn a_block_barrier_releases_its_members_together_forgets_leavers_and_panics_when_abandoned() {
        let block = std::sync::Arc::new(Block::new(3, 40));
        assert_eq!(block.memory().len(), 40);
        let passed = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let threads: std::vec::Vec<_> = (0..3)
            .map(|_| {
                let (b, p) = (block.clone(), passed.clone());
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        b.wait();
                    }
                    p.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(passed.load(core::sync::atomic::Ordering::Relaxed), 3);
        // Two of three threads arrive; the launch gives up on the third.
        let block = std::sync::Arc::new(Block::new(3, 0));
        let waiters: std::vec::Vec<_> = (0..2)
            .map(|_| {
                let b = block.clone();
                std::thread::spawn(move || b.wait())
            })
            .collect();
        block.abandon();
        for w in waiters {
            assert!(w.join().is_err(), "a waiter of an abandoned block went on");
        }
        // A thread that leaves the kernel no longer counts: the other two go on.
        let block = std::sync::Arc::new(Block::new(3, 0));
        let waiters: std::vec::Vec<_> = (0..2)
            .map(|_| {
                let b = block.clone();
                std::thread::spawn(move || {
                    b.wait();
                    b.wait();
                })
            })
            .collect();
        block.leave();
        for w in waiters {
            w.join().expect("the members that stayed pass the barrier");
        }
    }

    #[test]
    fn a_thread_rings_its_own_doorbell_until_its_guard_drops() {
        use super::{install_doorbell, ring_doorbell};
        use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
        use std::sync::Arc;
        let rings = Arc::new(AtomicU32::new(0));
        let bell = |n: u32| {
            let count = rings.clone();
            Some(Arc::new(move || {
                count.fetch_add(n, Relaxed);
            }) as super::Doorbell)
        };
        ring_doorbell();
        let outer = install_doorbell(bell(1));
        ring_doorbell();
        assert_eq!(rings.load(Relaxed), 1);
        {
            let _inner = install_doorbell(bell(100));
            ring_doorbell();
            assert_eq!(rings.load(Relaxed), 101, "the inner one");
            // Another thread has none of them.
            std::thread::spawn(ring_doorbell).join().unwrap();
            assert_eq!(rings.load(Relaxed), 101);
        }
        ring_doorbell();
        assert_eq!(rings.load(Relaxed), 102, "the outer one again");
        drop(outer);
        ring_doorbell();
        assert_eq!(rings.load(Relaxed), 102, "none");
    }
}
