//! A simulated warp: `n` lanes on `n` host threads, for the paths that lanes of a GPU warp
//! take together (a CPU backend warp has one lane).

use std::sync::{Barrier, Mutex};

use gpuio::device::protocol::group::Group;

/// A simulated warp of `lanes` lanes, one host thread each.
pub struct SimWarp {
    pub lanes: usize,
    barrier: Barrier,
    slots: Mutex<Vec<u64>>,
}

impl SimWarp {
    /// A warp of `lanes` lanes; each runs on its own thread, as a [`Lane`].
    pub fn new(lanes: usize) -> SimWarp {
        SimWarp {
            lanes,
            barrier: Barrier::new(lanes),
            slots: Mutex::new(vec![0; lanes]),
        }
    }
}

/// Runs `warps` simulated warps of `lanes` lanes each, a host thread per lane driving `rt`'s
/// context ([`gpuio::Runtime::host_thread`]), until every lane returns: lane `lane` of warp
/// `w` runs `body(w, &lane)`.
pub fn run_warps(rt: &gpuio::Runtime, warps: usize, lanes: usize, body: impl Fn(usize, &Lane) + Sync) {
    std::thread::scope(|s| {
        for w in 0..warps {
            let warp = std::sync::Arc::new(SimWarp::new(lanes));
            for lane in 0..lanes {
                let (warp, body) = (warp.clone(), &body);
                s.spawn(move || {
                    let _driving = rt.host_thread();
                    body(w, &Lane { warp: &warp, lane })
                });
            }
        }
    });
}

/// Lane `lane` of `warp`: the [`Group`] a lane's thread passes to the code under test.
pub struct Lane<'a> {
    pub warp: &'a SimWarp,
    pub lane: usize,
}

impl Lane<'_> {
    /// Every lane's `v`, on every lane.
    fn gather(&self, v: u64) -> Vec<u64> {
        self.warp.slots.lock().unwrap()[self.lane] = v;
        self.warp.barrier.wait();
        let slots = self.warp.slots.lock().unwrap().clone();
        self.warp.barrier.wait();
        slots
    }
}

impl Group for Lane<'_> {
    fn is_leader(&self) -> bool {
        self.lane == 0
    }
    fn lanes(&self) -> u32 {
        self.warp.lanes as u32
    }
    fn exclusive_sum(&self, v: u64) -> (u64, u64) {
        let slots = self.gather(v);
        (slots[..self.lane].iter().sum(), slots.iter().sum())
    }
    fn broadcast(&self, v: u64) -> u64 {
        if self.lane == 0 {
            self.warp.slots.lock().unwrap()[0] = v;
        }
        self.warp.barrier.wait();
        let v = self.warp.slots.lock().unwrap()[0];
        self.warp.barrier.wait();
        v
    }
    fn sync(&self) {
        self.warp.barrier.wait();
    }
    /// Only the split that keeps every lane together: the simulated warp has one barrier
    /// for all its lanes, so a group of some of them cannot be simulated (and the tests
    /// that use it print to one stream).
    fn split(&self, side: bool) -> Self {
        let sides = self.gather(side as u64);
        assert!(
            sides.iter().all(|&s| s == side as u64),
            "SimWarp cannot split its lanes"
        );
        Lane {
            warp: self.warp,
            lane: self.lane,
        }
    }
    fn all(&self, p: bool) -> bool {
        self.gather(p as u64).iter().all(|&x| x == 1)
    }
}
