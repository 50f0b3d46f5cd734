//! The combiner: no request stranded (its slow path and the publisher's fast path), and
//! its try-lock ordering each holder after the last, one that only looked included.

use super::*;

#[test]
fn combiner_never_strands_a_request() {
    never_strands_a_request(false);
}

#[test]
fn combiner_fast_path_never_strands_a_request() {
    never_strands_a_request(true);
}

/// Two threads and the main thread each make a request and run the combiner; the two
/// threads enter it with `run_fast` (the publisher's entry: the fast path when they find
/// the lock free) if `fast`, else with `run`; the main thread always the slow way. Whoever
/// ran last saw every request: none was left for a run that never came.
fn never_strands_a_request(fast: bool) {
    model(move || {
        let c = Arc::new(Combiner::new());
        let produced = Arc::new(AtomicU32::new(0));
        let consumed = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (c, produced, consumed) = (c.clone(), produced.clone(), consumed.clone());
                thread::spawn(move || {
                    produced.fetch_add(1, Ordering::Relaxed);
                    let consume = || consumed.store(produced.load(Ordering::Relaxed), Ordering::Relaxed);
                    if fast {
                        c.run_fast(consume);
                    } else {
                        c.run(consume);
                    }
                })
            })
            .collect();
        produced.fetch_add(1, Ordering::Relaxed);
        c.run(|| consumed.store(produced.load(Ordering::Relaxed), Ordering::Relaxed));
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(consumed.load(Ordering::Relaxed), 3);
    });
}

/// A holder of a try-lock that wrote nothing (a reap that found no CQE) releases it with a
/// relaxed read-modify-write, no fence on a GPU; one that wrote releases it with a release
/// store (`Left::Writes`), or with a relaxed store after its own release fence
/// (`Left::Fenced`, a reap that took CQEs). A later holder must still see what an earlier
/// holder wrote: loom reports the cell's read if it is not ordered after the write (as when
/// the writer, too, releases with the relaxed RMW, or says `Fenced` without the fence).
/// Loom does not tell that RMW from a relaxed store here, though only the RMW continues the
/// writer's release sequence: that part rests on the argument in `Left::Nothing`.
fn try_run_model(writer_left: Left) {
    model(move || {
        let c = Arc::new(Combiner::new());
        let cell = Arc::new(SharedCell::new(0u32));
        let written = Arc::new(AtomicU32::new(0));
        let until_ran = |c: &Combiner, work: &mut dyn FnMut() -> Left| {
            while !c.try_run(&mut *work) {
                thread::yield_now();
            }
        };
        let writer = {
            let (c, cell, written) = (c.clone(), cell.clone(), written.clone());
            thread::spawn(move || {
                until_ran(&c, &mut || {
                    // SAFETY: inside the lock (the claim under test).
                    unsafe { cell.write(1) };
                    written.store(1, Ordering::Relaxed);
                    if writer_left == Left::Fenced {
                        fence(Ordering::Release);
                    }
                    writer_left
                })
            })
        };
        let looker = {
            let c = c.clone();
            thread::spawn(move || until_ran(&c, &mut || Left::Nothing))
        };
        until_ran(&c, &mut || {
            if written.load(Ordering::Relaxed) == 1 {
                // SAFETY: inside the lock (the claim under test).
                assert_eq!(unsafe { cell.read() }, 1);
            }
            Left::Nothing
        });
        writer.join().unwrap();
        looker.join().unwrap();
    });
}

#[test]
fn try_run_orders_holders_across_one_that_only_looked() {
    try_run_model(Left::Writes);
}

#[test]
fn try_run_orders_holders_after_a_fenced_release() {
    try_run_model(Left::Fenced);
}
