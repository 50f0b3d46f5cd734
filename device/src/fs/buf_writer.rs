//! Small writes gathered into one request.

use super::{Error, File};

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

    /// Formats `args` into the buffer: `write!` and `writeln!` call this one, whichever
    /// `Write` traits are in scope (`core::fmt`'s and the io traits' both have a
    /// `write_fmt`). A write error is kept for [`BufWriter::flush`] and fails this call.
    pub fn write_fmt(&mut self, args: core::fmt::Arguments<'_>) -> core::fmt::Result {
        core::fmt::Write::write_fmt(self, args)
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
