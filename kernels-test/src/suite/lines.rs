//! Lines of every kind: from call sites that lanes diverge between, one warp's lanes on both
//! streams (in pieces, and in one print call), lines of every shape, warps' records near the
//! log's size, lines built from pieces on a locked stdout. The host formats the expected
//! text with the same `Display` types ([`Repeat`], [`token`]).

use core::fmt;

use gpuio_device::io;
use gpuio_device::kernel;
use gpuio_device::{eprint, eprintln, global_thread_idx, print, println};

kernel! {
    /// `lines` lines per thread from three call sites chosen by `t % 3` (the third
    /// alternates between two), all to stdout: `t=<t> i=<i> site=<a|b|c|d>[ more]`.
    pub fn divergent_sites(lines: u32) {
        let t = global_thread_idx();
        for i in 0..lines {
            match t % 3 {
                0 => println!("t={t} i={i} site=a"),
                1 => println!("t={t} i={i} site=b {}", "more"),
                _ => {
                    if i % 2 == 0 {
                        println!("t={t} i={i} site=c");
                    } else {
                        println!("t={t} i={i} site=d");
                    }
                }
            }
        }
    }
}

kernel! {
    /// One warp mixing streams and pieces, as a user writes it: even threads `println!`
    /// and odd threads `eprintln!` `lines` tokens each; then every thread prints, `lines`
    /// times, a formatted line (UTF-8, a Debug string), two `print!` pieces, and an
    /// `eprintln!` (and every fourth time an `eprint!` piece, then an empty `eprintln!`).
    /// Every token is [`token`]`(t, i, kind)`; the host checks each appears exactly once,
    /// whole, in per-thread order, on the right stream.
    pub fn mixed_streams(lines: u32) {
        let t = global_thread_idx();
        for i in 0..lines {
            if t.is_multiple_of(2) {
                println!("{}", Token(t, i, 'o'));
            } else {
                eprintln!("{}", Token(t, i, 'e'));
            }
        }
        for i in 0..lines {
            println!("{} ünï ✓ {:?}", Token(t, i, 'f'), "d\"é");
            print!("{}", Token(t, i, 'p'));
            print!("{}", Token(t, i, 'q'));
            eprintln!("{}", Token(t, i, 'r'));
            if i % 4 == 3 {
                eprint!("{}", Token(t, i, 's'));
                eprintln!();
            }
        }
    }
}

kernel! {
    /// `lines` lines `<t:i:x>` per thread, from one call of the print function whose stream
    /// each lane picks at run time (even threads stdout, odd threads stderr): the lanes of a
    /// warp reach it together with both streams, as `println!` and `eprintln!` can when
    /// their call sites merge.
    pub fn two_streams_one_call(lines: u32) {
        let t = global_thread_idx();
        for i in 0..lines {
            gpuio_device::protocol::print::print_to(t % 2 == 1, true, format_args!("{}", Token(t, i, 'x')));
        }
    }
}

/// `<t:i:kind>`: one piece of [`mixed_streams`]' output.
pub struct Token(pub u64, pub u32, pub char);

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}:{}:{}>", self.0, self.1, self.2)
    }
}

/// [`Token`] as a function, for the host's checker.
pub fn token(t: u64, i: u32, kind: char) -> Token {
    Token(t, i, kind)
}

kernel! {
    /// Lines of every shape, per thread, in this order: `100% {} {<t>} t=<t>`; an empty
    /// line; UTF-8 and a Debug string; [`Repeat`] of 65,536 bytes; [`Repeat`] of `long`
    /// bytes (longer than the log in the suite's configuration); `done t=<t>`.
    pub fn line_shapes(long: u32) {
        let t = global_thread_idx();
        println!("100% {{}} {{{t}}} t={t}");
        println!();
        println!("ünïcødé ✓ {:?} t={t}", "q\"uote");
        println!("{}", Repeat { t, len: 65536 });
        println!("{}", Repeat { t, len: long as usize });
        println!("done t={t}");
    }
}

kernel! {
    /// `2 * lines` lines per thread, `t=<t> i=<i>` for even `i`, and for odd `i` that and a
    /// space and [`near_log_pad`]`(t, i)` bytes of `z`: the lines of a 32-lane warp add up to
    /// 2.5-4.6 KiB, about the size of a 4 KiB log, so that a warp's record sometimes fits the
    /// log less a chunk (3 KiB) and sometimes does not, behind records of short lines.
    pub fn near_log_records(lines: u32) {
        let t = global_thread_idx();
        for j in 0..lines {
            println!("t={t} i={}", 2 * j);
            println!("t={t} i={} {:z<w$}", 2 * j + 1, "", w = near_log_pad(t, 2 * j + 1));
        }
    }
}

/// How many `z` [`near_log_records`] prints on thread `t`'s line `i`: the same for the 32
/// threads of a warp, so that a warp's records vary in size from print to print (with a
/// pad that varied by thread, every record would be about the average).
pub fn near_log_pad(t: u64, i: u32) -> usize {
    68 + ((t / 32 * 13 + i as u64 / 2 * 7) % 64) as usize
}

/// `L<t>:` followed by `a..z` repeated, `len` bytes in all (the newline not counted).
pub struct Repeat {
    pub t: u64,
    pub len: usize,
}

impl fmt::Display for Repeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ABC: &str = "abcdefghijklmnopqrstuvwxyz";
        let mut head = gpuio_kernels::Counting { inner: f, written: 0 };
        fmt::Write::write_fmt(&mut head, format_args!("L{}:", self.t))?;
        let mut rest = self.len.saturating_sub(head.written);
        while rest > 0 {
            let n = rest.min(ABC.len());
            f.write_str(&ABC[..n])?;
            rest -= n;
        }
        Ok(())
    }
}

kernel! {
    /// `lines` lines per thread, each built from pieces on a locked stdout
    /// (`io::stdout().lock()`): `t=<t> i=<i>:` then ` <k>` for k in 0..(t % 7 + 3), then
    /// ` end` and the newline, so that lanes of a warp write different numbers of pieces and
    /// print their lines at different calls.
    pub fn locked_lines(lines: u32) {
        let t = global_thread_idx();
        let mut out = io::stdout().lock();
        for i in 0..lines {
            let _ = write!(out, "t={t} i={i}:");
            for k in 0..(t % 7 + 3) {
                let _ = write!(out, " {k}");
            }
            let _ = writeln!(out, " end");
        }
    }
}
