//! What the cases share: the kernels on a runtime (a loaded module on CUDA, the host
//! functions on the CPU backend), the memory they read and write, and the checks of what
//! they printed.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use gpuio::cuda::Cuda;
use gpuio::{Builder, GpuModule, Kernel, KernelArgs, LaunchConfig, Runtime, Scheduling};

use crate::harness::Scratch;

/// The example kernels as PTX: `sm_90` and `sm_60` (build.rs).
pub(crate) const NVPTX: &[(&str, &[u8])] = gpuio_kernels_gpu::TEST_NVPTX;

/// The kernels on a runtime (`gpuio::Kernels`: a loaded module on CUDA, the host
/// functions on the CPU), launched typed, with errors as the cases report them.
pub(crate) struct Kernels<'rt> {
    kernels: gpuio::Kernels<'rt>,
}

impl<'rt> Kernels<'rt> {
    pub(crate) fn load(rt: &'rt Runtime) -> Result<Kernels<'rt>, String> {
        let kernels = rt.kernels(NVPTX).map_err(|e| format!("loading the kernels: {e}"))?;
        Ok(Kernels { kernels })
    }

    pub(crate) fn module(&self) -> Option<&GpuModule<'rt>> {
        self.kernels.module()
    }

    pub(crate) fn scheduling(&self) -> String {
        match self.module() {
            None => format!("{} (host threads)", Scheduling::Independent),
            Some(m) => match m.scheduling() {
                Some(s @ Scheduling::Lockstep) => format!("{s} (sm_60 PTX)"),
                Some(s) => format!("{s} (sm_90 PTX)"),
                None => "unknown scheduling".into(),
            },
        }
    }

    /// gpuio's own, for what the cases' wrappers do not cover.
    #[cfg(feature = "cudarc")]
    pub(crate) fn gpuio(&self) -> &gpuio::Kernels<'rt> {
        &self.kernels
    }

    pub(crate) fn cuda(&self) -> Option<&Arc<Cuda>> {
        self.module().and_then(|m| m.cuda())
    }

    /// Launches `kernel` on `grid` blocks of `block` threads with `args`.
    pub(crate) fn launch<F, A>(&self, kernel: Kernel<F>, grid: u32, block: u32, args: A) -> Result<(), String>
    where
        F: Copy + Send + Sync + 'static,
        A: KernelArgs<F>,
    {
        self.launch_with(kernel, LaunchConfig::linear(grid, block), args)
    }

    /// As [`Kernels::launch`], on the blocks and threads of `cfg` (up to three dimensions).
    pub(crate) fn launch_with<F, A>(&self, kernel: Kernel<F>, cfg: LaunchConfig, args: A) -> Result<(), String>
    where
        F: Copy + Send + Sync + 'static,
        A: KernelArgs<F>,
    {
        self.kernels
            .launch(kernel, cfg, args)
            .map_err(|e| format!("launching {}: {e}", kernel.name()))
    }
}

/// Memory a kernel reads or writes: device memory on a GPU, a host vector on the CPU.
pub(crate) enum Mem {
    Host(Vec<u8>),
    Gpu(Arc<Cuda>, u64, usize),
}

impl Mem {
    /// `bytes`, in the kernels' memory (device memory on a GPU).
    pub(crate) fn from_bytes(k: &Kernels, bytes: &[u8]) -> Result<Mem, String> {
        let mut m = Mem::zeroed(k, bytes.len());
        match (&mut m, k.cuda()) {
            (Mem::Host(v), _) => v.copy_from_slice(bytes),
            (Mem::Gpu(_, d, _), Some(c)) => c.copy_to_device(*d, bytes).map_err(|e| e.to_string())?,
            _ => unreachable!("a Mem is on the GPU only where the kernels have CUDA"),
        }
        Ok(m)
    }

