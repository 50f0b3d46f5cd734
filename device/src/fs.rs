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

/// Why a call that names a path failed ([`File::open`], [`File::create`],
/// [`OpenOptions::open`], [`remove_file`], [`remove_dir`], [`create_dir`], [`create_dir_all`],
/// [`rename`]):
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

/// Removes the file `path`, as std's `fs::remove_file` (a directory: `EISDIR`).
///
/// ```no_run
/// use gpuio_device::fs;
/// fs::create_dir("out")?;
/// fs::File::create("out/part.tmp")?.write_all(b"done")?;
/// fs::rename("out/part.tmp", "out/part")?;
/// fs::remove_file("out/part")?;
/// fs::remove_dir("out")?;
/// # Ok::<(), gpuio_device::fs::Error>(())
/// ```
pub fn remove_file(path: &str) -> Result<(), PathError<'_>> {
    io::remove_file(path).map_err(|errno| PathError { errno, path })
}

/// Removes the empty directory `path`, as std's `fs::remove_dir`.
pub fn remove_dir(path: &str) -> Result<(), PathError<'_>> {
    io::remove_dir(path).map_err(|errno| PathError { errno, path })
}

/// Creates the directory `path` (mode 0o777 less the host's umask), as std's
/// `fs::create_dir`; its parent must exist.
pub fn create_dir(path: &str) -> Result<(), PathError<'_>> {
    io::create_dir(path, 0o777).map_err(|errno| PathError { errno, path })
}

/// Creates the directory `path` and every missing parent (mode 0o777 less the host's
/// umask), as std's `fs::create_dir_all`: `Ok` where `path` is already a directory, also
/// where other threads create the same directories at the same time.
///
/// It asks for `path` first and walks back one parent per `ENOENT`, then forward: a
/// directory whose parent exists costs one request; each missing parent two more. Where
/// `path` exists it asks whether it is a directory by opening it for reading (three more
/// requests; a directory you may not read answers `EACCES`); a file there is `EEXIST`.
///
/// ```no_run
/// use gpuio_device::fs;
/// fs::create_dir_all("out/run-1/parts")?;
/// fs::File::create("out/run-1/parts/0")?.write_all(b"done")?;
/// # Ok::<(), gpuio_device::fs::PathError>(())
/// ```
pub fn create_dir_all(path: &str) -> Result<(), PathError<'_>> {
    let fail = |errno| PathError { errno, path };
    // Trailing slashes name the same directory; "" and "/" are there already.
    let whole = path.trim_end_matches('/');
    if whole.is_empty() {
        return Ok(());
    }
    // Back: the deepest prefix that mkdir makes or finds (ENOENT: its parent is missing).
    let mut made = whole.len();
    loop {
        match io::create_dir(&whole[..made], 0o777) {
            Ok(()) => break,
            // Found: a directory (or, if not, the next mkdir says ENOTDIR).
            Err(Errno::EEXIST) if made < whole.len() => break,
            Err(Errno::EEXIST) => {
                return if is_dir(whole)? {
                    Ok(())
                } else {
                    Err(fail(Errno::EEXIST))
                }
            }
            Err(Errno::ENOENT) => match parent_end(&whole[..made]) {
                Some(end) => made = end,
                None => return Err(fail(Errno::ENOENT)),
            },
            Err(errno) => return Err(fail(errno)),
        }
    }
    // Forward: each component after it, in turn.
    while made < whole.len() {
        let rest = &whole[made..];
        let start = made + (rest.len() - rest.trim_start_matches('/').len());
        let next = whole[start..].find('/').map_or(whole.len(), |i| start + i);
        match io::create_dir(&whole[..next], 0o777) {
            Ok(()) => {}
            // Another thread made it meanwhile.
            Err(Errno::EEXIST) if next < whole.len() => {}
            Err(Errno::EEXIST) => {
                return if is_dir(whole)? {
                    Ok(())
                } else {
                    Err(fail(Errno::EEXIST))
                }
            }
            Err(errno) => return Err(fail(errno)),
        }
        made = next;
    }
    Ok(())
}

