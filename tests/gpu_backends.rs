//! The GPU backends end to end, one set of checks over each of CUDA and HSA: GPU threads
//! print through io_uring, every line exactly once and in order; a print to a closed fd is
//! reported; a code object built against another context layout is refused. Each check
//! skips, saying why, where its backend has no GPU (CI), and runs on the device machine
//! (RELIABILITY.md has what it printed there).
//!
//! Choosing a backend: a forced backend that cannot run says why; automatic choice falls
//! back to the CPU. Without an AMD GPU the HSA reason depends on the machine: no
//! `libhsa-runtime64.so.1`, or the library but no `/dev/kfd` (`hsa_init` fails with 0x1008).
//! CI installs Debian's `libhsa-runtime64-1` and sets `GPUIO_EXPECT_HSA_LIBRARY=1`, so that
//! the second case is the one checked there.

use std::os::fd::AsRawFd;
use std::path::Path;

use gpuio::{Backend, Error, GpuModule, Runtime};

#[allow(dead_code)]
mod common;
use common::{skip, temp_file};

/// The GPU backends the checks run over.
const GPUS: [Backend; 2] = [Backend::Cuda, Backend::Hsa];

/// The example kernels for NVIDIA GPUs, built for sm_90 by kernels-gpu.
const PTX: &str = gpuio_kernels_gpu::PTX;

/// The example kernels for every AMD GPU kernels-gpu built for: `(processor, code object)`.
const AMDGCN: &[(&str, &[u8])] = gpuio_kernels_gpu::AMDGCN;

/// A runtime on `backend` printing to `fd`, or `None` (reported as a skip of `test`) where
/// that backend has no GPU here.
fn gpu_runtime(backend: Backend, test: &str, fd: i32) -> Option<Runtime> {
    match Runtime::builder().backend(backend).stdout_fd(fd).build() {
        Ok(rt) => Some(rt),
        Err(Error::BackendUnavailable { reason, .. }) => {
            skip(&format!("{test} ({})", backend.name()), &format!("no GPU ({reason})"));
            None
        }
        Err(e) => panic!("{} runtime failed: {e}", backend.name()),
    }
}

/// The example kernels on `rt`'s GPU. An AMD GPU the build has no code object for is a
/// failure, not a skip: the build's GPU list (kernels-gpu/build.rs) must grow, and the
/// checks that would show it works must not pass quietly meanwhile.
fn load_kernels(rt: &Runtime) -> GpuModule<'_> {
    match rt.backend() {
        Backend::Cuda => rt.load_module(PTX).unwrap(),
        Backend::Hsa => match rt.load_matching(AMDGCN) {
            Ok(m) => m,
            Err(Error::NoCodeObject { gpu, available }) => panic!(
                "this AMD GPU, {gpu}, has no code object in this build, which has them for [{}]{}: \
                 add its processor to AMDGPU_TARGETS in kernels-gpu/build.rs",
                available.join(", "),
                if available.is_empty() {
                    " (none: GPUIO_SKIP_GPU_BUILD=1 skips them)"
                } else {
                    ""
                }
            ),
            Err(e) => panic!("loading the kernels: {e}"),
        },
        Backend::Cpu => unreachable!("the checks run on GPU backends"),
    }
}

#[test]
fn gpu_threads_print_every_line_exactly_once_in_order() {
    for backend in GPUS {
        let (f, path) = temp_file(&format!("stress-{}.txt", backend.name()));
        let Some(rt) = gpu_runtime(
            backend,
            "gpu_threads_print_every_line_exactly_once_in_order",
            f.as_raw_fd(),
        ) else {
            continue;
        };
        let (grid, block, lines) = (64u32, 256u32, 16u32);
        let m = load_kernels(&rt);
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
            assert_eq!(i, next[t], "{}: thread {t}: out of order or duplicated", backend.name());
            next[t] += 1;
        }
        assert!(next.iter().all(|&n| n == lines), "{}: lines lost", backend.name());
        std::fs::remove_file(&path).ok();
        eprintln!(
            "{}: {} lines from {threads} GPU threads: all present, whole, in order",
            backend.name(),
            threads * lines as usize
        );
    }
}

#[test]
fn gpu_print_to_a_closed_fd_is_reported() {
    for backend in GPUS {
        let Some(rt) = gpu_runtime(backend, "gpu_print_to_a_closed_fd_is_reported", 1_000_000) else {
            continue;
        };
        let m = load_kernels(&rt);
        m.launch("hello", 2, 64, &[]).unwrap();
        match rt.synchronize() {
            Err(Error::Print(p)) => {
                assert_eq!(p.outputs[0].errno, libc::EBADF, "{p}");
                assert_eq!(p.outputs[0].lost_lines, 128, "{p}");
                eprintln!("{}: reported: {p}", backend.name());
            }
            other => panic!("{}: expected a print error, got {other:?}", backend.name()),
        }
        rt.synchronize().unwrap();
    }
}

/// PTX only: the layout is a text initializer there (tests/amdgcn_code_objects/ reads it
/// from the AMD code objects).
#[test]
fn a_code_object_built_against_another_layout_is_refused() {
    let Some(rt) = gpu_runtime(
        Backend::Cuda,
        "a_code_object_built_against_another_layout_is_refused",
        1,
    ) else {
        return;
    };
    // The same PTX with `gpuio_layout` changed, as a kernel built against another gpuio
    // version would carry: the runtime must refuse it, not let it read the context at the
    // wrong offsets.
    let decl = ".global .align 8 .b8 gpuio_layout[8] = {";
    let at = PTX.find(decl).expect("the PTX exports gpuio_layout") + decl.len();
    let mut ptx = PTX.to_string();
    ptx.insert_str(at, "1, ");
    let end = at + ptx[at..].find('}').unwrap();
    let values: Vec<&str> = ptx[at..end].split(", ").take(8).collect();
    let ptx = format!("{}{}{}", &ptx[..at], values.join(", "), &ptx[end..]);
    match rt.load_module(&ptx) {
        Err(Error::Config(why)) => {
            assert!(why.contains("another version of gpuio's device crate"), "{why}");
            eprintln!("refused: {why}");
        }
        Err(e) => panic!("expected a layout error, got {e}"),
        Ok(_) => panic!("a code object with another context layout was accepted"),
    }
    // The runtime still works with the right one.
    let m = rt.load_module(PTX).unwrap();
    drop(m);
}

/// Whether the HSA runtime library can be loaded here.
fn hsa_library_present() -> bool {
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
    if !hsa_library_present() {
        assert!(
            std::env::var_os("GPUIO_EXPECT_HSA_LIBRARY").is_none_or(|v| v != "1"),
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
