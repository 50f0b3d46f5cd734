//! The no_std ecosystem's io traits (`embedded-io`'s, re-exported as
//! [`crate::io::Read`], [`crate::io::Write`], [`crate::io::Seek`] and
//! [`crate::io::ErrorType`]) on device files and the runtime's stdout and stderr, so that
//! code generic over a writer or a reader takes them.
//!
//! Each type keeps its inherent methods, std's names and results (`File::write_all`
//! returning [`fs::Error`], `Stdout::write_fmt` a `fmt::Result`): with a trait in scope a
//! method call still finds those first, and `write!` works as before.
//!
//! ```
//! use gpuio_device::io::{self, Write};
//!
//! /// Generic over any writer: a device file, stdout, stderr or their locks.
//! fn report<W: Write>(w: &mut W, t: u64) -> Result<(), W::Error> {
//!     w.write_all(b"thread ")?;
//!     let mut digits = [0u8; 20];
//!     let mut at = digits.len();
//!     let mut n = t;
//!     loop {
//!         at -= 1;
//!         digits[at] = b'0' + (n % 10) as u8;
//!         n /= 10;
//!         if n == 0 {
//!             break;
//!         }
//!     }
//!     w.write_all(&digits[at..])?;
//!     w.write_all(b" done\n")
//! }
//!
//! // In a kernel; outside one, on the host's stdout.
//! report(&mut io::stdout().lock(), 7).unwrap(); // `thread 7 done`, one line
//! ```

use core::convert::Infallible;
use core::fmt;

use embedded_io::{ErrorKind, ErrorType, Read, Seek, Write};

use crate::errno::Errno;
use crate::fs::{self, File};
use crate::stdio::{Stderr, StderrLock, Stdout, StdoutLock};

impl embedded_io::Error for Errno {
    /// The kind std's `io::Error` gives the same errno.
    fn kind(&self) -> ErrorKind {
        match self.0 {
            1 | 13 => ErrorKind::PermissionDenied, // EPERM, EACCES
            2 => ErrorKind::NotFound,              // ENOENT
            4 => ErrorKind::Interrupted,           // EINTR
            12 => ErrorKind::OutOfMemory,          // ENOMEM
            17 => ErrorKind::AlreadyExists,        // EEXIST
            22 => ErrorKind::InvalidInput,         // EINVAL
            32 => ErrorKind::BrokenPipe,           // EPIPE
            38 | 95 => ErrorKind::Unsupported,     // ENOSYS, EOPNOTSUPP
            98 => ErrorKind::AddrInUse,            // EADDRINUSE
            99 => ErrorKind::AddrNotAvailable,     // EADDRNOTAVAIL
            103 => ErrorKind::ConnectionAborted,   // ECONNABORTED
            104 => ErrorKind::ConnectionReset,     // ECONNRESET
            107 => ErrorKind::NotConnected,        // ENOTCONN
            110 => ErrorKind::TimedOut,            // ETIMEDOUT
            111 => ErrorKind::ConnectionRefused,   // ECONNREFUSED
            _ => ErrorKind::Other,
        }
    }
}

/// A file's errors are its requests' errnos.
impl ErrorType for File {
    type Error = Errno;
}

/// Reads at the cursor ([`File::read`]).
impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        File::read(self, buf)
    }
}

/// Writes at the cursor ([`File::write`]); `flush` has nothing to do (a `File` holds no
/// buffer).
impl Write for File {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Errno> {
        File::write(self, buf)
    }

    fn flush(&mut self) -> Result<(), Errno> {
        Ok(())
    }
}

/// Moves the cursor ([`File::seek`]: `SeekFrom::End` is `EOPNOTSUPP`).
impl Seek for File {
    fn seek(&mut self, pos: fs::SeekFrom) -> Result<u64, Errno> {
        File::seek(self, pos)
    }
}

/// The given bytes as text: UTF-8 as it is, any other byte sequence as U+FFFD, as
/// `String::from_utf8_lossy` shows it (prints are text).
struct Lossy<'a>(&'a [u8]);

impl fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{FFFD}")?;
            }
        }
        Ok(())
    }
}

/// The io traits on the runtime's stdout and stderr handles and their locks: a print does
/// not fail (what the host could not write, `synchronize` reports), so their error type is
/// `Infallible`. `write` prints all of `buf` as text (bytes that are not UTF-8 as U+FFFD):
/// at once on a handle, one record; on a lock, into its line.
macro_rules! text_writer {
    ($($ty:ty),*) => {
        $(
            impl ErrorType for $ty {
                type Error = Infallible;
            }

            impl Write for $ty {
                fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
                    // A handle's and a lock's `write_fmt` never fail: their `fmt::Result` is
                    // that of `Lossy`, whose writes are the handle's own.
                    let _ = <$ty>::write_fmt(self, format_args!("{}", Lossy(buf)));
                    Ok(buf.len())
                }

                fn flush(&mut self) -> Result<(), Infallible> {
                    let _ = <$ty>::flush(self);
                    Ok(())
                }
            }
        )*
    };
}

text_writer!(Stdout, Stderr, StdoutLock, StderrLock);

/// `fs::Error`'s kind: its errno's, or what std gives the others.
impl embedded_io::Error for fs::Error {
    fn kind(&self) -> ErrorKind {
        match self {
            fs::Error::Os { errno, .. } => embedded_io::Error::kind(errno),
            fs::Error::WriteZero { .. } => ErrorKind::WriteZero,
            fs::Error::UnexpectedEof { .. } | fs::Error::Format => ErrorKind::Other,
        }
    }
}
