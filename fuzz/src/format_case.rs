//! One fuzz case for the device formatter: `print!`/`println!`/`eprint!`/`eprintln!` on the
//! CPU backend (through `print_to` and `emit`, as the macros go), against std's `format!` of
//! the same format spec and values, byte for byte.
//!
//! The bytes choose a sequence of prints: for each, a value (integers of every width,
//! floats from raw bits: NaN, infinities, subnormals; chars, strings with escapes and
//! multi-byte characters, tuples, options, slices, a Display that writes in pieces), one of
//! the format specs for its type (alignment, fill, sign, `#`, `0`, width, precision,
//! `?`/`x`/`X`/`o`/`b`/`e`/`E`), runtime widths and precisions, stdout or stderr, with or
//! without a newline. Widths go up to ~600 and strings up to ~1,100 bytes, so lines take
//! every path: the stack buffer (up to 256 bytes), the in-place long path, and, with the
//! 128-byte logs used here, lines longer than the log that go out in pieces.
//!
//! Shared by the cargo-fuzz target `fuzz/fuzz_targets/format.rs` and the deterministic
//! randomized test `tests/fuzz_format.rs` (included with `#[path]`).

use std::fmt::{self, Write as _};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{Arc, Mutex, OnceLock};

use gpuio_host::{Backend, Runtime};

/// Reads fuzz bytes as values; zeros once they run out.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        self.u32() as u64 | (self.u32() as u64) << 32
    }
    pub fn u128(&mut self) -> u128 {
        self.u64() as u128 | (self.u64() as u128) << 64
    }
    /// A string of up to `max` characters, mostly ASCII, with escapes and multi-byte ones.
    pub fn string(&mut self, max: usize) -> String {
        const ODD: [char; 12] = [
            'é',
            '€',
            '𝄞',
            '\n',
            '"',
            '\\',
            '\'',
            '\0',
            '\t',
            '\u{7f}',
            '\u{200b}',
            '\u{10ffff}',
        ];
        let len = self.u16() as usize % (max + 1);
        (0..len)
            .map(|_| match self.u8() {
                b @ 0x20..=0x7e => b as char,
                b => ODD[b as usize % ODD.len()],
            })
            .collect()
    }
}

/// A Display that writes its text in pieces of `step` bytes (at char boundaries).
#[derive(Clone, Debug)]
pub struct Pieces(pub String, pub usize);

