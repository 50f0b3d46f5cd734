//! Random 4 KiB reads, BaM's and GIDS's access pattern ([`pread_random`]), and their
//! diagnostics, the same reads made with the runtime's parts: timed in phases with each reap
//! timed ([`pread_random_phases`]), and untimed with either wait ([`pread_random_parts`]).

use gpuio_device::io;
use gpuio_device::kernel;
use gpuio_device::{clock_ns, global_thread_idx};

use super::{arena_transfer, slice};

/// Bytes of one [`pread_random`] read: a page.
pub const RANDOM_READ: u64 = 4096;

/// The page of read `i` of thread `t` in [`pread_random`]: a splitmix64 of `(t, i)`,
/// reduced to `0..pages` (`pages` > 0). The host recomputes it to check the bytes read,
/// and its own random-read loop draws its offsets from it too.
pub fn random_page(t: u64, i: u64, pages: u64) -> u64 {
    let mut z = (t.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ i).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % pages
}

kernel! {
    /// Random 4 KiB reads (BaM's and GIDS's access pattern): each thread `t` reads
    /// [`RANDOM_READ`] bytes `reads` times, read `i` at page [`random_page`]`(t, i,
    /// file_pages)` of `fd`, into its own slot `dst + t * 4096` (device memory: staged), and
    /// stores each read's round trip (ns, [`clock_ns`]) into `lat[t * reads + i]` (u64;
    /// `u64::MAX` if the read failed or came back short). Every thread of the grid reads:
    /// the host sizes `dst` and `lat` for all of them.
    pub fn pread_random(fd: i32, dst: u64, file_pages: u64, reads: u64, lat: u64) {
        let t = global_thread_idx();
        // SAFETY: the host allocated `RANDOM_READ` bytes per thread at `dst`; slots are
        // disjoint.
        let slot = unsafe { slice(dst + t * RANDOM_READ, RANDOM_READ as usize) };
        for i in 0..reads {
            let off = random_page(t, i, file_pages) * RANDOM_READ;
            let t0 = clock_ns();
            let r = io::pread(fd, slot, off);
            let dt = clock_ns().wrapping_sub(t0);
            let v = if r == Ok(RANDOM_READ as usize) { dt } else { u64::MAX };
            // SAFETY: the host allocated `reads` u64 results per thread at `lat`.
            unsafe { *(lat as *mut u64).add((t * reads + i) as usize) = v };
        }
    }
}

/// Phases of [`pread_random_phases`] per read, at the start of each row of `out`.
pub const RANDOM_PHASES: usize = 4;

/// The reaping that [`pread_random_phases`] saw while it waited for one read, after the
/// phases in each row of `out` (counts, and sums of ns): reaps that found CQEs; the CQEs
/// they took; their time from the try-lock to the first batch of CQEs in hand (the lock,
/// the reads of the CQ tail and of the batch, across PCIe on a GPU); from the first batch
/// to the last (the dispatch of each but the last, and the reads of the next); from the
/// last to the end (its dispatch, the head stores, the unlock); reaps that found none (or
/// lost the try-lock); their time; rounds that found the reaper busy; the batches the reaps
/// dispatched; their time in the dispatch; and its steps' times
/// (`gpuio_device::protocol::dispatch::DispatchTimes`: the looks, prepare, fence, finish).
pub const RANDOM_REAP: usize = 14;

/// Values per read in `out` of [`pread_random_phases`].
pub const RANDOM_ROW: usize = RANDOM_PHASES + RANDOM_REAP;

