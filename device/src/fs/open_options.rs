//! How to open a file, as std's `OpenOptions`.

use super::{File, PathError, O_APPEND, O_CLOEXEC, O_CREAT, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
use crate::io::{self, Errno};

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
    pub fn open<'p>(&self, path: &'p str) -> Result<File, PathError<'p>> {
        let fd = self
            .flags()
            .and_then(|flags| io::open(path, flags, self.mode))
            .map_err(|errno| PathError { errno, path })?;
        // SAFETY: `fd` was just opened, for this `File` alone.
        Ok(unsafe { File::from_raw_fd(fd) })
    }
}
