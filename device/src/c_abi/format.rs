//! C's `printf` formats, done on the device: a format string and its arguments, passed as
//! [`gpuio_printf_arg`] values (the header's `gpuio_printf` packs them), written to a
//! `fmt::Write` as C's `snprintf` would write them.
//!
//! Conversions `d i u x X o c s p f F e E g G a A %`, the flags `- + space # 0`, a width
//! and a precision (digits or `*`), and the lengths `hh h l ll z j t` (integers are cut to
//! the length's width, as C reads them). Not taken, as a [`BadFormat`]: `%n` (it writes
//! through a pointer), `L` (no `long double` on a GPU), `%lc`/`%ls` (wide characters), a
//! conversion missing its argument or given one of another kind, and a `%` at the end.
//! A NULL `%s` prints `(null)`, a NULL `%p` `(nil)`, as glibc's do. A width or precision
//! over [`MAX_FIELD`] is refused. Prints are text: bytes of a `%s`, `%c` or the format that
//! are not UTF-8 print as U+FFFD.

use core::fmt::{self, Write};

mod float;

use float::float;

/// One argument of a C format, as the device header packs it: `kind` says how `bits`
/// holds it ([`GPUIO_PRINTF_INT`], [`GPUIO_PRINTF_UINT`], [`GPUIO_PRINTF_DOUBLE`],
/// [`GPUIO_PRINTF_PTR`]).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct gpuio_printf_arg {
    /// How `bits` holds the value.
    pub kind: u32,
    /// The value: an integer sign- or zero-extended to 64 bits, a `double`'s bits, or a
    /// pointer's address.
    pub bits: u64,
}

/// A signed integer (`char`, `short`, `int`, `long`, ...), sign-extended to 64 bits.
pub const GPUIO_PRINTF_INT: u32 = 0;
/// An unsigned integer, zero-extended to 64 bits.
pub const GPUIO_PRINTF_UINT: u32 = 1;
/// A `double` (a `float` is promoted, as C's varargs promote it): its bits.
pub const GPUIO_PRINTF_DOUBLE: u32 = 2;
/// A pointer: a `%s` string (NUL-terminated) or a `%p` address.
pub const GPUIO_PRINTF_PTR: u32 = 3;

/// Why a format was not taken: the byte offset in the format, and what was wrong there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadFormat {
    /// Where in the format string the conversion that was refused starts (its `%`).
    pub at: usize,
    /// What was wrong.
    pub why: &'static str,
}

impl fmt::Display for BadFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (the conversion at byte {} of the format)", self.why, self.at)
    }
}

/// The largest width or precision taken.
pub const MAX_FIELD: usize = 4096;

/// A conversion's flags, width and precision.
#[derive(Clone, Copy, Default)]
struct Spec {
    left: bool,
    plus: bool,
    space: bool,
    alt: bool,
    zero: bool,
    width: usize,
    precision: Option<usize>,
}

/// Writes `format` with `args` to `out` as C's `snprintf` would. An error of `out` ends
/// it as `Ok(Err(..))`; a format it does not take, as `Err(BadFormat)`, possibly after
/// writing the text before that conversion (check first with [`check`] where that
/// matters: it gives the same verdict without formatting).
///
/// # Safety
/// Every [`GPUIO_PRINTF_PTR`] argument that a `%s` takes is NULL or points to a
/// NUL-terminated string (read up to its NUL or its precision).
pub unsafe fn format(format: &[u8], args: &[gpuio_printf_arg], out: &mut dyn Write) -> Result<fmt::Result, BadFormat> {
    let mut args = args.iter();
    let mut i = 0;
    while i < format.len() {
        let start = i;
        while i < format.len() && format[i] != b'%' {
            i += 1;
        }
        if i > start && write_bytes(out, &format[start..i]).is_err() {
            return Ok(Err(fmt::Error));
        }
        if i == format.len() {
            break;
        }
        let c = conversion(format, &mut i, &mut args)?;
        let value = take(c.conv, c.wide, &mut args, c.at)?;
        // SAFETY: the caller's contract.
        if unsafe { convert(out, c.spec, c.conv, c.bits, value) }.is_err() {
            return Ok(Err(fmt::Error));
        }
    }
    Ok(Ok(()))
}

/// A conversion read from the format.
struct Conversion {
    /// Where its `%` is.
    at: usize,
    spec: Spec,
    /// The bits an integer argument keeps (its length).
    bits: u32,
    /// Whether its length is `l` (wide for `%c`, `%s`).
    wide: bool,
    /// Its conversion character.
    conv: u8,
}

