//! A CUDA C++ kernel printing through gpuio on an NVIDIA GPU: `tests/cuda/printf_kernel.cu`
//! built with nvcc (`-rdc=true -ptx`, the device header `device/include/gpuio/device.h`),
//! its PTX joined with the device library's (`gpuio::link_ptx`, the library's C ABI built
//! from `kernels-c/`) and loaded as one module. Each thread's `gpuio_printf` line must be
//! what the C library's `snprintf` makes of the same format and values, with the same
//! count; a format gpuio does not take returns -1 and says why on stderr. Then, from the
//! same module, `divergent_kernel` in blocks of 97 threads: every thread's lines whole and
//! in its order where its warp diverges, a `%s` of a string on the thread's stack among
//! them.
//!
//! Skips without a CUDA GPU or without nvcc (`NVCC`, else `nvcc` on the PATH, else
//! /usr/local/cuda/bin/nvcc). `GPUIO_LOCKSTEP=1` runs the lockstep build (sm_60 PTX: the
//! kernel built for sm_75, the oldest nvcc 13 builds, and retargeted).

#[allow(dead_code)]
mod common;

use std::ffi::{c_char, CString};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

use common::dirs::process_dir;
use common::faults::{create, cuda_or_skip};
use common::{skip, watchdog};
use gpuio::Runtime;

/// The line format of `printf_kernel.cu` (`PRINTF_LINE` in `tests/cuda/printf_line.h`), byte for byte.
const LINE: &str =
    "t=%u d=%+05d x=%-10.3f e=%.2e g=%g G=%#.3G a=%a s=%5s|%-5s| c=%c h=%#x o=%#o l=%lld z=%zu p=%p %%\n";

/// What `snprintf` makes of thread `i`'s line (the kernel's values, computed alike).
fn want_line(i: u32) -> String {
    let d = i as i32 * 37 - 500;
    let x = i as f64 / 7.0 - 3.0;
    let s = CString::new(if i % 2 == 1 { "odd" } else { "even" }).unwrap();
    let big = i as i64 * -123_456_789_012;
    let z = (i as usize) << 40;
    let p = (i as usize * 16) as *const u8;
    let c = b'A' as i32 + (i % 26) as i32;
    let f = CString::new(LINE).unwrap();
    let mut buf = vec![0u8; 512];
    // SAFETY: `buf` holds 512 bytes; each conversion of LINE is given an argument of the
    // type it reads.
    let n = unsafe {
        libc::snprintf(
            buf.as_mut_ptr() as *mut c_char,
            buf.len(),
            f.as_ptr(),
            i,
            d,
            x,
            x * 1e7,
            x,
            x,
            x,
            s.as_ptr(),
            s.as_ptr(),
            c,
            i.wrapping_mul(4097),
            i,
            big,
            z,
            p,
        )
    };
    String::from_utf8(buf[..n as usize].to_vec()).unwrap()
}

