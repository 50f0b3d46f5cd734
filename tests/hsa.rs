//! The HSA backend: where it cannot run, it says why (and automatic choice falls back to
//! the CPU); on an AMD GPU, GPU threads print through io_uring, and a GPU this build has
//! no code object for is a failure, not a skip.
//!
//! Without a GPU the reason depends on the machine: no `libhsa-runtime64.so.1`, or the
//! library but no `/dev/kfd` (`hsa_init` fails with 0x1008). CI installs Debian's
//! `libhsa-runtime64-1` and sets `GPUIO_EXPECT_HSA_LIBRARY=1`, so that the second case is
//! the one checked there.

use std::os::fd::AsRawFd;
use std::path::Path;

use gpuio::{Backend, Error, Runtime};

#[allow(dead_code)]
mod common;
use common::skip;

/// The example kernels for every GPU build.rs built for: `(processor, code object)`.
const KERNELS: &[(&str, &[u8])] = gpuio_kernels_gpu::AMDGCN;

/// Whether the HSA runtime library can be loaded here.
fn library_present() -> bool {
    // SAFETY: dlopen of a shared library by name; closed right away.
    unsafe {
        let h = libc::dlopen(c"libhsa-runtime64.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
    }
    true
}

fn expect_library() -> bool {
    std::env::var_os("GPUIO_EXPECT_HSA_LIBRARY").is_some_and(|v| v == "1")
}

#[test]
fn forced_hsa_says_why_it_cannot_run() {
    let err = match Runtime::builder().backend(Backend::Hsa).build() {
        Ok(rt) => {
            eprintln!("an AMD GPU is present: {:?}", rt.device_name());
            assert_eq!(rt.backend(), Backend::Hsa);
            return;
        }
        Err(e) => e,
    };
    let Error::BackendUnavailable { backend: "hsa", reason } = &err else {
        panic!("expected BackendUnavailable for hsa, got {err:?}");
    };
    eprintln!("forced hsa: {err}");
    if !library_present() {
        assert!(
            !expect_library(),
            "GPUIO_EXPECT_HSA_LIBRARY=1, but libhsa-runtime64.so.1 does not load"
        );
        assert!(
            reason.contains("libhsa-runtime64.so.1 not found"),
            "without the library the reason should say so: {reason}"
        );
    } else if !Path::new("/dev/kfd").exists() {
        assert!(
            reason.contains("0x1008") && reason.contains("/dev/kfd is absent"),
            "with the library but no /dev/kfd, hsa_init fails with 0x1008: {reason}"
        );
    } else {
        // /dev/kfd exists but no usable GPU agent (or no permission): still a reason.
        assert!(
            reason.contains("hsa_init") || reason.contains("no AMD GPU agent"),
            "{reason}"
        );
    }
}

#[test]
fn automatic_choice_falls_back_to_the_cpu() {
    if std::env::var_os("GPUIO_BACKEND").is_some() {
        skip(
            "automatic_choice_falls_back_to_the_cpu",
            "GPUIO_BACKEND is set, so the choice is not automatic",
        );
        return;
    }
    let null = std::fs::File::create("/dev/null").unwrap();
    let rt = Runtime::builder()
        .stdout_fd(null.as_raw_fd())
        .build()
        .expect("some backend always runs");
    if rt.backend() == Backend::Cpu {
        // The notice went to stderr; what matters is that the CPU backend runs kernels.
        rt.launch(1, 4, || gpuio::device::println!("cpu fallback")).unwrap();
        rt.synchronize().unwrap();
    } else {
        eprintln!("a GPU backend was chosen: {:?}", rt.backend());
    }
}

#[test]
fn gpu_threads_print_every_line_exactly_once_in_order() {
    const TEST: &str = "gpu_threads_print_every_line_exactly_once_in_order";
    let dir = std::env::temp_dir().join(format!("gpuio-hsa-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("stress.txt");
    let file = std::fs::File::create(&path).unwrap();
    let rt = match Runtime::builder()
        .backend(Backend::Hsa)
        .stdout_fd(file.as_raw_fd())
        .build()
    {
        Ok(rt) => rt,
        Err(Error::BackendUnavailable { reason, .. }) => {
            skip(TEST, &format!("no AMD GPU ({reason})"));
            return;
        }
        Err(e) => panic!("HSA runtime failed: {e}"),
    };
    // An AMD GPU the build has no code object for: the build's GPU list (build.rs) must
    // grow, and the test that would show it works must not pass quietly meanwhile.
    let m = match rt.load_matching(KERNELS) {
        Ok(m) => m,
        Err(Error::NoCodeObject { gpu, available }) => panic!(
            "this AMD GPU, {gpu}, has no code object in this build, which has them for [{}]{}: \
             add its processor to AMDGPU_TARGETS in build.rs",
            available.join(", "),
            if available.is_empty() {
                " (none: GPUIO_SKIP_GPU_BUILD=1 skips them)"
            } else {
                ""
            }
        ),
        Err(e) => panic!("loading the kernels: {e}"),
    };
    let (grid, block, lines) = (64u32, 256u32, 16u32);
    m.launch("stress", grid, block, &[lines.into(), 40u32.into()]).unwrap();
    rt.synchronize().unwrap();
    drop(m);
    drop(rt);
    let text = std::fs::read_to_string(&path).unwrap();
    let threads = (grid * block) as usize;
    let mut next = vec![0u32; threads];
    for line in text.lines() {
        assert_eq!(line.len() + 1, 40, "padded to 40 bytes: {line:?}");
        let (t, i) = common::stress_line(line);
        assert_eq!(i, next[t], "thread {t}: out of order or duplicated");
        next[t] += 1;
    }
    assert!(next.iter().all(|&n| n == lines), "lines lost");
    std::fs::remove_dir_all(&dir).ok();
}
