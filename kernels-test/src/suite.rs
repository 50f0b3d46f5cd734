//! Kernels of the GPU suite (`tests/gpu/`), and a few that tests/ run on the CPU backend
//! alone (a panic or an `Err` that would end a GPU's context): odd warp shapes, lanes that diverge between
//! call sites and streams, lines of every shape, stack buffers in file I/O, idle kernels,
//! and a probe of the warp scheduling itself. Each output format is checked by the host,
//! which formats the expected text with the same `Display` types ([`Repeat`], [`token`]).

use core::fmt;

use gpuio_device::io;
use gpuio_device::kernel;
use gpuio_device::protocol::sync::{AtomicU32, Ordering};
use gpuio_device::{clock_ns, eprint, eprintln, global_thread_idx, print, println};

kernel! {
    /// `lines` lines per thread from three call sites chosen by `t % 3` (the third
    /// alternates between two), all to stdout: `t=<t> i=<i> site=<a|b|c|d>[ more]`.
    pub fn divergent_sites(lines: u32) {
        let t = global_thread_idx();
        for i in 0..lines {
            match t % 3 {
                0 => println!("t={t} i={i} site=a"),
                1 => println!("t={t} i={i} site=b {}", "more"),
                _ => {
                    if i % 2 == 0 {
                        println!("t={t} i={i} site=c");
                    } else {
                        println!("t={t} i={i} site=d");
                    }
                }
            }
        }
    }
}

kernel! {
    /// One warp mixing streams and pieces, as a user writes it: even threads `println!`
    /// and odd threads `eprintln!` `lines` tokens each; then every thread prints, `lines`
    /// times, a formatted line (UTF-8, a Debug string), two `print!` pieces, and an
    /// `eprintln!` (and every fourth time an `eprint!` piece, then an empty `eprintln!`).
    /// Every token is [`token`]`(t, i, kind)`; the host checks each appears exactly once,
    /// whole, in per-thread order, on the right stream.
    pub fn mixed_streams(lines: u32) {
        let t = global_thread_idx();
        for i in 0..lines {
            if t % 2 == 0 {
                println!("{}", Token(t, i, 'o'));
            } else {
                eprintln!("{}", Token(t, i, 'e'));
            }
        }
        for i in 0..lines {
            println!("{} ünï ✓ {:?}", Token(t, i, 'f'), "d\"é");
            print!("{}", Token(t, i, 'p'));
            print!("{}", Token(t, i, 'q'));
            eprintln!("{}", Token(t, i, 'r'));
            if i % 4 == 3 {
                eprint!("{}", Token(t, i, 's'));
                eprintln!();
            }
        }
    }
}

kernel! {
    /// `lines` lines `<t:i:x>` per thread, from one call of the print function whose stream
    /// each lane picks at run time (even threads stdout, odd threads stderr): the lanes of a
    /// warp reach it together with both streams, as `println!` and `eprintln!` can when
    /// their call sites merge.
    pub fn two_streams_one_call(lines: u32) {
        let t = global_thread_idx();
        for i in 0..lines {
            gpuio_device::protocol::print::print_to(t % 2 == 1, true, format_args!("{}", Token(t, i, 'x')));
        }
    }
}

/// `<t:i:kind>`: one piece of [`mixed_streams`]' output.
pub struct Token(pub u64, pub u32, pub char);

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}:{}:{}>", self.0, self.1, self.2)
    }
}

/// [`Token`] as a function, for the host's checker.
pub fn token(t: u64, i: u32, kind: char) -> Token {
    Token(t, i, kind)
}

kernel! {
    /// Lines of every shape, per thread, in this order: `100% {} {<t>} t=<t>`; an empty
    /// line; UTF-8 and a Debug string; [`Repeat`] of 65,536 bytes; [`Repeat`] of `long`
    /// bytes (longer than the log in the suite's configuration); `done t=<t>`.
    pub fn line_shapes(long: u32) {
        let t = global_thread_idx();
        println!("100% {{}} {{{t}}} t={t}");
        println!();
        println!("ünïcødé ✓ {:?} t={t}", "q\"uote");
        println!("{}", Repeat { t, len: 65536 });
        println!("{}", Repeat { t, len: long as usize });
        println!("done t={t}");
    }
}

