//! The solo ring: its buffer and its SQE and CQE slots handed from holder to kernel to
//! holder, the holder waiting on the CQ tail or on each CQE's `res`.

use super::*;

/// The kernel's side and the staging buffer of a solo ring in the models, in memory that
/// stays put (an `Arc`'s) while a [`Solo`] points into it.
struct SoloParts {
    kernel: KernelRings,
    stage: Vec<SharedCell<u8>>,
}

/// Reads `want.len()` bytes at `off` of the model's file through the solo ring, taking it
/// again (running the kernel between tries) until it is ours, and checks the bytes the
/// kernel put in the buffer.
fn read_on_the_ring(solo: &Solo, off: u64, want: &[u8], kernel: &impl Fn()) {
    let len = want.len();
    loop {
        let res = solo.try_call_helping(
            |_, addr| Sqe {
                opcode: IORING_OP_READ,
                fd: FD,
                off,
                addr,
                len: len as u32,
                ..Sqe::default()
            },
            |stage, res| {
                assert_eq!(res, len as i32);
                let mut got = Vec::new();
                // SAFETY: we hold the ring, and the kernel's read completed.
                unsafe { read_cells(stage, len, |b| got.extend_from_slice(b)) };
                assert_eq!(got, want, "the read did not see the kernel's bytes");
            },
            kernel,
        );
        match res {
            Some(res) => break assert_eq!(res, len as i32),
            None => {
                kernel();
                thread::yield_now()
            }
        }
    }
}

impl SoloParts {
    /// The staging buffer's cells that `sqe` names (its `addr` and `len`).
    fn cells(&self, sqe: &Sqe) -> *const SharedCell<u8> {
        // A cell's address back to its index (under loom a cell is bigger than a byte).
        let cell = core::mem::size_of::<SharedCell<u8>>() as u64;
        let first = ((sqe.addr - self.stage.as_ptr() as u64) / cell) as usize;
        self.stage[first..first + sqe.len as usize].as_ptr()
    }
}

/// A solo ring of one SQE and two CQEs over a kernel model (so that three requests reuse
/// the SQE slot twice and a CQE slot once), with a buffer of four bytes; its holder waits on
/// each CQE's `res` if `on_results`, else on the CQ tail.
fn solo_world(on_results: bool) -> (Arc<SoloParts>, Arc<Solo>) {
    let parts = Arc::new(SoloParts {
        kernel: KernelRings::new(1, 2),
        stage: (0..4).map(|_| SharedCell::new(0)).collect(),
    });
    let k = &parts.kernel;
    // SAFETY: the pointers point into the Arc's contents, which never move and which the
    // models keep alive (they hold `parts`) for as long as they use the ring. The kernel
    // sees the buffer where the device does (its cells' address).
    let solo = unsafe {
        Solo::new(
            &k.sq_tail,
            &k.cq_head,
            &k.cq_tail,
            k.sqes.as_ptr(),
            k.cqes.as_ptr(),
            1,
            2,
            parts.stage.as_ptr(),
            parts.stage.as_ptr() as u64,
        )
    };
    let solo = if on_results {
        let stride = core::mem::size_of::<AtomicI32>() as u32;
        // SAFETY: slot `i`'s result word is `results[i]`, one atomic on from the last, in
        // the Arc's contents (above); the model's kernel stores it with Release after the
        // CQE, as an x86 host is seen to.
        unsafe { solo.waiting_on_results(k.results.as_ptr(), stride) }
    } else {
        solo
    };
    (parts, Arc::new(solo))
}

/// The solo ring taken in turn: a writer (twice) and a reader each retry until they hold it (a
/// model's shortcut: device code goes to the shared rings instead), and both play the
/// kernel, the holder while it waits for its completion and the other between its tries
/// (one at a time, under a lock: the kernel is one SQPOLL thread), as [`InlineKernel`]
/// does, which keeps the model small. Loom checks the hand-offs
/// of the buffer and of the SQE and CQE slots: the writer's payload happens-before the
/// kernel's copy of it (the SQ tail), the kernel's bytes happen-before the reader's copy
/// (the CQ tail), each holder's last use of the buffer happens-before the next holder's
/// first (the release fence and the lock's word), and the second request finds the count
/// and the kernel's ring where the first left them. The holder waits on the CQ tail here,
/// and on each CQE's `res` in the next model.
#[test]
fn solo_ring_hands_its_buffer_from_holder_to_kernel_to_holder() {
    solo_ring_hands_its_buffer(false);
}

