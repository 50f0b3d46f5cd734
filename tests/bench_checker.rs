//! The benchmarks' output checker (`benches/common`: `verify`, `expected_bytes`), which
//! `bench_gpu` and `bench_print` count lost lines with: here, since a benchmark has no test
//! harness to run tests in.

#[path = "../benches/common/mod.rs"]
mod common;

use common::{expected_bytes, verify};

fn line(t: u64, i: u64, width: u32) -> Vec<u8> {
    let mut s = format!("t={t} i={i}");
    while s.len() + 1 < width as usize {
        s.push('.');
    }
    s.push('\n');
    s.into_bytes()
}

#[test]
fn verifies_padded_output() {
    for width in [0, 8, 32, 128] {
        let mut data = Vec::new();
        for i in 0..3 {
            for t in 0..12 {
                data.extend(line(t, i, width));
            }
        }
        assert_eq!(data.len() as u64, expected_bytes(12, 3, width));
        let c = verify(&data, 12, 3, width);
        assert_eq!(
            (c.good, c.malformed, c.duplicate, c.disorder),
            (36, 0, 0, 0),
            "width {width}"
        );
        // A duplicate, one out of order, a torn line; (0, 1), (0, 2) missing.
        let mut bad = line(0, 0, width);
        bad.extend(line(0, 0, width));
        bad.extend(line(1, 2, width));
        bad.extend(line(1, 1, width));
        bad.extend(b"t=1 i\n");
        let c = verify(&bad, 2, 3, width);
        let found = (c.read, c.good, c.duplicate, c.disorder, c.malformed);
        assert_eq!(found, (5, 2, 1, 1, 1), "width {width}");
    }
    // Wrong padding is malformed.
    let mut short = line(3, 1, 32);
    short.remove(10);
    assert_eq!(verify(&short, 4, 2, 32).malformed, 1);
}
