//! File-I/O kernels: the device file API end to end (`tests/file_io_gpu.rs`) and its
//! benchmarks (`benches/bench_file/`).
//!
//! Pointers are passed as `u64` device addresses (on the CPU backend, host addresses).

use core::fmt::Write;

use gpuio_device::fs::{Error as FsError, File, OpenOptions};
use gpuio_device::io::{self, Errno};
use gpuio_device::kernel;
use gpuio_device::protocol::sync::{AtomicU32, Ordering};
use gpuio_device::{block_dim, clock_ns, global_thread_idx, grid_dim};

/// Fills `buf` with pseudo-random bytes (xorshift64*) from `seed`; the host uses the same
/// function to check what device code wrote.
pub fn random_fill(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in buf {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *b = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
    }
}

/// Whether two byte slices are equal, without `memcmp` (which amdgcn code objects cannot
/// import).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A path built on the stack (no allocation on a GPU).
struct PathBuf {
    bytes: [u8; 512],
    len: usize,
}

impl PathBuf {
    /// `<dir>/<name>`; `dir` is `dir_len` bytes at device address `dir`.
    fn new(dir: u64, dir_len: u32, name: core::fmt::Arguments) -> PathBuf {
        let mut p = PathBuf {
            bytes: [0; 512],
            len: 0,
        };
        // SAFETY: the host passes `dir_len` bytes of UTF-8 at `dir`, alive for the kernel.
        let d = unsafe { core::slice::from_raw_parts(dir as *const u8, dir_len as usize) };
        let _ = p.write_str(core::str::from_utf8(d).unwrap_or("?"));
        let _ = write!(p, "/{name}");
        p
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("?")
    }
}

impl Write for PathBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len();
        if self.len + n > self.bytes.len() {
            return Err(core::fmt::Error);
        }
        self.bytes[self.len..self.len + n].copy_from_slice(s.as_bytes());
        self.len += n;
        Ok(())
    }
}

/// A result code: 0, or `step * 1000 + errno` (errno 999: wrong bytes or end of file).
fn code(step: i64, e: Result<(), FsError>) -> Result<(), i64> {
    e.map_err(|e| step * 1000 + e.errno().map_or(999, |n| n.0 as i64))
}

/// # Safety
/// `at` is `len` bytes of memory the kernel may use for the launch.
unsafe fn slice<'a>(at: u64, len: usize) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts_mut(at as *mut u8, len) }
}

kernel! {
    /// Each thread writes `bytes` pseudo-random bytes ([`random_fill`], seeded by its global
    /// index `t`) to its own new file `<dir>/t<t>`, fsyncs, reads them back and compares;
    /// then the same at offset `t * bytes` of the shared file `shared_fd`. `scratch` holds
    /// `2 * bytes` of device memory per thread; `results[t]` (i64) gets 0, or
    /// `step * 1000 + errno` for the first step that failed.
    pub fn file_check(dir: u64, dir_len: u32, shared_fd: i32, bytes: u32, scratch: u64, results: u64) {
        let t = global_thread_idx();
        let n = bytes as usize;
        // SAFETY: the host allocated `2 * bytes` per thread and one i64 per thread.
        let (data, back, out) = unsafe {
            let mine = slice(scratch + t * 2 * n as u64, 2 * n);
            let (a, b) = mine.split_at_mut(n);
            (a, b, &mut *((results as *mut i64).add(t as usize)))
        };
        random_fill(t, data);
        let path = PathBuf::new(dir, dir_len, format_args!("t{t}"));
        let mut run = || -> Result<(), i64> {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path.as_str())
                .map_err(|e| 1000 + e.errno.0 as i64)?;
            code(2, f.write_all_at(data, 0))?;
            code(3, f.sync_all().map_err(FsError::from))?;
            code(4, f.read_exact_at(back, 0))?;
            if !same(back, data) {
                return Err(4999);
            }
            code(5, f.close().map_err(FsError::from))?;
            // The shared file, at our own offset.
            back.fill(0);
            // SAFETY: `shared_fd` is open for the kernel's duration (the host holds it).
            let shared = core::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(shared_fd) });
            code(6, shared.write_all_at(data, t * n as u64))?;
            code(7, shared.sync_data().map_err(FsError::from))?;
            code(8, shared.read_exact_at(back, t * n as u64))?;
            if !same(back, data) {
                return Err(8999);
            }
            Ok(())
        };
        *out = run().err().unwrap_or(0);
    }
}

