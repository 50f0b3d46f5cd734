//! A cudarc program with gpuio: the example kernels loaded by cudarc, gpuio attached to
//! their module, kernels launched by cudarc on a non-blocking stream of its own; their
//! lines come out through gpuio, and a kernel that hangs on that stream is reported by the
//! watchdog, then waited out once released. Built with the `cudarc` feature
//! (`cargo test --release --features cudarc,cudarc/cuda-12080 --test gpu -- cudarc`); without it, or
//! on the CPU configuration, the suite says SKIPPED and why ([`cudarc_unavailable`]).

use crate::harness::{Config, Scratch};
use crate::Outcome;

/// Why the cudarc case cannot run in `config` here, if it cannot.
pub(crate) fn cudarc_unavailable(config: Config) -> Option<String> {
    if !cfg!(feature = "cudarc") {
        return Some("built without the cudarc feature (--features cudarc,cudarc/cuda-12080 builds it)".into());
    }
    if !config.gpu() {
        return Some("cudarc launches on a CUDA GPU; the cpu configuration has none".into());
    }
    None
}

#[cfg(not(feature = "cudarc"))]
pub(crate) fn cudarc_launches_print_and_a_hang_on_its_stream_is_reported(_: Config, _: &Scratch) -> Outcome {
    Err("unreachable: the harness skips this case without the cudarc feature".into())
}

#[cfg(not(feature = "cudarc"))]
pub(crate) fn cudarc_slices_and_streams_in_typed_launches(_: Config, _: &Scratch) -> Outcome {
    Err("unreachable: the harness skips this case without the cudarc feature".into())
}

#[cfg(not(feature = "cudarc"))]
pub(crate) fn cudarc_a_refused_launch_and_a_synchronize_naming_another_stream(_: Config, _: &Scratch) -> Outcome {
    Err("unreachable: the harness skips this case without the cudarc feature".into())
}

/// Two promises of typed launches on cudarc's streams at their edges. A launch CUDA
/// refuses (2,048 threads a block) returns its error and leaves cudarc's slices as they
/// were: cudarc reads them back at once (the after-launch steps ran), and the next launch
/// works. And `synchronize_streams` naming one stream still waits for gpuio's launch on
/// another (its launch memory and lines are the runtime's): when it returns, the other
/// stream's kernel has printed all its lines and ended.
#[cfg(feature = "cudarc")]
pub(crate) fn cudarc_a_refused_launch_and_a_synchronize_naming_another_stream(
    config: Config,
    scratch: &Scratch,
) -> Outcome {
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    use cudarc::driver::CudaContext;
    use gpuio_test_kernels as k;

    use crate::kernels::{build, Kernels};

    let (out, out_path) = scratch.file("streams-out");
    let rt = build(config.builder().gpu(0).stdout_fd(out.as_raw_fd()))?;
    let kernels = Kernels::load(&rt)?;
    let kernels = kernels.gpuio();
    let ctx = CudaContext::new(0).map_err(|e| format!("cudarc's context: {e:?}"))?;
    let (a, b) = (
        ctx.new_stream().map_err(|e| format!("stream a: {e:?}"))?,
        ctx.new_stream().map_err(|e| format!("stream b: {e:?}"))?,
    );
    let n = 64usize;
    let x: Vec<u64> = (0..n as u64).collect();
    let x_dev = a.clone_htod(&x).map_err(|e| format!("x to the GPU: {e:?}"))?;
    let mut squares = a.alloc_zeros::<u64>(n).map_err(|e| format!("squares: {e:?}"))?;
    let mut halves = a.alloc_zeros::<f32>(n).map_err(|e| format!("halves: {e:?}"))?;
    let too_wide = cudarc::driver::LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (2048, 1, 1),
        shared_mem_bytes: 0,
    };
    let refused = match kernels.launch_on(&a, k::squares_into, too_wide, (&x_dev, &mut squares, &mut halves)) {
        Err(e) => e.to_string(),
        Ok(()) => return Err("a launch of 2,048 threads a block was taken".into()),
    };
    let untouched: Vec<u64> = a
        .clone_dtoh(&squares)
        .map_err(|e| format!("squares back after the refusal: {e:?}"))?;
    if untouched.iter().any(|&v| v != 0) {
        return Err(format!("a refused launch wrote {untouched:?}"));
    }
    let cfg = cudarc::driver::LaunchConfig::for_num_elems(n as u32);
    kernels
        .launch_on(&a, k::squares_into, cfg, (&x_dev, &mut squares, &mut halves))
        .map_err(|e| format!("the launch after the refusal: {e}"))?;
    let sq: Vec<u64> = a.clone_dtoh(&squares).map_err(|e| format!("squares back: {e:?}"))?;
    if let Some(i) = (0..n).find(|&i| sq[i] != x[i] * x[i] + i as u64) {
        return Err(format!("after the refusal, element {i} is {}", sq[i]));
    }
    // gpuio's launch on b, waited for by a synchronize that names a.
    let idle = Duration::from_millis(300);
    let started = Instant::now();
    kernels
        .launch_on(
            &b,
            k::idle_then_print,
            gpuio::LaunchConfig::new(1, 32),
            (idle.as_nanos() as u64,),
        )
        .map_err(|e| format!("the launch on b: {e}"))?;
    rt.synchronize_streams(&[&a])
        .map_err(|e| format!("synchronize naming a: {e}"))?;
    let waited = started.elapsed();
    let text = std::fs::read_to_string(&out_path).map_err(|e| format!("the output file: {e}"))?;
    if let Some(t) = (0..32).find(|t| !text.contains(&format!("t={t} i=0\n"))) {
        return Err(format!(
            "synchronize_streams(&[&a]) returned after {waited:?} with thread {t}'s line of the kernel on b missing: {text:?}"
        ));
    }
    if waited < idle {
        return Err(format!(
            "synchronize_streams(&[&a]) returned after {waited:?}, before b's kernel could end"
        ));
    }
    Ok(format!(
        "a launch of 2,048 threads a block refused ({}), cudarc's slices untouched and the next launch right; synchronize_streams naming a waited {waited:?} for gpuio's 300 ms kernel on b, its 32 lines out",
        refused.lines().next().unwrap_or("")
    ))
}

