//! The completion slots: each result reaches its own waiter whoever reaps, through a
//! reused slot and in whatever order the kernel completes.

use super::*;

/// Two threads each make two requests, one after the other (take a slot, submit, wait:
/// `Context::call`'s steps, with the kernel model run in between, in the round of
/// `Context::with_taken` that took the slot), whose results are their
/// SQEs' `len`s, all different: a result routed to the wrong slot, left over from the
/// slot's previous request, or read before its `DONE` was acquired (a stale value), fails
/// the waiter's assertion. Whoever waits reaps, so a result is often routed by the other
/// thread. Afterwards every slot is free and no completion went astray.
fn requests_model(slots: u32, batch: usize) {
    model(move || {
        let w = world(1, false, slots, 1);
        let kernel = Arc::new(InlineKernel::new(batch));
        let waiters: Vec<_> = [[3u32, 4], [5, 6]]
            .into_iter()
            .map(|lens| {
                let (w, kernel) = (w.clone(), kernel.clone());
                thread::spawn(move || {
                    let ctx = w.ctx.as_ref().unwrap();
                    for len in lens {
                        // As `Context::call` does: the request is made and waited for in the
                        // round that took the slot (the lockstep rule).
                        ctx.with_taken(
                            || ctx.requests.try_take(),
                            |ticket| {
                                let sqe = Sqe {
                                    opcode: IORING_OP_WRITE,
                                    fd: 1,
                                    len,
                                    user_data: ticket.user_data(),
                                    ..Sqe::default()
                                };
                                ctx.submit(&sqe);
                                kernel.run(&w, |sqe| sqe.len as i32);
                                let res = ctx.wait(ticket);
                                assert_eq!(res, len as i32, "a waiter got a result that is not its own");
                            },
                        );
                    }
                })
            })
            .collect();
        for t in waiters {
            t.join().unwrap();
        }
        let ctx = w.ctx.as_ref().unwrap();
        assert!(ctx.idle());
        for i in 0..slots {
            assert_eq!(
                ctx.requests.pool.state(i).load(Ordering::Relaxed),
                FREE,
                "slot {i} still taken"
            );
        }
        assert_eq!(ctx.stray_completions.load(Ordering::Relaxed), 0);
        assert_eq!(ctx.refusals.unclaimed.load(Ordering::Relaxed), 0);
    });
}

/// One completion slot: each request waits for the previous one's waiter to give it back
/// (reaping, which is what frees it) and takes it with the next tag. Completions in order.
#[test]
fn request_results_reach_their_own_waiters() {
    requests_model(1, 1);
}

/// Two slots, two requests in flight at once; the kernel completes them in pairs, the
/// later one first.
#[test]
fn request_results_reach_their_own_waiters_out_of_order() {
    requests_model(2, 2);
}
