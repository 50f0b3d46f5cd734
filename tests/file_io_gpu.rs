//! The file-I/O kernels of `gpuio-test-kernels` (`kernels-test/src/files/`) end to end: on a CUDA
//! GPU where there is one (the device machine; skipped with a message elsewhere), and the
//! same kernels on the CPU backend (always), so CI runs the kernel code too; each over both
//! submission paths (tests `io_uring::*` and `host_thread::*`).

use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

use gpuio::cuda::Cuda;
use gpuio::{Arg, Backend, Error, Runtime, Sandbox};
use gpuio_test_kernels as k;

#[allow(dead_code)]
mod common;
use common::{skip, Suite, TempDir};

/// The example kernels, built for sm_90 by build.rs.
const PTX: &str = gpuio_kernels_gpu::TEST_PTX;

/// A file-I/O runtime on `backend`, its ring consumed by `sub`, or `None` (reported as a skip of `test`) where that
/// backend cannot run.
fn runtime(test: &str, backend: Backend, sub: Suite) -> Option<Runtime> {
    let mut b = Runtime::builder()
        .backend(backend)
        .submission(sub.submission)
        .rings(sub.rings)
        .solo(sub.solo)
        .sandbox(Sandbox::FileIo)
        // Small, so that the big file is larger than the arena and transfers split.
        .arena_bytes(256 << 10)
        .arena_block_bytes(64 << 10);
    // A GPU's rings always have SQPOLL (it cannot enter them); the CPU backend's as given.
    if backend == Backend::Cpu {
        b = b.sqpoll(sub.sqpoll);
    } else if sub.submission == gpuio::Submission::Inline {
        // Inline is the CPU backend's alone (a GPU's threads make no syscalls): the build
        // must say so, naming the way out.
        match b.build() {
            Err(Error::Config(why)) if why.contains("needs the CPU backend") && why.contains("use auto") => skip(
                test,
                "inline is the CPU backend's alone (the build refuses it on a GPU, as it should)",
            ),
            Err(Error::BackendUnavailable { reason, .. }) => {
                skip(test, &format!("no {} backend here ({reason})", backend.name()))
            }
            Err(e) => panic!("Inline on {backend:?}: {e}"),
            Ok(_) => panic!("Inline on {backend:?} was not refused"),
        }
        return None;
    }
    match b.build() {
        Ok(rt) => Some(rt),
        Err(Error::BackendUnavailable { reason, .. }) => {
            skip(test, &format!("no {} backend here ({reason})", backend.name()));
            None
        }
        Err(e) => panic!("{backend:?} runtime failed: {e}"),
    }
}

/// Memory the kernels address: device memory on a GPU, a host vector on the CPU backend.
enum Mem {
    Host(Vec<u8>),
    Gpu(std::sync::Arc<Cuda>, u64, usize),
}

impl Mem {
    fn new(rt: &Runtime, cuda: Option<&std::sync::Arc<Cuda>>, bytes: &[u8]) -> Mem {
        let _ = rt;
        match cuda {
            None => Mem::Host(bytes.to_vec()),
            Some(c) => {
                let d = c.alloc_zeroed(bytes.len().max(1)).unwrap();
                c.copy_to_device(d, bytes).unwrap();
                Mem::Gpu(c.clone(), d, bytes.len())
            }
        }
    }
    fn addr(&mut self) -> u64 {
        match self {
            Mem::Host(v) => v.as_mut_ptr() as u64,
            Mem::Gpu(_, d, _) => *d,
        }
    }
    fn read(&self) -> Vec<u8> {
        match self {
            Mem::Host(v) => v.clone(),
            Mem::Gpu(c, d, n) => {
                let mut v = vec![0u8; *n];
                c.copy_from_device(&mut v, *d).unwrap();
                v
            }
        }
    }
    fn i64s(&self) -> Vec<i64> {
        self.read()
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Mem::Gpu(c, d, _) = self {
            c.free(*d);
        }
    }
}

/// Runs `file_check` on `grid x block` threads of `backend`; returns false if skipped.
fn file_check(test: &str, backend: Backend, sub: Suite, grid: u32, block: u32, bytes: u32) -> bool {
    let Some(rt) = runtime(test, backend, sub) else {
        return false;
    };
    let dir = TempDir::new(&format!("{backend:?}-check"));
    let shared_path = dir.join("shared");
    let shared = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&shared_path)
        .unwrap();
    let threads = (grid * block) as usize;
    let module = (backend == Backend::Cuda).then(|| rt.load_module(PTX).unwrap());
    let cuda = module.as_ref().and_then(|m| m.cuda().cloned());
    let dir_bytes = dir.path().to_str().unwrap().as_bytes().to_vec();
    let mut dir_mem = Mem::new(&rt, cuda.as_ref(), &dir_bytes);
    let mut scratch = Mem::new(&rt, cuda.as_ref(), &vec![0u8; threads * 2 * bytes as usize]);
    let mut results = Mem::new(&rt, cuda.as_ref(), &vec![0xffu8; threads * 8]);
    let (d, dl, fd, s, r) = (
        dir_mem.addr(),
        dir_bytes.len() as u32,
        shared.as_raw_fd(),
        scratch.addr(),
        results.addr(),
    );
    let started = std::time::Instant::now();
    match &module {
        Some(m) => m
            .launch(
                "file_check",
                grid,
                block,
                &[
                    Arg::U64(d),
                    Arg::U32(dl),
                    Arg::U32(fd as u32),
                    Arg::U32(bytes),
                    Arg::U64(s),
                    Arg::U64(r),
                ],
            )
            .unwrap(),
        None => rt
            .launch(grid, block, move || k::file_check(d, dl, fd, bytes, s, r))
            .unwrap(),
    }
    rt.synchronize().unwrap();
    let elapsed = started.elapsed();
    let codes = results.i64s();
    let failed: Vec<(usize, i64)> = codes.iter().copied().enumerate().filter(|&(_, c)| c != 0).collect();
    assert!(
        failed.is_empty(),
        "{} of {threads} threads failed, first (thread, step*1000+errno): {:?}",
        failed.len(),
        &failed[..failed.len().min(8)]
    );
    // The host reads the same bytes: per-thread files and the shared one.
    let all = std::fs::read(&shared_path).unwrap();
    assert_eq!(all.len(), threads * bytes as usize);
    let mut want = vec![0u8; bytes as usize];
    for t in 0..threads {
        k::random_fill(t as u64, &mut want);
        assert!(
            std::fs::read(dir.join(&format!("t{t}"))).unwrap() == want,
            "file t{t} differs"
        );
        let at = t * bytes as usize;
        assert!(
            all[at..at + bytes as usize] == want[..],
            "shared range of thread {t} differs"
        );
    }
    eprintln!(
        "{backend:?}: {threads} threads wrote, fsynced and read back {threads} files and one shared file \
         of {} bytes each ({:.1} MB in all, {elapsed:.2?}): all bytes correct",
        bytes,
        2.0 * (threads * bytes as usize) as f64 / 1e6
    );
    true
}

