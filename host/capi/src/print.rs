//! `gpuio_print` / `gpuio_eprint`: C kernels on the CPU backend print through the same
//! device protocol code as Rust kernels.
//!
//! The CPU backend installs the runtime's device context in each kernel thread's
//! thread-local (`gpuio_device::protocol::context::enter`); printing finds it there, so C needs
//! no handle. Bytes that are UTF-8 (nearly always) take `println!`'s own path,
//! `gpuio_device::protocol::print::emit`. Other bytes are written with the stream calls that `emit`
//! makes for a long line (reserve, fill, flush): one contiguous record either way.

use gpuio_device::protocol::arch::Warp;
use gpuio_device::protocol::print::emit;

use crate::status::gpuio_status::GPUIO_ERROR_WRONG_CONTEXT;
use crate::status::Failure;

/// Prints `bytes` to the runtime's stdout (or stderr) from a CPU kernel thread.
pub(crate) fn print(stderr: bool, bytes: &[u8]) -> Result<(), Failure> {
    let ctx = gpuio_device::protocol::context::current();
    if ctx.is_null() {
        let f = if stderr { "gpuio_eprint" } else { "gpuio_print" };
        return Err(Failure::new(
            GPUIO_ERROR_WRONG_CONTEXT,
            format!(
                "{f} was called outside a kernel: it prints from the threads of gpuio_cpu_launch \
                 (use the C library's own output elsewhere)"
            ),
        ));
    }
    // SAFETY: a non-null context was installed on this thread by the CPU backend, for the
    // kernel this thread runs; the runtime keeps it alive until that thread has finished
    // (synchronize joins it before anything is freed).
    let ctx = unsafe { &*ctx };
    let stream = ctx.stream(stderr);
    match std::str::from_utf8(bytes) {
        Ok(text) => emit(&Warp::default(), ctx, stream, false, format_args!("{text}")),
        Err(_) => {
            let pos = stream.reserve(bytes.len() as u64);
            let (ring, reap) = ctx.print_out();
            stream.fill(pos, bytes, ring, reap);
            stream.flush(ring, reap);
        }
    }
    Ok(())
}
