//! The device runtime's C `printf` (`gpuio::device::c_abi::format`, what `gpuio_printf`
//! formats with on a GPU) against this machine's C library: every conversion, with flags,
//! widths, precisions and lengths, over values at their edges, gives the bytes `snprintf`
//! gives. And the formats it refuses, refused with where and why.

use std::ffi::{c_char, CString};

use gpuio::device::c_abi::format::{
    check, format, gpuio_printf_arg, GPUIO_PRINTF_DOUBLE, GPUIO_PRINTF_INT, GPUIO_PRINTF_PTR, GPUIO_PRINTF_UINT,
};

/// One C argument: what `gpuio_printf` packs, and how C's varargs pass it.
#[derive(Clone, Copy, Debug)]
enum Arg {
    Int(i64),
    Uint(u64),
    Double(f64),
    Ptr(*const c_char),
}

impl Arg {
    fn packed(self) -> gpuio_printf_arg {
        match self {
            Arg::Int(v) => gpuio_printf_arg {
                kind: GPUIO_PRINTF_INT,
                bits: v as u64,
            },
            Arg::Uint(v) => gpuio_printf_arg {
                kind: GPUIO_PRINTF_UINT,
                bits: v,
            },
            Arg::Double(v) => gpuio_printf_arg {
                kind: GPUIO_PRINTF_DOUBLE,
                bits: v.to_bits(),
            },
            Arg::Ptr(p) => gpuio_printf_arg {
                kind: GPUIO_PRINTF_PTR,
                bits: p as u64,
            },
        }
    }
}