kernel! {
    /// A diagnostic of [`pread_random`], in phases: the same reads (same pages, same slots),
    /// made with the runtime's parts so that each can be timed (ns, [`clock_ns`]) into
    /// `out[(t * reads + i) * 4 + k]`: taking an arena block and a completion slot,
    /// `Context::submit` (the SQE written and published on the block's ring), waiting for
    /// the completion (`Context::wait`: the kernel's work and the reaping), and the copy out
    /// of the block into the slot; then how the wait reaped ([`RANDOM_REAP`]: the wait is
    /// `Context::wait`'s, with each reap timed). A row is [`RANDOM_ROW`] values at
    /// `out[(t * reads + i) * RANDOM_ROW]`. A failed or short read stores `u64::MAX` in
    /// every phase.
    ///
    /// Each thread holds its block and slot outside the wait that took them, which the
    /// lockstep rule forbids (`gpuio_device::protocol::arch`): run it with independent thread
    /// scheduling only (sm_70+, or the CPU backend).
    pub fn pread_random_phases(fd: i32, dst: u64, file_pages: u64, reads: u64, out: u64) {
        let Some(ctx) = gpuio_device::protocol::context::installed() else {
            return;
        };
        let t = global_thread_idx();
        for i in 0..reads {
            let off = random_page(t, i, file_pages) * RANDOM_READ;
            let t0 = clock_ns();
            let (block, ticket) = ctx.with_taken(|| ctx.try_take_block_and_slot(), |taken| taken);
            let t1 = clock_ns();
            submit_page_read(ctx, fd, off, block, ticket);
            let t2 = clock_ns();
            let mut reap = [0u64; RANDOM_REAP];
            let res = wait_timing_reaps(ctx, ticket, &mut reap);
            let t3 = clock_ns();
            if res == RANDOM_READ as i32 {
                // SAFETY: the read completed (the wait's acquire); the block is ours until
                // we give it back; the host allocated `RANDOM_READ` bytes per thread at
                // `dst`.
                unsafe { copy_page_out(ctx, block, dst + t * RANDOM_READ) };
            }
            let t4 = clock_ns();
            ctx.arena.pool.give_back(block);
            let mut row = [u64::MAX; RANDOM_ROW];
            if res == RANDOM_READ as i32 {
                row[..RANDOM_PHASES].copy_from_slice(&[t1 - t0, t2 - t1, t3 - t2, t4 - t3]);
                row[RANDOM_PHASES..].copy_from_slice(&reap);
            }
            for (k, v) in row.iter().enumerate() {
                // SAFETY: the host allocated `RANDOM_ROW * reads` u64s per thread at `out`.
                unsafe { *(out as *mut u64).add((t * reads + i) as usize * RANDOM_ROW + k) = *v };
            }
        }
    }
}

kernel! {
    /// A diagnostic of [`pread_random`]: the same reads as [`pread_random_phases`], made
    /// with the runtime's parts, untimed. `mode` 0 waits with `Context::wait` (the
    /// runtime's wait, with its shortcut for a CQE the waiter's own reap takes); mode 1
    /// with the phases kernel's wait (every result dispatched, none taken by the waiter).
    /// Panics on a failed or short read. Independent thread scheduling only, as
    /// [`pread_random_phases`].
    pub fn pread_random_parts(fd: i32, dst: u64, file_pages: u64, reads: u64, mode: u64) {
        let Some(ctx) = gpuio_device::protocol::context::installed() else {
            return;
        };
        let t = global_thread_idx();
        for i in 0..reads {
            let off = random_page(t, i, file_pages) * RANDOM_READ;
            let (block, ticket) = ctx.with_taken(|| ctx.try_take_block_and_slot(), |taken| taken);
            submit_page_read(ctx, fd, off, block, ticket);
            let res = match mode {
                0 => ctx.wait(ticket),
                1 => wait_timing_reaps(ctx, ticket, &mut [0u64; RANDOM_REAP]),
                _ => panic!("pread_random_parts: no mode {mode} (0 or 1)"),
            };
            assert!(res == RANDOM_READ as i32, "pread_random_parts: read {i} of thread {t}: {res}");
            // SAFETY: as in `pread_random_phases` (the read completed: checked above).
            unsafe { copy_page_out(ctx, block, dst + t * RANDOM_READ) };
            ctx.arena.pool.give_back(block);
        }
    }
}