/// Runs `file_errors` on one thread of `backend`.
fn file_errors(test: &str, backend: Backend, sub: Suite) -> bool {
    let Some(rt) = runtime(test, backend, sub) else {
        return false;
    };
    let dir = TempDir::new(&format!("{backend:?}-errors"));
    std::fs::write(dir.join("ten"), b"0123456789").unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, b"secret").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
    let module = (backend == Backend::Cuda).then(|| rt.load_module(PTX).unwrap());
    let cuda = module.as_ref().and_then(|m| m.cuda().cloned());
    let dir_bytes = dir.path().to_str().unwrap().as_bytes().to_vec();
    let big_len = (1usize << 20) + 17; // 1 MiB + 17 through a 256 KiB arena
    let mut dir_mem = Mem::new(&rt, cuda.as_ref(), &dir_bytes);
    let mut big = Mem::new(&rt, cuda.as_ref(), &vec![0u8; big_len]);
    let mut out = Mem::new(&rt, cuda.as_ref(), &[0u8; 16 * 8]);
    let (d, dl, b, o) = (dir_mem.addr(), dir_bytes.len() as u32, big.addr(), out.addr());
    match &module {
        Some(m) => m
            .launch(
                "file_errors",
                1,
                1,
                &[
                    Arg::U64(d),
                    Arg::U32(dl),
                    Arg::U64(b),
                    Arg::U64(big_len as u64),
                    Arg::U64(o),
                ],
            )
            .unwrap(),
        None => rt
            .launch(1, 1, move || k::file_errors(d, dl, b, big_len as u64, o))
            .unwrap(),
    }
    rt.synchronize().unwrap();
    let out = out.i64s();
    let e = |n: i32| -(n as i64);
    assert_eq!(out[0], e(libc::EBADF), "invalid fd");
    assert_eq!(out[1], e(libc::ENOENT), "missing path");
    assert_eq!(
        (out[2], out[3]),
        (4, i64::from(u32::from_le_bytes(*b"6789"))),
        "short read at the end"
    );
    assert_eq!((out[4], out[5]), (k::EOF_CODE, 6), "read_exact_at past the end");
    assert_eq!(out[6], 0, "read at the end");
    // SAFETY: geteuid only reads.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        // Root opens a mode-000 file (CAP_DAC_OVERRIDE); tests/file_io/errors.rs covers EACCES
        // with a child that drops to nobody.
        assert!(out[7] >= 0, "root opens mode 000: {}", out[7]);
    } else {
        assert_eq!(out[7], e(libc::EACCES), "permission denied");
    }
    assert_eq!((out[8], out[9]), (big_len as i64, 1), "file larger than the arena");
    assert_eq!(out[10], e(libc::EBADF), "write to a read-only fd");
    let mut want = vec![0u8; big_len];
    k::random_fill(42, &mut want);
    assert!(
        std::fs::read(dir.join("big")).unwrap() == want,
        "big file differs on disk"
    );
    eprintln!(
        "{backend:?}: EBADF, ENOENT, short read, EOF with count 6, read at end, {}, 1 MiB + 17 through a \
         256 KiB arena, write to a read-only fd: all as expected",
        if root { "mode 000 opened as root" } else { "EACCES" }
    );
    true
}

over_submissions!(
    cpu_backend_runs_the_file_kernels,
    gpu_threads_write_fsync_and_read_back_files,
    gpu_file_errors_reach_the_thread,
);

fn cpu_backend_runs_the_file_kernels(sub: Suite) {
    let test = format!("{}::cpu_backend_runs_the_file_kernels", sub.name());
    assert!(file_check(&test, Backend::Cpu, sub, 4, 16, 5000));
    assert!(file_errors(&test, Backend::Cpu, sub));
}

fn gpu_threads_write_fsync_and_read_back_files(sub: Suite) {
    let test = format!("{}::gpu_threads_write_fsync_and_read_back_files", sub.name());
    file_check(&test, Backend::Cuda, sub, 32, 64, 8192);
}

fn gpu_file_errors_reach_the_thread(sub: Suite) {
    let test = format!("{}::gpu_file_errors_reach_the_thread", sub.name());
    file_errors(&test, Backend::Cuda, sub);
}