#[test]
fn a_cuda_cpp_kernel_prints_through_gpuio() {
    const NAME: &str = "a_cuda_cpp_kernel_prints_through_gpuio";
    // The lockstep build compiles the joined module whole: minutes of JIT.
    let _wd = watchdog(NAME, 560);
    let (out_path, err_path) = (process_dir().join("cpp-out.txt"), process_dir().join("cpp-err.txt"));
    let (out, err) = (create(&out_path, false), create(&err_path, false));
    let builder = Runtime::builder().stdout_fd(out.as_raw_fd()).stderr_fd(err.as_raw_fd());
    let Some(rt) = cuda_or_skip(NAME, builder) else {
        return;
    };
    let Some(nvcc) = common::cuda_tool("nvcc", "NVCC") else {
        skip(
            NAME,
            "no nvcc (NVCC, nvcc on the PATH, /usr/local/cuda/bin/nvcc) to build the CUDA C++ kernel",
        );
        return;
    };
    let lockstep = std::env::var("GPUIO_LOCKSTEP").is_ok_and(|v| v == "1");
    let arch = if lockstep { "sm_60" } else { "sm_90" };
    // nvcc 13 builds nothing before sm_75: the lockstep build (sm_60, which Hopper runs with
    // AMD's scheduling) takes the kernel's sm_75 PTX retargeted, below. This kernel's PTX
    // uses nothing sm_60 and PTX 7.8 lack.
    let nvcc_arch = if lockstep { "sm_75" } else { arch };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let ptx_path = process_dir().join(format!("printf_kernel-{arch}.ptx"));
    let built = Command::new(&nvcc)
        .args(["-rdc=true", "-ptx", &format!("-arch={nvcc_arch}"), "-std=c++17"])
        .arg(format!("-I{}", root.join("device/include").display()))
        .arg(root.join("tests/cuda/printf_kernel.cu"))
        .arg("-o")
        .arg(&ptx_path)
        .output()
        .expect("run nvcc");
    assert!(
        built.status.success(),
        "nvcc failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut kernel = std::fs::read_to_string(&ptx_path).unwrap();
    if lockstep {
        kernel = kernel
            .lines()
            .map(|l| match l {
                l if l.starts_with(".target ") => ".target sm_60".to_string(),
                l if l.starts_with(".version ") => ".version 7.8".to_string(),
                l => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
    }
    let (_, library) = gpuio_kernels_gpu::C_LIBRARY_NVPTX
        .iter()
        .find(|(a, _)| *a == arch)
        .unwrap_or_else(|| panic!("no {arch} device library was built (GPUIO_GPU_TARGETS=sm_90,sm_60)"));
    let library = std::str::from_utf8(library).unwrap().trim_end_matches('\0');
    let joined = gpuio::link_ptx(&[library, &kernel]).unwrap();
    let started = std::time::Instant::now();
    let module = rt.load_module(&joined).unwrap();
    eprintln!(
        "{arch}: nvcc PTX {} bytes, library {} bytes, joined module loaded in {:?} ({})",
        kernel.len(),
        library.len(),
        started.elapsed(),
        module
            .scheduling()
            .map_or("unknown scheduling".into(), |s| s.to_string())
    );
    let n = 1000u32;
    let mut words = rt.host_buffer(4 * (n as usize + 1)).unwrap();
    module
        .launch(
            "printf_kernel",
            n.div_ceil(128),
            128,
            &[n.into(), words.device_ptr().into()],
        )
        .unwrap();
    rt.synchronize().unwrap();
    // Blocks of 97 threads (a partial last warp each), threads past `n` returning at once.
    module
        .launch("divergent_kernel", n.div_ceil(97) + 1, 97, &[n.into()])
        .unwrap();
    rt.synchronize().unwrap();
    let counts: Vec<i32> = words
        .as_mut_slice()
        .chunks_exact(4)
        .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    drop(words);
    drop(module);
    drop(rt);
    let mut want: Vec<String> = (0..n).map(want_line).collect();
    for (i, line) in want.iter().enumerate() {
        assert_eq!(counts[i], line.len() as i32, "thread {i}'s count");
    }
    assert_eq!(counts[n as usize], -1, "a format gpuio does not take returns -1");
    want.push("a line from gpuio_puts\n".into());
    let text = std::fs::read_to_string(&out_path).unwrap();
    let (divergent, text): (Vec<&str>, Vec<&str>) = text.split_inclusive('\n').partition(|l| l.starts_with("div "));
    check_divergent(n, &divergent);
    let mut got = text;
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got.len(), want.len(), "lines out");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
    let said = std::fs::read_to_string(&err_path).unwrap();
    assert!(said.contains("gpuio_printf: `%n` is not taken"), "stderr: {said}");
    eprintln!(
        "{arch}: {} lines as snprintf makes them, with their counts; %n refused; {} lines of divergent \
         warps whole and in each thread's order",
        n + 1,
        divergent.len()
    );
}

/// `divergent_kernel`'s lines (`got`, in the file's order) against what each of its `n`
/// threads prints, in that thread's order.
fn check_divergent(n: u32, got: &[&str]) {
    let mut want: Vec<Vec<String>> = vec![Vec::new(); n as usize];
    for i in 0..n {
        let tag: String = (0..7).map(|k| (b'a' + ((i + k) % 26) as u8) as char).collect();
        let lines = &mut want[i as usize];
        if i % 3 == 0 {
            lines.extend((0..i % 5).map(|k| format!("div t={i} k={k} {tag}\n")));
        } else if i % 3 == 1 {
            lines.push(format!("div t={i} k=0 {}|{:<9}|\n", &tag[..3], &tag[4..]));
        }
        lines.push(format!("div t={i} end\n"));
    }
    let mut seen: Vec<Vec<&str>> = vec![Vec::new(); n as usize];
    for line in got {
        let t: usize = line
            .strip_prefix("div t=")
            .and_then(|r| r.split(' ').next())
            .and_then(|t| t.parse().ok())
            .filter(|&t: &usize| t < n as usize)
            .unwrap_or_else(|| panic!("a line no thread prints: {line:?}"));
        seen[t].push(line);
    }
    for (t, (s, w)) in seen.iter().zip(&want).enumerate() {
        assert_eq!(s, w, "thread {t}'s lines, in the order they reached the file");
    }
}