/// As above, the holder waiting on each CQE's `res` (`Solo::waiting_on_results`): the
/// kernel's bytes happen-before the reader's copy through that word alone, and a holder
/// never takes its own mark, or the previous request's answer in a reused slot, for its
/// answer.
#[test]
fn solo_ring_hands_its_buffer_waiting_on_results() {
    solo_ring_hands_its_buffer(true);
}

fn solo_ring_hands_its_buffer(on_results: bool) {
    model(move || {
        let (parts, solo) = solo_world(on_results);
        let file = Arc::new(Mutex::new(b"0123456789".to_vec()));
        // The kernel: one step at a time, under the lock.
        let kernel = {
            let (parts, file) = (parts.clone(), file.clone());
            let sqpoll = Arc::new(Mutex::new(()));
            move || {
                let _one = sqpoll.lock().unwrap();
                parts.kernel.step(|sqe| {
                    let (len, at) = (sqe.len as usize, sqe.off as usize);
                    let cells = parts.cells(sqe);
                    let mut f = file.lock().unwrap();
                    match sqe.opcode {
                        // SAFETY: loom checks these accesses against the holders' own.
                        IORING_OP_READ => unsafe { copy_to_cells(cells, &f[at..at + len]) },
                        _ => {
                            let mut i = at;
                            // SAFETY: as above.
                            unsafe {
                                read_cells(cells, len, |b| {
                                    f[i..i + b.len()].copy_from_slice(b);
                                    i += b.len();
                                })
                            };
                        }
                    }
                    len as i32
                });
            }
        };
        let writer = {
            let (solo, kernel) = (solo.clone(), kernel.clone());
            thread::spawn(move || {
                // Two writes, one after the other: "xy" at 8, then "z" at 9.
                for (bytes, off) in [(&b"xy"[..], 8), (&b"z"[..], 9)] {
                    loop {
                        let res = solo.try_call_helping(
                            |stage, addr| {
                                // SAFETY: we hold the ring, so the buffer is ours.
                                unsafe { copy_to_cells(stage, bytes) };
                                Sqe {
                                    opcode: IORING_OP_WRITE,
                                    fd: FD,
                                    off,
                                    addr,
                                    len: bytes.len() as u32,
                                    ..Sqe::default()
                                }
                            },
                            |_, _| {},
                            &kernel,
                        );
                        match res {
                            Some(res) => break assert_eq!(res, bytes.len() as i32),
                            None => {
                                kernel();
                                thread::yield_now()
                            }
                        }
                    }
                }
            })
        };
        read_on_the_ring(&solo, 1, b"123", &kernel);
        writer.join().unwrap();
        assert_eq!(&file.lock().unwrap()[..], b"01234567xz");
        assert_eq!(solo.requests(), 3);
        assert!(!solo.held());
        assert_eq!(parts.kernel.cq_tail.load(Ordering::Relaxed), 3);
        assert_eq!(parts.kernel.cq_head.load(Ordering::Relaxed), 3);
    });
}

/// A turn dropped without its request (`Solo::take`, then no `SoloTurn::call`) gives the
/// ring back as it was: the count unchanged, so the next holder's request is the kernel's
/// next SQE, and the dropper's stores to the buffer happen-before the next holder's use of
/// it (the release fence before the lock's word, which loom would otherwise report as a
/// race with the kernel's copy into the buffer).
#[test]
fn a_turn_dropped_without_its_request_gives_the_ring_back_as_it_was() {
    model(|| {
        let (parts, solo) = solo_world(false);
        // The kernel: reads "abc" into the buffer, one request at a time.
        let kernel = {
            let parts = parts.clone();
            let sqpoll = Arc::new(Mutex::new(()));
            move || {
                let _one = sqpoll.lock().unwrap();
                parts.kernel.step(|sqe| {
                    let cells = parts.cells(sqe);
                    // SAFETY: loom checks this access against the holders' own.
                    unsafe { copy_to_cells(cells, &b"abc"[..sqe.len as usize]) };
                    sqe.len as i32
                });
            }
        };
        let dropper = {
            let solo = solo.clone();
            thread::spawn(move || {
                if let Some(turn) = solo.take() {
                    // SAFETY: we hold the ring, so the buffer is ours.
                    unsafe { copy_to_cells(turn.stage(), b"zz") };
                }
            })
        };
        read_on_the_ring(&solo, 0, b"abc", &kernel);
        dropper.join().unwrap();
        assert_eq!(solo.requests(), 1, "a dropped turn counted a request");
        assert!(!solo.held());
        assert_eq!(parts.kernel.cq_tail.load(Ordering::Relaxed), 1);
        assert_eq!(parts.kernel.cq_head.load(Ordering::Relaxed), 1);
    });
}
