//! Files from device code: [`File`], opened with [`OpenOptions`] (like std's), closed when
//! dropped.
//!
//! ```
//! use gpuio_device::fs::{File, OpenOptions};
//! // In a kernel launched by a gpuio runtime whose sandbox allows file I/O.
//! fn kernel() -> Result<(), gpuio_device::fs::Error> {
//!     let f = OpenOptions::new().read(true).write(true).create(true).open("/tmp/gpuio-doc")?;
//!     f.write_all_at(b"0123456789", 0)?;
//!     let mut back = [0u8; 4];
//!     f.read_exact_at(&mut back, 3)?;
//!     assert_eq!(&back, b"3456");
//!     f.sync_all()?;
//!     Ok(()) // dropping `f` closes it
//! }
//! # assert!(kernel().is_err()); // outside a kernel there is no runtime: ENOSYS
//! ```

use crate::io::{self, Errno};

// `open(2)` flags (Linux; the same values on x86-64 and arm64).
/// `O_RDONLY`: open for reading only.
pub const O_RDONLY: i32 = 0;
/// `O_WRONLY`: open for writing only.
pub const O_WRONLY: i32 = 1;
/// `O_RDWR`: open for reading and writing.
pub const O_RDWR: i32 = 2;
/// `O_CREAT`: create the file if it does not exist.
pub const O_CREAT: i32 = 0o100;
/// `O_EXCL`: with `O_CREAT`, fail with `EEXIST` if the file exists.
pub const O_EXCL: i32 = 0o200;
/// `O_TRUNC`: truncate an existing regular file to 0 bytes.
pub const O_TRUNC: i32 = 0o1000;
/// `O_APPEND`: every write goes to the end of the file.
pub const O_APPEND: i32 = 0o2000;
/// `O_CLOEXEC`: close the descriptor on `execve(2)`.
pub const O_CLOEXEC: i32 = 0o2000000;

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
}

impl Error {
    /// Bytes transferred before the error.
    pub fn done(&self) -> usize {
        match *self {
            Error::Os { done, .. } | Error::UnexpectedEof { done } | Error::WriteZero { done } => done,
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
            Error::Os { errno, done } => write!(f, "{errno} after {done} bytes"),
            Error::UnexpectedEof { done } => write!(f, "end of file after {done} bytes"),
            Error::WriteZero { done } => write!(f, "write made no progress after {done} bytes"),
        }
    }
}

impl core::error::Error for Error {}

/// An open file; closed when dropped (errors on that close are ignored: use
/// [`File::close`] to see them).
#[derive(Debug)]
pub struct File {
    fd: i32,
}

impl File {
    /// Opens `path` read-only.
    pub fn open(path: &str) -> Result<File, Errno> {
        OpenOptions::new().read(true).open(path)
    }

    /// Opens `path` write-only, creating it (mode 0o666, less the host's umask) or
    /// truncating it.
    pub fn create(path: &str) -> Result<File, Errno> {
        OpenOptions::new().write(true).create(true).truncate(true).open(path)
    }

    /// A builder for other ways of opening.
    pub fn options() -> OpenOptions {
        OpenOptions::new()
    }

    /// Takes ownership of `fd`.
    ///
    /// # Safety
    /// `fd` is an open file descriptor that nothing else closes.
    pub unsafe fn from_raw_fd(fd: i32) -> File {
        File { fd }
    }

    /// The file descriptor.
    pub fn as_raw_fd(&self) -> i32 {
        self.fd
    }

    /// Gives up ownership: the descriptor stays open.
    pub fn into_raw_fd(self) -> i32 {
        let fd = self.fd;
        core::mem::forget(self);
        fd
    }

