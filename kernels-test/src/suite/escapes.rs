//! What the sandboxes forbid, attempted from a kernel: `FileIo`'s transfers of host memory
//! ([`file_io_escape_attempts`]), and the default sandbox's ([`escape_attempts`]).

use gpuio_device::io;
use gpuio_device::kernel;
use gpuio_device::{global_thread_idx, println};

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
