//! A cudarc program with gpuio: the example kernels loaded by cudarc, gpuio attached to
//! their module, kernels launched by cudarc on a non-blocking stream of its own; their
//! lines come out through gpuio, and a kernel that hangs on that stream is reported by
//! the watchdog, then waited out once released. Needs the `cudarc` feature and a CUDA GPU
//! (it says SKIPPED otherwise).
//!
//! cargo test --release --features cudarc --test cudarc -- --nocapture

use std::time::Duration;

use cudarc::driver::{CudaContext, DevicePtr, LaunchConfig, PushKernelArg};
use gpuio::{Backend, Error, Runtime};

#[allow(dead_code)]
mod common;

const TEST: &str = "cudarc_launches_print_and_a_hang_on_its_stream_is_reported";

#[test]
fn cudarc_launches_print_and_a_hang_on_its_stream_is_reported() {
    let Some((_, ptx)) = gpuio_kernels_gpu::NVPTX.iter().find(|(arch, _)| *arch == "sm_90") else {
        common::skip(TEST, "no sm_90 PTX was built (GPUIO_GPU_TARGETS=sm_90 builds it)");
        return;
    };
    let (out, out_path) = common::temp_file("cudarc-out");
    let rt = match Runtime::builder()
        .backend(Backend::Cuda)
        .gpu(0)
        .stdout_fd(std::os::fd::AsRawFd::as_raw_fd(&out))
        .hang_timeout(Some(Duration::from_secs(2)))
        .build()
    {
        Ok(rt) => rt,
        Err(Error::BackendUnavailable { reason, .. }) => {
            common::skip(TEST, &format!("no CUDA GPU ({reason})"));
            return;
        }
        Err(e) => panic!("runtime: {e}"),
    };
    let ctx = CudaContext::new(0).expect("cudarc's context");
    let stream = ctx.new_stream().expect("a non-blocking stream");
    let text = std::str::from_utf8(ptx.strip_suffix(&[0]).unwrap_or(ptx)).expect("PTX text");
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(text))
        .expect("cudarc loads the PTX");
    let hello = module.load_function("hello").expect("hello");
    let wait = module.load_function("wait_for_flag").expect("wait_for_flag");
    rt.attach_cudarc(&hello).expect("attach");

    // Lines from a kernel cudarc launched on its own non-blocking stream.
    rt.prepare_external_launch().expect("prepare");
    let cfg = LaunchConfig {
        grid_dim: (4, 1, 1),
        block_dim: (64, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `hello` takes no parameters.
    unsafe { stream.launch_builder(&hello).launch(cfg) }.expect("launch hello");
    rt.synchronize_streams(&[&stream]).expect("synchronize the stream");
    let text = std::fs::read_to_string(&out_path).expect("the output file");
    for t in 0..256 {
        assert!(
            text.contains(&format!("hello from thread {t} of 256\n")),
            "thread {t}'s line missing: {text}"
        );
    }
    println!("cudarc: 256 lines from a kernel on a non-blocking stream");

    // A kernel that hangs on that stream: reported, then waited out once released.
    let flag = stream.alloc_zeros::<u32>(1).expect("a flag");
    let (addr, _guard) = flag.device_ptr(&stream);
    drop(_guard);
    rt.prepare_external_launch().expect("prepare");
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `wait_for_flag` takes one u64, the address of a live u32.
    unsafe { stream.launch_builder(&wait).arg(&addr).launch(one) }.expect("launch wait_for_flag");
    for (what, result) in [
        ("named", rt.synchronize_streams(&[&stream])),
        ("every stream", rt.synchronize()),
    ] {
        match result {
            Err(Error::Hang(report)) => println!("cudarc: a hang on the stream, {what}: reported: {report}"),
            other => panic!("a hang on the stream ({what}): expected Error::Hang, got {other:?}"),
        }
    }
    let side = ctx.new_stream().expect("another stream");
    let mut flag = flag;
    side.memcpy_htod(&[1u32], &mut flag).expect("release the flag");
    side.synchronize().expect("the release landed");
    rt.synchronize_streams(&[&stream]).expect("waited out once released");
    let text = std::fs::read_to_string(&out_path).expect("the output file");
    for t in 0..32 {
        assert!(
            text.contains(&format!("waiting t={t}\n")) && text.contains(&format!("released t={t}\n")),
            "{text}"
        );
    }
    println!("cudarc: the hung kernel's 32 lanes released, 64 lines out");
}
