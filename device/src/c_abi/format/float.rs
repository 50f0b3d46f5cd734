//! `%f %F %e %E %g %G %a %A`: a double as C's `snprintf` writes it, through core's exact
//! decimal formatting (`%e` and `%g` read its digits back to place the exponent and trim
//! zeros) and a hex formatter of our own (`%a`).

use core::fmt::{self, Write};

use super::{join, pad, pad_with, repeat, Count, Spec};

/// The floating-point conversions.
pub(super) fn float(out: &mut dyn Write, spec: Spec, conv: u8, v: f64) -> fmt::Result {
    let upper = conv.is_ascii_uppercase();
    let sign = if v.is_sign_negative() {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    };
    if !v.is_finite() {
        let text: &[u8] = match (v.is_nan(), upper) {
            (true, false) => b"nan",
            (true, true) => b"NAN",
            (false, false) => b"inf",
            (false, true) => b"INF",
        };
        return pad(out, spec, false, sign, text);
    }
    let v = v.abs();
    let zeros = spec.zero && !spec.left;
    let body = Body { spec, conv, v };
    let mut count = Count(0);
    body.write(&mut count)?;
    if conv == b'a' || conv == b'A' {
        let prefix = if upper { "0X" } else { "0x" };
        let mut head = [0u8; 3];
        let head = join(&mut head, sign, prefix);
        return pad_with(out, spec, zeros, head, count.0, &mut |out| body.write(out));
    }
    pad_with(out, spec, zeros, sign, count.0, &mut |out| body.write(out))
}

/// A finite, non-negative floating-point number's text under one conversion, without its
/// sign (or `0x` prefix).
#[derive(Clone, Copy)]
struct Body {
    spec: Spec,
    conv: u8,
    v: f64,
}

impl Body {
    fn write(&self, out: &mut dyn Write) -> fmt::Result {
        let Body { spec, conv, v } = *self;
        let precision = spec.precision.unwrap_or(6);
        match conv {
            b'f' | b'F' => {
                write!(out, "{v:.precision$}")?;
                if spec.alt && precision == 0 {
                    out.write_char('.')?;
                }
                Ok(())
            }
            b'e' | b'E' => exponent(out, v, precision, spec.alt, conv == b'E', false),
            b'g' | b'G' => {
                let p = if precision == 0 { 1 } else { precision };
                // The exponent the `%e` form has once rounded to `p` significant digits.
                let mut seen = ExponentOfText::default();
                write!(seen, "{v:.*e}", p - 1)?;
                let x = seen.exponent.value();
                let trim = !spec.alt;
                if (p as i64) > x && x >= -4 {
                    let decimals = (p as i64 - 1 - x) as usize;
                    let mut t = Trim::new(out, trim);
                    write!(t, "{v:.decimals$}")?;
                    t.end(spec.alt && decimals == 0)
                } else {
                    exponent(out, v, p - 1, spec.alt, conv == b'G', trim)
                }
            }
            _ => hex(out, v, spec.precision, spec.alt, conv == b'A'),
        }
    }
}

/// `%e`: `d.ddde±dd`, from Rust's `{:e}` (`d.ddde-7`): the exponent with its sign and at
/// least two digits; `trim`: trailing zeros of the fraction dropped (`%g`).
fn exponent(out: &mut dyn Write, v: f64, precision: usize, alt: bool, upper: bool, trim: bool) -> fmt::Result {
    let mut e = Exponent::default();
    {
        let mut t = Trim::new(out, trim);
        let mut mantissa = Mantissa {
            out: &mut t,
            exponent: &mut e,
            in_exponent: false,
        };
        write!(mantissa, "{v:.precision$e}")?;
        t.end(alt && precision == 0)?;
    }
    let x = e.value();
    out.write_char(if upper { 'E' } else { 'e' })?;
    out.write_char(if x < 0 { '-' } else { '+' })?;
    if x.unsigned_abs() < 10 {
        out.write_char('0')?;
    }
    write!(out, "{}", x.unsigned_abs())
}

/// Passes a mantissa on and keeps the exponent after its `e`.
struct Mantissa<'a, 'o> {
    out: &'a mut Trim<'o>,
    exponent: &'a mut Exponent,
    in_exponent: bool,
}

