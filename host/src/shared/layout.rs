//! Where each part of the shared memory lives ([`Layout`]: offsets into the protocol
//! state region and into the logs), and the memory itself: the logs, the arena and the solo
//! ring's buffer mapped, the state region placed in host or device memory.

use std::sync::Mutex;

use gpuio_device::protocol::context::Context;
use gpuio_device::protocol::context::{MAX_RINGS, STREAMS};
use gpuio_device::protocol::solo::SOLO_STAGE;
use gpuio_device::protocol::stream::{chunk_count, Flight};

use crate::backend::Device;
use crate::consumer::submission::Queue;
use crate::error::{Error, Result};
use crate::memory::{round_up, Mapping};

use super::{SharedConfig, State};

/// Where each part lives: offsets into the state region and into the logs.
pub(super) struct Layout {
    /// Each ring's ready flags.
    pub(super) ready: Vec<usize>,
    /// Completion slots: states, tags, results (`slots` each).
    pub(super) request_words: [usize; 3],
    /// Arena block states.
    pub(super) block_states: usize,
    pub(super) flights: [usize; STREAMS],
    pub(super) chunks: [usize; STREAMS],
    /// The streams' stages.
    pub(super) stages: [usize; STREAMS],
    pub(super) state_len: usize,
    pub(super) bufs: [usize; STREAMS],
    pub(super) logs_len: usize,
}

impl Layout {
    /// The layout for `queues` (1 to `MAX_RINGS` rings of one geometry) and `cfg`.
    pub(super) fn for_rings(queues: &[Queue], cfg: &SharedConfig) -> Layout {
        assert!((1..=MAX_RINGS).contains(&queues.len()), "1 to {MAX_RINGS} rings");
        let p = *queues[0].params();
        // One configuration made them all: the layout and the slot count assume it.
        assert!(queues
            .iter()
            .all(|q| (q.params().sq_entries, q.params().cq_entries) == (p.sq_entries, p.cq_entries)));
        Layout::new(
            queues.len(),
            p.sq_entries,
            completion_slots(queues),
            cfg.log_bytes,
            cfg.max_flights,
            cfg.arena_bytes / cfg.arena_block_bytes,
        )
    }

    pub(super) fn new(
        rings: usize,
        sq_entries: u32,
        slots: u32,
        log_bytes: [usize; STREAMS],
        max_flights: u32,
        blocks: usize,
    ) -> Layout {
        let mut at = round_up(size_of::<Context>(), 128);
        let ready = (0..rings)
            .map(|_| {
                let ready = at;
                at = round_up(at + sq_entries as usize * 4, 128);
                ready
            })
            .collect();
        let mut request_words = [0; 3];
        for w in &mut request_words {
            *w = at;
            at = round_up(at + slots as usize * 4, 128);
        }
        let block_states = at;
        at = round_up(at + blocks * 4, 128);
        let (mut flights, mut chunks) = ([0; STREAMS], [0; STREAMS]);
        for i in 0..STREAMS {
            flights[i] = at;
            at = round_up(at + max_flights as usize * size_of::<Flight>(), 128);
            chunks[i] = at;
            at = round_up(at + chunk_count(log_bytes[i] as u64) * 4, 128);
        }
        // The stages (`Stream::stage`), in the GPU's own memory on GPU backends. Only groups
        // of several lanes use them: on the CPU backend that is the tests' simulated warps
        // (its own groups are single threads), and the pages nobody touches cost nothing.
        // Each stage starts 128-aligned and each log at least 16-byte aligned (below): a
        // position has the same 16-byte phase in both, which the group copy needs for its
        // wide stores.
        let mut stages = [0; STREAMS];
        for (stage, bytes) in stages.iter_mut().zip(log_bytes) {
            *stage = at;
            at = round_up(at + bytes, 128);
        }
        let state_len = round_up(at, 4096);
        // Each log starts where the one before ends. The sizes are powers of two of at least
        // 64 bytes, so each log starts 16-byte aligned (the phase the stages keep, above).
        let bufs = std::array::from_fn(|i| log_bytes[..i].iter().sum());
        Layout {
            ready,
            request_words,
            block_states,
            flights,
            chunks,
            stages,
            state_len,
            bufs,
            logs_len: log_bytes.iter().sum(),
        }
    }
}

