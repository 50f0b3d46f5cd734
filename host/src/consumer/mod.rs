//! Who consumes the ring: the kernel's SQPOLL thread ([`uring`], restricted by the
//! [`sandbox`]) or, where io_uring cannot be used, a host thread that plays the kernel's
//! part ([`fallback`]); [`submission`] picks one; the `waker` keeps the consumer awake
//! while kernels run.

pub mod fallback;
pub mod sandbox;
pub mod submission;
pub mod uring;
pub(crate) mod waker;