/// Submits a read of [`RANDOM_READ`] bytes of `fd` at `off` into arena block `block`, for
/// `ticket` (the diagnostics of [`pread_random`], which take their own block and slot).
fn submit_page_read(
    ctx: &gpuio_device::protocol::context::Context,
    fd: i32,
    off: u64,
    block: u32,
    ticket: gpuio_device::protocol::request::Ticket,
) {
    use gpuio_device::protocol::uapi::Sqe;
    let (opcode, buf_index) = arena_transfer(ctx, false);
    let sqe = Sqe {
        opcode,
        fd,
        off,
        addr: ctx.arena.io_addr(block),
        len: RANDOM_READ as u32,
        buf_index,
        user_data: ticket.user_data(),
        ..Sqe::default()
    };
    ctx.submit(&sqe);
}

/// Copies a completed [`RANDOM_READ`]-byte read out of arena block `block` into `dst`, as
/// `io::pread` does: the lanes copying together share the work. The group is the lanes
/// here now: a warp taken before the waits would make a lane that got its block wait in
/// the copy for siblings still waiting for blocks, which it holds (a deadlock whenever
/// blocks run out).
///
/// # Safety
/// The block's read completed (its wait acquired the result), the block is the caller's
/// until it gives it back, and `dst` has [`RANDOM_READ`] bytes for it.
unsafe fn copy_page_out(ctx: &gpuio_device::protocol::context::Context, block: u32, dst: u64) {
    // SAFETY: the caller's contract.
    unsafe {
        gpuio_device::protocol::copy::group_copy(
            &gpuio_device::protocol::arch::Warp::default(),
            dst as *mut u8,
            ctx.arena.cells(block) as *const u8,
            RANDOM_READ as usize,
        )
    };
}

/// `Context::wait` for `ticket` (the same rounds: its block's ring reaped while the reaper is
/// free, `arch::yield_to_siblings` while it is busy, every ring every 64th round, each round
/// gone by one of the lanes waiting together, `arch::by_one_lane`), with each
/// reap timed into `stats` ([`RANDOM_REAP`]); without `Context::wait`'s shortcut for a CQE
/// the waiter's own reap takes (here the dispatch stores every result, and the waiter
/// acquires `DONE`). No stream is flushed: the kernel that calls it does not print.
fn wait_timing_reaps(
    ctx: &gpuio_device::protocol::context::Context,
    ticket: gpuio_device::protocol::request::Ticket,
    stats: &mut [u64; RANDOM_REAP],
) -> i32 {
    let mut rounds = 0u32;
    let timed_reap = |ring: &gpuio_device::protocol::ring::Ring, stats: &mut [u64; RANDOM_REAP]| {
        let (start, mut first, mut last, mut n) = (clock_ns(), 0u64, 0u64, 0u64);
        ring.reap(|cqes| {
            last = clock_ns();
            if n == 0 {
                first = last;
            }
            n += cqes.len() as u64;
            let mut t = gpuio_device::protocol::dispatch::DispatchTimes::default();
            let fenced = ctx.dispatch_timed(cqes, &mut t);
            stats[8] += 1;
            stats[9] += clock_ns() - last;
            for (k, ns) in [t.looks, t.prepare, t.fence, t.finish].into_iter().enumerate() {
                stats[10 + k] += ns;
            }
            fenced
        });
        let end = clock_ns();
        if n > 0 {
            stats[0] += 1;
            stats[1] += n;
            stats[2] += first - start;
            stats[3] += last - first;
            stats[4] += end - last;
        } else {
            stats[5] += 1;
            stats[6] += end - start;
        }
    };
    gpuio_device::protocol::wait::until(
        || ctx.requests.try_result(ticket),
        || {
            gpuio_device::protocol::arch::by_one_lane(|| {
                rounds = rounds.wrapping_add(1);
                let ring = ctx.request_ring();
                if rounds.is_multiple_of(64) {
                    for r in ctx.rings() {
                        timed_reap(r, stats);
                    }
                } else if !ring.reaper.busy() {
                    timed_reap(ring, stats);
                } else {
                    stats[7] += 1;
                    gpuio_device::protocol::arch::yield_to_siblings();
                }
                None::<()>
            });
        },
    )
}
