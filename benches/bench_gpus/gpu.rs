//! One GPU: its runtime, its modules, its page-cached file and device memory for the pread
//! case; the file's bytes, and the cases run on several GPUs at once.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use gpuio::cuda::Cuda;
use gpuio::{Arg, Backend, Error, GpuModule, Runtime, Sandbox};

use crate::{Case, Print, CLI};

/// One GPU: its runtime, its modules, its file and device memory for the pread case.
pub(crate) struct Gpu {
    pub(crate) index: u32,
    // Declared before `rt`: the modules go first.
    print: GpuModule<'static>,
    files: GpuModule<'static>,
    pub(crate) cuda: Arc<Cuda>,
    pub(crate) rt: &'static Runtime,
    pub(crate) file: File,
    path: PathBuf,
    pub(crate) dev: u64,
    errors: u64,
}

impl Gpu {
    pub(crate) fn open(
        index: u32,
        rings: u32,
        sq_entries: u32,
        (arena, block): (usize, usize),
        size: usize,
        dir: &std::path::Path,
    ) -> Gpu {
        let rt = match Runtime::builder()
            .backend(Backend::Cuda)
            .gpu(index)
            .rings(rings)
            .sq_entries(sq_entries)
            .sandbox(Sandbox::FileIo)
            .arena_bytes(arena)
            .arena_block_bytes(block)
            .stdout_fd(devnull().as_raw_fd())
            .build()
        {
            Ok(rt) => rt,
            Err(e @ Error::Config(_)) => CLI.fail(&e.to_string()),
            Err(e) => panic!("GPU {index}: runtime: {e}"),
        };
        // The runtimes live as long as the process: `'static` modules borrow them.
        let rt: &'static Runtime = Box::leak(Box::new(rt));
        let print = rt
            .load_matching(gpuio_kernels_gpu::NVPTX)
            .expect("load the print kernels");
        let files = rt
            .load_matching(gpuio_kernels_gpu::TEST_NVPTX)
            .expect("load the file kernels");
        let cuda = files.cuda().expect("a CUDA module").clone();
        let path = dir.join(format!("gpuio-bench-gpus-{}-{index}", std::process::id()));
        let file = write_cached(&path, size, index);
        let dev = cuda.alloc_zeroed(size).expect("device memory");
        let errors = cuda.alloc_zeroed(8).expect("device memory");
        Gpu {
            index,
            print,
            files,
            cuda,
            rt,
            file,
            path,
            dev,
            errors,
        }
    }

    /// Runs the case's kernel and waits for it; lines lost, if any, are an error.
    fn run(&self, case: Case, p: &Print, size: usize) -> Result<(), String> {
        match case {
            Case::Print => self
                .print
                .launch("stress", p.threads / 256, 256, &[p.lines.into(), p.width.into()])
                .map_err(|e| e.to_string())?,
            Case::Pread => self
                .files
                .launch(
                    "pread_bulk",
                    p.readers.div_ceil(128),
                    p.readers.min(128),
                    &[
                        Arg::U32(self.file.as_raw_fd() as u32),
                        Arg::U64(self.dev),
                        Arg::U64(size as u64),
                        Arg::U64(1 << 20),
                        Arg::U64(self.errors),
                    ],
                )
                .map_err(|e| e.to_string())?,
        }
        match self.rt.synchronize() {
            Ok(()) => Ok(()),
            Err(Error::Print(p)) => Err(format!("lost lines: {p}")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Whether the device memory holds the file's bytes and no read failed.
    pub(crate) fn check(&self, size: usize) -> bool {
        let mut errors = [0u8; 8];
        self.cuda.copy_from_device(&mut errors, self.errors).expect("copy");
        let errors = u64::from_le_bytes(errors);
        if errors != 0 {
            eprintln!("bench_gpus: GPU {}: {errors} failed reads", self.index);
            return false;
        }
        let (mut got, mut want) = (vec![0u8; 16 << 20], vec![0u8; 16 << 20]);
        let mut at = 0;
        while at < size {
            let n = got.len().min(size - at);
            self.cuda
                .copy_from_device(&mut got[..n], self.dev + at as u64)
                .expect("copy");
            pattern(self.index, at, &mut want[..n]);
            if got[..n] != want[..n] {
                eprintln!("bench_gpus: GPU {}: wrong bytes in [{at}, {})", self.index, at + n);
                return false;
            }
            at += n;
        }
        true
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        self.cuda.free(self.dev);
        self.cuda.free(self.errors);
        let _ = std::fs::remove_file(&self.path);
    }
}

fn devnull() -> &'static File {
    static NULL: std::sync::OnceLock<File> = std::sync::OnceLock::new();
    NULL.get_or_init(|| {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .expect("/dev/null")
    })
}

/// Bytes unique to GPU `gpu`'s file at each offset, so that a GPU that read another's file
/// fails its check.
pub(crate) fn pattern(gpu: u32, at: usize, buf: &mut [u8]) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let v = ((at / 8 + i) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(gpu);
        chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
    }
}

/// A file of `size` bytes of GPU `index`'s pattern, read once so that it is page-cached.
fn write_cached(path: &std::path::Path, size: usize, index: u32) -> File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap_or_else(|e| CLI.fail(&format!("{}: {e}", path.display())));
    let mut buf = vec![0u8; 16 << 20];
    let mut at = 0;
    while at < size {
        let n = buf.len().min(size - at);
        pattern(index, at, &mut buf[..n]);
        f.write_all_at(&buf[..n], at as u64).expect("write");
        at += n;
    }
    let mut at = 0;
    while at < size {
        at += f.read_at(&mut buf, at as u64).expect("read");
    }
    f
}

/// Runs the case on `gpus` at once, each from its own host thread; seconds from before the
/// first launch to after the last synchronize.
pub(crate) fn together(gpus: &[&Gpu], case: Case, p: &Print, size: usize) -> Result<f64, String> {
    let t0 = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = gpus.iter().map(|g| s.spawn(move || g.run(case, p, size))).collect();
        handles.into_iter().map(|h| h.join().expect("runner thread")).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    for (g, r) in gpus.iter().zip(results) {
        r.map_err(|e| format!("GPU {}: {e}", g.index))?;
    }
    Ok(secs)
}
