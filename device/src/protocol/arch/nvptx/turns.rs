//! Print turns (sm_70+): at most [`TURNS`] warps of one SM write print records at once.
//!
//! Why: a kernel that prints gets gpuio's print path at 32 registers
//! (`GPUIO_PRINT_REGISTERS`), which keeps a kernel that only might print at full occupancy:
//! 64 warps an SM. When most of them print at once, they all take part in writing records
//! (reserving log space, waiting for room, copying lines out), in code
//! that spills at 32 registers, and the SM gets less done than with a few warps in that
//! part: with every warp let in, a kernel that only prints ran well below the uncapped
//! rate (8 warps an SM), and 8 warps an SM at a time closed about half of that gap. 4 or 16
//! did less than 8, a fair (ticket) order less than this free-for-all, shorter naps between
//! looks less, and letting the formatting in too nothing. docs/PROTOCOL.md ("What the cap
//! costs a kernel that only prints") and BENCHMARKS.md have the figures.
//!
//! The turn is taken once every lane of the group has formatted its line (after the
//! group's first collective, which all of them reach only then), so a print that a
//! `Display` makes while its line is formatted never waits for a turn its own group holds.
//! (A long line, formatted again in place, runs its `Display`s there, inside the turn where
//! its group wrote no record; the prints they make then are skipped, see `print`.) Turns count groups, not warps: a warp
//! whose lanes print to stdout and stderr at once holds two.
//!
//! A turn is given back once the group's record is in the log, before its commit: the
//! commit's system-scope fence waits for the record's stores to reach host memory, and the
//! flush after it may serve other groups' requests; neither is the crowd turns keep out,
//! and holding the turn through them kept the SM's other printing warps waiting (a line a
//! thread from an FMA chain: docs/PROTOCOL.md). A group with no record (its lines together
//! larger than the log allows), whose lines all go out one lane at a time, holds it to the
//! end; a group that wrote a record prints its lines longer than the stack buffer after it
//! gave its turn back.
//!
//! A turn is held while the record waits for log room, so under backpressure a warp may
//! wait for a turn about as long as it would have waited for room. A warp that waited
//! [`GIVE_UP_NS`] goes in without a turn (taken only while records wait that long for room,
//! when letting one more warp in costs little): a safety net, so that a turn is never what
//! holds a kernel. A turn is given back when it is dropped, on every way out of a record (a
//! trap ends the context, and this count with it). Turns are counted per SM in a device
//! global of each program (a looser limit where a module compiled whole is cut per kernel);
//! SM ids past [`SMS`] share counters (a stricter limit for them, nothing worse).
//!
//! The lockstep build (before sm_70) takes no turns: it has no `nanosleep` to wait with (so
//! a kernel of it that only prints, capped too, loses more of its rate: BENCHMARKS.md).

use core::sync::atomic::Ordering;

use crate::protocol::arch::atomic::DeviceAtomicU64;
use crate::protocol::group::Group;

/// Warps of one SM let into a record's write at once.
pub const TURNS: u64 = 8;
/// Counters; `%smid` modulo this picks one (today's largest GPUs have fewer than 200 SMs).
const SMS: usize = 512;
/// How long a warp waits for a turn before it goes in without one (by the GPU's clock).
const GIVE_UP_NS: u64 = 100_000_000;
/// One look's nap while waiting: 0.2 and 0.8 us let fewer lines out than 2 us, the looks
/// costing the SM more than they gained.
const NAP_NS: u32 = 2_000;

/// Warps of each SM now holding a turn. Relaxed, GPU scope: a count that orders nothing
/// (each record's own system-scope atomics order its bytes), which only the GPU's threads
/// touch; a GPU-scope atomic lets more lines out than a system-scope one.
static HOLDERS: [DeviceAtomicU64; SMS] = [const { DeviceAtomicU64::new(0) }; SMS];

/// A group's turn to write a record on its SM, given back when dropped; or none (it went in
/// without one, or this lane is not the group's leader, which alone holds the group's turn).
pub struct PrintTurn(Option<&'static DeviceAtomicU64>);

impl PrintTurn {
    /// Waits (the group's leader; the other lanes wait for it at their next collective)
    /// until fewer than [`TURNS`] groups of this SM hold a turn, and takes one; or goes in
    /// without one after [`GIVE_UP_NS`]. Call it once every lane of `g` has formatted.
    #[inline(never)] // tests/ptx_atomics/ finds its GPU-scope atomics by name
    pub fn take<G: Group>(g: &G) -> Self {
        if !g.is_leader() {
            return PrintTurn(None);
        }
        let holders = &HOLDERS[sm_id() as usize % SMS];
        let give_up = super::clock_ns() + GIVE_UP_NS;
        loop {
            // Relaxed look first: while the SM is full, no read-modify-write.
            if holders.load(Ordering::Relaxed) < TURNS {
                if holders.fetch_add(1, Ordering::Relaxed) < TURNS {
                    return PrintTurn(Some(holders));
                }
                holders.fetch_add(u64::MAX, Ordering::Relaxed); // minus one: not ours
            }
            // SAFETY: `nanosleep` only suspends the thread for a while; it has no memory
            // effects.
            unsafe { core::arch::asm!("nanosleep.u32 {};", in(reg32) NAP_NS, options(nostack, nomem)) };
            if super::clock_ns() >= give_up {
                return PrintTurn(None);
            }
        }
    }
}

impl PrintTurn {
    /// Gives the turn back now (as dropping it does; see [`Drop`] below for when).
    #[inline(always)]
    pub fn give_back(self) {
        drop(self);
    }
}

impl Drop for PrintTurn {
    /// Gives the turn back. Drop it once every lane of the group has put its part of the
    /// record into the log (after the group's `sync` that follows its writes there: the
    /// copy-out's, where the record was staged), or, for a group with no record, after the
    /// group's last `sync`.
    #[inline(never)] // tests/ptx_atomics/ finds its GPU-scope atomic by name
    fn drop(&mut self) {
        if let Some(holders) = self.0 {
            holders.fetch_add(u64::MAX, Ordering::Relaxed); // minus one
        }
    }
}

/// `%smid`: the SM the calling thread runs on now. (A warp may move if it is preempted; a
/// turn keeps the counter it took, so it is given back where it was taken.)
#[inline(always)]
fn sm_id() -> u32 {
    let id: u32;
    // SAFETY: reads a special register; no memory effects.
    unsafe { core::arch::asm!("mov.u32 {}, %smid;", out(reg32) id, options(nostack, nomem)) };
    id
}