/// The conversion whose `%` is at `format[*i]`, moving `*i` past its conversion character
/// (taking `*`'s arguments from `args`).
fn conversion(
    format: &[u8],
    i: &mut usize,
    args: &mut core::slice::Iter<'_, gpuio_printf_arg>,
) -> Result<Conversion, BadFormat> {
    let at = *i;
    *i += 1;
    let (spec, bits, wide) = spec(format, i, args, at)?;
    let Some(&conv) = format.get(*i) else {
        return Err(BadFormat {
            at,
            why: "the format ends inside a conversion",
        });
    };
    *i += 1;
    Ok(Conversion {
        at,
        spec,
        bits,
        wide,
        conv,
    })
}

/// The flags, width, precision and length of the conversion at `at`, from `format[*i..]`
/// (moving `i` to its conversion character), taking `*`'s arguments from `args`: the spec,
/// the bits an integer argument keeps, and whether the length is `l` (wide for `%c`, `%s`).
fn spec(
    format: &[u8],
    i: &mut usize,
    args: &mut core::slice::Iter<'_, gpuio_printf_arg>,
    at: usize,
) -> Result<(Spec, u32, bool), BadFormat> {
    let bad = |why| BadFormat { at, why };
    let mut spec = Spec::default();
    while *i < format.len() {
        match format[*i] {
            b'-' => spec.left = true,
            b'+' => spec.plus = true,
            b' ' => spec.space = true,
            b'#' => spec.alt = true,
            b'0' => spec.zero = true,
            _ => break,
        }
        *i += 1;
    }
    let mut next_int = |what| match args.next() {
        Some(a) if a.kind == GPUIO_PRINTF_INT || a.kind == GPUIO_PRINTF_UINT => Ok(a.bits as i32),
        Some(_) => Err(bad(what)),
        None => Err(bad("a `*` has no argument")),
    };
    if *i < format.len() && format[*i] == b'*' {
        let w = next_int("a `*` width takes an int")?;
        spec.left |= w < 0;
        spec.width = w.unsigned_abs() as usize;
        *i += 1;
    } else {
        spec.width = digits(format, i);
    }
    if *i < format.len() && format[*i] == b'.' {
        *i += 1;
        if *i < format.len() && format[*i] == b'*' {
            let p = next_int("a `*` precision takes an int")?;
            spec.precision = (p >= 0).then_some(p as usize);
            *i += 1;
        } else {
            spec.precision = Some(digits(format, i));
        }
    }
    // A thread writing megabytes of padding would hold its print for seconds, and core's
    // float formatting takes no precision past 65,535.
    if spec.width > MAX_FIELD || spec.precision.is_some_and(|p| p > MAX_FIELD) {
        return Err(bad("a width or precision over 4096 is not taken"));
    }
    // The length, as the number of bits an integer argument keeps.
    let (mut bits, mut wide) = (32, false);
    match format.get(*i) {
        Some(b'h') if format.get(*i + 1) == Some(&b'h') => (bits, *i) = (8, *i + 2),
        Some(b'h') => (bits, *i) = (16, *i + 1),
        Some(b'l') if format.get(*i + 1) == Some(&b'l') => (bits, *i) = (64, *i + 2),
        Some(b'l') => (bits, wide, *i) = (64, true, *i + 1),
        Some(b'z' | b'j' | b't') => (bits, *i) = (64, *i + 1),
        Some(b'L') => return Err(bad("`L` (long double) is not taken: a GPU has no long double")),
        _ => {}
    }
    Ok((spec, bits, wide))
}

/// What a conversion takes from the arguments, checked against the conversion.
#[derive(Clone, Copy)]
enum Value {
    /// `%%`: nothing.
    Percent,
    /// `%d %i %u %x %X %o %c`: an integer's bits.
    Int(u64),
    /// A floating-point conversion: the `double`.
    Float(f64),
    /// `%p`: an address.
    Pointer(u64),
    /// `%s`: NULL or a C string.
    Str(*const u8),
}