/// `out` codes of [`file_errors`]: a count or fd (>= 0), `-errno`, or this for end of file
/// with the count in the next entry.
pub const EOF_CODE: i64 = -1000;

fn errno_code<E: Into<Errno>>(e: E) -> i64 {
    -(e.into().0 as i64)
}

kernel! {
    /// One thread runs the error cases and writes one i64 per case into `out` (see
    /// [`EOF_CODE`]); `tests/file_io_gpu.rs` lists them. `big` is `big_len` bytes of device
    /// memory for a transfer larger than the arena.
    pub fn file_errors(dir: u64, dir_len: u32, big: u64, big_len: u64, out: u64) {
        if global_thread_idx() != 0 {
            return;
        }
        // SAFETY: the host allocated 16 i64 results and `big_len` bytes at `big`.
        let (out, big) = unsafe { (core::slice::from_raw_parts_mut(out as *mut i64, 16), slice(big, big_len as usize)) };
        let mut buf = [0u8; 8];
        // 0: invalid fd.
        out[0] = io::pread(987_654, &mut buf, 0).map_or_else(errno_code, |n| n as i64);
        // 1: missing path.
        out[1] = File::open(PathBuf::new(dir, dir_len, format_args!("missing")).as_str()).map_or_else(errno_code, |f| f.into_raw_fd() as i64);
        // 2, 3: a short read at the end of "ten" (10 bytes: "0123456789"), and its bytes.
        let ten_path = PathBuf::new(dir, dir_len, format_args!("ten"));
        let ten = File::open(ten_path.as_str());
        match &ten {
            Ok(f) => {
                out[2] = f.read_at(&mut buf, 6).map_or_else(errno_code, |n| n as i64);
                out[3] = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as i64;
                // 4, 5: read_exact_at past the end: EOF after 6 bytes.
                match f.read_exact_at(&mut buf, 4) {
                    Err(FsError::UnexpectedEof { done }) => {
                        out[4] = EOF_CODE;
                        out[5] = done as i64;
                    }
                    Err(e) => out[4] = e.errno().map_or(-999, errno_code),
                    Ok(()) => out[4] = 0,
                }
                // 6: at the end: 0.
                out[6] = f.read_at(&mut buf, 10).map_or_else(errno_code, |n| n as i64);
            }
            Err(e) => out[2] = errno_code(*e),
        }
        drop(ten);
        // 7: permission denied (the host made "secret" mode 000).
        out[7] = File::open(PathBuf::new(dir, dir_len, format_args!("secret")).as_str()).map_or_else(errno_code, |f| f.into_raw_fd() as i64);
        // 8, 9: a file larger than the arena: write `big`, read it back over itself, and
        // compare with the generator.
        random_fill(42, big);
        let path = PathBuf::new(dir, dir_len, format_args!("big"));
        out[8] = match OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path.as_str()) {
            Ok(f) => {
                let w = f.write_all_at(big, 0);
                big.fill(0);
                let r = f.read_exact_at(big, 0);
                match (w, r) {
                    (Ok(()), Ok(())) => big_len as i64,
                    (Err(e), _) | (_, Err(e)) => e.errno().map_or(-999, errno_code),
                }
            }
            Err(e) => errno_code(e),
        };
        let mut check = [0u8; 256];
        let mut same = true;
        let mut at = 0;
        // Regenerate in 256-byte windows of one stream: random_fill over the whole length
        // would need a second buffer as large as `big`.
        let mut gen = Gen::new(42);
        while at < big.len() {
            let k = (big.len() - at).min(check.len());
            gen.fill(&mut check[..k]);
            same &= self::same(&check[..k], &big[at..at + k]);
            at += k;
        }
        out[9] = same as i64;
        // 10: a write to a read-only descriptor.
        out[10] = match File::open(PathBuf::new(dir, dir_len, format_args!("ten")).as_str()) {
            Ok(f) => f.write_at(b"x", 0).map_or_else(errno_code, |n| n as i64),
            Err(e) => errno_code(e) - 100,
        };
    }
}

/// [`random_fill`]'s generator, resumable.
struct Gen(u64);

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            let x = &mut self.0;
            *x ^= *x >> 12;
            *x ^= *x << 25;
            *x ^= *x >> 27;
            *b = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8;
        }
    }
}

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

