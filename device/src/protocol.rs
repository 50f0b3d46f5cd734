//! The host runtime's side of the shared memory: the ring protocol that the kernel-facing
//! API (the print macros, [`crate::io`], [`crate::fs`]) is built on, and that the host
//! runtime (`gpuio-host`) sets up, drains and inspects. Not for kernels: a kernel uses the
//! crate root.
//!
//! In the order data flows: [`print`] formats, [`stream`] appends to a log and flushes;
//! file I/O goes through the [`arena`] when the buffer is in device memory ([`copy`] moves
//! the bytes), and [`request`] routes each result back to its thread; [`ring`] submits and
//! reaps ([`solo`]: a lone request's shorter way; [`combine`]: a warp's requests as one),
//! [`uapi`] is the kernel's ABI, [`context`] the shared state the host fills, [`pool`],
//! [`sync`] and [`group`] are the slots, atomics and lanes, [`running`] counts the threads
//! still running, and [`wait`] is how every wait is written (the lockstep rule, in
//! [`arch`], which holds everything target-specific). The files stay beside the crate root
//! (`device/src/ring.rs`, `device/src/arch/`, ...), where docs/PROTOCOL.md names them.

#[path = "arch/mod.rs"]
pub mod arch;
#[path = "arena.rs"]
pub mod arena;
#[path = "combine.rs"]
pub mod combine;
#[path = "context.rs"]
pub mod context;
#[path = "copy.rs"]
pub mod copy;
#[path = "group.rs"]
pub mod group;
#[path = "pool.rs"]
pub mod pool;
#[path = "print.rs"]
pub mod print;
#[path = "request.rs"]
pub mod request;
#[path = "ring.rs"]
pub mod ring;
#[path = "running.rs"]
pub mod running;
#[path = "solo.rs"]
pub mod solo;
#[path = "stream.rs"]
pub mod stream;
#[path = "sync.rs"]
pub mod sync;
#[path = "uapi.rs"]
pub mod uapi;
#[path = "wait.rs"]
pub mod wait;
