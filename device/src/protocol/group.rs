//! Groups of lanes that execute one call together (a warp or wavefront).
//!
//! A `println!` executed by the lanes of a warp becomes one record: the lanes' lines are
//! laid out back to back, one lane reserves space for all of them with one atomic, and
//! they go out in one write. [`Group`] is the little a print needs from the hardware.
//! The CPU backend's warp is a [`SingleLane`]; tests use a simulated multi-lane group.

/// The lanes executing the current call together.
///
/// Every lane of the group calls each method the same number of times, in the same order
/// (they are collective operations, like CUDA's `__shfl_sync`).
pub trait Group {
    /// Whether this lane is the group's leader (the lane that talks to the ring).
    fn is_leader(&self) -> bool;
    /// How many lanes the group holds (every member knows it: not a collective).
    fn lanes(&self) -> u32;
    /// The sum of `v` over the lanes before this one (in lane order), and over all lanes.
    fn exclusive_sum(&self, v: u64) -> (u64, u64);
    /// The leader's `v`, returned on every lane.
    fn broadcast(&self, v: u64) -> u64;
    /// Waits until every lane reached this point; writes before it are visible after it,
    /// to the other lanes and to whatever a lane's later release publishes them to.
    fn sync(&self);
    /// The members whose `side` equals this lane's, as a group of their own (a collective
    /// of this group: every member calls it). The two halves may then run different
    /// collectives.
    fn split(&self, side: bool) -> Self
    where
        Self: Sized;
    /// Whether `p` is true on every member (a collective of this group). `true` implies
    /// that it is true on this lane.
    fn all(&self, p: bool) -> bool;
}

/// A group of one: every call is its own record.
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleLane;

impl Group for SingleLane {
    #[inline(always)]
    fn is_leader(&self) -> bool {
        true
    }
    #[inline(always)]
    fn lanes(&self) -> u32 {
        1
    }
    #[inline(always)]
    fn exclusive_sum(&self, v: u64) -> (u64, u64) {
        (0, v)
    }
    #[inline(always)]
    fn broadcast(&self, v: u64) -> u64 {
        v
    }
    #[inline(always)]
    fn sync(&self) {}
    #[inline(always)]
    fn split(&self, _side: bool) -> Self {
        SingleLane
    }
    #[inline(always)]
    fn all(&self, p: bool) -> bool {
        p
    }
}
