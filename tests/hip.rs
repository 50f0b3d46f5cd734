//! HIP hosts (the `hip` feature): a program loads a gpuio code object itself with
//! `hipModuleLoadData`, attaches it to a runtime on the HSA backend, launches its kernels
//! both through HIP and through gpuio, and every line comes out once.
//!
//! Without an AMD GPU, HIP reports that it finds none (`hipErrorNoDevice` where the
//! library loads without `/dev/kfd`), and the test stops there, saying so; it still checks
//! what a host meets then: attaching to a runtime on the CPU backend is refused with the
//! reason. CI builds this against Debian's `libamdhip64-dev` (`HIP_PATH=/usr`).

use std::ffi::c_void;
use std::os::fd::AsRawFd;

use gpuio::hip::{self, sys};
use gpuio::{Backend, Error, Runtime};

#[allow(dead_code)]
mod common;
use common::c_hosts::{build_capi, compile, compiler, pc_fields, root, toolchain_here, words};
use common::skip;

/// The example kernels for every AMD GPU build.rs built for: `(processor, code object)`.
const KERNELS: &[(&str, &[u8])] = gpuio_kernels_gpu::AMDGCN;

fn hip_ok(e: sys::hipError_t, what: &str) {
    assert_eq!(e, sys::hipError_t::hipSuccess, "{what}");
}

