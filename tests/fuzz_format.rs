//! The device formatter against std's `format!` on random cases from fixed seeds: the
//! cargo-fuzz target's cases (`fuzz/src/format_case.rs`), without coverage guidance, in
//! every `cargo test`. `GPUIO_FUZZ_CASES` sets how many (default 5,000; at most 30 s of them).

#[path = "../fuzz/src/format_case.rs"]
mod format_case;

use std::time::{Duration, Instant};

/// When to stop early (the cases run in order, so a shorter run is a prefix).
const BUDGET: Duration = Duration::from_secs(30);

#[test]
fn device_formatting_matches_std_on_random_cases() {
    let cases: u64 = std::env::var("GPUIO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    // A watchdog: a hang fails the test instead of blocking CI.
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(300);
        while Instant::now() < until {
            if d.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("device_formatting_matches_std_on_random_cases hung for 300 s: aborting");
        std::process::abort();
    });
    let mut state = 0x6770_7569_6f5f_666du64;
    let mut next = || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let started = Instant::now();
    let (mut bytes, mut printed) = (0, 0);
    let mut ran = 0;
    for _ in 0..cases {
        // Bounded in time too: 5,000 cases take ~5 s on an idle 2-core machine, but ~270 s
        // while other builds and a fuzzer shared its cores.
        if started.elapsed() > BUDGET {
            break;
        }
        ran += 1;
        let len = next() % 512;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        bytes += data.len();
        printed += format_case::run(&data);
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{ran} of {cases} cases ({bytes} input bytes): {printed} bytes printed, all equal to std's, in {:?}",
        started.elapsed()
    );
}
