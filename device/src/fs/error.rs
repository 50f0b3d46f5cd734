//! What a file call returns when it fails: an [`Error`] with the bytes done, or a
//! [`PathError`] naming the path asked for.

use crate::io::Errno;

/// A failed `write_all_at` or `read_exact_at`: what went wrong, and how many bytes were
/// transferred before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The kernel failed a request (or an `open`, with `done == 0`).
    Os {
        /// What the kernel returned.
        errno: Errno,
        /// Bytes transferred before the failed request.
        done: usize,
    },
    /// End of file after `done` bytes, before the buffer was full.
    UnexpectedEof {
        /// Bytes read before the end of file.
        done: usize,
    },
    /// A write made no progress after `done` bytes.
    WriteZero {
        /// Bytes written before the write that wrote nothing.
        done: usize,
    },
    /// A value's `Display` or `Debug` failed while `write!` formatted it (what was formatted
    /// before it was written).
    Format,
}

impl Error {
    /// Bytes transferred before the error.
    pub fn done(&self) -> usize {
        match *self {
            Error::Os { done, .. } | Error::UnexpectedEof { done } | Error::WriteZero { done } => done,
            Error::Format => 0,
        }
    }

    /// The errno, for [`Error::Os`].
    pub fn errno(&self) -> Option<Errno> {
        match *self {
            Error::Os { errno, .. } => Some(errno),
            _ => None,
        }
    }
}

impl From<Errno> for Error {
    fn from(errno: Errno) -> Error {
        Error::Os { errno, done: 0 }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Os { errno, done: 0 } => write!(f, "{errno}"),
            Error::Os { errno, done } => write!(f, "{errno} after {done} bytes"),
            Error::UnexpectedEof { done } => write!(f, "end of file after {done} bytes"),
            Error::WriteZero { done } => write!(f, "write made no progress after {done} bytes"),
            Error::Format => write!(f, "a value's Display or Debug implementation failed"),
        }
    }
}

impl core::error::Error for Error {}

/// Why a call that names a path failed ([`File::open`](super::File::open),
/// [`File::create`](super::File::create), [`OpenOptions::open`](super::OpenOptions::open),
/// [`remove_file`](super::remove_file), [`remove_dir`](super::remove_dir),
/// [`create_dir`](super::create_dir), [`create_dir_all`](super::create_dir_all),
/// [`rename`](super::rename)):
/// the kernel's answer and the path asked for. Displayed (and debug-printed, as by `unwrap`) as std's
/// error with the path: `No such file or directory (os error 2): "data/in.bin"` (a path
/// over [`PathError::SHOWN`] bytes is cut, with `...`). `?` turns it into an [`Errno`] or an
/// [`Error`] where a function returns those.
///
/// ```
/// use gpuio_device::fs::File;
/// // Outside a kernel there is no runtime to ask: ENOSYS.
/// let e = File::open("data/in.bin").unwrap_err();
/// assert_eq!(e.path, "data/in.bin");
/// assert!(e.to_string().ends_with(": \"data/in.bin\""));
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PathError<'p> {
    /// What the kernel returned (or what the path was refused with before it was sent:
    /// `EINVAL` for a NUL inside it, `ENAMETOOLONG` past `PATH_MAX`).
    pub errno: Errno,
    /// The path, as given.
    pub path: &'p str,
}

impl PathError<'_> {
    /// The most bytes of the path its `Display` shows.
    pub const SHOWN: usize = 200;
}

impl core::fmt::Display for PathError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut end = self.path.len().min(Self::SHOWN);
        while !self.path.is_char_boundary(end) {
            end -= 1;
        }
        let more = if end < self.path.len() { "..." } else { "" };
        write!(f, "{}: {:?}{more}", self.errno, &self.path[..end])
    }
}

impl core::fmt::Debug for PathError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

impl core::error::Error for PathError<'_> {}

impl From<PathError<'_>> for Errno {
    fn from(e: PathError<'_>) -> Errno {
        e.errno
    }
}

impl From<PathError<'_>> for Error {
    fn from(e: PathError<'_>) -> Error {
        Error::Os {
            errno: e.errno,
            done: 0,
        }
    }
}