/// The argument conversion `conv` (of the spec at `at`, with an `l` length if `wide`) takes
/// from `args`, or why the conversion is not taken. Reads no memory but the arguments.
fn take(
    conv: u8,
    wide: bool,
    args: &mut core::slice::Iter<'_, gpuio_printf_arg>,
    at: usize,
) -> Result<Value, BadFormat> {
    let bad = |why| BadFormat { at, why };
    match conv {
        b'%' => Ok(Value::Percent),
        b'd' | b'i' | b'u' | b'x' | b'X' | b'o' | b'c' => match args.next() {
            Some(a) if a.kind == GPUIO_PRINTF_INT || a.kind == GPUIO_PRINTF_UINT => match conv == b'c' && wide {
                true => Err(bad("`%lc` (a wide character) is not taken")),
                false => Ok(Value::Int(a.bits)),
            },
            Some(_) => Err(bad("an integer conversion was given a double or a pointer")),
            None => Err(bad("a conversion has no argument")),
        },
        b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' => match args.next() {
            Some(a) if a.kind == GPUIO_PRINTF_DOUBLE => Ok(Value::Float(f64::from_bits(a.bits))),
            Some(_) => Err(bad("a floating-point conversion was given an integer or a pointer")),
            None => Err(bad("a conversion has no argument")),
        },
        b's' | b'p' => match args.next() {
            Some(a) if a.kind == GPUIO_PRINTF_PTR => match (conv, wide) {
                (b'p', _) => Ok(Value::Pointer(a.bits)),
                (_, true) => Err(bad("`%ls` (a wide string) is not taken")),
                (_, false) => Ok(Value::Str(a.bits as *const u8)),
            },
            Some(_) => Err(bad("`%s` and `%p` take a pointer")),
            None => Err(bad("a conversion has no argument")),
        },
        b'n' => Err(bad("`%n` is not taken: it writes through a pointer")),
        _ => Err(bad("an unknown conversion")),
    }
}

/// Writes conversion `conv` of `value` (what [`take`] returned for it).
///
/// # Safety
/// A [`Value::Str`] is NULL or a NUL-terminated string (read up to its NUL or the
/// precision).
unsafe fn convert(out: &mut dyn Write, spec: Spec, conv: u8, bits: u32, value: Value) -> fmt::Result {
    match value {
        Value::Percent => out.write_char('%'),
        Value::Int(arg) if conv == b'c' => pad(out, spec, false, "", &[arg as u8]),
        Value::Int(arg) => integer(out, spec, conv, arg, bits),
        Value::Float(v) => float(out, spec, conv, v),
        Value::Pointer(p) => pointer(out, spec, p),
        // SAFETY: the caller's contract.
        Value::Str(s) => unsafe { string(out, spec, s) },
    }
}

/// Whether `format` with `args` would be taken: [`format`]'s verdict, without formatting
/// anything (it reads the format and the arguments, not the strings a `%s` points to).
pub fn check(format: &[u8], args: &[gpuio_printf_arg]) -> Result<(), BadFormat> {
    let mut args = args.iter();
    let mut i = 0;
    while i < format.len() {
        while i < format.len() && format[i] != b'%' {
            i += 1;
        }
        if i == format.len() {
            break;
        }
        let c = conversion(format, &mut i, &mut args)?;
        take(c.conv, c.wide, &mut args, c.at)?;
    }
    Ok(())
}

/// A sink that counts what it is given.
pub(crate) struct Count(pub(crate) usize);