/// cudarc's habits in gpuio's typed launches: `&CudaSlice<u64>` for a `&[u64]` parameter and
/// `&mut CudaSlice<T>` for `Out<T>` ones (no copies), cudarc's `LaunchConfig`, and a launch
/// on cudarc's non-blocking stream. The input is written by cudarc on that stream and the
/// results read back by cudarc on it, with no synchronize between: cudarc's events alone
/// order them with gpuio's kernels, on the null stream and on the named one.
#[cfg(feature = "cudarc")]
pub(crate) fn cudarc_slices_and_streams_in_typed_launches(config: Config, _: &Scratch) -> Outcome {
    use cudarc::driver::CudaContext;
    use gpuio_test_kernels as k;

    use crate::kernels::{build, Kernels};

    let rt = build(config.builder().gpu(0))?;
    let kernels = Kernels::load(&rt)?;
    let kernels = kernels.gpuio();
    let ctx = CudaContext::new(0).map_err(|e| format!("cudarc's context: {e:?}"))?;
    let stream = ctx.new_stream().map_err(|e| format!("a non-blocking stream: {e:?}"))?;
    let n = 5000usize;
    let mut rounds = Vec::new();
    for (round, on_stream) in [(1u64, false), (2, true)] {
        let x: Vec<u64> = (0..n as u64).map(|i| i * 7 + round).collect();
        let x_dev = stream.clone_htod(&x).map_err(|e| format!("x to the GPU: {e:?}"))?;
        let mut squares = stream.alloc_zeros::<u64>(n).map_err(|e| format!("squares: {e:?}"))?;
        let mut halves = stream.alloc_zeros::<f32>(n + 3).map_err(|e| format!("halves: {e:?}"))?;
        let args = (&x_dev, &mut squares, &mut halves);
        let launched = if on_stream {
            let cfg = cudarc::driver::LaunchConfig::for_num_elems(n as u32);
            kernels.launch_on(&stream, k::squares_into, cfg, args)
        } else {
            kernels.launch(k::squares_into, gpuio::LaunchConfig::for_num_elems(n as u32), args)
        };
        launched.map_err(|e| format!("launch (round {round}): {e}"))?;
        let sq: Vec<u64> = stream
            .clone_dtoh(&squares)
            .map_err(|e| format!("squares back: {e:?}"))?;
        let hv: Vec<f32> = stream.clone_dtoh(&halves).map_err(|e| format!("halves back: {e:?}"))?;
        rt.synchronize_streams(&[&stream])
            .map_err(|e| format!("synchronize (round {round}): {e}"))?;
        for i in 0..n {
            if sq[i] != x[i] * x[i] + i as u64 || hv[i] != x[i] as f32 / 2.0 {
                return Err(format!(
                    "round {round}, element {i}: {} and {}, from x = {} (read by cudarc right after the launch)",
                    sq[i], hv[i], x[i]
                ));
            }
        }
        if hv[n..] != [0.0; 3] {
            return Err(format!("round {round}: elements nothing wrote are {:?}", &hv[n..]));
        }
        rounds.push(if on_stream {
            "on cudarc's stream"
        } else {
            "on the null stream"
        });
    }
    Ok(format!(
        "{n} elements from CudaSlices, results into CudaSlices, read back by cudarc with no synchronize between, {}",
        rounds.join(" and ")
    ))
}

