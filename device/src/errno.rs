//! Error numbers: the kernel's `errno` values a device call returns, with their names.
//!
//! A leaf, so that the protocol's modules (the reaper's dispatch in `context`, a stream's
//! failed writes) name errnos without importing the file API in [`crate::io`], which
//! re-exports [`Errno`].

/// An error number from the kernel (`errno`), as a device call returns it.
///
/// Displayed as std displays an OS error, with the description where
/// [`Errno::description`] knows it; `Debug` adds the symbolic name:
///
/// ```
/// use gpuio_device::io::Errno;
/// assert_eq!(Errno(2), Errno::ENOENT);
/// assert_eq!(Errno::ENOENT.name(), Some("ENOENT"));
/// assert_eq!(Errno::ENOENT.to_string(), "No such file or directory (os error 2)");
/// assert_eq!(format!("{:?}", Errno::ENOENT), "ENOENT: No such file or directory (os error 2)");
/// assert_eq!(Errno(1000).to_string(), "os error 1000");
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
    /// Not a directory.
    pub const ENOTDIR: Errno = Errno(20);
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

    /// What the error means, as `strerror(3)` says it, for the common ones.
    pub fn description(self) -> Option<&'static str> {
        Some(match self {
            Errno::EPERM => "Operation not permitted",
            Errno::ENOENT => "No such file or directory",
            Errno::EINTR => "Interrupted system call",
            Errno::EIO => "Input/output error",
            Errno::EBADF => "Bad file descriptor",
            Errno::EAGAIN => "Resource temporarily unavailable",
            Errno::EACCES => "Permission denied",
            Errno::EFAULT => "Bad address",
            Errno::EEXIST => "File exists",
            Errno::ENOTDIR => "Not a directory",
            Errno::EISDIR => "Is a directory",
            Errno::EINVAL => "Invalid argument",
            Errno::EFBIG => "File too large",
            Errno::ENOSPC => "No space left on device",
            Errno::EPIPE => "Broken pipe",
            Errno::ENAMETOOLONG => "File name too long",
            Errno::ENOSYS => "Function not implemented",
            Errno::EOVERFLOW => "Value too large for defined data type",
            Errno::EOPNOTSUPP => "Operation not supported",
            _ => return None,
        })
    }

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
            Errno::ENOTDIR => "ENOTDIR",
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
        match self.description() {
            Some(d) => write!(f, "{d} (os error {})", self.0),
            None => write!(f, "os error {}", self.0),
        }
    }
}

impl core::fmt::Debug for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if let Some(n) = self.name() {
            write!(f, "{n}: ")?;
        }
        core::fmt::Display::fmt(self, f)
    }
}

impl core::error::Error for Errno {}
