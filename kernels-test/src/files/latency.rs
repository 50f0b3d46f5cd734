//! A 64-byte `pwrite`'s round trip, timed by thread 0: through the solo ring or the shared
//! rings ([`pwrite_latency`], [`pwrite_latency_shared`]), in phases ([`latency_phases`]),
//! and at the floor the hardware and the kernel allow ([`latency_floor`]).

use gpuio_device::io::{self, Errno};
use gpuio_device::kernel;
use gpuio_device::protocol::sync::Ordering;
use gpuio_device::{clock_ns, global_thread_idx};

use super::arena_transfer;

kernel! {
    /// Thread 0 writes 64 bytes at `i * 64` of `fd` and waits for the completion, `iters`
    /// times, and stores each round trip (ns, [`clock_ns`]) into `out[i]` (u64; `u64::MAX`
    /// if that write failed). The 64 bytes are on the stack: device memory, so staged. Each
    /// write takes the solo ring (`gpuio_device::protocol::solo`) when the runtime has one.
    pub fn pwrite_latency(fd: i32, iters: u32, out: u64) {
        write_latencies(iters, out, |line, off| io::pwrite(fd, line, off));
    }
}

kernel! {
    /// [`pwrite_latency`] through the shared rings: `pwrite_async` and its wait, which
    /// never take the solo ring (`gpuio_device::protocol::solo`), so that one run times both ways.
    pub fn pwrite_latency_shared(fd: i32, iters: u32, out: u64) {
        // SAFETY: waited for at once.
        write_latencies(iters, out, |line, off| unsafe { io::pwrite_async(fd, line, off) }.wait());
    }
}

/// The loop of [`pwrite_latency`] on thread 0, writing each line with `write(line, offset)`.
fn write_latencies(iters: u32, out: u64, write: impl Fn(&[u8], u64) -> Result<usize, Errno>) {
    if global_thread_idx() != 0 {
        return;
    }
    let mut line = [b'.'; 64];
    line[63] = b'\n';
    for i in 0..iters {
        line[0] = b'0' + (i % 10) as u8;
        let t0 = clock_ns();
        let r = write(&line, i as u64 * 64);
        let dt = clock_ns().wrapping_sub(t0);
        // SAFETY: the host allocated `iters` u64 results.
        unsafe { *(out as *mut u64).add(i as usize) = if r == Ok(64) { dt } else { u64::MAX } };
    }
}

/// Values per round trip in `out` of [`latency_phases`]: its six phases, then the result.
pub const LATENCY_ROW: usize = 7;

kernel! {
    /// A diagnostic of [`pwrite_latency`]'s round trip, in phases. Thread 0, `iters` times:
    /// one PCIe read (the kernel's CQ tail, kept to tell when it moves), one system-scope
    /// fence, taking a block and a completion slot and staging 64 bytes, `Ring::submit` (the
    /// SQE written and published), until the kernel's CQ tail moves (the kernel's work, and
    /// the crossings of PCIe both ways: relaxed loads of the tail in a loop, outside the
    /// reaper lock, which only a lone thread may do), then the rest of the wait
    /// (`Context::wait`: the reap, the dispatch, the result, which a lone thread's own reap
    /// takes straight from the CQE). `out[LATENCY_ROW * i + k]`
    /// (u64, ns) for the phases `k` in that order; the last entry is the CQE's result.
    pub fn latency_phases(fd: i32, iters: u32, out: u64) {
        use gpuio_device::protocol::sync::fence;
        use gpuio_device::protocol::uapi::Sqe;
        if global_thread_idx() != 0 {
            return;
        }
        let Some(ctx) = gpuio_device::protocol::context::installed() else {
            return;
        };
        let line = [b'x'; 64];
        for i in 0..iters {
            let t0 = clock_ns();
            // SAFETY: the ring's pointers are valid while the runtime lives.
            let cq_tail = unsafe { &*ctx.request_ring().cq_tail };
            let before = cq_tail.load(Ordering::Relaxed);
            let t1 = clock_ns();
            fence(Ordering::SeqCst);
            let t2 = clock_ns();
            // One thread: no sibling waits for what it holds (the lockstep rule,
            // gpuio_device::protocol::arch), so it may keep the block and slot past the wait.
            let (block, ticket) = ctx.with_taken(|| ctx.try_take_block_and_slot(), |taken| taken);
            // SAFETY: the block is ours until the request completes.
            unsafe { gpuio_device::protocol::sync::copy_to_cells(ctx.arena.cells(block), &line) };
            let t3 = clock_ns();
            let (opcode, buf_index) = arena_transfer(ctx, true);
            let sqe = Sqe {
                opcode,
                fd,
                off: i as u64 * 64,
                addr: ctx.arena.io_addr(block),
                len: 64,
                buf_index,
                user_data: ticket.user_data(),
                ..Sqe::default()
            };
            ctx.submit(&sqe);
            let t4 = clock_ns();
            // Nothing else is in flight on this ring, so the tail moves for our CQE.
            while cq_tail.load(Ordering::Relaxed) == before {}
            let t5 = clock_ns();
            let res = ctx.wait(ticket);
            let t6 = clock_ns();
            ctx.arena.pool.give_back(block);
            let row = [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, res as i64 as u64];
            for (k, v) in row.iter().enumerate() {
                // SAFETY: the host allocated `LATENCY_ROW * iters` u64s.
                unsafe { *(out as *mut u64).add(LATENCY_ROW * i as usize + k) = *v };
            }
        }
    }
}