kernel! {
    /// Every thread of the grid reads chunks `c = t, t + threads, ...` of `chunk` bytes of
    /// `fd` (`total` bytes from offset 0) into `dst + c * chunk`: device memory (staged)
    /// or a host buffer (direct). Failures are counted in `errors` (a u32).
    pub fn pread_bulk(fd: i32, dst: u64, total: u64, chunk: u64, errors: u64) {
        bulk(fd, dst, total, chunk, errors, false);
    }
}

kernel! {
    /// Like [`pread_bulk`], writing `src` to `fd` instead.
    pub fn pwrite_bulk(fd: i32, src: u64, total: u64, chunk: u64, errors: u64) {
        bulk(fd, src, total, chunk, errors, true);
    }
}

fn bulk(fd: i32, at: u64, total: u64, chunk: u64, errors: u64, write: bool) {
    let threads = grid_dim() as u64 * block_dim() as u64;
    let mut c = global_thread_idx();
    // SAFETY: `fd` stays open for the kernel (the host holds it).
    let f = core::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
    while c * chunk < total {
        let off = c * chunk;
        let n = chunk.min(total - off) as usize;
        // SAFETY: the host allocated `total` bytes at `at`; chunks are disjoint.
        let buf = unsafe { slice(at + off, n) };
        let r = if write {
            f.write_all_at(buf, off)
        } else {
            f.read_exact_at(buf, off)
        };
        if r.is_err() {
            // SAFETY: the host allocated a zeroed u32 counter.
            unsafe { &*(errors as *const AtomicU32) }.fetch_add(1, Ordering::Relaxed);
        }
        c += threads;
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

/// The opcode and buffer index of a transfer into (`write` false) or from an arena block,
/// as the runtime's sandbox wants them: `*_FIXED` naming the arena where every ring holds
/// gpuio's memory as its buffers (`Arena::fixed`, the `FileIo` sandbox), plain otherwise.
fn arena_transfer(ctx: &gpuio_device::protocol::context::Context, write: bool) -> (u8, u16) {
    use gpuio_device::protocol::arena::buffer;
    use gpuio_device::protocol::uapi::{IORING_OP_READ, IORING_OP_READ_FIXED, IORING_OP_WRITE, IORING_OP_WRITE_FIXED};
    match (ctx.arena.fixed, write) {
        (true, true) => (IORING_OP_WRITE_FIXED, buffer::ARENA),
        (true, false) => (IORING_OP_READ_FIXED, buffer::ARENA),
        (false, true) => (IORING_OP_WRITE, 0),
        (false, false) => (IORING_OP_READ, 0),
    }
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

kernel! {
    /// std's habits on a device `File`, by every thread: it creates `<dir>/h<t>`, writes
    /// `t=<t> sq=<t*t>` with `writeln!`, then 20 lines `<t> <i>` and `end` (by its io trait)
    /// through a 256-byte `BufWriter`, seeks back to the start and `read_exact`s its first line, then rewrites
    /// and reads it back through code generic over the io traits. Thread 0 also `dbg!`s its
    /// id (on the runtime's stderr). `results[t]` (i64): 0, or `1000 * step + errno` (step 1
    /// create, 2 write!, 3 BufWriter, 4 seek, 5 read back, 6 the io traits; errno 999: wrong
    /// bytes).
    pub fn std_habits(dir: u64, dir_len: u32, results: u64) {
        use gpuio_device::fs::{BufWriter, SeekFrom};
        let t = global_thread_idx();
        if t == 0 {
            gpuio_device::dbg!(t);
        }
        let code = (|| {
            let code = |step: i64, e: FsError| 1000 * step + e.errno().map_or(999, |e| e.0 as i64);
            let path = PathBuf::new(dir, dir_len, format_args!("h{t}"));
            let mut f = match OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path.as_str()) {
                Ok(f) => f,
                Err(e) => return 1000 + e.errno.0 as i64,
            };
            if let Err(e) = writeln!(f, "t={t} sq={}", t * t) {
                return code(2, e);
            }
            {
                let mut w = BufWriter::<256>::new(&mut f);
                for i in 0..20 {
                    if writeln!(w, "{t} {i}").is_err() {
                        return 3999;
                    }
                }
                // The buffered writer through the io traits: one more line.
                if let Err(e) = io::Write::write_all(&mut w, b"end\n") {
                    return code(3, e);
                }
                if let Err(e) = w.flush() {
                    return code(3, e);
                }
            }
            if let Err(e) = f.seek(SeekFrom::Start(0)) {
                return 4000 + e.0 as i64;
            }
            let mut want = PathBuf {
                bytes: [0; 512],
                len: 0,
            };
            let _ = writeln!(want, "t={t} sq={}", t * t);
            let mut back = [0u8; 64];
            let n = want.len;
            if let Err(e) = f.read_exact(&mut back[..n]) {
                return code(5, e);
            }
            if !same(&back[..n], &want.bytes[..n]) {
                return 5999;
            }
            // Code generic over the io traits takes the file: the first line again, from
            // the start, read back.
            match through_the_traits(&mut f, &want.bytes[..n], &mut back[..n]) {
                Ok(true) => {}
                Ok(false) => return 6999,
                Err(e) => return code(6, e),
            }
            0
        })();
        // SAFETY: the host allocated one i64 per thread at `results`.
        unsafe { *(results as *mut i64).add(t as usize) = code };
    }
}

kernel! {
    /// A file's length and end, and nested directories, by every thread: it creates
    /// `<dir>/e<t>` (read and write), writes `t % 200 + 1` lines `<t> <i>`, asks its length
    /// (`len`, found by reads), seeks 4 bytes before its end and reads them back (the last
    /// line's tail), then makes `<dir>/deep/<t % 4>/a/b` with `create_dir_all` (a quarter of
    /// the threads each, at once). `results[t]` (i64): 0, or `1000 * step + errno` (step 1
    /// create, 2 write, 3 len, 4 seek from the end, 5 read back, 6 create_dir_all; errno
    /// 999: a wrong length, position or bytes).
    pub fn file_ends_and_directories(dir: u64, dir_len: u32, results: u64) {
        use gpuio_device::fs::{BufWriter, SeekFrom};
        let t = global_thread_idx();
        let code = (|| {
            let path = PathBuf::new(dir, dir_len, format_args!("e{t}"));
            let mut f = match OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path.as_str()) {
                Ok(f) => f,
                Err(e) => return 1000 + e.errno.0 as i64,
            };
            {
                let mut w = BufWriter::<256>::new(&mut f);
                for i in 0..t % 200 + 1 {
                    if writeln!(w, "{t} {i}").is_err() {
                        return 2999;
                    }
                }
                if let Err(e) = w.flush() {
                    return 2000 + e.errno().map_or(999, |e| e.0 as i64);
                }
            }
            let written = f.stream_position();
            match f.len() {
                Ok(len) if len == written => {}
                Ok(_) => return 3999,
                Err(e) => return 3000 + e.0 as i64,
            }
            match f.seek(SeekFrom::End(-4)) {
                Ok(at) if at == written - 4 => {}
                Ok(_) => return 4999,
                Err(e) => return 4000 + e.0 as i64,
            }
            let mut tail = [0u8; 4];
            if let Err(e) = f.read_exact(&mut tail) {
                return 5000 + e.errno().map_or(999, |e| e.0 as i64);
            }
            let mut last = PathBuf {
                bytes: [0; 512],
                len: 0,
            };
            let _ = writeln!(last, "{t} {}", t % 200);
            if last.len < 4 || !same(&tail, &last.bytes[last.len - 4..last.len]) {
                return 5999;
            }
            let deep = PathBuf::new(dir, dir_len, format_args!("deep/{}/a/b", t % 4));
            if let Err(e) = gpuio_device::fs::create_dir_all(deep.as_str()) {
                return 6000 + e.errno.0 as i64;
            }
            0
        })();
        // SAFETY: the host allocated one i64 per thread at `results`.
        unsafe { *(results as *mut i64).add(t as usize) = code };
    }
}

/// Rewrites `line` at the start of `f` through the io traits alone and reads it back into
/// `back`: whether it read what it wrote.
fn through_the_traits<F: io::Read + io::Write + io::Seek>(
    f: &mut F,
    line: &[u8],
    back: &mut [u8],
) -> Result<bool, F::Error> {
    f.rewind()?;
    f.write_all(line)?;
    f.flush()?;
    f.seek(io::SeekFrom::Current(-(line.len() as i64)))?;
    let n = f.read(back)?;
    Ok(n == line.len() && same(back, line))
}