    pub(crate) fn zeroed(k: &Kernels, len: usize) -> Mem {
        match k.cuda() {
            None => Mem::Host(vec![0; len]),
            Some(c) => Mem::Gpu(c.clone(), c.alloc_zeroed(len.max(1)).expect("cuMemAlloc"), len),
        }
    }
    pub(crate) fn addr(&mut self) -> u64 {
        match self {
            Mem::Host(v) => v.as_mut_ptr() as u64,
            Mem::Gpu(_, d, _) => *d,
        }
    }
    pub(crate) fn read(&self) -> Vec<u8> {
        match self {
            Mem::Host(v) => v.clone(),
            Mem::Gpu(c, d, n) => {
                let mut v = vec![0; *n];
                c.copy_from_device(&mut v, *d).expect("cuMemcpyDtoH");
                v
            }
        }
    }
    /// The memory as native-endian i64s (a kernel's per-thread result codes).
    pub(crate) fn read_i64s(&self) -> Vec<i64> {
        self.read()
            .chunks(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }
}

/// `Ok` if every thread's result code is 0; otherwise how many failed, and the first eight
/// `(thread, code)` pairs, with `legend` saying how to read a code.
pub(crate) fn all_threads_ok(codes: &[i64], legend: &str) -> Result<(), String> {
    let bad: Vec<(usize, i64)> = codes.iter().copied().enumerate().filter(|&(_, c)| c != 0).collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} of {} threads failed ({legend}): {:?}",
        bad.len(),
        codes.len(),
        &bad[..bad.len().min(8)]
    ))
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Mem::Gpu(c, d, _) = self {
            c.free(*d);
        }
    }
}

/// [`Runtime::synchronize`], its error said at once on stderr (past libtest's capture): a
/// case that fails with a kernel still running may block in its cleanup (freeing device
/// memory waits for the device) until the suite's watchdog aborts it, and the report would
/// be lost.
pub(crate) fn sync(rt: &Runtime) -> Result<(), String> {
    rt.synchronize().map_err(|e| {
        use std::io::Write;
        let said = format!("synchronize: {e}");
        let _ = std::io::stderr().write_all(format!("gpu suite: {said}\n").as_bytes());
        said
    })
}

pub(crate) fn build(b: Builder) -> Result<Runtime, String> {
    b.build().map_err(|e| format!("building the runtime: {e}"))
}

/// Runs `kernel` with `args` once on a fresh runtime from `b` whose stdout and stderr are
/// files; returns what each received.
pub(crate) fn run_printing<F, A>(
    b: Builder,
    scratch: &Scratch,
    kernel: Kernel<F>,
    (grid, block): (u32, u32),
    args: A,
) -> Result<(String, String), String>
where
    F: Copy + Send + Sync + 'static,
    A: KernelArgs<F>,
{
    let name = kernel.name();
    let (out, out_path) = scratch.file(&format!("{name}.out"));
    let (err, err_path) = scratch.file(&format!("{name}.err"));
    {
        let rt = build(b.stdout_fd(out.as_raw_fd()).stderr_fd(err.as_raw_fd()))?;
        let k = Kernels::load(&rt)?;
        k.launch(kernel, grid, block, args)?;
        sync(&rt)?;
    }
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let text = |bytes: Vec<u8>, what: &str| {
        String::from_utf8(bytes).map_err(|e| format!("{what} is not UTF-8 (a torn character?): {e}"))
    };
    Ok((text(read(&out_path)?, "stdout")?, text(read(&err_path)?, "stderr")?))
}

/// Checks lines `t=<t> i=<i><suffix>`: each (t, i) exactly once, in order per thread, for
/// `threads` threads of `lines` lines each; `suffix` checks the rest of each line.
pub(crate) fn check_numbered(
    text: &str,
    threads: u64,
    lines: u64,
    suffix: impl Fn(u64, u64, &str) -> Result<(), String>,
) -> Result<(), String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the output ends in the middle of a line".into());
    }
    let mut next = vec![0u64; threads as usize];
    for (n, line) in text.lines().enumerate() {
        let bad = || format!("line {n} is torn or foreign: {:?}", &line[..line.len().min(120)]);
        let rest = line.strip_prefix("t=").ok_or_else(bad)?;
        let (t, rest) = rest.split_once(" i=").ok_or_else(bad)?;
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (i, tail) = rest.split_at(digits);
        let (t, i): (u64, u64) = (t.parse().map_err(|_| bad())?, i.parse().map_err(|_| bad())?);
        if t >= threads {
            return Err(bad());
        }
        if i != next[t as usize] {
            return Err(format!(
                "thread {t}: line i={i} where i={} was due (lost, repeated or out of order)",
                next[t as usize]
            ));
        }
        suffix(t, i, tail).map_err(|e| format!("line {n} ({line:?}): {e}"))?;
        next[t as usize] += 1;
    }
    match next.iter().position(|&c| c != lines) {
        Some(t) => Err(format!("thread {t} printed {} of {lines} lines", next[t])),
        None => Ok(()),
    }
}

pub(crate) fn plain(_: u64, _: u64, tail: &str) -> Result<(), String> {
    if tail.trim_end_matches('.').is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected text {tail:?}"))
    }
}
