//! The warp (an AMD wavefront) as a [`Group`], once for both GPU targets, over the lane
//! primitives each target provides in its `lanes` module (`amdgcn.rs`, `nvptx.rs`): the
//! mask type (`LaneMask`: `u64` on amdgcn, `u32` on nvptx), `active_mask`, `lane_id`,
//! `ballot`, and the collectives whose algorithm differs (`exclusive_sum`, `broadcast`,
//! `sync`). Those modules also say how their target forms the group and why its
//! collectives are sound.

#[cfg(target_arch = "amdgpu")]
use super::amdgcn::lanes::{self, LaneMask};
#[cfg(target_arch = "nvptx64")]
use super::nvptx::lanes::{self, LaneMask};
use crate::protocol::group::Group;

/// The lanes of a warp (an AMD wavefront) that execute a call together: the lanes active
/// where it was formed (`lanes::active_mask`; see `arch/mod.rs` on where to form it).
/// Every lane of that set gets the same mask, so the masks partition the warp: lanes that
/// get there on different branches (or at different times) form separate, disjoint groups.
#[derive(Clone, Copy, Debug)]
pub struct Warp {
    /// The lanes of the group (this lane included): bit `i` is lane `i`.
    mask: LaneMask,
    /// This lane's index in the warp.
    lane: u32,
}

impl Warp {
    /// The lanes executing this call together with the calling lane.
    #[inline(always)]
    pub fn current() -> Warp {
        Warp {
            mask: lanes::active_mask(),
            lane: lanes::lane_id(),
        }
    }

    /// The group's leader: its lowest lane.
    #[inline(always)]
    fn leader(&self) -> u32 {
        self.mask.trailing_zeros()
    }
}

impl Default for Warp {
    /// [`Warp::current`].
    #[inline(always)]
    fn default() -> Self {
        Warp::current()
    }
}

impl Group for Warp {
    #[inline(always)]
    fn is_leader(&self) -> bool {
        self.lane == self.leader()
    }

    #[inline(always)]
    fn lanes(&self) -> u32 {
        self.mask.count_ones()
    }

    /// `(sum of v over the group's lanes below this one, sum over the whole group)`, modulo
    /// 2^64 (callers add line lengths, far from overflowing); "below" means a lower lane.
    #[inline(always)]
    fn exclusive_sum(&self, v: u64) -> (u64, u64) {
        lanes::exclusive_sum(self.mask, self.lane, v)
    }

    /// The leader's `v`, on every lane of the group.
    #[inline(always)]
    fn broadcast(&self, v: u64) -> u64 {
        lanes::broadcast(self.mask, self.leader(), v)
    }

    #[inline(always)]
    fn sync(&self) {
        lanes::sync(self.mask);
    }

    /// A ballot over the group: the members whose `side` equals this lane's.
    #[inline(always)]
    fn split(&self, side: bool) -> Self {
        let same = lanes::ballot(&self.mask, side);
        Warp {
            mask: if side { same } else { self.mask & !same },
            lane: self.lane,
        }
    }

    /// A ballot over the group.
    #[inline(always)]
    fn all(&self, p: bool) -> bool {
        lanes::ballot(&self.mask, p) == self.mask
    }
}
