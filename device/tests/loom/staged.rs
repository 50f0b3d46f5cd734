//! Staged `pread`/`pwrite`: an arena block's bytes handed between the kernel and a waiter,
//! and the block between two threads.

use super::*;

/// A staged `pread` of 12 bytes through an arena of one 8-byte block: two pieces, the
/// second waiting for the first's block. The model's main thread is the kernel, then (as
/// the host's drain or another GPU thread would) reaps once, so the reader's completion is
/// routed by it or by the reader itself.
///
/// Loom checks the hand-offs of the block's cells: the kernel's bytes happen-before the
/// reader's copy out of the block (kernel, CQ tail, reaper, `DONE`, waiter), and the
/// reader's copy out of the first piece happens-before the kernel writes the second into
/// the same block (the block comes back after the completion, and goes out again with the
/// next SQE's publication).
#[test]
fn staged_read_sees_the_kernels_bytes() {
    model(|| {
        let w = world(1, false, 1, 1);
        let _entered = enter_world(&w, 0);
        let reader = {
            let w = w.clone();
            thread::spawn(move || {
                let _entered = enter_world(&w, 1);
                let mut buf = [0u8; 12];
                assert_eq!(io::pread(FD, &mut buf, 2), Ok(12));
                assert_eq!(&buf, b"23456789abcd", "the read did not see the kernel's bytes");
            })
        };
        let file = model_file();
        w.kernel.serve(2, |sqe| serve_transfer(&w, &file, sqe));
        let ctx = w.ctx.as_ref().unwrap();
        ctx.reap();
        reader.join().unwrap();
        assert_all_given_back(ctx, 12);
    });
}

/// A staged `pread` and a staged `pwrite` on two threads, through an arena of one block
/// and one completion slot: the second to come finds the block taken (its `*_async` call
/// does not wait for it) and takes it in its `wait`, reaping, once the first's request
/// completed and its block came back. Loom checks that the block's next holder touches the
/// cells only after the kernel and the previous holder are done with them (the pool's
/// give-back and take), and that whichever thread reaps routes each result to its waiter.
/// The kernel is [`InlineKernel`], run by each thread between its `*_async` call (which
/// submits if the block is free) and its `wait`, and after its `wait` until both requests
/// were served (the second may be submitted inside the other thread's `wait`).
#[test]
fn staged_read_and_write_share_one_block() {
    model(|| {
        let w = world(1, false, 1, 1);
        let _entered = enter_world(&w, 0);
        let kernel = Arc::new(InlineKernel::new(1));
        let file = Arc::new(model_file());
        let reader = {
            let (w, kernel, file) = (w.clone(), kernel.clone(), file.clone());
            thread::spawn(move || {
                let _entered = enter_world(&w, 1);
                let mut buf = [0u8; 3];
                // SAFETY: waited for below.
                let pending = unsafe { io::pread_async(FD, &mut buf, 0) };
                kernel.run(&w, |sqe| serve_transfer(&w, &file, sqe));
                assert_eq!(pending.wait(), Ok(3));
                assert_eq!(&buf, b"012", "the read did not see the kernel's bytes");
                kernel.serve_until(&w, 2, |sqe| serve_transfer(&w, &file, sqe));
            })
        };
        let writer = {
            let (w, kernel, file) = (w.clone(), kernel.clone(), file.clone());
            thread::spawn(move || {
                let _entered = enter_world(&w, 2);
                // SAFETY: waited for below.
                let pending = unsafe { io::pwrite_async(FD, b"xyz", 8) };
                kernel.run(&w, |sqe| serve_transfer(&w, &file, sqe));
                assert_eq!(pending.wait(), Ok(3));
                kernel.serve_until(&w, 2, |sqe| serve_transfer(&w, &file, sqe));
            })
        };
        reader.join().unwrap();
        writer.join().unwrap();
        assert_eq!(
            &file.lock().unwrap()[..],
            b"01234567xyzbcdef",
            "the kernel did not see the written bytes"
        );
        let ctx = w.ctx.as_ref().unwrap();
        assert_all_given_back(ctx, 6);
    });
}

/// After a model's requests: the context is idle, its completion slot and arena block are
/// free again, `staged` bytes went through the arena, and no completion was a stray.
fn assert_all_given_back(ctx: &Context, staged: u64) {
    assert!(ctx.idle());
    assert_eq!(
        ctx.requests.pool.state(0).load(Ordering::Relaxed),
        FREE,
        "slot still taken"
    );
    assert_eq!(
        ctx.arena.pool.state(0).load(Ordering::Relaxed),
        FREE,
        "block still taken"
    );
    assert_eq!(ctx.arena.staged_bytes.load(Ordering::Relaxed), staged);
    assert_eq!(ctx.stray_completions.load(Ordering::Relaxed), 0);
}