/// Values per round trip in `out` of [`latency_floor`]: its four phases, the whole, then
/// the result.
pub const FLOOR_ROW: usize = 6;

kernel! {
    /// What the hardware and the kernel allow a GPU thread's 64-byte `pwrite` round trip: the
    /// fewest steps it can take, none of the protocol's. Thread 0, alone on its block's ring,
    /// `iters` times: stage 64 bytes in an arena block and write the SQE into its slot
    /// (plain stores to host memory); store the SQ tail (Release: one system-scope fence,
    /// then the store); load the CQ tail (Acquire) until it moves; load the CQE (one 16-byte
    /// load) and store the CQ head (Release). No ticket, ready flag, combiner lock,
    /// completion slot or dispatch. A diagnostic, sound only while nothing else uses the
    /// ring: the host launches it alone, on one thread, with the ring idle (it checks the
    /// ring's counters and writes `u64::MAX` rows if they say otherwise); it leaves the
    /// counters as if the protocol had submitted and reaped the same SQEs.
    /// `out[FLOOR_ROW * i + k]` (u64, ns): staging and the SQE, the tail's store, until the
    /// tail moves, the CQE and the head's store, the whole round trip; then the CQE's result.
    pub fn latency_floor(fd: i32, iters: u32, out: u64) {
        use gpuio_device::protocol::uapi::Sqe;
        if global_thread_idx() != 0 {
            return;
        }
        let Some(ctx) = gpuio_device::protocol::context::installed() else {
            return;
        };
        let put = |i: u32, row: [u64; FLOOR_ROW]| {
            for (k, v) in row.iter().enumerate() {
                // SAFETY: the host allocated `FLOOR_ROW * iters` u64s.
                unsafe { *(out as *mut u64).add(FLOOR_ROW * i as usize + k) = *v };
            }
        };
        let ring = ctx.request_ring();
        // Acquire: pairs with the protocol's releases of these counters, so that the SQEs
        // and CQEs they count are done with before we reuse their slots.
        let start = ring.tickets.load(Ordering::Acquire);
        if ring.sq_entries == 0
            || start != ring.published.load(Ordering::Acquire)
            || start != ring.reaped.load(Ordering::Acquire)
        {
            // Something is in flight: the ring is not ours alone.
            (0..iters).for_each(|i| put(i, [u64::MAX; FLOOR_ROW]));
            return;
        }
        // One thread: it may hold the block for the whole loop (the lockstep rule binds
        // only lanes that wait for one another).
        let block = ctx.with_taken(|| ctx.arena.pool.try_take(), |b| b);
        // SAFETY (for the four dereferences below): the ring's pointers are valid while the
        // runtime lives, which outlives the kernel.
        let (sq_tail, cq_tail, cq_head) = unsafe { (&*ring.sq_tail, &*ring.cq_tail, &*ring.cq_head) };
        let line = [b'x'; 64];
        let (mut tail, mut head) = (start, start);
        for i in 0..iters {
            let t0 = clock_ns();
            // SAFETY: the block is ours until we give it back.
            unsafe { gpuio_device::protocol::sync::copy_to_cells(ctx.arena.cells(block), &line) };
            let (opcode, buf_index) = arena_transfer(ctx, true);
            let sqe = Sqe {
                opcode,
                fd,
                off: i as u64 * 64,
                addr: ctx.arena.io_addr(block),
                len: 64,
                buf_index,
                user_data: i as u64,
                ..Sqe::default()
            };
            // SAFETY: the slot's last SQE was consumed: its CQE came back (below, or before
            // the launch: every published SQE was reaped), which the kernel posts after it
            // consumed the SQE. `sqes` holds `sq_entries` slots and the index is masked.
            unsafe { (*ring.sqes.add((tail & (ring.sq_entries - 1)) as usize)).write(sqe) };
            let t1 = clock_ns();
            tail = tail.wrapping_add(1);
            // Release, system scope: the SQE and the staged bytes happen-before the kernel's
            // smp_load_acquire of the tail.
            sq_tail.store(tail, Ordering::Release);
            // What every publisher does next: nothing on a GPU; on the CPU backend it
            // performs the SQE (rings performed inline) or wakes the waker that submits.
            gpuio_device::protocol::arch::ring_doorbell();
            let t2 = clock_ns();
            // Acquire, system scope: pairs with the kernel's smp_store_release of the CQ tail;
            // the CQE happens-before our load of it.
            while cq_tail.load(Ordering::Acquire) == head {}
            let t3 = clock_ns();
            let cell = ring.cqes.wrapping_add((head & (ring.cq_entries - 1)) as usize);
            // SAFETY: the kernel published the slot (the acquire above) and will not rewrite it
            // before the head moves past it; the kernel places the CQE array 16-byte aligned.
            let cqe = unsafe { gpuio_device::protocol::ring::load_cqe(cell) };
            head = head.wrapping_add(1);
            // Release, system scope: our load of the CQE happens-before the kernel reuses the
            // slot.
            cq_head.store(head, Ordering::Release);
            let t4 = clock_ns();
            put(i, [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0, cqe.res as i64 as u64]);
        }
        // The counters as the protocol leaves them after submitting and reaping these SQEs
        // (Release: what we did to the ring happens-before the next user's acquire of them).
        // `sq_head_seen` may lag: it only sends submitters to the kernel's word.
        ring.tickets.store(tail, Ordering::Release);
        ring.published.store(tail, Ordering::Release);
        ring.reaped.store(head, Ordering::Release);
        ctx.arena.pool.give_back(block);
    }
}