impl Write for Mantissa<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if self.in_exponent {
                self.exponent.write_char(c)?;
            } else if c == 'e' {
                self.in_exponent = true;
            } else {
                self.out.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// The exponent of Rust's `{:e}` text, fed what follows its `e` (`-7`, `12`).
#[derive(Default)]
struct Exponent {
    negative: bool,
    magnitude: i64,
}

impl Exponent {
    fn value(&self) -> i64 {
        if self.negative {
            -self.magnitude
        } else {
            self.magnitude
        }
    }
}

impl Write for Exponent {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.bytes() {
            match c {
                b'-' => self.negative = true,
                b'0'..=b'9' => self.magnitude = self.magnitude.saturating_mul(10).saturating_add((c - b'0') as i64),
                _ => {}
            }
        }
        Ok(())
    }
}

/// [`Exponent`] fed a whole `{:e}` text: only what follows the `e` counts.
#[derive(Default)]
struct ExponentOfText {
    exponent: Exponent,
    past_e: bool,
}

impl Write for ExponentOfText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if self.past_e {
                self.exponent.write_char(c)?;
            } else if c == 'e' {
                self.past_e = true;
            }
        }
        Ok(())
    }
}

/// Passes a decimal number on, holding back the zeros at the end of its fraction (and its
/// point, if nothing else follows) where `trim` asks for `%g`'s rule.
struct Trim<'o> {
    out: &'o mut dyn Write,
    trim: bool,
    in_fraction: bool,
    point: bool,
    zeros: usize,
}

impl<'o> Trim<'o> {
    fn new(out: &'o mut dyn Write, trim: bool) -> Trim<'o> {
        Trim {
            out,
            trim,
            in_fraction: false,
            point: false,
            zeros: 0,
        }
    }

    /// Ends the number: what was held back is dropped; with `point`, a point is written
    /// where the number has none (`#` with no fraction digits).
    fn end(self, point: bool) -> fmt::Result {
        if point && !self.in_fraction {
            self.out.write_char('.')?;
        }
        Ok(())
    }
}

impl Write for Trim<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if !self.trim {
                if c == '.' {
                    self.in_fraction = true;
                }
                self.out.write_char(c)?;
            } else if c == '.' {
                self.in_fraction = true;
                self.point = true;
            } else if self.in_fraction && c == '0' {
                self.zeros += 1;
            } else {
                if self.point {
                    self.out.write_char('.')?;
                    self.point = false;
                }
                repeat(self.out, '0', self.zeros)?;
                self.zeros = 0;
                self.out.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// `%a`: `h.hhhp±d`, the leading digit 1 for a normal number and 0 for zero and a
/// subnormal one (as glibc writes them); with a precision, the fraction rounded to that
/// many hex digits (ties to even), else as many as it needs.
fn hex(out: &mut dyn Write, v: f64, precision: Option<usize>, alt: bool, upper: bool) -> fmt::Result {
    let bits = v.to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i64;
    let mut fraction = bits & ((1u64 << 52) - 1);
    let (mut lead, exp) = match (raw_exp, fraction) {
        (0, 0) => (0u64, 0i64),
        (0, _) => (0, -1022),
        _ => (1, raw_exp - 1023),
    };
    // 13 hex digits hold the 52 fraction bits.
    let mut digits = 13usize;
    if let Some(p) = precision.filter(|&p| p < 13) {
        let drop = (13 - p) * 4;
        let mut kept = fraction >> drop;
        let rest = fraction & ((1u64 << drop) - 1);
        let half = 1u64 << (drop - 1);
        // Ties to even: the last digit kept is the leading one where no fraction digit is.
        let last = if p == 0 { lead } else { kept };
        if rest > half || (rest == half && last & 1 == 1) {
            kept += 1;
        }
        if p == 0 {
            lead += kept;
            fraction = 0;
        } else if kept >> (p * 4) != 0 {
            lead += 1;
            fraction = 0;
        } else {
            fraction = kept << drop;
        }
        digits = p;
    } else if precision.is_none() {
        while digits > 0 && (fraction >> ((13 - digits) * 4)) & 0xf == 0 {
            digits -= 1;
        }
    }
    let table = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    out.write_char(table[lead as usize & 0xf] as char)?;
    if digits > 0 || alt || precision.is_some_and(|p| p > 0) {
        out.write_char('.')?;
    }
    for k in 0..digits.min(13) {
        let d = (fraction >> ((12 - k) * 4)) & 0xf;
        out.write_char(table[d as usize] as char)?;
    }
    if let Some(p) = precision {
        repeat(out, '0', p.saturating_sub(13))?;
    }
    out.write_char(if upper { 'P' } else { 'p' })?;
    write!(out, "{}{}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs())
}
