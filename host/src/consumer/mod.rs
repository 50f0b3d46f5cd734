//! Who consumes the ring: the kernel's SQPOLL thread, on the CPU backend by default the
//! kernel threads themselves (`fallback`'s executor, inline), or the kernel inside the
//! waker's `io_uring_enter` ([`uring`], held to the sandbox's policy by
//! `restrictions`, its paths confined by `landlock`) or, where io_uring cannot be used, a
//! host thread that plays the kernel's part ([`fallback`]); [`submission`] picks one; the
//! `waker` keeps the consumers awake while kernels run (and submits where nothing polls);
//! `affinity` says which CPU each ring's SQPOLL thread runs on; `io_threads` keeps signals
//! off gpuio's own threads and lets these threads in promptly on a CPU crowded with the CPU
//! backend's kernel threads, as `realtime` does for the waker of the rings it enters and
//! its io-wq workers, where the kernel allows.

pub(crate) mod affinity;
pub mod fallback;
pub(crate) mod io_threads;
pub(crate) mod landlock;
pub(crate) mod realtime;
pub(crate) mod restrictions;
pub mod submission;
pub mod uring;
pub(crate) mod waker;
