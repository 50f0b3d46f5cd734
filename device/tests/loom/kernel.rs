//! The kernel's side of io_uring in the models: a kernel thread over rings a test owns
//! ([`KernelRings`]), and the device threads playing it themselves ([`InlineKernel`]).

use super::*;

/// The kernel's side of one io_uring, in memory a test owns.
pub(crate) struct KernelRings {
    pub(crate) sq_head: AtomicU32,
    pub(crate) sq_tail: AtomicU32,
    pub(crate) sq_flags: AtomicU32,
    pub(crate) cq_head: AtomicU32,
    pub(crate) cq_tail: AtomicU32,
    pub(crate) sqes: Vec<SharedCell<Sqe>>,
    pub(crate) cqes: Vec<SharedCell<Cqe>>,
    /// Each CQE slot's `res` again, as an atomic the solo ring's holder can wait on
    /// (`Solo::waiting_on_results`): stored with Release after the CQE, as an x86 host's
    /// every store is (TSO), which is what that mode relies on.
    pub(crate) results: Vec<AtomicI32>,
    pub(crate) ready: Vec<AtomicU32>,
}

impl KernelRings {
    pub(crate) fn new(sq: u32, cq: u32) -> Self {
        KernelRings {
            sq_head: AtomicU32::new(0),
            sq_tail: AtomicU32::new(0),
            sq_flags: AtomicU32::new(0),
            cq_head: AtomicU32::new(0),
            cq_tail: AtomicU32::new(0),
            sqes: (0..sq).map(|_| SharedCell::new(Sqe::default())).collect(),
            cqes: (0..cq).map(|_| SharedCell::new(Cqe::default())).collect(),
            results: (0..cq).map(|_| AtomicI32::new(0)).collect(),
            ready: (0..sq).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    pub(crate) fn ring(&self) -> Ring {
        // SAFETY: every pointer points into `self`, which the test keeps alive (in an Arc)
        // for as long as the ring is used.
        unsafe {
            Ring::new(
                &self.sq_head,
                &self.sq_tail,
                &self.sq_flags,
                self.sqes.as_ptr(),
                &self.cq_head,
                &self.cq_tail,
                self.cqes.as_ptr(),
                self.ready.as_ptr(),
                self.sqes.len() as u32,
                self.cqes.len() as u32,
            )
        }
    }

    /// Consumes one SQE if there is one, as SQPOLL does, and completes it with
    /// `complete(sqe)`. Returns whether it did.
    pub(crate) fn step(&self, complete: impl FnOnce(&Sqe) -> i32) -> bool {
        let head = self.sq_head.load(Ordering::Relaxed);
        // smp_load_acquire of the tail.
        if self.sq_tail.load(Ordering::Acquire) == head {
            return false;
        }
        let mask = self.sqes.len() as u32 - 1;
        // SAFETY: loom checks this read is ordered after the submitter's write.
        let sqe = unsafe { self.sqes[(head & mask) as usize].read() };
        // Invariant 4: the CQ must have room for this request's completion.
        let cq_tail = self.cq_tail.load(Ordering::Relaxed);
        let in_cq = cq_tail.wrapping_sub(self.cq_head.load(Ordering::Acquire));
        assert!(in_cq < self.cqes.len() as u32, "CQ would overflow");
        let res = complete(&sqe);
        // smp_store_release of the head: the SQE is consumed.
        self.sq_head.store(head.wrapping_add(1), Ordering::Release);
        self.write_cqe(cq_tail, sqe.user_data, res);
        self.cq_tail.store(cq_tail.wrapping_add(1), Ordering::Release);
        true
    }

    /// Writes the CQE at CQ position `at`, then its `res` word (Release).
    fn write_cqe(&self, at: u32, user_data: u64, res: i32) {
        let slot = (at & (self.cqes.len() as u32 - 1)) as usize;
        // SAFETY: the reaper reads this slot only after our release of the tail (or of the
        // result word).
        unsafe {
            self.cqes[slot].write(Cqe {
                user_data,
                res,
                flags: 0,
            })
        };
        self.results[slot].store(res, Ordering::Release);
    }

    /// Consumes one SQE if there is one, without completing it: the kernel may complete
    /// requests in any order, later, with [`KernelRings::post`].
    pub(crate) fn consume(&self) -> Option<Sqe> {
        let head = self.sq_head.load(Ordering::Relaxed);
        if self.sq_tail.load(Ordering::Acquire) == head {
            return None;
        }
        let mask = self.sqes.len() as u32 - 1;
        // SAFETY: as in `step`.
        let sqe = unsafe { self.sqes[(head & mask) as usize].read() };
        self.sq_head.store(head.wrapping_add(1), Ordering::Release);
        Some(sqe)
    }

    /// Posts the completion of an SQE that [`KernelRings::consume`] took.
    pub(crate) fn post(&self, user_data: u64, res: i32) {
        let cq_tail = self.cq_tail.load(Ordering::Relaxed);
        let in_cq = cq_tail.wrapping_sub(self.cq_head.load(Ordering::Acquire));
        assert!(in_cq < self.cqes.len() as u32, "CQ would overflow");
        self.write_cqe(cq_tail, user_data, res);
        self.cq_tail.store(cq_tail.wrapping_add(1), Ordering::Release);
    }

    /// Consumes and completes `n` SQEs, one at a time in the order it finds them, yielding
    /// while there is none.
    pub(crate) fn serve(&self, n: usize, mut complete: impl FnMut(&Sqe) -> i32) {
        let mut done = 0;
        while done < n {
            if self.step(&mut complete) {
                done += 1;
            } else {
                thread::yield_now();
            }
        }
    }
}

/// The kernel model played by the device threads themselves: after its submission, a thread
/// runs the kernel (under a lock: the kernel is one SQPOLL thread) until every SQE
/// submitted so far was consumed, then waits for its own result like any device thread.
///
/// Why not a kernel thread: with one, two device threads spinning in their waits give loom
/// far more interleavings than a test can afford (over 15 minutes for one request on each
/// of two threads, at preemption bound 1); this way a model takes seconds. What it gives
/// up: the kernel's work for a thread's own request is ordered before that thread's later
/// steps by program order, and the lock orders one thread's kernel run before the next
/// one's. So the models that use it check what passes *between device threads* outside
/// the kernel: a result routed by whichever thread reaps (through the slot's `DONE`), a
/// slot or a block given back by one and taken by the other (through the pool). The edge
/// from a kernel thread to a waiter is checked by `staged_read_sees_the_kernels_bytes`,
/// which has one.
pub(crate) struct InlineKernel {
    /// SQEs consumed and not yet completed, and how many were consumed in all.
    pub(crate) held: Mutex<(Vec<Sqe>, u32)>,
    /// Completes SQEs in batches of this many, the latest first (1: each as it is found).
    /// A model submits a multiple of it, or the last SQEs would never complete.
    pub(crate) batch: usize,
}

impl InlineKernel {
    pub(crate) fn new(batch: usize) -> Self {
        InlineKernel {
            held: Mutex::new((Vec::new(), 0)),
            batch,
        }
    }

    /// Runs the kernel until `total` SQEs were consumed in all, yielding between runs (for
    /// a request that another thread submits late, inside its wait).
    pub(crate) fn serve_until(&self, w: &World, total: u32, mut complete: impl FnMut(&Sqe) -> i32) {
        loop {
            self.run(w, &mut complete);
            if self.held.lock().unwrap().1 >= total {
                return;
            }
            thread::yield_now();
        }
    }

    /// Runs the kernel until every SQE submitted before the call was consumed (one a
    /// submitter published late is waited for, yielding).
    pub(crate) fn run(&self, w: &World, mut complete: impl FnMut(&Sqe) -> i32) {
        let target = w.ctx.as_ref().unwrap().print_ring().submitted();
        loop {
            {
                let mut held = self.held.lock().unwrap();
                let (sqes, consumed) = &mut *held;
                while let Some(sqe) = w.kernel.consume() {
                    sqes.push(sqe);
                    *consumed += 1;
                    if sqes.len() == self.batch {
                        for sqe in sqes.drain(..).rev() {
                            w.kernel.post(sqe.user_data, complete(&sqe));
                        }
                    }
                }
                if *consumed >= target {
                    return;
                }
            }
            thread::yield_now();
        }
    }
}
