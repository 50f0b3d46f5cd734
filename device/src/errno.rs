//! Error numbers: the kernel's `errno` values a device call returns, with their names.
//!
//! A leaf, so that the protocol's modules (the reaper's dispatch in `context`, a stream's
//! failed writes) name errnos without importing the file API in [`crate::io`], which
//! re-exports [`Errno`].

/// An error number from the kernel (`errno`), as a device call returns it.
///
/// Displayed with its symbolic name where [`Errno::name`] knows it:
///
/// ```
/// use gpuio_device::io::Errno;
/// assert_eq!(Errno(2), Errno::ENOENT);
/// assert_eq!(Errno::ENOENT.name(), Some("ENOENT"));
/// assert_eq!(Errno::ENOENT.to_string(), "ENOENT (errno 2)");
/// assert_eq!(Errno(1000).to_string(), "errno 1000");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// Operation not permitted.
    pub const EPERM: Errno = Errno(1);
    /// No such file or directory.
    pub const ENOENT: Errno = Errno(2);
    /// Interrupted system call.
    pub const EINTR: Errno = Errno(4);
    /// Input/output error.
    pub const EIO: Errno = Errno(5);
    /// Bad file descriptor.
    pub const EBADF: Errno = Errno(9);
    /// Resource temporarily unavailable.
    pub const EAGAIN: Errno = Errno(11);
    /// Permission denied (also: the io_uring sandbox refused the request).
    pub const EACCES: Errno = Errno(13);
    /// Bad address.
    pub const EFAULT: Errno = Errno(14);
    /// File exists.
    pub const EEXIST: Errno = Errno(17);
    /// Is a directory.
    pub const EISDIR: Errno = Errno(21);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(22);
    /// File too large.
    pub const EFBIG: Errno = Errno(27);
    /// No space left on device.
    pub const ENOSPC: Errno = Errno(28);
    /// Broken pipe.
    pub const EPIPE: Errno = Errno(32);
    /// File name too long.
    pub const ENAMETOOLONG: Errno = Errno(36);
    /// Function not implemented; also: called outside a kernel launched by a gpuio runtime
    /// (no context).
    pub const ENOSYS: Errno = Errno(38);
    /// Value too large for defined data type.
    pub const EOVERFLOW: Errno = Errno(75);
    /// Operation not supported.
    pub const EOPNOTSUPP: Errno = Errno(95);

    /// The symbolic name, for the common ones.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Errno::EPERM => "EPERM",
            Errno::ENOENT => "ENOENT",
            Errno::EINTR => "EINTR",
            Errno::EIO => "EIO",
            Errno::EBADF => "EBADF",
            Errno::EAGAIN => "EAGAIN",
            Errno::EACCES => "EACCES",
            Errno::EFAULT => "EFAULT",
            Errno::EEXIST => "EEXIST",
            Errno::EISDIR => "EISDIR",
            Errno::EINVAL => "EINVAL",
            Errno::EFBIG => "EFBIG",
            Errno::ENOSPC => "ENOSPC",
            Errno::EPIPE => "EPIPE",
            Errno::ENAMETOOLONG => "ENAMETOOLONG",
            Errno::ENOSYS => "ENOSYS",
            Errno::EOVERFLOW => "EOVERFLOW",
            Errno::EOPNOTSUPP => "EOPNOTSUPP",
            _ => return None,
        })
    }
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} (errno {})", self.0),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl core::fmt::Debug for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}