/// Where the parent of `path` (no trailing slash) ends, without the slashes before the last
/// component; `None` where it has none to make (a single component, or one under `/`).
fn parent_end(path: &str) -> Option<usize> {
    let end = path.rfind('/')?;
    let end = path[..end].trim_end_matches('/').len();
    (end > 0).then_some(end)
}

/// Whether `path`, which exists, is a directory: it opens for reading, and `.` opens in it
/// (`ENOTDIR` for anything else). No `O_DIRECTORY`: its value differs between the hosts'
/// architectures (x86-64, arm64), which device code does not know.
fn is_dir(path: &str) -> Result<bool, PathError<'_>> {
    let fd = io::open(path, O_RDONLY | O_CLOEXEC, 0).map_err(|errno| PathError { errno, path })?;
    let inner = io::open_at(fd, ".", O_RDONLY | O_CLOEXEC, 0);
    let _ = io::close(fd);
    match inner {
        Ok(dot) => {
            let _ = io::close(dot);
            Ok(true)
        }
        Err(Errno::ENOTDIR) => Ok(false),
        Err(errno) => Err(PathError { errno, path }),
    }
}

/// Renames `from` to `to`, replacing `to` if it is a file, as std's `fs::rename`. The error
/// names `from`.
pub fn rename<'p>(from: &'p str, to: &str) -> Result<(), PathError<'p>> {
    io::rename(from, to).map_err(|errno| PathError { errno, path: from })
}

/// An open file; closed when dropped (errors on that close are ignored: use
/// [`File::close`] to see them).
///
/// Two ways to address it: positional calls (`read_at`, `write_all_at`, ...: any thread,
/// any offset, `&self`), and std's cursor (`read`, `write_all`, `seek`, `write!`:
/// `&mut self`), which this `File` keeps itself, starting at 0 (on a file opened with
/// `append`, Linux puts every write at the end whatever the cursor says).
///
/// ```no_run
/// use gpuio_device::fs::{File, SeekFrom};
/// let mut f = File::create("out.txt")?;
/// writeln!(f, "x = {}", 42)?;            // one request per 256 formatted bytes
/// f.write_all(b"raw bytes\n")?;
/// f.seek(SeekFrom::Start(0))?;
/// # Ok::<(), gpuio_device::fs::Error>(())
/// ```
#[derive(Debug)]
pub struct File {
    fd: i32,
    /// The cursor of `read`, `write` and `seek`.
    pos: u64,
}

/// Where [`File::seek`] moves the cursor to, as std's `SeekFrom`: `embedded-io`'s, which
/// the [`Seek`](crate::io::Seek) trait takes too. `SeekFrom::End` asks the file's length
/// ([`File::len`]).
pub use embedded_io::SeekFrom;

/// Bytes [`File::write_fmt`] formats before it writes them: a `write!` of a longer text
/// takes one request per this many bytes.
pub const FORMAT_CHUNK: usize = 256;