impl Write for Count {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Writes `bytes` as text: UTF-8 as it is, each invalid sequence as one U+FFFD, as
/// `String::from_utf8_lossy` (3 bytes; so a `%s` or `%c` of such bytes prints, and counts,
/// otherwise than C's, which copies bytes).
fn write_bytes(out: &mut dyn Write, bytes: &[u8]) -> fmt::Result {
    // UTF-8 (all a format's text and numbers, most strings) goes straight to `out`: through
    // `write!` each run of text was a `core::fmt` call of its own.
    match core::str::from_utf8(bytes) {
        Ok(text) => out.write_str(text),
        Err(_) => write!(out, "{}", crate::io_traits::Lossy(bytes)),
    }
}

/// The decimal number at `format[*i..]`, moving `*i` past it (0 where there is none).
fn digits(format: &[u8], i: &mut usize) -> usize {
    let mut n = 0usize;
    while *i < format.len() && format[*i].is_ascii_digit() {
        n = n.saturating_mul(10).saturating_add((format[*i] - b'0') as usize);
        *i += 1;
    }
    n
}

/// Writes `body` (a number's digits, or text), after `sign` and `prefix`, padded to the
/// width: on the right with `-`, with zeros between prefix and body where `zeros` (a
/// number's `0` flag), else with spaces on the left.
fn pad(out: &mut dyn Write, spec: Spec, zeros: bool, sign_and_prefix: &str, body: &[u8]) -> fmt::Result {
    if spec.width == 0 {
        // No field to fill: the body's printed length (U+FFFD for bytes that are not UTF-8)
        // is not needed.
        out.write_str(sign_and_prefix)?;
        return write_bytes(out, body);
    }
    let mut len = Count(0);
    write_bytes(&mut len, body)?;
    pad_with(out, spec, zeros, sign_and_prefix, len.0, &mut |out| {
        write_bytes(out, body)
    })
}

/// [`pad`] for a body of `len` bytes that `body` writes.
fn pad_with(
    out: &mut dyn Write,
    spec: Spec,
    zeros: bool,
    sign_and_prefix: &str,
    len: usize,
    body: &mut dyn FnMut(&mut dyn Write) -> fmt::Result,
) -> fmt::Result {
    let fill = spec.width.saturating_sub(sign_and_prefix.len() + len);
    if !spec.left && !zeros {
        repeat(out, ' ', fill)?;
    }
    out.write_str(sign_and_prefix)?;
    if !spec.left && zeros {
        repeat(out, '0', fill)?;
    }
    body(out)?;
    if spec.left {
        repeat(out, ' ', fill)?;
    }
    Ok(())
}

fn repeat(out: &mut dyn Write, c: char, n: usize) -> fmt::Result {
    for _ in 0..n {
        out.write_char(c)?;
    }
    Ok(())
}

/// `%d %i %u %x %X %o` of an argument whose length keeps `bits` bits; and `%p` of a
/// non-null pointer (`conv` `p`): lowercase hex after `0x`, signed by `+` or space as glibc's.
fn integer(out: &mut dyn Write, spec: Spec, conv: u8, arg: u64, bits: u32) -> fmt::Result {
    let keep = |v: u64| if bits == 64 { v } else { v & ((1u64 << bits) - 1) };
    let (negative, magnitude) = if conv == b'd' || conv == b'i' {
        // Sign-extend from the length's width.
        let v = ((arg << (64 - bits)) as i64) >> (64 - bits);
        (v < 0, v.unsigned_abs())
    } else {
        (false, keep(arg))
    };
    let base = match conv {
        b'x' | b'X' | b'p' => 16,
        b'o' => 8,
        _ => 10,
    };
    let digits_of = if conv == b'X' {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut buf = [0u8; 64];
    let mut at = buf.len();
    let mut v = magnitude;
    while v != 0 {
        at -= 1;
        buf[at] = digits_of[(v % base) as usize];
        v /= base;
    }
    // The precision is the least number of digits: `%.0d` of 0 writes none.
    let min = spec.precision.unwrap_or(1);
    while buf.len() - at < min && at > 0 {
        at -= 1;
        buf[at] = b'0';
    }
    if conv == b'o' && spec.alt && (at == buf.len() || buf[at] != b'0') {
        at -= 1;
        buf[at] = b'0';
    }
    let sign = if negative {
        "-"
    } else if matches!(conv, b'd' | b'i' | b'p') && spec.plus {
        "+"
    } else if matches!(conv, b'd' | b'i' | b'p') && spec.space {
        " "
    } else {
        ""
    };
    let prefix = match (conv, spec.alt && magnitude != 0) {
        (b'x' | b'p', true) => "0x",
        (b'X', true) => "0X",
        _ => "",
    };
    let mut head = [0u8; 3];
    let head = join(&mut head, sign, prefix);
    // With a precision, the `0` flag is ignored for integers.
    let zeros = spec.zero && !spec.left && spec.precision.is_none();
    // A precision past 64 digits writes its zeros here.
    let extra = min.saturating_sub(buf.len() - at);
    pad_with(out, spec, zeros, head, extra + buf.len() - at, &mut |out| {
        repeat(out, '0', extra)?;
        write_bytes(out, &buf[at..])
    })
}

/// `sign` and `prefix` as one string, in `buf`.
fn join<'b>(buf: &'b mut [u8; 3], sign: &str, prefix: &str) -> &'b str {
    let n = sign.len() + prefix.len();
    buf[..sign.len()].copy_from_slice(sign.as_bytes());
    buf[sign.len()..n].copy_from_slice(prefix.as_bytes());
    core::str::from_utf8(&buf[..n]).unwrap_or("")
}

/// `%p`: `0x` and the address in lowercase hex (after a `+` or space where the flags ask,
/// as glibc's), `(nil)` for NULL.
fn pointer(out: &mut dyn Write, spec: Spec, p: u64) -> fmt::Result {
    if p == 0 {
        let spec = Spec {
            precision: None,
            ..spec
        };
        return pad(out, spec, false, "", b"(nil)");
    }
    integer(out, Spec { alt: true, ..spec }, b'p', p, 64)
}

/// `%s` of the C string at `s`: up to its NUL, or to the precision's bytes; `(null)` for
/// NULL.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string (read no further than the precision).
unsafe fn string(out: &mut dyn Write, spec: Spec, s: *const u8) -> fmt::Result {
    if s.is_null() {
        return pad(out, spec, false, "", b"(null)");
    }
    let max = spec.precision.unwrap_or(usize::MAX);
    let mut len = 0;
    // SAFETY: the caller's contract: bytes up to the NUL (or `max`) are readable.
    while len < max && unsafe { *s.add(len) } != 0 {
        len += 1;
    }
    // SAFETY: the `len` bytes just read.
    let bytes = unsafe { core::slice::from_raw_parts(s, len) };
    pad(out, spec, false, "", bytes)
}