kernel! {
    /// `2 * lines` lines per thread, `t=<t> i=<i>` for even `i`, and for odd `i` that and a
    /// space and [`near_log_pad`]`(t, i)` bytes of `z`: the lines of a 32-lane warp add up to
    /// 2.5-4.6 KiB, about the size of a 4 KiB log, so that a warp's record sometimes fits the
    /// log less a chunk (3 KiB) and sometimes does not, behind records of short lines.
    pub fn near_log_records(lines: u32) {
        let t = global_thread_idx();
        for j in 0..lines {
            println!("t={t} i={}", 2 * j);
            println!("t={t} i={} {:z<w$}", 2 * j + 1, "", w = near_log_pad(t, 2 * j + 1));
        }
    }
}

/// How many `z` [`near_log_records`] prints on thread `t`'s line `i`: the same for the 32
/// threads of a warp, so that a warp's records vary in size from print to print (with a
/// pad that varied by thread, every record would be about the average).
pub fn near_log_pad(t: u64, i: u32) -> usize {
    68 + ((t / 32 * 13 + i as u64 / 2 * 7) % 64) as usize
}

/// `L<t>:` followed by `a..z` repeated, `len` bytes in all (the newline not counted).
pub struct Repeat {
    pub t: u64,
    pub len: usize,
}

impl fmt::Display for Repeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ABC: &str = "abcdefghijklmnopqrstuvwxyz";
        let mut head = gpuio_kernels::Counting { inner: f, written: 0 };
        fmt::Write::write_fmt(&mut head, format_args!("L{}:", self.t))?;
        let mut rest = self.len.saturating_sub(head.written);
        while rest > 0 {
            let n = rest.min(ABC.len());
            f.write_str(&ABC[..n])?;
            rest -= n;
        }
        Ok(())
    }
}

/// The 64 bytes thread `t` writes in [`stack_io`]: distinct for every thread and offset.
pub fn stack_bytes(t: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    for (j, x) in b.iter_mut().enumerate() {
        *x = (t.wrapping_mul(131).wrapping_add(j as u64 * 7) % 251) as u8;
    }
    b
}

kernel! {
    /// Every thread `pwrite`s the 64 bytes of [`stack_bytes`]`(t)`, from an array on its
    /// stack, at offset `64 * t` of `fd`, then `pread`s them back into another stack array
    /// and compares. `results[t]` (i64): 0, or `1000 * step + errno` (step 1 write, 2 read;
    /// errno 999: a short count, 998: wrong bytes).
    pub fn stack_io(fd: i32, results: u64) {
        let t = global_thread_idx();
        let data = stack_bytes(t);
        let code = (|| {
            match io::pwrite(fd, &data, 64 * t) {
                Ok(64) => {}
                Ok(_) => return 1999,
                Err(e) => return 1000 + e.0 as i64,
            }
            let mut back = [0u8; 64];
            match io::pread(fd, &mut back, 64 * t) {
                Ok(64) => {}
                Ok(_) => return 2999,
                Err(e) => return 2000 + e.0 as i64,
            }
            if back.iter().zip(&data).any(|(a, b)| a != b) {
                return 2998;
            }
            0
        })();
        // SAFETY: the host allocated one i64 per thread.
        unsafe { *(results as *mut i64).add(t as usize) = code };
    }
}