impl File {
    /// Opens `path` read-only.
    pub fn open(path: &str) -> Result<File, PathError<'_>> {
        OpenOptions::new().read(true).open(path)
    }

    /// Opens `path` write-only, creating it (mode 0o666, less the host's umask) or
    /// truncating it.
    pub fn create(path: &str) -> Result<File, PathError<'_>> {
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
        File { fd, pos: 0 }
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

    /// Reads at the cursor and moves it past what was read; returns the bytes read (0 at
    /// end of file).
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        let n = io::pread(self.fd, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Reads exactly `buf.len()` bytes at the cursor, retrying short reads; the cursor
    /// moves past what was read, also on an error.
    pub fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        let r = self.read_exact_at(buf, self.pos);
        self.pos += match &r {
            Ok(()) => buf.len(),
            Err(e) => e.done(),
        } as u64;
        r
    }

    /// Writes at the cursor and moves it past what was written; returns the bytes written.
    pub fn write(&mut self, buf: &[u8]) -> Result<usize, Errno> {
        let n = io::pwrite(self.fd, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    /// Writes all of `buf` at the cursor, retrying short writes; the cursor moves past what
    /// was written, also on an error.
    pub fn write_all(&mut self, buf: &[u8]) -> Result<(), Error> {
        let r = self.write_all_at(buf, self.pos);
        self.pos += match &r {
            Ok(()) => buf.len(),
            Err(e) => e.done(),
        } as u64;
        r
    }

    /// Formats `args` and writes the text at the cursor: what `write!(f, ..)` and
    /// `writeln!(f, ..)` call. The text is formatted into a buffer of [`FORMAT_CHUNK`]
    /// bytes on the stack, written each time it fills and at the end: no allocation, and a
    /// short line is one request. For many small writes, gather them in a [`BufWriter`].
    pub fn write_fmt(&mut self, args: core::fmt::Arguments<'_>) -> Result<(), Error> {
        let mut w = BufWriter::<FORMAT_CHUNK>::new(self);
        let r = core::fmt::Write::write_fmt(&mut w, args);
        match (w.finish(), r) {
            (Err(e), _) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
            // A Display impl that failed on its own: nothing of ours went wrong.
            (Ok(()), Err(_)) => Err(Error::Format),
        }
    }

    /// Moves the cursor; returns its new position. `SeekFrom::End` asks the file's length
    /// first ([`File::len`]: the file must be open for reading); a position before the
    /// start or past `i64::MAX` is `EINVAL`, as with `lseek(2)` (an offset of `u64::MAX`
    /// would otherwise mean "the fd's own offset" to io_uring).
    pub fn seek(&mut self, to: SeekFrom) -> Result<u64, Errno> {
        let pos = match to {
            SeekFrom::Start(p) => p,
            SeekFrom::Current(d) => self.pos.checked_add_signed(d).ok_or(Errno::EINVAL)?,
            SeekFrom::End(d) => self.len()?.checked_add_signed(d).ok_or(Errno::EINVAL)?,
        };
        if pos > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        self.pos = pos;
        Ok(pos)
    }

    /// The file's length in bytes, as std's `File::metadata()?.len()`, found by reading:
    /// the file must be open for reading (`EBADF` otherwise; [`File::create`] opens
    /// write-only, `OpenOptions::new().read(true).write(true)` both).
    ///
    /// Why by reading: io_uring's `STATX`, which would say it in one request, writes its
    /// answer to any host address the request names, so no sandbox allows it; reads go only
    /// to gpuio's own buffers. What it costs: reads of 64 bytes at offsets that double and
    /// then halve towards the end, where a short read stops them: 2 requests for a file
    /// under 64 bytes, about 2 log2(len / 64) for a longer one (a 1 GiB file: about 50).
    /// Like any length, it may be stale by the time it returns while other threads or
    /// processes write the file.
    ///
    /// ```no_run
    /// use gpuio_device::fs::{OpenOptions, SeekFrom};
    /// let mut log = OpenOptions::new().read(true).write(true).create(true).open("log.txt")?;
    /// let end = log.seek(SeekFrom::End(0))?; // the same as log.len()?
    /// log.write_all(b"one more line\n")?;
    /// assert_eq!(log.len()?, end + 14);
    /// # Ok::<(), gpuio_device::fs::Error>(())
    /// ```
    pub fn len(&self) -> Result<u64, Errno> {
        let mut probe = [0u8; 64];
        let mut read_at = |at: u64| loop {
            match io::pread(self.fd, &mut probe, at) {
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
                r => return r,
            }
        };
        // The length lies in `at_least..=at_most`; each read narrows it.
        let (mut at_least, mut at_most) = (0u64, None::<u64>);
        let (mut at, mut step) = (0u64, 64u64);
        // The highest offset a read may start at and still end within `i64::MAX`.
        let last = i64::MAX as u64 - 64;
        loop {
            let n = read_at(at)? as u64;
            if n == 0 {
                at_most = Some(at);
            } else {
                at_least = at_least.max(at + n);
            }
            if let Some(most) = at_most.filter(|&m| m <= at_least) {
                return Ok(most);
            }
            if at_least > last {
                // No file on Linux is this long (its offsets are i64s).
                return Err(Errno::EFBIG);
            }
            at = if n != 0 && n < 64 {
                // A short read: the end is most likely right after it.
                at_least
            } else if let Some(most) = at_most {
                at_least + (most - at_least) / 2
            } else {
                step = step.saturating_mul(2);
                at_least.saturating_add(step).min(last)
            };
        }
    }

    /// Whether the file holds no bytes: one read of a byte at its start (the file must be
    /// open for reading, as for [`File::len`]).
    pub fn is_empty(&self) -> Result<bool, Errno> {
        let mut byte = [0u8; 1];
        loop {
            match io::pread(self.fd, &mut byte, 0) {
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
                r => return r.map(|n| n == 0),
            }
        }
    }

    /// The cursor's position.
    pub fn stream_position(&self) -> u64 {
        self.pos
    }

    /// Nothing to do: a `File` holds no buffer (a [`BufWriter`] does). For std's habits.
    pub fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Truncates or extends the file to `len` bytes (extended with zeros), as std's
    /// `File::set_len`; the cursor stays where it is. `ftruncate(2)` through io_uring,
    /// which has it from Linux 6.9 (before, the sandbox refuses it: `EACCES`; without one,
    /// `EINVAL`).
    pub fn set_len(&self, len: u64) -> Result<(), Errno> {
        io::set_len(self.fd, len)
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

/// Gathers writes to a [`File`] in a buffer of `N` bytes on the stack (no allocation: on a
/// GPU mind the thread's stack, `Builder::gpu_stack_bytes`, 8 KiB by default), and
/// writes them at the file's cursor when it fills, on [`BufWriter::flush`], and when
/// dropped (where an error is lost: call `flush` to see it), as std's `BufWriter`. A loop
/// of `writeln!(w, ..)` then costs one request per `N` bytes, not one per line.
///
/// ```no_run
/// use core::fmt::Write as _;
/// use gpuio_device::fs::{BufWriter, File};
/// let mut f = File::create("table.txt")?;
/// let mut w = BufWriter::<4096>::new(&mut f);
/// for i in 0..100 {
///     writeln!(w, "{i} {}", i * i).ok();
/// }
/// w.flush()?;
/// # Ok::<(), gpuio_device::fs::Error>(())
/// ```
pub struct BufWriter<'f, const N: usize> {
    file: &'f mut File,
    buf: [u8; N],
    len: usize,
    /// The first write error; later writes are dropped and `flush` returns it.
    error: Option<Error>,
}

impl<'f, const N: usize> BufWriter<'f, N> {
    /// An empty buffer in front of `file`. `N` must not be 0 (a compile-time error).
    pub fn new(file: &'f mut File) -> Self {
        const { assert!(N > 0, "a BufWriter needs room for at least one byte") };
        BufWriter {
            file,
            buf: [0; N],
            len: 0,
            error: None,
        }
    }

    /// Adds `bytes`, writing the buffer out each time it fills (a write error is kept for
    /// [`BufWriter::flush`]).
    pub fn write_all(&mut self, mut bytes: &[u8]) -> Result<(), Error> {
        while !bytes.is_empty() {
            if let Some(e) = self.error {
                return Err(e);
            }
            let n = bytes.len().min(N - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
            if self.len == N {
                self.write_out();
            }
        }
        self.error.map_or(Ok(()), Err)
    }

    /// Writes out what the buffer holds; returns the first error any write met.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.write_out();
        match self.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// [`BufWriter::flush`], and ends the borrow of the file.
    pub fn finish(mut self) -> Result<(), Error> {
        self.flush()
    }

    fn write_out(&mut self) {
        if self.len != 0 && self.error.is_none() {
            if let Err(e) = self.file.write_all(&self.buf[..self.len]) {
                self.error = Some(e);
            }
        }
        self.len = 0;
    }
}

impl<const N: usize> core::fmt::Write for BufWriter<'_, N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.write_all(s.as_bytes()).map_err(|_| core::fmt::Error)
    }
}

impl<const N: usize> Drop for BufWriter<'_, N> {
    fn drop(&mut self) {
        self.write_out();
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
    pub fn open<'p>(&self, path: &'p str) -> Result<File, PathError<'p>> {
        let fd = self
            .flags()
            .and_then(|flags| io::open(path, flags, self.mode))
            .map_err(|errno| PathError { errno, path })?;
        Ok(File { fd, pos: 0 })
    }
}