/// One completion slot per CQ entry of every ring (rounded to a power of two, which the
/// pool's masks need): a block's ring can fill its CQ while the others do too.
pub(super) fn completion_slots(queues: &[Queue]) -> u32 {
    queues[0].params().cq_entries * (queues.len() as u32).next_power_of_two()
}

/// Maps the print logs, the file-I/O arena and, for a solo ring, its staging buffer (on
/// GPU backends the first two in huge pages: they are registered with the driver).
pub(super) fn map_memory(
    layout: &Layout,
    cfg: &SharedConfig,
    gpu: bool,
    solo: bool,
) -> Result<(Mapping, Mapping, Option<Mapping>)> {
    let os = |what| move |e| Error::Os { what, source: e };
    let map = if gpu { Mapping::huge } else { Mapping::new };
    let logs = map(layout.logs_len).map_err(os("mmap of the print logs"))?;
    let arena = map(cfg.arena_bytes).map_err(os("mmap of the file-I/O arena"))?;
    let stage = match solo {
        true => Some(Mapping::new(SOLO_STAGE as usize).map_err(os("mmap of the solo ring's staging buffer"))?),
        false => None,
    };
    Ok((logs, arena, stage))
}

/// Where the protocol state was placed ([`place_state`]).
pub(super) struct Placed {
    pub(super) state: State,
    /// The state region's address as the agents that run the protocol see it.
    pub(super) base: *mut u8,
    /// The host memory the Context is first written to.
    pub(super) image: *mut u8,
    /// Where those agents see each region (the host's address, except where the GPU maps
    /// host memory elsewhere: HSA on discrete GPUs without the SVM API).
    pub(super) views: Vec<*mut u8>,
}

/// Places the protocol state: in host memory on the CPU backend; on a GPU in zeroed device
/// memory, with a host image of the context, after mapping `regions` for the GPU.
pub(super) fn place_state(device: Option<Device>, layout: &Layout, regions: &[&Mapping]) -> Result<Placed> {
    let os = |what| move |e| Error::Os { what, source: e };
    let Some(device) = device else {
        // Lazy: the stages at its end are touched only by the tests' simulated warps.
        let m = Mapping::lazy(layout.state_len).map_err(os("mmap of the protocol state"))?;
        let base = m.as_ptr();
        let views = regions.iter().map(|m| m.as_ptr()).collect();
        return Ok(Placed {
            state: State::Host(m),
            base,
            image: base,
            views,
        });
    };
    let views = map_all(&device, regions)?;
    let unmap_all = || {
        // SAFETY: mapped just above; no kernel has run yet.
        unsafe {
            for m in regions {
                device.unmap_host(m.as_ptr());
            }
        }
    };
    let dptr = device.alloc_zeroed(layout.state_len).inspect_err(|_| unmap_all())?;
    let image = Mapping::new(size_of::<Context>()).map_err(|e| {
        unmap_all();
        device.free(dptr);
        Error::Os {
            what: "mmap of the context image",
            source: e,
        }
    })?;
    let image_ptr = image.as_ptr();
    Ok(Placed {
        state: State::Device {
            device,
            dptr,
            image: Mutex::new(image),
            peek: Mutex::new(None),
        },
        base: dptr as *mut u8,
        image: image_ptr,
        views,
    })
}

/// Maps the regions for the GPU, in order; on failure unmaps those already mapped.
fn map_all(device: &Device, regions: &[&Mapping]) -> Result<Vec<*mut u8>> {
    let mut views = vec![std::ptr::null_mut(); regions.len()];
    for (i, m) in regions.iter().enumerate() {
        // SAFETY: the mappings live in `Shared`, whose Drop unmaps them for the GPU first.
        match unsafe { device.map_host(m.as_ptr(), m.len()) } {
            Ok(v) => views[i] = v,
            Err(e) => {
                for done in &regions[..i] {
                    // SAFETY: mapped in this loop; no kernel has run yet.
                    unsafe { device.unmap_host(done.as_ptr()) };
                }
                return Err(e);
            }
        }
    }
    Ok(views)
}