#[test]
fn a_module_loaded_with_hip_prints_through_the_runtime() {
    const TEST: &str = "a_module_loaded_with_hip_prints_through_the_runtime";
    let devices = match hip::device_count() {
        Ok(n) => n,
        Err(e) if hip::is_no_device(&e) => {
            // What a HIP host meets here: the runtime falls back to the CPU, and attaching
            // says why it cannot.
            let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
            let mut fake = 0u64;
            // SAFETY: refused before the module is used: the runtime is not on HSA.
            let refused = unsafe { rt.attach_hip_module(&mut fake as *mut u64 as *mut c_void, 0) };
            match refused {
                Err(Error::BackendUnavailable { backend: "hsa", reason }) => {
                    assert!(reason.contains("cpu backend"), "{reason}")
                }
                Err(e) => panic!("expected BackendUnavailable, got {e}"),
                Ok(_) => panic!("a CPU runtime attached a HIP module"),
            }
            skip(TEST, &format!("HIP finds no GPU here ({e})"));
            return;
        }
        Err(e) => panic!("HIP failed otherwise than finding no GPU: {e}"),
    };
    assert!(devices > 0, "HIP reports success with 0 devices");

    let dir = std::env::temp_dir().join(format!("gpuio-hip-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("stress.txt");
    let file = std::fs::File::create(&path).unwrap();
    let rt = Runtime::builder()
        .backend(Backend::Hsa)
        .stdout_fd(file.as_raw_fd())
        .build()
        .expect("HIP sees a GPU, so the HSA backend runs");
    let processor = rt.gpu_arch().expect("an HSA runtime has a processor").to_owned();
    let Some((_, image)) = KERNELS.iter().find(|(p, _)| *p == processor) else {
        panic!("this AMD GPU, {processor}, has no code object in this build: add it to kernels-gpu/build.rs");
    };
    let mut module: sys::hipModule_t = std::ptr::null_mut();
    // SAFETY: device 0 exists (counted above); `image` is a whole code object, and HIP
    // copies it; `module` is an out-pointer.
    unsafe {
        hip_ok(sys::hipSetDevice(0), "hipSetDevice");
        hip_ok(
            sys::hipModuleLoadData(&mut module, image.as_ptr() as *const c_void),
            "hipModuleLoadData",
        );
    }
    // SAFETY: loaded on device 0 just now, unloaded only after the runtime is dropped;
    // `stress` takes (u32, u32), as launched below.
    let m = unsafe { rt.attach_hip_module(module as *mut c_void, 0) }.expect("attach");

    let (grid, block, lines, width) = (16u32, 256u32, 8u32, 40u32);
    // The host launches through HIP itself...
    rt.prepare_external_launch().unwrap();
    let mut f: sys::hipFunction_t = std::ptr::null_mut();
    let (mut a, mut b) = (lines, width);
    let mut params = [&mut a as *mut u32 as *mut c_void, &mut b as *mut u32 as *mut c_void];
    // SAFETY: `stress(lines: u32, width: u32)`; the parameters live across the call.
    unsafe {
        hip_ok(
            sys::hipModuleGetFunction(&mut f, module, c"stress".as_ptr()),
            "hipModuleGetFunction",
        );
        hip_ok(
            sys::hipModuleLaunchKernel(
                f,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
            "hipModuleLaunchKernel",
        );
    }
    // ...and through gpuio.
    m.launch("stress", grid, block, &[lines.into(), width.into()]).unwrap();
    rt.synchronize().expect("both launches and their prints");
    drop(m);
    drop(rt);
    // SAFETY: no kernel of it runs, and nothing refers to it any more.
    hip_ok(unsafe { sys::hipModuleUnload(module) }, "hipModuleUnload");

    let text = std::fs::read_to_string(&path).unwrap();
    let threads = (grid * block) as usize;
    let mut seen = vec![0u32; threads * lines as usize];
    for line in text.lines() {
        assert_eq!(line.len() + 1, width as usize, "padded: {line:?}");
        let (t, i) = common::stress_line(line);
        seen[t * lines as usize + i as usize] += 1;
    }
    assert!(seen.iter().all(|&n| n == 2), "each line once per launch");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_c_host_attaches_a_module_it_loaded_with_hip() {
    const TEST: &str = "a_c_host_attaches_a_module_it_loaded_with_hip";
    let _watchdog = common::watchdog(TEST, 600);
    if !toolchain_here(TEST) {
        return;
    }
    let b = build_capi(&["hip"]);
    let pc = pc_fields(&b.libdir.join("gpuio.pc"));
    let exe = b.bin.join("hip_host");
    let mut args = words("-std=c99 -Wall -Wextra -Werror -D__HIP_PLATFORM_AMD__");
    args.extend(words(&pc["Cflags"]));
    // HIP's headers and library: under HIP_PATH (ROCm's /opt/rocm), or the system's
    // (Debian's libamdhip64-dev).
    let hip_path = std::env::var("HIP_PATH").ok().filter(|p| p != "/usr");
    if let Some(p) = &hip_path {
        args.push(format!("-I{p}/include"));
    }
    args.push(root().join("tests/capi/hip_host.c").display().to_string());
    args.push(b.libdir.join("libgpuio.a").display().to_string());
    args.extend(words(&pc["Libs.private"]));
    if let Some(p) = &hip_path {
        args.extend([format!("-L{p}/lib"), format!("-Wl,-rpath,{p}/lib")]);
    }
    args.extend(["-lamdhip64".into(), "-o".into(), exe.display().to_string()]);
    compile(&compiler(false), &args);

    // The code object for this GPU, where there is one (without a GPU the host stops
    // before reading it).
    let processor = Runtime::builder()
        .backend(Backend::Hsa)
        .build()
        .ok()
        .and_then(|rt| rt.gpu_arch().map(str::to_owned));
    let image = match &processor {
        Some(p) => KERNELS
            .iter()
            .find(|(k, _)| k == p)
            .map(|(_, i)| *i)
            .unwrap_or_else(|| {
                panic!("this AMD GPU, {p}, has no code object in this build: add it to kernels-gpu/build.rs")
            }),
        None => KERNELS.first().map(|(_, i)| *i).unwrap_or_default(),
    };
    let image_path = b.bin.join(format!("hip_host-{}.hsaco", std::process::id()));
    std::fs::write(&image_path, image).unwrap();
    let out = std::process::Command::new(&exe)
        .arg(&image_path)
        .env_remove("GPUIO_BACKEND")
        .output()
        .expect("run hip_host");
    std::fs::remove_file(&image_path).ok();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    match out.status.code() {
        Some(77) => {
            let why = stdout
                .lines()
                .find_map(|l| l.strip_prefix("SKIP: "))
                .unwrap_or_else(|| panic!("exit 77 without a SKIP line:\n{stdout}\n{stderr}"));
            assert!(
                stderr.contains("ok: attach to a CPU runtime: GPUIO_ERROR_BACKEND_UNAVAILABLE"),
                "{stderr}"
            );
            skip(TEST, &format!("the C host ran until {why}"));
        }
        Some(0) => {
            let mut seen = vec![0u32; 128 * 4];
            for line in stdout.lines() {
                let (t, i) = common::stress_line(line);
                seen[t * 4 + i as usize] += 1;
            }
            assert!(seen.iter().all(|&n| n == 1), "each line once:\n{stdout}\n{stderr}");
        }
        _ => panic!("hip_host failed ({}):\n{stdout}\n{stderr}", out.status),
    }
}
