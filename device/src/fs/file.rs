//! An open file, with positional calls and std's cursor.

use super::{BufWriter, Error, OpenOptions, PathError};
use crate::io::{self, Errno};

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

    /// The file's length in bytes, as std's `File::metadata()?.len()`, found by reading: a
    /// regular file opened for reading (`EBADF` otherwise; [`File::create`] opens
    /// write-only, `OpenOptions::new().read(true).write(true)` both). Not for a pipe, socket
    /// or device: a read at an offset there reads on as `read(2)` does (io_uring ignores
    /// the offset of a file without offsets, and the fallback does as io_uring), so `len`
    /// takes the bytes waiting there: under 64 of them, it returns their count; with more,
    /// a length that means nothing, or it waits for more bytes.
    ///
    /// Why by reading: io_uring's `STATX`, which would say it in one request, writes its
    /// answer to any host address the request names, so no sandbox allows it; reads go only
    /// to gpuio's own buffers. What it costs: reads of 64 bytes at offsets that double and
    /// then halve towards the end, where a short read answers: 1 request for a file under
    /// 64 bytes, at most 2 log2(len / 64) + 4 for a longer one (64 bytes: 4; 4 KiB: 9; a
    /// 1 GiB file: 48). Like any
    /// length, it may be stale by the time it returns while other threads or processes write
    /// the file.
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
        const PROBE: u64 = 64;
        let mut probe = [0u8; PROBE as usize];
        let mut read_at = |at: u64| self.probe_at(&mut probe, at).map(|n| n as u64);
        // Every offset below `at_least` holds a byte; `at_most`, once found, holds none.
        let (mut at_least, mut at_most) = (0u64, None::<u64>);
        let (mut at, mut step) = (0u64, PROBE);
        // The highest offset a read may start at and still end within `i64::MAX`.
        let last = i64::MAX as u64 - PROBE;
        loop {
            let n = read_at(at)?;
            if n != 0 && n < PROBE {
                // A short read of a regular file ends at its end.
                return Ok(at + n);
            }
            if n == 0 {
                at_most = Some(at);
            } else {
                at_least = at_least.max(at + n);
            }
            let most = match at_most {
                // Found; past it only if the file grew meanwhile.
                Some(most) if most <= at_least => return Ok(at_least),
                Some(most) => most,
                None if at_least > last => return Err(Errno::EFBIG), // no Linux file is this long
                None => {
                    step = step.saturating_mul(2);
                    at = at_least.saturating_add(step).min(last);
                    continue;
                }
            };
            // Halve towards the end, and read right at it once one read can reach it.
            at = if most - at_least <= PROBE {
                at_least
            } else {
                at_least + (most - at_least) / 2
            };
        }
    }

    /// Whether the file holds no bytes: one read of a byte at its start (the file must be
    /// open for reading, as for [`File::len`]).
    pub fn is_empty(&self) -> Result<bool, Errno> {
        self.probe_at(&mut [0u8; 1], 0).map(|n| n == 0)
    }

    /// `read_at` for `len` and `is_empty`: an interrupted read is tried again, a bounded
    /// number of times (a loop of requests would look like progress to the host's hang
    /// watch).
    fn probe_at(&self, buf: &mut [u8], at: u64) -> Result<usize, Errno> {
        let mut tries = 0;
        loop {
            match io::pread(self.fd, buf, at) {
                Err(Errno::EINTR) | Err(Errno::EAGAIN) if tries < 100 => tries += 1,
                r => return r,
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