kernel! {
    /// Lanes of one warp printing while their neighbours wait for file I/O: in step `i` of
    /// `steps`, thread `t` prints `t=<t> i=<n>` (its `n`-th line) when `t + i` is even, and
    /// otherwise `pwrite`s the 64 bytes of [`stack_bytes`]`(t * steps + i)` from its stack at
    /// offset `64 * (t * steps + i)` of `fd` and `pread`s them back. With a tiny ring and log
    /// the waiting lanes' rounds (one lane goes round for those waiting together) flush the
    /// printing lanes' streams and wait for ring room while their siblings are parked.
    /// `results[t]` (i64): 0, or `1000 * step + errno` as [`stack_io`]'s, with the step
    /// number `i` added times 10,000.
    pub fn print_while_waiting(fd: i32, steps: u32, results: u64) {
        let t = global_thread_idx();
        let mut printed = 0u32;
        let mut code = 0i64;
        for i in 0..steps {
            if (t + i as u64) % 2 == 0 {
                println!("t={t} i={printed}");
                printed += 1;
                continue;
            }
            let at = t * steps as u64 + i as u64;
            let data = stack_bytes(at);
            let mut back = [0u8; 64];
            let step = match io::pwrite(fd, &data, 64 * at) {
                // Compared byte by byte: `==` on arrays becomes a `memcmp` call, which a GPU
                // code object has nothing to link to.
                Ok(64) => match io::pread(fd, &mut back, 64 * at) {
                    Ok(64) if back.iter().zip(&data).all(|(a, b)| a == b) => 0,
                    Ok(64) => 2998,
                    Ok(_) => 2999,
                    Err(e) => 2000 + e.0 as i64,
                },
                Ok(_) => 1999,
                Err(e) => 1000 + e.0 as i64,
            };
            if step != 0 && code == 0 {
                code = step + 10_000 * i as i64;
            }
        }
        // SAFETY: the host allocated one i64 per thread.
        unsafe { *(results as *mut i64).add(t as usize) = code };
    }
}

kernel! {
    /// Every thread waits `ns` nanoseconds doing nothing (no I/O: SQPOLL falls asleep when
    /// that is longer than its idle time), then prints `t=<t> i=0`.
    pub fn idle_then_print(ns: u64) {
        let t0 = clock_ns();
        while clock_ns().wrapping_sub(t0) < ns {
            core::hint::spin_loop();
        }
        println!("t={} i=0", global_thread_idx());
    }
}