    /// Reads at `offset`; returns the bytes read (0 at end of file). See [`io::pread`].
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
        io::pread(self.fd, buf, offset)
    }

    /// Writes at `offset`; returns the bytes written. See [`io::pwrite`].
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize, Errno> {
        io::pwrite(self.fd, buf, offset)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, retrying short reads.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), Error> {
        let mut done = 0;
        while done < buf.len() {
            match io::pread(self.fd, &mut buf[done..], offset + done as u64) {
                Ok(0) => return Err(Error::UnexpectedEof { done }),
                Ok(n) => done += n,
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
                Err(errno) => return Err(Error::Os { errno, done }),
            }
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset`, retrying short writes.
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<(), Error> {
        let mut done = 0;
        while done < buf.len() {
            match io::pwrite(self.fd, &buf[done..], offset + done as u64) {
                Ok(0) => return Err(Error::WriteZero { done }),
                Ok(n) => done += n,
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
                Err(errno) => return Err(Error::Os { errno, done }),
            }
        }
        Ok(())
    }

    /// Flushes data and metadata to storage.
    pub fn sync_all(&self) -> Result<(), Errno> {
        io::fsync(self.fd)
    }

    /// Flushes data to storage.
    pub fn sync_data(&self) -> Result<(), Errno> {
        io::fdatasync(self.fd)
    }

    /// Closes the file, reporting the close's error.
    pub fn close(self) -> Result<(), Errno> {
        io::close(self.into_raw_fd())
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = io::close(self.fd);
    }
}

/// How to open a file, like std's `OpenOptions`.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
    custom_flags: i32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// Nothing set (opening fails with `EINVAL` until `read`, `write` or `append` is).
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o666,
            custom_flags: 0,
        }
    }
    /// Open for reading.
    pub fn read(&mut self, on: bool) -> &mut Self {
        self.read = on;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.write = on;
        self
    }
    /// Open for appending (`O_APPEND`; positional writes still go to the end on Linux).
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.append = on;
        self
    }
    /// Truncate to 0 bytes (needs write).
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.truncate = on;
        self
    }
    /// Create if missing (needs write or append).
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.create = on;
        self
    }
    /// Create, failing with `EEXIST` if it exists (needs write or append).
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.create_new = on;
        self
    }
    /// Permission bits for a created file (default 0o666, less the host's umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }
    /// Extra `open(2)` flags, or-ed in (the access mode bits are ignored).
    pub fn custom_flags(&mut self, flags: i32) -> &mut Self {
        self.custom_flags = flags;
        self
    }

    /// The `open(2)` flags these options give, or `EINVAL` for a combination std refuses
    /// too (nothing to read or write; create or truncate without write access).
    ///
    /// ```
    /// use gpuio_device::fs::{OpenOptions, O_APPEND, O_CLOEXEC, O_CREAT, O_WRONLY};
    /// use gpuio_device::io::Errno;
    /// let flags = OpenOptions::new().append(true).create(true).flags();
    /// assert_eq!(flags, Ok(O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC));
    /// // Nothing to read or write.
    /// assert_eq!(OpenOptions::new().flags(), Err(Errno::EINVAL));
    /// ```
    pub fn flags(&self) -> Result<i32, Errno> {
        let access = match (self.read, self.write || self.append) {
            (true, false) => O_RDONLY,
            (false, true) => O_WRONLY,
            (true, true) => O_RDWR,
            (false, false) => return Err(Errno::EINVAL),
        };
        let writable = self.write || self.append;
        if (self.truncate || self.create || self.create_new) && !writable {
            return Err(Errno::EINVAL);
        }
        if self.truncate && self.append {
            return Err(Errno::EINVAL);
        }
        let mut flags = access | O_CLOEXEC | (self.custom_flags & !3);
        if self.append {
            flags |= O_APPEND;
        }
        if self.truncate {
            flags |= O_TRUNC;
        }
        if self.create_new {
            flags |= O_CREAT | O_EXCL;
        } else if self.create {
            flags |= O_CREAT;
        }
        Ok(flags)
    }

    /// Opens `path` with these options.
    pub fn open(&self, path: &str) -> Result<File, Errno> {
        let fd = io::open(path, self.flags()?, self.mode)?;
        Ok(File { fd })
    }
}
