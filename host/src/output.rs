//! Results from kernels: memory a kernel's threads write through an
//! `gpuio_device::param::Out<T>` parameter and the host reads once they are done
//! ([`Output`], made by [`Runtime::output`]).

use std::cell::Cell;
use std::marker::PhantomData;

use gpuio_device::param::{Plain, RawSlice};

use crate::error::{Error, Result};
use crate::kernels::{KernelParam, Launch, Staging};
use crate::memory::Mapping;
use crate::runtime::Runtime;

/// `len` elements of `T` that kernels write their results into: a typed launch passes
/// `&mut output` for an `Out<T>` parameter of the kernel, and the host reads the elements
/// with [`Output::read`] once a synchronize has found the kernels done. Zeroed when made;
/// host memory the GPU addresses (registered with its driver) on a GPU, plain memory on the
/// CPU backend.
///
/// Only an `Output` can be passed for an `Out<T>` parameter: a host slice would be copied,
/// and what the kernel wrote lost with the copy, so it does not compile:
///
/// ```compile_fail
/// # use gpuio_host::{Backend, LaunchConfig, Runtime};
/// gpuio_device::kernel! {
///     pub fn fill(out: gpuio_device::param::Out<u32>) {}
/// }
/// # let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
/// # let kernels = rt.kernels(&[]).unwrap();
/// let mut results = vec![0u32; 4];
/// kernels.launch(fill, LaunchConfig::linear(1, 4), (&mut results[..],)).unwrap();
/// ```
///
/// ```
/// use gpuio_host::{Backend, LaunchConfig, Runtime};
/// gpuio_device::kernel! {
///     /// Squares `x` into `out`, one element per thread.
///     pub fn square(x: &[f32], out: gpuio_device::param::Out<f32>) {
///         let i = gpuio_device::global_thread_idx() as usize;
///         if i < x.len() {
///             // SAFETY: thread i alone writes element i.
///             unsafe { out.write(i, x[i] * x[i]) };
///         }
///     }
/// }
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// let kernels = rt.kernels(&[])?;
/// let mut out = rt.output::<f32>(4)?;
/// kernels.launch(square, LaunchConfig::linear(1, 4), (&[1.0f32, 2.0, 3.0, 4.0], &mut out))?;
/// rt.synchronize()?;
/// assert_eq!(out.read()?, [1.0, 4.0, 9.0, 16.0]);
/// # Ok::<(), gpuio_host::Error>(())
/// ```
pub struct Output<'rt, T: Plain> {
    rt: &'rt Runtime,
    /// The elements (`None` once `drop` handed the mapping on).
    map: Option<Mapping>,
    /// Their address in kernels.
    device: u64,
    len: usize,
    /// Whether the GPU's driver mapped it (`map_host`).
    mapped: bool,
    /// Passed to a launch, on this in-order queue or on none ([`Launch::queue`]): `None`
    /// before its first launch.
    launched: Option<Option<usize>>,
    of: PhantomData<T>,
}

impl Runtime {
    /// `len` zeroed elements of `T` for kernels to write results into ([`Output`]).
    pub fn output<T: Plain>(&self, len: usize) -> Result<Output<'_, T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::Config(format!("an Output of {len} elements: past the address space")))?;
        let map = Mapping::new(bytes.max(1)).map_err(|source| Error::Os {
            what: "mmap of an Output (results of kernels)",
            source,
        })?;
        let device = match self.device() {
            None => map.as_ptr(),
            // SAFETY: the mapping lives until it is unmapped: in `release_staged`, which the
            // Output's drop hands it to, once no kernel runs.
            Some(d) => unsafe { d.map_host(map.as_ptr(), map.len())? },
        } as u64;
        Ok(Output {
            rt: self,
            mapped: self.device().is_some(),
            map: Some(map),
            device,
            len,
            launched: None,
            of: PhantomData,
        })
    }
}

impl<T: Plain> Output<'_, T> {
    /// Its number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements, once no kernel may still write them: [`Error::KernelsRunning`] while
    /// kernels launched since the last successful [`Runtime::synchronize`] may still run
    /// (synchronize first; any kernel of the runtime counts, not only those given this
    /// `Output`). After a synchronize that reported a kernel fault, what the kernels wrote
    /// before it: elements nothing wrote are still zero.
    pub fn read(&self) -> Result<&[T]> {
        if self.rt.kernels_pending() {
            return Err(Error::KernelsRunning { call: "Output::read" });
        }
        let map = self.map.as_ref().expect("held until drop");
        // SAFETY: `len` elements of `T` (aligned: a page) in the mapping, which lives as
        // long as `self`; no kernel runs (checked above), and none can be launched with it
        // while this borrow lives (a launch takes `&mut self`); `T: Plain` makes any bytes
        // there values.
        Ok(unsafe { std::slice::from_raw_parts(map.as_ptr() as *const T, self.len) })
    }

    /// [`Output::read`], copied into a `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        Ok(self.read()?.to_vec())
    }
}

impl<T: Plain> std::fmt::Debug for Output<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Output {{ len: {}, addr: {:#x} }}", self.len, self.device)
    }
}

impl<T: Plain> Drop for Output<'_, T> {
    /// Hands the memory to the runtime's launch memory, which frees it (and unmaps it from
    /// the GPU) once a synchronize finds no kernel running: a kernel may still write it.
    fn drop(&mut self) {
        if let Some(map) = self.map.take() {
            let shared = self.rt.shared();
            shared
                .staged
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((map, self.mapped));
            self.rt.release_staged();
        }
    }
}

// SAFETY: `check` refuses another runtime's Output and one a launch beside this one may
// write; `stage` borrows nothing past the launch (the memory is the runtime's until no
// kernel runs).
unsafe impl<T: Plain> KernelParam<RawSlice<[Cell<T>]>> for &mut Output<'_, T> {
    /// Refused for a launch on another runtime: its reads and drops wait for this
    /// runtime's kernels only, and on a GPU the memory is mapped for this runtime's. Refused
    /// too while an earlier launch that was given it may still run beside this one (on the
    /// CPU backend and AMD GPUs, or on two CUDA streams; two on one CUDA stream run one
    /// after the other): each thread's `Out::write_own` is safe because no two threads that
    /// may run at once write one element.
    fn check(&self, launch: &Launch<'_>) -> Result<()> {
        if !std::ptr::eq(self.rt, launch.runtime()) {
            return Err(Error::Config(
                "an Output passed to a launch on another runtime than the one that made it: make \
                 it with the launching runtime's Runtime::output"
                    .into(),
            ));
        }
        // Two launches on one in-order queue (a CUDA stream) run one after the other.
        let one_after_the_other = launch.queue().is_some() && self.launched == Some(launch.queue());
        if self.launched.is_some() && !one_after_the_other && self.rt.kernels_pending() {
            return Err(Error::Config(
                "an Output passed to a launch while an earlier launch given it may still run beside \
                 it (launches on the CPU backend, on AMD GPUs and on two CUDA streams run at \
                 once): call Runtime::synchronize between the two, or give each launch its own \
                 Output"
                    .into(),
            ));
        }
        Ok(())
    }

    fn stage(self, staging: &mut Staging) -> RawSlice<[Cell<T>]> {
        self.launched = Some(staging.queue);
        // SAFETY: `len` writable elements at `device` where the kernel runs (mapped for the
        // GPU, or plain memory on the CPU backend), which live until a synchronize finds no
        // kernel running (the drop hands them to the runtime's launch memory).
        unsafe { RawSlice::new(self.device, self.len as u64) }
    }
}