/// What the C library writes for `fmt` with one or two arguments (each passed as the
/// 64-bit or double type C's varargs read for it; the format's length picks how many bits).
fn libc(fmt: &str, args: &[Arg]) -> String {
    let f = CString::new(fmt).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` has room for 4096 bytes; the format's conversions take the arguments
    // passed, each of the type its conversion reads (an int-sized conversion reads the low
    // bits of a 64-bit argument on x86-64 and AArch64, as a promoted int is passed).
    let n = unsafe {
        let (p, len) = (buf.as_mut_ptr() as *mut c_char, buf.len());
        macro_rules! one {
            ($a:expr) => {
                match $a {
                    Arg::Int(v) => libc::snprintf(p, len, f.as_ptr(), v),
                    Arg::Uint(v) => libc::snprintf(p, len, f.as_ptr(), v),
                    Arg::Double(v) => libc::snprintf(p, len, f.as_ptr(), v),
                    Arg::Ptr(v) => libc::snprintf(p, len, f.as_ptr(), v),
                }
            };
        }
        match args {
            [] => libc::snprintf(p, len, f.as_ptr()),
            [a] => one!(*a),
            // A `*` width or precision first, then the value.
            [Arg::Int(w), a] => match *a {
                Arg::Int(v) => libc::snprintf(p, len, f.as_ptr(), *w as i32, v),
                Arg::Uint(v) => libc::snprintf(p, len, f.as_ptr(), *w as i32, v),
                Arg::Double(v) => libc::snprintf(p, len, f.as_ptr(), *w as i32, v),
                Arg::Ptr(v) => libc::snprintf(p, len, f.as_ptr(), *w as i32, v),
            },
            _ => panic!("the test passes at most a `*` and a value"),
        }
    };
    assert!((0..4096).contains(&n), "snprintf({fmt:?}) returned {n}");
    String::from_utf8(buf[..n as usize].to_vec()).unwrap()
}

/// What gpuio's engine writes (which `check` takes too).
fn gpuio(fmt: &str, args: &[Arg]) -> String {
    let packed: Vec<gpuio_printf_arg> = args.iter().map(|a| a.packed()).collect();
    let mut out = String::new();
    // SAFETY: every `%s` argument here is NULL or a C string.
    let written = unsafe { format(fmt.as_bytes(), &packed, &mut out) };
    assert_eq!(written, Ok(Ok(())), "{fmt:?} with {args:?}");
    assert_eq!(
        check(fmt.as_bytes(), &packed),
        Ok(()),
        "check({fmt:?}) of a format that format took"
    );
    out
}

/// Each format with each value, against the C library; returns how many were compared.
fn compare(formats: &[&str], values: &[Arg]) -> usize {
    let mut n = 0;
    let mut wrong = Vec::new();
    for fmt in formats {
        for v in values {
            let (want, got) = (libc(fmt, &[*v]), gpuio(fmt, &[*v]));
            if want != got {
                wrong.push(format!("{fmt:?} of {v:?}: C {want:?}, gpuio {got:?}"));
            }
            n += 1;
        }
    }
    assert!(wrong.is_empty(), "{} of {n} differ:\n{}", wrong.len(), wrong.join("\n"));
    n
}

/// Every flag combination, with and without a width and a precision, for `conv`.
fn specs(lengths: &[&str], conv: &str) -> Vec<String> {
    let flags = ["", "-", "+", " ", "#", "0", "-0", "+0", " #", "+#0", "-+ #0"];
    let widths = ["", "1", "8", "25"];
    let precisions = ["", ".0", ".1", ".3", ".17", ".30"];
    let mut v = Vec::new();
    for f in flags {
        for w in widths {
            for p in precisions {
                for l in lengths {
                    v.push(format!("[%{f}{w}{p}{l}{conv}]"));
                }
            }
        }
    }
    v
}

#[test]
fn integers_as_the_c_library_writes_them() {
    let signed: Vec<Arg> = [
        0i64,
        1,
        -1,
        7,
        -42,
        127,
        -128,
        255,
        32767,
        -32768,
        65535,
        i32::MAX as i64,
        i32::MIN as i64,
        u32::MAX as i64,
        i64::MAX,
        i64::MIN,
        0x1234_5678_9abc,
    ]
    .into_iter()
    .map(Arg::Int)
    .chain([u64::MAX, 1 << 63, 0xdead_beef].into_iter().map(Arg::Uint))
    .collect();
    let mut n = 0;
    for conv in ["d", "i", "u", "x", "X", "o"] {
        let formats = specs(&["", "hh", "h", "l", "ll", "z", "j", "t"], conv);
        let formats: Vec<&str> = formats.iter().map(String::as_str).collect();
        n += compare(&formats, &signed);
    }
    let formats = specs(&[""], "c");
    let formats: Vec<&str> = formats
        .iter()
        .filter(|f| !f.contains('.'))
        .map(String::as_str)
        .collect();
    n += compare(&formats, &[Arg::Int(65), Arg::Int(b'z' as i64), Arg::Int(0x141)]);
    assert!(n > 20_000, "{n} cases");
}

#[test]
fn floating_point_as_the_c_library_writes_it() {
    let values: Vec<Arg> = [
        0.0f64,
        -0.0,
        1.0,
        -1.5,
        0.1,
        2.5,
        0.5,
        1.25,
        9.5,
        99.95,
        123456.789,
        1e-5,
        1e-4,
        0.000123456,
        1e15,
        1e16,
        1e21,
        6.02214076e23,
        -1.602176634e-19,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        f64::EPSILON,
        std::f64::consts::PI,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        1.0 / 3.0,
        0.999_999_5,
        9.999_999_5e-5,
    ]
    .into_iter()
    .map(Arg::Double)
    .collect();
    let mut n = 0;
    for conv in ["f", "F", "e", "E", "g", "G", "a", "A"] {
        let formats = specs(&[""], conv);
        let formats: Vec<&str> = formats
            .iter()
            // %f of f64::MAX with a width past 25 is still compared; its 300 digits fit.
            .map(String::as_str)
            .collect();
        n += compare(&formats, &values);
    }
    assert!(n > 20_000, "{n} cases");
}

#[test]
fn strings_pointers_stars_and_percent_as_the_c_library_writes_them() {
    let hello = CString::new("hello, gpu").unwrap();
    let empty = CString::new("").unwrap();
    let strings = [Arg::Ptr(hello.as_ptr()), Arg::Ptr(empty.as_ptr())];
    let formats: Vec<String> = specs(&[""], "s")
        .into_iter()
        .filter(|f| !f.contains('#') && !f.contains('0') && !f.contains('+') && !f.contains(' '))
        .collect();
    let formats: Vec<&str> = formats.iter().map(String::as_str).collect();
    let mut n = compare(&formats, &strings);
    let pointers = [
        Arg::Ptr(0x7f00_dead_beef as *const c_char),
        Arg::Ptr(std::ptr::null()),
        Arg::Ptr(16 as *const c_char),
    ];
    n += compare(
        &[
            "[%p]", "[%20p]", "[%-20p]", "[%3p]", "[%+p]", "[% p]", "[%+20p]", "[% -20p]", "[%#p]", "[%020p]",
            "[%.20p]", "[%+.3p]",
        ],
        &pointers,
    );
    n += compare(&["[%s]", "[%10s]", "[%-10s]"], &[Arg::Ptr(std::ptr::null())]);
    for (fmt, w) in [
        ("[%*d]", 7i64),
        ("[%*d]", -7),
        ("[%-*d]", 5),
        ("[%.*d]", 4),
        ("[%.*d]", -1),
        ("[%*s]", 12),
    ] {
        let v = if fmt.ends_with("s]") {
            Arg::Ptr(hello.as_ptr())
        } else {
            Arg::Int(42)
        };
        assert_eq!(gpuio(fmt, &[Arg::Int(w), v]), libc(fmt, &[Arg::Int(w), v]), "{fmt} {w}");
        n += 1;
    }
    assert_eq!(
        gpuio("100%% of %d lines", &[Arg::Int(3)]),
        libc("100%% of %d lines", &[Arg::Int(3)])
    );
    assert_eq!(gpuio("no conversions", &[]), "no conversions");
    // Prints are text: a byte that is not UTF-8 is U+FFFD (3 bytes), padded as printed.
    assert_eq!(gpuio("[%5c]", &[Arg::Int(0xE9)]), "[  \u{FFFD}]");
    let latin1 = CString::new(vec![0xE9, b't', 0xE9]).unwrap();
    assert_eq!(gpuio("[%-8s]", &[Arg::Ptr(latin1.as_ptr())]), "[\u{FFFD}t\u{FFFD} ]");
    assert!(n > 80, "{n} cases");
}

#[test]
fn formats_it_does_not_take_are_refused_with_where_and_why() {
    let int = Arg::Int(1).packed();
    let double = Arg::Double(1.0).packed();
    for (fmt, args, at, why) in [
        (
            "x %n",
            vec![Arg::Ptr(std::ptr::null()).packed()],
            2,
            "`%n` is not taken",
        ),
        ("%Lf", vec![double], 0, "`L` (long double)"),
        ("ab %d %d", vec![int], 6, "has no argument"),
        ("%d", vec![double], 0, "an integer conversion was given a double"),
        ("%f", vec![int], 0, "a floating-point conversion was given an integer"),
        ("%s", vec![int], 0, "take a pointer"),
        ("50%", vec![], 2, "ends inside a conversion"),
        ("%q", vec![int], 0, "an unknown conversion"),
        ("%lc", vec![int], 0, "wide character"),
        ("%*d", vec![double, int], 0, "a `*` width takes an int"),
        ("%.70000f", vec![double], 0, "a width or precision over 4096"),
        ("%99999999999999999999d", vec![int], 0, "a width or precision over 4096"),
        (
            "x%*d",
            vec![Arg::Int(i32::MIN as i64).packed(), int],
            1,
            "a width or precision over 4096",
        ),
        (
            "%.*f",
            vec![Arg::Int(70_000).packed(), double],
            0,
            "a width or precision over 4096",
        ),
    ] {
        let e = check(fmt.as_bytes(), &args).expect_err(fmt);
        // SAFETY: no `%s` reads a string here.
        let formatted = unsafe { format(fmt.as_bytes(), &args, &mut String::new()) };
        assert_eq!(formatted, Err(e), "{fmt}: format and check disagree");
        assert_eq!(e.at, at, "{fmt}: {e}");
        assert!(e.to_string().contains(why), "{fmt}: {e}");
        assert!(e.to_string().contains(&format!("at byte {at}")), "{fmt}: {e}");
    }
}
