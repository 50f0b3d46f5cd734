//! The fallback kernel's thread: it drains the SQ (each SQE executed with an ordinary
//! syscall, `execute.rs`), posts each result to the CQ, and backs off as SQPOLL does when
//! there is nothing to do.

use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::Instant;

use gpuio_device::protocol::uapi::Cqe;

use super::execute::execute;
use super::{RingState, Words, CQES, CQ_HEAD, CQ_TAIL, PARKED, POLL, SQ_HEAD, SQ_TAIL};

/// The fallback kernel's loop: consume what the SQ holds, else back off as SQPOLL does.
pub(super) fn run(w: Words, st: &RingState) {
    crate::consumer::io_threads::quiet_this_thread();
    let mut consumer = Consumer::new(w);
    let mut idle = Idle {
        last_work: Instant::now(),
        rounds: 0,
    };
    while !st.stop.load(Ordering::Acquire) {
        if !st.enabled.load(Ordering::Acquire) {
            // Disabled: nothing is consumed (`enable` unparks the thread).
            thread::park_timeout(PARKED);
            continue;
        }
        match consumer.drain(st) {
            Drained::Some => idle.worked(),
            Drained::Nothing { cq_full } => idle.wait(&consumer, st, cq_full),
        }
    }
}

/// What one pass over the SQ did.
pub(super) enum Drained {
    /// It completed at least one request.
    Some,
    /// It completed none: the SQ was empty, or the CQ full (`cq_full`).
    Nothing { cq_full: bool },
}

/// The consuming side of the rings: only this thread writes the SQ head and the CQ tail,
/// so it keeps them here.
pub(super) struct Consumer {
    w: Words,
    pub(super) head: u32,
    cq_tail: u32,
}

impl Consumer {
    /// The consuming side of rings whose heads and tails are all 0.
    pub(super) fn new(w: Words) -> Consumer {
        Consumer { w, head: 0, cq_tail: 0 }
    }

    /// Executes every SQE published so far, in order, each completion posted before the
    /// next SQE is read; stops early at a full CQ or at `stop`.
    pub(super) fn drain(&mut self, st: &RingState) -> Drained {
        let w = self.w;
        // Acquire, system scope: pairs with the device publisher's Release store of the
        // tail: every SQE below it, and the payload it points at, is visible.
        let tail = w.word(SQ_TAIL).load(Ordering::Acquire);
        let mut did = false;
        while self.head != tail && !st.stop.load(Ordering::Relaxed) {
            // Acquire: pairs with the reaper's Release store of the CQ head; its reads
            // of the CQE slots below the head happen-before we overwrite them.
            let cq_head = w.word(CQ_HEAD).load(Ordering::Acquire);
            if self.cq_tail.wrapping_sub(cq_head) >= w.cq_entries {
                // Invariant 4 broken by the device: wait for the reaper rather than
                // overflow. The SQE stays unconsumed.
                st.cq_full.fetch_add(1, Ordering::Relaxed);
                return if did {
                    Drained::Some
                } else {
                    Drained::Nothing { cq_full: true }
                };
            }
            // SAFETY: slot `head & mask` holds a published SQE (acquire of the tail
            // above) that no submitter rewrites until we move the head past it.
            let sqe = unsafe { w.sqes.add((self.head & (w.sq_entries - 1)) as usize).read() };
            self.head = self.head.wrapping_add(1);
            // Release: our read of the slot happens-before a submitter's reuse of it
            // (pairs with the Acquire load of the SQ head in `Ring::submit`).
            w.word(SQ_HEAD).store(self.head, Ordering::Release);
            let res = execute(&sqe, &st.registered);
            self.post(sqe.user_data, res);
            st.completed.fetch_add(1, Ordering::Relaxed);
            did = true;
        }
        if did {
            Drained::Some
        } else {
            Drained::Nothing { cq_full: false }
        }
    }

    /// Posts a completion in the next CQ slot, which the caller found free.
    fn post(&mut self, user_data: u64, res: i32) {
        let w = self.w;
        // SAFETY: the slot is free (the caller's CQ check) and only we write CQEs; its
        // fields are aligned (the array is cache-line aligned, a CQE 16 bytes).
        unsafe {
            let slot = (self.cq_tail & (w.cq_entries - 1)) as usize;
            let cqe = (w.rings.add(CQES as usize) as *mut Cqe).add(slot);
            (&raw mut (*cqe).user_data).write(user_data);
            (&raw mut (*cqe).flags).write(0);
            // Release, an atomic: the solo ring's holder may be waiting on this word
            // (`Solo::waiting_on_results`); the syscall's last use of the request's
            // buffers happens-before its acquire of the answer.
            AtomicI32::from_ptr(&raw mut (*cqe).res).store(res, Ordering::Release);
        }
        self.cq_tail = self.cq_tail.wrapping_add(1);
        // Release: the CQE, and the syscall's last use of the request's buffers,
        // happen-before the reaper's Acquire load of the tail (invariant 3).
        w.word(CQ_TAIL).store(self.cq_tail, Ordering::Release);
    }
}

/// The back-off between passes that found nothing, like SQPOLL's idle spin: spin, yield,
/// poll every [`POLL`] for `sq_thread_idle`, then park until the waker unparks it.
struct Idle {
    last_work: Instant,
    rounds: u32,
}

impl Idle {
    fn worked(&mut self) {
        self.last_work = Instant::now();
        self.rounds = 0;
    }

    /// One step of the back-off; `cq_full`: the pass stopped at a full CQ, which only the
    /// reaper empties (no park then: the waker does not know of it).
    fn wait(&mut self, consumer: &Consumer, st: &RingState, cq_full: bool) {
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds < 64 {
            std::hint::spin_loop();
        } else if self.rounds < 128 {
            thread::yield_now();
        } else if cq_full || self.last_work.elapsed() < consumer.w.idle {
            thread::sleep(POLL);
        } else {
            // SeqCst: the flag is set before the re-check of the tail below, and the
            // waker reads the tail before the flag (see `wake_if_needed`).
            st.sleeping.store(true, Ordering::SeqCst);
            let tail = consumer.w.word(SQ_TAIL).load(Ordering::SeqCst);
            if tail == consumer.head && !st.stop.load(Ordering::SeqCst) {
                thread::park_timeout(PARKED);
            }
            st.sleeping.store(false, Ordering::SeqCst);
            self.worked();
        }
    }
}
