//! The models' world: a context over a test-owned kernel model (log, completion slots,
//! arena), and the kernel's side of the transfer models.

use super::*;

/// Bytes per arena block in the models (the host insists on 4096; the protocol does not).
pub(crate) const BLOCK: u64 = 8;

/// A context with a 64-byte log for stdout, `slots` completion slots and an arena of
/// `blocks` blocks, over a test-owned kernel model.
pub(crate) struct World {
    /// Boxed: the context's ring points into it, and `World` moves (into its `Arc`) after
    /// the context is built.
    pub(crate) kernel: Box<KernelRings>,
    pub(crate) bufs: Vec<Vec<SharedCell<u8>>>,
    pub(crate) chunks: Vec<Vec<AtomicU32>>,
    pub(crate) flights: Vec<Vec<Flight>>,
    /// Completion slots: states, tags, results.
    pub(crate) slot_states: Vec<AtomicU32>,
    pub(crate) slot_tags: Vec<AtomicU32>,
    pub(crate) slot_results: Vec<AtomicI32>,
    /// The arena's bytes, and its blocks' states.
    pub(crate) arena: Vec<SharedCell<u8>>,
    pub(crate) block_states: Vec<AtomicU32>,
    pub(crate) ctx: Option<Context>,
}

pub(crate) fn world(max_flights: u32, positional: bool, slots: u32, blocks: u32) -> Arc<World> {
    let cap = 64;
    let mut w = World {
        kernel: Box::new(KernelRings::new(2, 2)),
        bufs: (0..2).map(|_| (0..cap).map(|_| SharedCell::new(0)).collect()).collect(),
        chunks: (0..2)
            .map(|_| (0..chunk_count(cap as u64)).map(|_| AtomicU32::new(0)).collect())
            .collect(),
        flights: (0..2)
            .map(|_| (0..max_flights).map(|_| Flight::new()).collect())
            .collect(),
        slot_states: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        slot_tags: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        slot_results: (0..slots).map(|_| AtomicI32::new(0)).collect(),
        arena: (0..blocks as u64 * BLOCK).map(|_| SharedCell::new(0)).collect(),
        block_states: (0..blocks).map(|_| AtomicU32::new(0)).collect(),
        ctx: None,
    };
    // SAFETY: the pointers point into `w`'s vectors and its boxed kernel rings, whose heap
    // storage does not move when `w` moves into the Arc; `w` outlives every use of the context.
    let streams = [0, 1].map(|i| unsafe {
        Stream::new(
            i as u32,
            1 + i as i32,
            positional,
            0,
            w.bufs[i].as_ptr(),
            cap as u64,
            w.chunks[i].as_ptr(),
            w.flights[i].as_ptr(),
            max_flights,
        )
    });
    w.ctx = Some(Context {
        magic: CONTEXT_MAGIC,
        // One live ring (the CPU backend's default).
        rings: std::array::from_fn(|i| if i == 0 { w.kernel.ring() } else { Ring::unused() }),
        ring_count: 1,
        streams,
        stderr_stream: 1,
        stray_completions: AtomicU32::new(0),
        refusals: gpuio_device::protocol::context::Refusals::new(),
        // SAFETY: as above; the vectors hold `slots` and `blocks` zeroed words and
        // `blocks * BLOCK` cells. The kernel sees the arena where the device does, so an
        // SQE's `addr` is a pointer to the cells.
        requests: unsafe {
            Requests::new(
                w.slot_states.as_ptr(),
                w.slot_tags.as_ptr(),
                w.slot_results.as_ptr(),
                slots,
            )
        },
        arena: unsafe {
            Arena::new(
                w.arena.as_ptr(),
                w.arena.as_ptr() as u64,
                BLOCK,
                Pool::new(w.block_states.as_ptr(), blocks),
            )
        },
        allowed_ops: gpuio_device::protocol::sync::AtomicU64::new(u64::MAX),
        solo: Solo::unused(),
        running: gpuio_device::protocol::running::Running::new(),
        in_place: gpuio_device::protocol::in_place::InPlaceLines::new(),
    });
    Arc::new(w)
}

/// The file descriptor of the transfer models (the kernel model ignores it).
pub(crate) const FD: i32 = 7;

/// The kernel's side of a READ or WRITE on `file`: the SQE's `addr` points at arena cells
/// (the model's arena is where the kernel sees it); a read fills them from the file, a
/// write copies them into it. Transfers the whole length.
pub(crate) fn serve_transfer(w: &World, file: &Mutex<Vec<u8>>, sqe: &Sqe) -> i32 {
    // Under loom a cell is bigger than a byte; `Arena::io_addr` counts cells' bytes.
    let cell = core::mem::size_of::<SharedCell<u8>>() as u64;
    let offset = sqe.addr - w.arena.as_ptr() as u64;
    assert_eq!(offset % cell, 0, "addr is not a cell's");
    let (first, len, at) = ((offset / cell) as usize, sqe.len as usize, sqe.off as usize);
    assert!(first + len <= w.arena.len(), "addr..addr+len is outside the arena");
    let cells = w.arena[first..first + len].as_ptr();
    let mut f = file.lock().unwrap();
    match sqe.opcode {
        // SAFETY: loom checks these accesses against the device threads' copies into and
        // out of the block, and against the block's next holder.
        IORING_OP_READ => unsafe { copy_to_cells(cells, &f[at..at + len]) },
        IORING_OP_WRITE => {
            let mut i = at;
            // SAFETY: as above.
            unsafe {
                read_cells(cells, len, |b| {
                    f[i..i + b.len()].copy_from_slice(b);
                    i += b.len();
                })
            };
        }
        op => panic!("unexpected opcode {op}"),
    }
    len as i32
}

/// Makes the calling loom thread a "GPU thread" of `w`'s context, as the CPU backend does,
/// so that the `io` functions find the context.
///
/// Loom's threads are coroutines on the test's OS thread, so they share std's
/// thread-locals: the model's main thread enters first, and every guard then restores that
/// same context, in whatever order the threads drop them.
pub(crate) fn enter_world(w: &World, thread_idx: u32) -> impl Drop {
    let ids = ThreadIds::linear(thread_idx, 0, 3, 1);
    // SAFETY: the context lives in `w`, which the caller keeps alive past the guard.
    unsafe { enter(w.ctx.as_ref().unwrap(), ids) }
}

/// The model file of the transfer models.
pub(crate) fn model_file() -> Mutex<Vec<u8>> {
    Mutex::new(b"0123456789abcdef".to_vec())
}
