//! The no_std ecosystem's io traits (`embedded-io`'s, re-exported as
//! [`crate::io::Read`], [`crate::io::Write`], [`crate::io::Seek`] and
//! [`crate::io::ErrorType`]) on device files, their `BufWriter`, and the runtime's stdout
//! and stderr, so that code generic over a writer or a reader takes them.
//!
//! Each type keeps its inherent methods, std's names and results (`File::write_all`
//! returning [`fs::Error`], `Stdout::write_fmt` and `BufWriter::write_fmt` a
//! `fmt::Result`): with a trait in scope a method call still finds those first, and
//! `write!` works as before, with `core::fmt::Write` in scope too.
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

use embedded_io::{ErrorKind, ErrorType, Read, ReadExactError, Seek, Write, WriteFmtError};

use crate::errno::Errno;
use crate::fs::{self, BufWriter, File};
use crate::stdio::{Stderr, StderrLock, Stdout, StdoutLock};

impl embedded_io::Error for Errno {
    /// The kind std's `io::Error` gives the same errno (and `Unsupported` for `EOPNOTSUPP`).
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

/// A file's errors are [`fs::Error`]'s: an errno, or how a whole transfer fell short, with
/// the bytes done.
impl ErrorType for File {
    type Error = fs::Error;
}

/// Reads at the cursor ([`File::read`]); `read_exact` is the file's own, which retries
/// short reads.
impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, fs::Error> {
        Ok(File::read(self, buf)?)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), ReadExactError<fs::Error>> {
        File::read_exact(self, buf).map_err(|e| match e {
            fs::Error::UnexpectedEof { .. } => ReadExactError::UnexpectedEof,
            e => ReadExactError::Other(e),
        })
    }
}

/// Writes at the cursor ([`File::write`]); `write_all` and `write_fmt` are the file's own
/// (retrying short and interrupted writes; a `write!` one request per 256 bytes, not one
/// per piece); `flush` has nothing to do (a `File` holds no buffer).
impl Write for File {
    fn write(&mut self, buf: &[u8]) -> Result<usize, fs::Error> {
        Ok(File::write(self, buf)?)
    }

    fn flush(&mut self) -> Result<(), fs::Error> {
        Ok(())
    }

    fn write_all(&mut self, buf: &[u8]) -> Result<(), fs::Error> {
        File::write_all(self, buf)
    }

    fn write_fmt(&mut self, args: fmt::Arguments<'_>) -> Result<(), WriteFmtError<fs::Error>> {
        File::write_fmt(self, args).map_err(|e| match e {
            fs::Error::Format => WriteFmtError::FmtError,
            e => WriteFmtError::Other(e),
        })
    }
}

/// A buffered writer's errors are its file's.
impl<const N: usize> ErrorType for BufWriter<'_, N> {
    type Error = fs::Error;
}

/// Gathers into the buffer ([`BufWriter::write_all`]): `write` takes the whole of `buf`, or
/// returns the first error a write out of the buffer met (the one `flush` returns); `flush`
/// writes the buffer out at the file's cursor.
impl<const N: usize> Write for BufWriter<'_, N> {
    fn write(&mut self, buf: &[u8]) -> Result<usize, fs::Error> {
        BufWriter::write_all(self, buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), fs::Error> {
        BufWriter::flush(self)
    }

    fn write_all(&mut self, buf: &[u8]) -> Result<(), fs::Error> {
        BufWriter::write_all(self, buf)
    }
}

/// Moves the cursor ([`File::seek`]; `SeekFrom::End` asks [`File::len`]).
impl Seek for File {
    fn seek(&mut self, pos: fs::SeekFrom) -> Result<u64, fs::Error> {
        Ok(File::seek(self, pos)?)
    }
}

/// The given bytes as text: UTF-8 as it is, any other byte sequence as U+FFFD, as
/// `String::from_utf8_lossy` shows it (prints are text).
pub(crate) struct Lossy<'a>(pub(crate) &'a [u8]);

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
/// at once on a handle, one record; on a lock, into its line. Each `write` is text on its
/// own: a character whose bytes two `write`s split prints as U+FFFD twice, so write whole
/// text (`write_all` of a whole buffer, `write!`).
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

                /// The handle's own `write_fmt`: the whole text one print (a line stays
                /// whole), not one per piece.
                fn write_fmt(&mut self, args: fmt::Arguments<'_>) -> Result<(), WriteFmtError<Infallible>> {
                    <$ty>::write_fmt(self, args).map_err(|_| WriteFmtError::FmtError)
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
