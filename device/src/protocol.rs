//! The ring protocol: the host runtime's side of the shared memory, which the kernel-facing
//! API (the print macros, [`crate::io`], [`crate::fs`]) is built on and which the host
//! runtime (`gpuio-host`) sets up, drains and inspects. Not for kernels: a kernel uses the
//! crate root.
//!
//! Every file under `device/src/protocol/` is bound by the twelve invariants of
//! docs/PROTOCOL.md (section 4), which also lists who writes and reads each shared word and
//! with which scope and ordering (section 6). Two checks hold the code to them: the loom
//! model (`device/tests/loom/`: every interleaving of the lock-free parts) and
//! `tests/ptx_atomics` (the scope and ordering of every atomic in the PTX that both NVIDIA
//! builds make). A change here states which invariant it relies on.
//!
//! In the order data flows: [`print`] formats, [`stream`] appends to a log and flushes;
//! file I/O goes through the [`arena`] when the buffer is in device memory ([`copy`] moves
//! the bytes), and [`request`] routes each result back to its thread ([`dispatch`] reaps the CQ and hands each completion on); [`ring`] submits and
//! reaps ([`solo`]: a lone request's shorter way; [`combine`]: a warp's requests as one),
//! [`uapi`] is the kernel's ABI, [`context`] the shared state the host fills, [`pool`],
//! [`sync`] and [`group`] are the slots, atomics and lanes, [`running`] counts the threads
//! still running, [`in_place`] marks those formatting a long line in place, and [`wait`]
//! is how every wait is written (the lockstep rule, in [`arch`], which holds everything
//! target-specific).

pub mod arch;
pub mod arena;
pub mod combine;
pub mod context;
pub mod copy;
pub mod dispatch;
pub mod group;
pub mod in_place;
pub mod pool;
pub mod print;
pub mod request;
pub mod ring;
pub mod running;
pub mod solo;
pub mod stream;
pub mod sync;
pub mod uapi;
pub mod wait;
