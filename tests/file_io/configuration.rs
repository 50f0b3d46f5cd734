//! The builder's arena and ring settings: what it refuses, and requests on their block's
//! ring with prints on ring 0.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use gpuio::{Backend, Error, Runtime, Sandbox, Submission};

use crate::common::dirs::TempDir;
use crate::common::{self, sorted_lines, watchdog};
use crate::{assert_no_failures, create_rw, fail, random_bytes, reads_back, Failures};

#[test]
fn bad_arena_configuration_is_refused() {
    for (arena, block) in [
        (1 << 20, 1000),
        (1 << 20, 2048),
        (4096, 8192),
        (3 << 20, 4096),
        (1 << 40, 4096),
    ] {
        let r = Runtime::builder()
            .backend(Backend::Cpu)
            .arena_bytes(arena)
            .arena_block_bytes(block)
            .build();
        assert!(matches!(r, Err(Error::Config(_))), "{arena}/{block} accepted");
    }
}

/// A block's requests go to ring `block_idx % rings`, each ring with its own SQPOLL thread;
/// prints go through ring 0 whatever the block. Three blocks over three rings: blocks 0
/// and 1 do file I/O, on rings 0 and 1; block 2 only prints, so ring 2 carries nothing;
/// every byte written reads back and every line comes out.
#[test]
fn requests_go_to_their_blocks_ring_and_prints_to_ring_0() {
    let _w = watchdog("requests_go_to_their_blocks_ring_and_prints_to_ring_0", 120);
    let dir = Arc::new(TempDir::new("rings"));
    let (out, out_path) = common::temp_file("rings-out.txt");
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::IoUring)
        .rings(3)
        .sandbox(Sandbox::FileIo)
        .arena_bytes(64 << 10)
        .arena_block_bytes(4096)
        .stdout_fd(out.as_raw_fd())
        .build()
        .expect("runtime");
    assert_eq!(rt.stats().rings, 3);
    assert_eq!(rt.sqpoll_cpus().len(), 3);
    let failures: Failures = Arc::default();
    let (d, f) = (dir.clone(), failures.clone());
    rt.launch(3, 8, move || {
        let t = gpuio::device::global_thread_idx();
        if gpuio::device::block_idx() == 2 {
            gpuio::device::println!("block 2 thread {t}");
            return;
        }
        let data = random_bytes(t, 5_000 + t as usize * 977);
        let path = d.str(&format!("r{t}"));
        let run = || -> Result<(), String> {
            let file = create_rw(&path)?;
            file.write_all_at(&data, 0).map_err(|e| format!("write: {e}"))?;
            reads_back(&file, &data)?;
            file.close().map_err(|e| format!("close: {e}"))
        };
        if let Err(e) = run() {
            fail(&f, format!("thread {t}: {e}"));
        }
        gpuio::device::println!("block {} thread {t}", gpuio::device::block_idx());
    })
    .unwrap();
    rt.synchronize().unwrap();
    assert_no_failures(&failures);
    // sq_tail: SQEs each ring's SQPOLL thread was given.
    let tails: Vec<u32> = (0..3).map(|i| rt.ring_words_of(i)[1]).collect();
    // Blocks 0 and 1, 8 threads each: at least open, write, read, close (more where a
    // transfer split into arena blocks). Every print's write on ring 0.
    assert!(
        tails[0] >= 32 && tails[1] >= 32 && tails[2] == 0,
        "SQEs per ring: {tails:?}"
    );
    assert_eq!(rt.stats().sqes, tails.iter().sum::<u32>());
    drop(rt);
    let lines = sorted_lines(&out_path);
    let want: Vec<String> = {
        let mut w: Vec<String> = (0..24).map(|t| format!("block {} thread {t}", t / 8)).collect();
        w.sort();
        w
    };
    assert_eq!(lines, want);
}

#[test]
fn bad_ring_counts_and_cpus_are_refused() {
    for n in [0, 9] {
        let r = Runtime::builder().backend(Backend::Cpu).rings(n).build();
        assert!(
            matches!(&r, Err(Error::Config(m)) if m.contains("rings must be 1 to 8")),
            "{n} rings: {:?}",
            r.err()
        );
    }
    let r = Runtime::builder()
        .backend(Backend::Cpu)
        .rings(2)
        .sqpoll_cpus(&[0])
        .build();
    assert!(
        matches!(&r, Err(Error::Config(m)) if m.contains("one per ring")),
        "{:?}",
        r.err()
    );
    // Without a ring count, one ring per CPU named: at most 8.
    let r = Runtime::builder()
        .backend(Backend::Cpu)
        .sqpoll_cpus(&(0..9).collect::<Vec<u32>>())
        .build();
    assert!(
        matches!(&r, Err(Error::Config(m)) if m.contains("names 9 CPUs") && m.contains("1 to 8")),
        "{:?}",
        r.err()
    );
    // Only the CQ's size given: the SQ takes the default or the CQ's size, whichever is less.
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .cq_entries(64)
        .build()
        .expect("a CQ of 64 and no SQ size");
    assert_eq!(rt.stats().sq_entries, 64);
    drop(rt);
    // CPUs for SQPOLL threads with SQPOLL off: refused, saying so. (Named alone, they turn
    // SQPOLL on, which the CPU backend's rings otherwise go without.)
    let r = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::IoUring)
        .sqpoll(false)
        .sqpoll_cpus(&[0])
        .build();
    assert!(
        matches!(&r, Err(Error::Config(m)) if m.contains("sqpoll is off")),
        "{:?}",
        r.err()
    );
    let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
    assert!(
        !rt.stats().sqpoll,
        "the CPU backend's default (inline, or io_uring unasked): no SQPOLL"
    );
    drop(rt);
    // A CPU the kernel does not have: refused, naming it.
    let r = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::IoUring)
        .rings(1)
        .sqpoll_cpus(&[1000])
        .build();
    assert!(
        matches!(&r, Err(Error::Config(m)) if m.contains("CPU 1000")),
        "{:?}",
        r.err()
    );
    // A CPU this process may run on.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    let cpu: u32 = allowed.trim().split([',', '-']).next().unwrap().parse().unwrap();
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .submission(Submission::IoUring)
        .rings(1)
        .sqpoll_cpus(&[cpu])
        .build()
        .unwrap();
    assert_eq!(rt.sqpoll_cpus(), [Some(cpu)]);
}