#[cfg(feature = "cudarc")]
pub(crate) fn cudarc_launches_print_and_a_hang_on_its_stream_is_reported(config: Config, scratch: &Scratch) -> Outcome {
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use cudarc::driver::{CudaContext, DevicePtr, LaunchConfig, PushKernelArg};
    use gpuio::Error;

    // The example kernels' PTX for this configuration's scheduling, loaded by cudarc.
    let arch = if config == Config::Lockstep { "sm_60" } else { "sm_90" };
    let Some((_, ptx)) = gpuio_kernels_gpu::NVPTX.iter().find(|(a, _)| *a == arch) else {
        return Err(format!(
            "no {arch} PTX was built (GPUIO_GPU_TARGETS=sm_90,sm_60 builds both)"
        ));
    };
    let (out, out_path) = scratch.file("cudarc-out");
    let rt = config
        .builder()
        .gpu(0)
        .stdout_fd(out.as_raw_fd())
        .hang_timeout(Some(Duration::from_secs(2)))
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let ctx = CudaContext::new(0).map_err(|e| format!("cudarc's context: {e:?}"))?;
    let stream = ctx.new_stream().map_err(|e| format!("a non-blocking stream: {e:?}"))?;
    let text = std::str::from_utf8(ptx.strip_suffix(&[0]).unwrap_or(ptx)).map_err(|e| format!("PTX text: {e}"))?;
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(text))
        .map_err(|e| format!("cudarc loads the PTX: {e:?}"))?;
    let hello = module.load_function("hello").map_err(|e| format!("hello: {e:?}"))?;
    let wait = module
        .load_function("wait_for_flag")
        .map_err(|e| format!("wait_for_flag: {e:?}"))?;
    rt.attach_cudarc(&hello).map_err(|e| format!("attach: {e}"))?;

    // Lines from a kernel cudarc launched on its own non-blocking stream.
    rt.prepare_external_launch().map_err(|e| format!("prepare: {e}"))?;
    let cfg = LaunchConfig {
        grid_dim: (4, 1, 1),
        block_dim: (64, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `hello` takes no parameters.
    unsafe { stream.launch_builder(&hello).launch(cfg) }.map_err(|e| format!("launch hello: {e:?}"))?;
    rt.synchronize_streams(&[&stream])
        .map_err(|e| format!("synchronize the stream: {e}"))?;
    let text = std::fs::read_to_string(&out_path).map_err(|e| format!("the output file: {e}"))?;
    if let Some(t) = (0..256).find(|t| !text.contains(&format!("hello from thread {t} of 256\n"))) {
        return Err(format!("thread {t}'s line missing: {text}"));
    }

    // A kernel that hangs on that stream: reported by both waits, then waited out once
    // released.
    let mut flag = stream.alloc_zeros::<u32>(1).map_err(|e| format!("a flag: {e:?}"))?;
    let addr = flag.device_ptr(&stream).0;
    rt.prepare_external_launch().map_err(|e| format!("prepare: {e}"))?;
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `wait_for_flag` takes one u64, the address of a live u32 (`flag`, freed after
    // the kernel ended).
    unsafe { stream.launch_builder(&wait).arg(&addr).launch(one) }
        .map_err(|e| format!("launch wait_for_flag: {e:?}"))?;
    let mut reports = Vec::new();
    for (what, result) in [
        ("named", rt.synchronize_streams(&[&stream])),
        ("every stream", rt.synchronize()),
    ] {
        match result {
            Err(Error::Hang(report)) => reports.push(format!(
                "{what}: {}",
                report.to_string().split(';').next().unwrap_or("")
            )),
            other => {
                return Err(format!(
                    "a hang on the stream ({what}): expected Error::Hang, got {other:?}"
                ))
            }
        }
    }
    let side = ctx.new_stream().map_err(|e| format!("another stream: {e:?}"))?;
    side.memcpy_htod(&[1u32], &mut flag)
        .map_err(|e| format!("release the flag: {e:?}"))?;
    side.synchronize().map_err(|e| format!("the release landed: {e:?}"))?;
    rt.synchronize_streams(&[&stream])
        .map_err(|e| format!("waited out once released: {e}"))?;
    let text = std::fs::read_to_string(&out_path).map_err(|e| format!("the output file: {e}"))?;
    if let Some(t) =
        (0..32).find(|t| !text.contains(&format!("waiting t={t}\n")) || !text.contains(&format!("released t={t}\n")))
    {
        return Err(format!("the hung kernel's thread {t}: a line missing: {text}"));
    }
    Ok(format!(
        "{arch} PTX loaded by cudarc: 256 lines from a kernel on a non-blocking stream; a kernel hung there reported as Error::Hang after 2 s ({}); released, its 32 lanes' 64 lines out",
        reports.join("; ")
    ))
}
