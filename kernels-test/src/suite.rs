//! Kernels of the GPU suite (`tests/gpu/`), and a few that tests/ run on the CPU backend
//! alone (a panic or an `Err` that would end a GPU's context): odd warp shapes, lanes that diverge between
//! call sites and streams, lines of every shape, stack buffers in file I/O, idle kernels,
//! and a probe of the warp scheduling itself. Each output format is checked by the host,
//! which formats the expected text with the same `Display` types ([`Repeat`], [`token`]).
//!
//! Here: kernels whose threads fail as a user's may ([`returns_an_error`],
//! [`returns_a_long_error`], [`writes_past_the_end`]). Beside it, in `suite/`:
//!
//! - `lines.rs`: lines from divergent call sites, one warp's lanes on both streams (in
//!   pieces, and in one print call), lines of every shape, records near the log's size, a
//!   locked stdout's pieces;
//! - `stack_buffers.rs`: file I/O from stack buffers ([`stack_io`]), and lanes printing while
//!   their neighbours wait for it ([`print_while_waiting`]);
//! - `launches.rs`: what a launch hands its threads and gets back: every parameter type,
//!   strings and slices, `Out` parameters, dynamic shared memory, 3-D launches;
//! - `scheduling.rs`: threads that go without I/O: idle before they print, computing or
//!   trapping beside the lines printed (invariant 12), spinning for one lock (the probe of
//!   the warp scheduling, [`lockstep_probe`]);
//! - `escapes.rs`: what the sandboxes forbid, attempted ([`file_io_escape_attempts`],
//!   [`escape_attempts`]).

mod escapes;
mod launches;
mod lines;
mod scheduling;
mod stack_buffers;

pub use escapes::*;
pub use launches::*;
pub use lines::*;
pub use scheduling::*;
pub use stack_buffers::*;

use core::fmt;

use gpuio_device::kernel;
use gpuio_device::{global_thread_idx, println};

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