kernel! {
    /// Tells lockstep scheduling from independent scheduling. Every thread takes one global
    /// spin lock the way that needs independent scheduling (spin until the CAS succeeds,
    /// then the critical section after the loop), giving up after `tries` failed attempts.
    /// `out[0]` counts the critical sections run, `out[1]` the threads that gave up. With
    /// independent scheduling nobody gives up; in lockstep the lane that got the lock waits,
    /// masked off, for its siblings to leave the loop, and they spin for the lock it holds.
    /// `out` is 2 u32 words, zeroed; `lock` one u32 word, zeroed.
    pub fn lockstep_probe(lock: u64, out: u64, tries: u32) {
        // SAFETY: the host allocated these words for the launch.
        let (lock, out) = unsafe { (&*(lock as *const AtomicU32), &*(out as *const [AtomicU32; 2])) };
        let mut n = 0u32;
        while lock.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            n += 1;
            if n == tries {
                out[1].fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        out[0].fetch_add(1, Ordering::Relaxed);
        lock.store(0, Ordering::Release);
    }
}

kernel! {
    /// `lines` lines per thread, each built from pieces on a locked stdout
    /// (`io::stdout().lock()`): `t=<t> i=<i>:` then ` <k>` for k in 0..(t % 7 + 3), then
    /// ` end` and the newline, so that lanes of a warp write different numbers of pieces and
    /// print their lines at different calls.
    pub fn locked_lines(lines: u32) {
        let t = global_thread_idx();
        let mut out = io::stdout().lock();
        for i in 0..lines {
            let _ = write!(out, "t={t} i={i}:");
            for k in 0..(t % 7 + 3) {
                let _ = write!(out, " {k}");
            }
            let _ = writeln!(out, " end");
        }
    }
}

kernel! {
    /// A typed launch's arguments, one parameter of each type: every thread prints
    /// `t=<t> i=0 u32=<a> i32=<b> u64=<c> i64=<d> f32=<e> f64=<f>`.
    pub fn every_param_type(a: u32, b: i32, c: u64, d: i64, e: f32, f: f64) {
        println!("t={} i=0 u32={a} i32={b} u64={c} i64={d} f32={e} f64={f}", global_thread_idx());
    }
}

kernel! {
    /// String and slice parameters, which a typed launch copies where the kernel reads
    /// them: every thread prints `t=<t> i=0 name=<name> n=<values.len()> sum=<sum of
    /// values> last=<last value> scale=<scale> empty=<empty.len()>`.
    pub fn strings_and_slices(name: &str, values: &[u64], scale: f32, empty: &[u8]) {
        let sum: u64 = values.iter().sum();
        let last = values.last().copied().unwrap_or(0);
        println!(
            "t={} i=0 name={name} n={} sum={sum} last={last} scale={scale} empty={}",
            global_thread_idx(),
            values.len(),
            empty.len()
        );
    }
}

kernel! {
    /// Results through `Out` parameters: thread `i` (of the first `x.len()`) writes
    /// `x[i] * x[i] + i` to `squares[i]` and `x[i] as f32 / 2` to `halves[i]`; the rest
    /// write nothing.
    pub fn squares_into(x: &[u64], squares: gpuio_device::param::Out<u64>, halves: gpuio_device::param::Out<f32>) {
        let i = global_thread_idx() as usize;
        if i < x.len() && i < squares.len() && i < halves.len() {
            // SAFETY: thread i alone writes element i of each.
            unsafe {
                squares.write(i, x[i] * x[i] + i as u64);
                halves.write(i, x[i] as f32 / 2.0);
            }
        }
    }
}

kernel! {
    /// Each thread writes `3 * t + 1` to its own element of `out` (`Out::write_own`, no
    /// `unsafe`); threads past its end write nothing.
    pub fn own_elements(out: gpuio_device::param::Out<u64>) {
        let t = global_thread_idx();
        out.write_own(3 * t + 1);
    }
}

kernel! {
    /// A block's threads working together through dynamic shared memory: in each of
    /// `rounds` rounds thread `t` of block `b` writes `b * 1,000,000 + round * 1,000 + t` to
    /// word `t`, waits for the block (`sync_threads`), reads its neighbour's word `(t + 1) %
    /// n`, and waits again. Each thread prints `t=<global> i=0 len=<bytes> next=<the last
    /// round's neighbour word> sum=<sum of them>`, or `... len=<bytes> short` when the
    /// launch gave fewer than 4 bytes per thread.
    pub fn shared_memory_rounds(rounds: u32) {
        let shared = gpuio_device::dynamic_shared_memory();
        let (t, n) = (gpuio_device::thread_idx() as usize, gpuio_device::block_dim() as usize);
        if shared.len() < 4 * n {
            println!("t={} i=0 len={} short", global_thread_idx(), shared.len());
            return;
        }
        let words = shared as *mut u32;
        let (mut next, mut sum) = (0u32, 0u64);
        for r in 0..rounds {
            // SAFETY: word `t` is this thread's alone between the barriers; the launch gave
            // 4 * n bytes or more.
            unsafe { words.add(t).write(gpuio_device::block_idx() * 1_000_000 + r * 1_000 + t as u32) };
            gpuio_device::sync_threads();
            // SAFETY: every word was written before the barrier, none until the next.
            next = unsafe { words.add((t + 1) % n).read() };
            sum += next as u64;
            gpuio_device::sync_threads();
        }
        println!("t={} i=0 len={} next={next} sum={sum}", global_thread_idx(), shared.len());
    }
}

kernel! {
    /// A 3-D launch: each thread prints one line `t=<global_thread_idx> i=0 b=<x>,<y>,<z>
    /// th=<x>,<y>,<z> g=<x>,<y>,<z> bd=<x>,<y>,<z>` with its block and thread indices and the
    /// launch's grid and block sizes.
    pub fn dims_3d() {
        let (b, t) = (gpuio_device::block_idx_3d(), gpuio_device::thread_idx_3d());
        let (g, d) = (gpuio_device::grid_dim_3d(), gpuio_device::block_dim_3d());
        println!(
            "t={} i=0 b={},{},{} th={},{},{} g={},{},{} bd={},{},{}",
            global_thread_idx(),
            b.x,
            b.y,
            b.z,
            t.x,
            t.y,
            t.z,
            g.x,
            g.y,
            g.z,
            d.x,
            d.y,
            d.z
        );
    }
}

kernel! {
    /// The shapes of invariant 12 (a line whose print returned reaches its fd whatever the
    /// kernel's other threads do). `words` is host memory: word 0 is the host's stop flag,
    /// word `1 + t` is set to 1 by thread `t` once its print returned. Every thread prints
    /// `t=<t> i=0`, marks its word, and then the threads that `shape` names compute without
    /// I/O until the host sets the stop flag (or `max_ns` passed), while the others end:
    /// 0, thread 0; 1, every thread but lane 0 of each warp of 32; 2, warp 0 of each
    /// block; 3, block 0. Shape 4: thread 0 computes *instead of* printing, from the start,
    /// and the other lanes of its warp print in the other branch (whether they run while
    /// it computes is the scheduler's choice: they may print only after it).
    pub fn print_then_compute(shape: u32, words: u64, max_ns: u64) {
        let t = global_thread_idx();
        let (lane, warp, block) = (gpuio_device::thread_idx() % 32, gpuio_device::thread_idx() / 32, gpuio_device::block_idx());
        // SAFETY: the host passes `2 + threads` u32 words of host memory for the launch.
        let word = |i: u64| unsafe { &*(words as *const AtomicU32).add(i as usize) };
        let compute = || {
            let t0 = clock_ns();
            // Relaxed, system scope: a flag the host sets; nothing is read on the strength
            // of it.
            while word(0).load(Ordering::Relaxed) == 0 && clock_ns().wrapping_sub(t0) < max_ns {
                core::hint::spin_loop();
            }
        };
        if shape == 4 && t == 0 {
            compute();
            return;
        }
        println!("t={t} i=0");
        // Relaxed, system scope: the host only counts these.
        word(1 + t).store(1, Ordering::Relaxed);
        let busy = match shape {
            0 => t == 0,
            1 => lane != 0,
            2 => warp == 0,
            3 => block == 0,
            _ => false,
        };
        if busy {
            compute();
        }
    }
}

kernel! {
    /// After a trap, every line printed before it is out (invariant 12). `words` is host
    /// memory, a u32 per thread. Every thread outside warp 0 of block 0 prints `lines`
    /// lines `t=<t> i=<i>`, storing in word `t` how many of its prints returned. Warp 0 of
    /// block 0 (its lanes together, so lockstep can run the others) waits until every
    /// other thread has stored `lines` (or `max_ns` passed); then its lane 0 panics, which
    /// on a GPU traps and ends the kernel. The host then finds the line of every print
    /// whose mark it sees. Blocks of at least 32 threads.
    pub fn trap_after_others_print(lines: u32, words: u64, max_ns: u64) {
        let t = global_thread_idx();
        // SAFETY: the host passes a u32 word per thread of the launch, in host memory.
        let word = |i: u64| unsafe { &*(words as *const AtomicU32).add(i as usize) };
        let threads = gpuio_device::grid_dim() as u64 * gpuio_device::block_dim() as u64;
        if gpuio_device::block_idx() == 0 && gpuio_device::thread_idx() < 32 {
            let t0 = clock_ns();
            let all_printed = || {
                // Acquire, system scope: pairs with each printer's Release below, so that its
                // prints' reservations happen-before this thread's panic (which looks at the
                // streams' `reserved` to know what to wait for).
                (32..threads).all(|u| word(u).load(Ordering::Acquire) == lines)
            };
            while !all_printed() && clock_ns().wrapping_sub(t0) < max_ns {
                core::hint::spin_loop();
            }
            if t == 0 {
                panic!("trap_after_others_print: thread 0 traps after the others' prints returned");
            }
            return;
        }
        for i in 0..lines {
            println!("t={t} i={i}");
            // Release, system scope: orders this print before the store, for thread 0's
            // Acquire above; the host only counts these (a store it has not seen yet only
            // makes its check ask less).
            word(t).store(i + 1, Ordering::Release);
        }
    }
}

kernel! {
    /// Thread 0 tries to move host memory with `FileIo`'s transfers, and stores each
    /// attempt's result (the CQE's `res`: bytes, or `-errno`) in `results[0..4]` (i64): a
    /// plain `WRITE` of 8 bytes at the host address `secret` to `fd`; a `WRITE_FIXED` of
    /// them naming the arena's buffer; a `READ_FIXED` of fd 0 into them naming the arena, and
    /// naming the first host buffer's (empty) slot. Then it writes `allowed\n` to `fd` at
    /// offset 0 with `io::pwrite` (staged through the arena: `WRITE_FIXED`), and stores that
    /// result in `results[4]`. The other threads do nothing.
    pub fn file_io_escape_attempts(fd: u32, secret: u64, results: u64) {
        use gpuio_device::protocol::arena::buffer;
        use gpuio_device::protocol::uapi::{Sqe, IORING_OP_READ_FIXED, IORING_OP_WRITE, IORING_OP_WRITE_FIXED};
        if global_thread_idx() != 0 {
            return;
        }
        let Some(ctx) = gpuio_device::protocol::context::installed() else {
            return;
        };
        let sqe = |opcode, fd, buf_index| Sqe {
            opcode,
            fd,
            addr: secret,
            len: 8,
            buf_index,
            ..Sqe::default()
        };
        let res = [
            ctx.call(sqe(IORING_OP_WRITE, fd as i32, 0)) as i64,
            ctx.call(sqe(IORING_OP_WRITE_FIXED, fd as i32, buffer::ARENA)) as i64,
            ctx.call(sqe(IORING_OP_READ_FIXED, 0, buffer::ARENA)) as i64,
            ctx.call(sqe(IORING_OP_READ_FIXED, 0, buffer::REGION)) as i64,
            match io::pwrite(fd as i32, b"allowed\n", 0) {
                Ok(n) => n as i64,
                Err(e) => -(e.0 as i64),
            },
        ];
        for (i, r) in res.iter().enumerate() {
            // SAFETY: the host allocated five i64s at `results`.
            unsafe { *(results as *mut i64).add(i) = *r };
        }
    }
}

kernel! {
    /// Thread 0 tries what the default sandbox forbids, and stores each attempt's result
    /// (the CQE's `res`: bytes, or `-errno`) in `results[0..5]` (i64): a plain `WRITE` of 8
    /// bytes at the host address `secret` to the registered stdout; a `WRITE_FIXED` of them
    /// from the print log's buffer index; one from the log's own last 8 bytes, through a
    /// request ring (only the print ring holds the logs); an `OPENAT` that creates `escaped`
    /// (relative to the host's working directory); a `READ` of fd 0. Then it prints
    /// `allowed`. The other threads do nothing.
    pub fn escape_attempts(secret: u64, results: u64) {
        use gpuio_device::protocol::uapi::{
            Sqe, IORING_OP_READ, IORING_OP_WRITE, IORING_OP_WRITE_FIXED, IOSQE_FIXED_FILE,
        };
        if global_thread_idx() != 0 {
            return;
        }
        let Some(ctx) = gpuio_device::protocol::context::installed() else {
            return;
        };
        let log = &ctx.streams[0];
        let write = |opcode, addr| Sqe {
            opcode,
            flags: IOSQE_FIXED_FILE,
            fd: 0,
            addr,
            len: 8,
            buf_index: 0,
            ..Sqe::default()
        };
        let res = [
            ctx.call(write(IORING_OP_WRITE, secret)) as i64,
            ctx.call(write(IORING_OP_WRITE_FIXED, secret)) as i64,
            ctx.call(write(IORING_OP_WRITE_FIXED, log.io_base + log.cap - 8)) as i64,
            match io::open("escaped", 0o101, 0o644) {
                // O_WRONLY | O_CREAT
                Ok(fd) => fd as i64,
                Err(e) => -(e.0 as i64),
            },
            ctx.call(Sqe {
                opcode: IORING_OP_READ,
                fd: 0,
                addr: secret,
                len: 8,
                ..Sqe::default()
            }) as i64,
        ];
        for (i, r) in res.iter().enumerate() {
            // SAFETY: the host allocated five i64s at `results`.
            unsafe { *(results as *mut i64).add(i) = *r };
        }
        println!("allowed");
    }
}

/// A thread past the limit `returns_an_error` was given: `thread T is past the limit L`.
pub struct PastTheLimit {
    /// The thread.
    pub t: u64,
    /// The limit.
    pub limit: u32,
}

impl fmt::Display for PastTheLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "thread {} is past the limit {}", self.t, self.limit)
    }
}