impl fmt::Display for Pieces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0.as_str();
        while !rest.is_empty() {
            let mut n = self.1.clamp(1, rest.len());
            while !rest.is_char_boundary(n) {
                n += 1;
            }
            f.write_str(&rest[..n])?;
            rest = &rest[n..];
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub enum Value {
    I8(i8),
    I64(i64),
    U64(u64),
    I128(i128),
    U128(u128),
    F32(f32),
    F64(f64),
    Char(char),
    Bool(bool),
    Str(String),
    Tuple((i32, String, f64)),
    Opt(Option<String>),
    Slice(Vec<u16>),
    Pieces(Pieces),
}

/// One print: a value, a spec (an index into its type's list), runtime width and
/// precision, which stream, and whether a newline follows.
#[derive(Clone, Debug)]
pub struct Op {
    pub value: Value,
    pub spec: u8,
    pub width: usize,
    pub precision: usize,
    pub stderr: bool,
    pub newline: bool,
}

impl Op {
    pub fn read(b: &mut Bytes) -> Op {
        let kind = b.u8();
        let value = match kind % 14 {
            0 => Value::I8(b.u8() as i8),
            1 => Value::I64(b.u64() as i64),
            2 => Value::U64(b.u64()),
            3 => Value::I128(b.u128() as i128),
            4 => Value::U128(b.u128()),
            5 => Value::F32(f32::from_bits(b.u32())),
            6 => Value::F64(f64::from_bits(b.u64())),
            7 => Value::Char(char::from_u32(b.u32() % 0x11_0000).unwrap_or('\u{fffd}')),
            8 => Value::Bool(b.u8() & 1 == 1),
            9 => Value::Str(b.string(1100)),
            10 => Value::Tuple((b.u32() as i32, b.string(40), f64::from_bits(b.u64()))),
            11 => Value::Opt((b.u8() & 1 == 1).then(|| b.string(60))),
            12 => Value::Slice((0..b.u8() % 24).map(|_| b.u16()).collect()),
            _ => Value::Pieces(Pieces(b.string(700), 1 + b.u8() as usize % 64)),
        };
        let flags = b.u8();
        Op {
            value,
            spec: b.u8(),
            width: b.u16() as usize % 600,
            precision: b.u8() as usize % 70,
            stderr: flags & 1 == 1,
            newline: flags & 2 == 2,
        }
    }

    /// Formats the op into `sink`, with the same `format_args!` whichever sink it is.
    pub fn apply(&self, sink: &mut dyn FnMut(bool, bool, fmt::Arguments<'_>)) {
        let (e, nl, w, p) = (self.stderr, self.newline, self.width, self.precision);
        let s = self.spec;
        macro_rules! int {
            ($v:expr) => {{
                let v = $v;
                match s % 18 {
                    0 => sink(e, nl, format_args!("{v}")),
                    1 => sink(e, nl, format_args!("{v:w$}")),
                    2 => sink(e, nl, format_args!("{v:<w$}")),
                    3 => sink(e, nl, format_args!("{v:^w$}")),
                    4 => sink(e, nl, format_args!("{v:>+w$}")),
                    5 => sink(e, nl, format_args!("{v:#x}")),
                    6 => sink(e, nl, format_args!("{v:#X}")),
                    7 => sink(e, nl, format_args!("{v:#o}")),
                    8 => sink(e, nl, format_args!("{v:#b}")),
                    9 => sink(e, nl, format_args!("{v:0w$}")),
                    10 => sink(e, nl, format_args!("{v:+#0w$x}")),
                    11 => sink(e, nl, format_args!("{v:e}")),
                    12 => sink(e, nl, format_args!("{v:E}")),
                    13 => sink(e, nl, format_args!("{v:?}")),
                    14 => sink(e, nl, format_args!("{v:#?}")),
                    15 => sink(e, nl, format_args!("{v:*^w$}")),
                    16 => sink(e, nl, format_args!("[{v:>8}|{v:<8}|{v:^8}]")),
                    _ => sink(e, nl, format_args!("{v:x?} {v:X?}")),
                }
            }};
        }
        macro_rules! float {
            ($v:expr) => {{
                let v = $v;
                match s % 16 {
                    0 => sink(e, nl, format_args!("{v}")),
                    1 => sink(e, nl, format_args!("{v:.p$}")),
                    2 => sink(e, nl, format_args!("{v:w$.p$}")),
                    3 => sink(e, nl, format_args!("{v:<w$}")),
                    4 => sink(e, nl, format_args!("{v:^+w$.p$}")),
                    5 => sink(e, nl, format_args!("{v:e}")),
                    6 => sink(e, nl, format_args!("{v:E}")),
                    7 => sink(e, nl, format_args!("{v:.p$e}")),
                    8 => sink(e, nl, format_args!("{v:+w$.p$E}")),
                    9 => sink(e, nl, format_args!("{v:?}")),
                    10 => sink(e, nl, format_args!("{v:#?}")),
                    11 => sink(e, nl, format_args!("{v:0w$.p$}")),
                    12 => sink(e, nl, format_args!("{v:08.3}")),
                    13 => sink(e, nl, format_args!("{v:.p$?}")),
                    14 => sink(e, nl, format_args!("{v:_>w$.p$}")),
                    _ => sink(e, nl, format_args!("{v:+}")),
                }
            }};
        }
        macro_rules! text {
            ($v:expr) => {{
                let v = $v;
                match s % 12 {
                    0 => sink(e, nl, format_args!("{v}")),
                    1 => sink(e, nl, format_args!("{v:?}")),
                    2 => sink(e, nl, format_args!("{v:w$}")),
                    3 => sink(e, nl, format_args!("{v:>w$.p$}")),
                    4 => sink(e, nl, format_args!("{v:^w$}")),
                    5 => sink(e, nl, format_args!("{v:*^w$}")),
                    6 => sink(e, nl, format_args!("{v:.p$}")),
                    7 => sink(e, nl, format_args!("{v:#?}")),
                    8 => sink(e, nl, format_args!("{v:<w$?}")),
                    9 => sink(e, nl, format_args!("{{{v}}} {v} {{}}")),
                    10 => sink(e, nl, format_args!("{v:é>w$.p$}")),
                    _ => sink(e, nl, format_args!("{v:-<w$}|")),
                }
            }};
        }
        macro_rules! debug {
            ($v:expr) => {{
                let v = $v;
                match s % 5 {
                    0 => sink(e, nl, format_args!("{v:?}")),
                    1 => sink(e, nl, format_args!("{v:#?}")),
                    2 => sink(e, nl, format_args!("{v:w$?}")),
                    3 => sink(e, nl, format_args!("{v:.p$?}")),
                    _ => sink(e, nl, format_args!("{v:x?}")),
                }
            }};
        }
        match &self.value {
            Value::I8(v) => int!(*v),
            Value::I64(v) => int!(*v),
            Value::U64(v) => int!(*v),
            Value::I128(v) => int!(*v),
            Value::U128(v) => int!(*v),
            Value::F32(v) => float!(*v),
            Value::F64(v) => float!(*v),
            Value::Char(v) => text!(*v),
            Value::Bool(v) => text!(*v),
            Value::Str(v) => text!(v.as_str()),
            Value::Pieces(v) => match s % 4 {
                0 => sink(e, nl, format_args!("{v}")),
                1 => sink(e, nl, format_args!("<{v}>")),
                2 => sink(e, nl, format_args!("{v}{v}")),
                _ => sink(e, nl, format_args!("{v:?}")),
            },
            Value::Tuple(v) => debug!(v),
            Value::Opt(v) => debug!(v),
            Value::Slice(v) => debug!(v.as_slice()),
        }
    }
}

/// The ops of one case.
pub fn ops(data: &[u8]) -> Vec<Op> {
    let mut b = Bytes::new(data);
    let mut ops = Vec::new();
    while !b.is_empty() && ops.len() < 24 {
        ops.push(Op::read(&mut b));
    }
    ops
}

/// What std prints for `ops`: (stdout, stderr).
pub fn expected(ops: &[Op]) -> (String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    for op in ops {
        op.apply(&mut |stderr, newline, args| {
            let s = if stderr { &mut err } else { &mut out };
            s.write_fmt(args).unwrap();
            if newline {
                s.push('\n');
            }
        });
    }
    (out, err)
}

/// A CPU-backend runtime printing into two memfds, reused by every case.
pub struct Formatter {
    rt: Runtime,
    out: std::fs::File,
    err: std::fs::File,
}

fn memfd(name: &std::ffi::CStr) -> std::fs::File {
    // SAFETY: memfd_create with a NUL-terminated name returns a new fd that we own.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh fd, owned by nobody else.
    unsafe { std::fs::File::from_raw_fd(fd) }
}

impl Formatter {
    pub fn new() -> Formatter {
        let out = memfd(c"gpuio-fuzz-out");
        let err = memfd(c"gpuio-fuzz-err");
        // 128-byte logs: lines of 129..=256 bytes fit the stack buffer but not the log,
        // longer ones go out in pieces; an 8-entry SQ wraps often.
        let rt = Runtime::builder()
            .backend(Backend::Cpu)
            .stdout_fd(out.as_raw_fd())
            .stderr_fd(err.as_raw_fd())
            .log_bytes(128)
            .sq_entries(8)
            .build()
            .expect("a CPU-backend runtime");
        Formatter { rt, out, err }
    }

    /// The shared one.
    pub fn shared() -> &'static Mutex<Formatter> {
        static F: OnceLock<Mutex<Formatter>> = OnceLock::new();
        F.get_or_init(|| Mutex::new(Formatter::new()))
    }

    /// Prints `ops` from one kernel thread; returns what came out: (stdout, stderr).
    pub fn print(&mut self, ops: Vec<Op>) -> (Vec<u8>, Vec<u8>) {
        for f in [&mut self.out, &mut self.err] {
            f.set_len(0).unwrap();
            f.seek(SeekFrom::Start(0)).unwrap();
        }
        let ops = Arc::new(ops);
        self.rt
            .launch(1, 1, move || {
                for op in ops.iter() {
                    op.apply(&mut |stderr, newline, args| {
                        gpuio_device::protocol::print::print_to(stderr, newline, args)
                    });
                }
            })
            .unwrap();
        self.rt.synchronize().expect("printing into a memfd fails nothing");
        let read = |f: &mut std::fs::File| {
            let mut v = Vec::new();
            f.seek(SeekFrom::Start(0)).unwrap();
            f.read_to_end(&mut v).unwrap();
            v
        };
        (read(&mut self.out), read(&mut self.err))
    }
}

impl Default for Formatter {
    fn default() -> Self {
        Self::new()
    }
}

/// One case: panics if the device output differs from std's. Returns the bytes compared.
pub fn run(data: &[u8]) -> usize {
    let ops = ops(data);
    if ops.is_empty() {
        return 0;
    }
    let (want_out, want_err) = expected(&ops);
    let mut f = Formatter::shared().lock().unwrap_or_else(|e| e.into_inner());
    let (out, err) = f.print(ops.clone());
    let compared = out.len() + err.len();
    for (name, got, want) in [("stdout", out, want_out), ("stderr", err, want_err)] {
        if got != want.as_bytes() {
            panic!(
                "{name} differs from std's format!\n ops: {ops:?}\n std:    {want:?}\n device: {:?}",
                String::from_utf8_lossy(&got)
            );
        }
    }
    compared
}
