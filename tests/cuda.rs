//! The CUDA backend end to end: GPU threads print through io_uring. Skips, saying why,
//! where no CUDA GPU is present (CI); run on the device machine (see BENCHMARKS.md and the
//! issue notes for what it printed there).

use std::os::fd::AsRawFd;

use gpuio::{Backend, Error, Runtime};

#[allow(dead_code)]
mod common;
use common::skip;

/// The example kernels, built for sm_90 by build.rs.
const PTX: &str = gpuio_kernels_gpu::PTX;

/// A CUDA runtime printing to `fd`, or `None` (reported as a skip of `test`) without a
/// CUDA GPU.
fn gpu_runtime(test: &str, fd: i32) -> Option<Runtime> {
    match Runtime::builder().backend(Backend::Cuda).stdout_fd(fd).build() {
        Ok(rt) => Some(rt),
        Err(Error::BackendUnavailable { reason, .. }) => {
            skip(test, &format!("no CUDA GPU ({reason})"));
            None
        }
        Err(e) => panic!("CUDA runtime failed: {e}"),
    }
}

fn temp_file(name: &str) -> (std::fs::File, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("gpuio-cuda-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    (std::fs::File::create(&path).unwrap(), path)
}

#[test]
fn gpu_threads_print_every_line_exactly_once_in_order() {
    let (f, path) = temp_file("stress.txt");
    let Some(rt) = gpu_runtime("gpu_threads_print_every_line_exactly_once_in_order", f.as_raw_fd()) else {
        return;
    };
    let (grid, block, lines) = (64u32, 256u32, 16u32);
    let m = rt.load_module(PTX).unwrap();
    m.launch("stress", grid, block, &[lines.into(), 40u32.into()]).unwrap();
    rt.synchronize().unwrap();
    drop(m);
    drop(rt);
    let text = std::fs::read_to_string(path).unwrap();
    let threads = (grid * block) as usize;
    let mut next = vec![0u32; threads];
    for line in text.lines() {
        assert_eq!(line.len() + 1, 40, "padded to 40 bytes: {line:?}");
        let (t, i) = common::stress_line(line);
        assert_eq!(i, next[t], "thread {t}: out of order or duplicated");
        next[t] += 1;
    }
    assert!(next.iter().all(|&n| n == lines), "lines lost");
    eprintln!(
        "{} lines from {threads} GPU threads: all present, whole, in order",
        threads * lines as usize
    );
}

#[test]
fn gpu_print_to_a_closed_fd_is_reported() {
    let Some(rt) = gpu_runtime("gpu_print_to_a_closed_fd_is_reported", 1_000_000) else {
        return;
    };
    let m = rt.load_module(PTX).unwrap();
    m.launch("hello", 2, 64, &[]).unwrap();
    match rt.synchronize() {
        Err(Error::Print(p)) => {
            assert_eq!(p.outputs[0].errno, libc::EBADF, "{p}");
            assert_eq!(p.outputs[0].lost_lines, 128, "{p}");
            eprintln!("reported: {p}");
        }
        other => panic!("expected a print error, got {other:?}"),
    }
    rt.synchronize().unwrap();
}

#[test]
fn a_code_object_built_against_another_layout_is_refused() {
    let Some(rt) = gpu_runtime("a_code_object_built_against_another_layout_is_refused", 1) else {
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
