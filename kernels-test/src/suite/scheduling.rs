//! Threads that go without I/O: idle before they print ([`idle_then_print`]: SQPOLL falls
//! asleep), computing or trapping while the lines printed must still come out (invariant 12:
//! [`print_then_compute`], [`trap_after_others_print`]), and spinning for one lock, the probe
//! of the warp scheduling itself ([`lockstep_probe`]).

use gpuio_device::kernel;
use gpuio_device::protocol::sync::{AtomicU32, Ordering};
use gpuio_device::{clock_ns, global_thread_idx, println};

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