/// `Ok(t)` for a thread below `limit`, else the error.
fn below(t: u64, limit: u32) -> Result<u64, PastTheLimit> {
    if t < limit as u64 {
        Ok(t)
    } else {
        Err(PastTheLimit { t, limit })
    }
}

kernel! {
    /// Each thread prints `t=<t> before`; one at or past `limit` then returns
    /// [`PastTheLimit`] through `?`, which `kernel!` reports as `kernel thread T (block B,
    /// thread I) of returns_an_error returned Err: thread T is past the limit L` (on a GPU
    /// the thread then traps, ending the kernel); the others print `t=<t> after`.
    /// (tests/kernel_errors.rs)
    pub fn returns_an_error(limit: u32) -> Result<(), PastTheLimit> {
        let t = global_thread_idx();
        println!("t={t} before");
        below(t, limit)?;
        println!("t={t} after");
        Ok(())
    }
}

/// An error whose text is long: `thread T: ` and then `len` digits, `0123456789` over and
/// over.
pub struct Long {
    /// The thread.
    pub t: u64,
    /// How many digits.
    pub len: u32,
}

impl fmt::Display for Long {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "thread {}: ", self.t)?;
        for i in 0..self.len {
            fmt::Write::write_char(f, (b'0' + (i % 10) as u8) as char)?;
        }
        Ok(())
    }
}

kernel! {
    /// Each thread prints `t=<t> before`; one at or past `limit` then returns [`Long`] of
    /// `len` digits through `?` (with `len` over 256, a report longer than a GPU formats in
    /// one pass: it measures, then writes); the others print `t=<t> after`.
    /// (tests/kernel_errors.rs)
    pub fn returns_a_long_error(limit: u32, len: u32) -> Result<(), Long> {
        let t = global_thread_idx();
        println!("t={t} before");
        if t >= limit as u64 {
            return Err(Long { t, len });
        }
        println!("t={t} after");
        Ok(())
    }
}

kernel! {
    /// Thread 0 writes one element past the end of `out` (`Out::write`), a panic that names
    /// this line, not gpuio's (`#[track_caller]`); the other threads write nothing. CPU
    /// backend only: on a GPU the panic traps (tests/faults_kernel.rs).
    pub fn writes_past_the_end(out: gpuio_device::param::Out<u64>) {
        if global_thread_idx() == 0 {
            // SAFETY: no other thread writes or reads `out`.
            unsafe { out.write(out.len(), 1) };
        }
    }
}
