//! `io::stdout()` and `io::stderr()` as std has them: handles on the runtime's stdout and
//! stderr whose `write!` prints at once, and a `lock()` that gathers a thread's pieces into
//! whole lines.
//!
//! `print!` writes each piece at once, whole, so the pieces that several threads print at
//! the same time sit side by side. A [`StdoutLock`] (std's name; it locks nothing: each
//! thread has its own) keeps the thread's pieces in a buffer on its stack and prints them
//! as one record at each newline, on [`StdoutLock::flush`] and when dropped, as std's
//! line-buffered stdout does: a line built from several `write!` calls comes out whole,
//! with nothing of another thread inside it. A line longer than the buffer
//! ([`crate::protocol::print::LINE_BUF`] bytes) goes out in pieces of that size.
//!
//! ```
//! use gpuio_device::io;
//! // In a kernel (outside one, on the host's stdout).
//! let mut out = io::stdout().lock();
//! write!(out, "t={} sums:", 3).unwrap();
//! for i in 0..4 {
//!     write!(out, " {}", i * i).unwrap();
//! }
//! writeln!(out).unwrap(); // `t=3 sums: 0 1 4 9`, one line
//! let mut err: io::StderrLock = io::stderr().lock(); // the same on stderr
//! writeln!(err, "t={} done", 3).unwrap();
//! ```

use core::fmt;

use crate::protocol::print::{print_to, LINE_BUF};

/// The runtime's stdout, as std's `io::stdout()`: `write!` on it prints at once, as
/// `print!` does.
pub fn stdout() -> Stdout {
    Stdout(())
}

/// The runtime's stderr, as std's `io::stderr()`: `write!` on it prints at once, as
/// `eprint!` does.
pub fn stderr() -> Stderr {
    Stderr(())
}

/// The two handles, std's `Stdout` and `Stderr`: the same methods, each on its stream.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $lock:ident, $stderr:literal, $print:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name(());

        impl $name {
            /// A line-buffered handle for this thread: its pieces become one line at each
            /// newline (see [`StdoutLock`]). Costs [`LINE_BUF`] bytes of the thread's stack.
            pub fn lock(self) -> $lock {
                $lock(LineBuffer::new($stderr))
            }

            #[doc = concat!("Prints `args` at once, as `", $print, "` does, so that `write!` works.")]
            pub fn write_fmt(&mut self, args: fmt::Arguments<'_>) -> fmt::Result {
                print_to($stderr, false, args);
                Ok(())
            }

            /// Prints `s` at once.
            pub fn write_str(&mut self, s: &str) -> fmt::Result {
                self.write_fmt(format_args!("{s}"))
            }

            /// Nothing to do: this handle holds no buffer. For std's habits.
            pub fn flush(&mut self) -> fmt::Result {
                Ok(())
            }
        }

        impl fmt::Write for $name {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                $name::write_str(self, s)
            }
        }
    };
}

handle!(
    /// A handle on the runtime's stdout (from [`stdout`]).
    Stdout,
    StdoutLock,
    false,
    "print!"
);
handle!(
    /// A handle on the runtime's stderr (from [`stderr`]).
    Stderr,
    StderrLock,
    true,
    "eprint!"
);

/// The two line-buffered handles, std's `StdoutLock` and `StderrLock`.
macro_rules! lock {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name(LineBuffer);

        impl $name {
            /// Formats `args` into the line; each newline prints the line so far, so that
            /// `write!` and `writeln!` work.
            pub fn write_fmt(&mut self, args: fmt::Arguments<'_>) -> fmt::Result {
                fmt::Write::write_fmt(&mut self.0, args)
            }

            /// Adds `s` to the line; each newline prints the line so far.
            pub fn write_str(&mut self, s: &str) -> fmt::Result {
                self.0.write_str(s)
            }

            /// Prints what the line holds so far (one record), as std's `flush`.
            pub fn flush(&mut self) -> fmt::Result {
                self.0.print_buffered();
                Ok(())
            }
        }

        impl fmt::Write for $name {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                self.0.write_str(s)
            }
        }
    };
}

lock!(
    /// This thread's line-buffered handle on stdout ([`Stdout::lock`]): its `write!`
    /// pieces become one record at each newline, on [`StdoutLock::flush`] and at drop, with
    /// nothing of another thread inside; a line longer than [`LINE_BUF`] bytes goes out in
    /// pieces of that size.
    StdoutLock
);
lock!(
    /// This thread's line-buffered handle on stderr ([`Stderr::lock`]), as [`StdoutLock`] is
    /// on stdout.
    StderrLock
);

/// A thread's line on its stack: whole `str` pieces until a newline, a flush or the drop
/// prints them as one record.
struct LineBuffer {
    stderr: bool,
    /// Bytes in `buf`: whole `str` pieces, or parts of one cut at a char boundary, so
    /// `buf[..len]` is always UTF-8.
    len: usize,
    buf: [u8; LINE_BUF],
}

impl LineBuffer {
    fn new(stderr: bool) -> LineBuffer {
        LineBuffer {
            stderr,
            len: 0,
            buf: [0; LINE_BUF],
        }
    }

    /// Adds `s` to the line; each newline prints the line so far.
    fn write_str(&mut self, mut s: &str) -> fmt::Result {
        while !s.is_empty() {
            // Up to and including the first newline, if any.
            // A byte loop: `str::find` may call `memchr`/`memcmp`, which amdgcn code objects
            // cannot import.
            let (piece, ends_line) = match s.bytes().position(|b| b == b'\n') {
                Some(i) => (&s[..=i], true),
                None => (s, false),
            };
            let room = LINE_BUF - self.len;
            if piece.len() <= room {
                self.buf[self.len..self.len + piece.len()].copy_from_slice(piece.as_bytes());
                self.len += piece.len();
                s = &s[piece.len()..];
                if ends_line {
                    self.print_buffered();
                }
                continue;
            }
            // Longer than the room left: fill the buffer up to a char boundary and print it.
            let mut cut = room;
            while !piece.is_char_boundary(cut) {
                cut -= 1;
            }
            if cut == 0 && self.len == 0 {
                // Cannot happen: a char is at most 4 bytes and the buffer is larger.
                cut = piece.len().min(LINE_BUF);
            }
            self.buf[self.len..self.len + cut].copy_from_slice(&piece.as_bytes()[..cut]);
            self.len += cut;
            s = &s[cut..];
            self.print_buffered();
        }
        Ok(())
    }

    /// Prints what the line holds so far, as one record.
    fn print_buffered(&mut self) {
        if self.len == 0 {
            return;
        }
        match core::str::from_utf8(&self.buf[..self.len]) {
            Ok(text) => print_to(self.stderr, false, format_args!("{text}")),
            // Unreachable: `buf[..len]` holds whole chars (see `len`).
            Err(_) => print_to(
                self.stderr,
                true,
                format_args!("(gpuio: a line that is not UTF-8 was dropped)"),
            ),
        }
        self.len = 0;
    }
}

impl fmt::Write for LineBuffer {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        LineBuffer::write_str(self, s)
    }
}

impl Drop for LineBuffer {
    /// Prints the unfinished line, as std's stdout does at exit.
    fn drop(&mut self) {
        self.print_buffered();
    }
}

impl fmt::Debug for LineBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LineBuffer")
            .field("stderr", &self.stderr)
            .field("buffered", &self.len)
            .finish()
    }
}
