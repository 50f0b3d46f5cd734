//! Reading device memory while kernels run, for hang reports.

use std::ffi::c_void;
use std::sync::Arc;

use super::driver::Cuda;
use super::ffi::*;
use crate::error::{Error, Result};

/// Reads device memory while kernels run: a copy on a stream of its own, which does not
/// wait for the null stream that gpuio's kernels run on, into pinned host memory, waited
/// for at most a given time. For diagnostics (what a hung kernel left in the context):
/// whatever the copy finds, mid-update or not, is what it returns.
pub struct Peek {
    cuda: Arc<Cuda>,
    stream: *mut c_void,
    buf: crate::memory::Mapping,
    /// A copy was started and not seen finished: `buf` is still the copy's.
    busy: bool,
}

// SAFETY: the stream and the pinned buffer are used only through `&mut self`; driver
// handles are usable from any thread with the context bound.
unsafe impl Send for Peek {}

impl Peek {
    /// A peek of up to `len` bytes.
    pub fn new(cuda: &Arc<Cuda>, len: usize) -> Result<Peek> {
        cuda.bind()?;
        let buf = crate::memory::Mapping::new(len).map_err(|e| Error::Os {
            what: "mmap of the peek buffer",
            source: e,
        })?;
        // SAFETY: `buf` stays mapped until `Drop`, which unregisters it first.
        unsafe { cuda.register(buf.as_ptr(), buf.len())? };
        let mut stream = std::ptr::null_mut();
        if let Err(e) = cuda.check(
            // SAFETY: a valid out-pointer and a documented flag.
            unsafe { (cuda.api.cuStreamCreate)(&mut stream, CU_STREAM_NON_BLOCKING) },
            "cuStreamCreate",
        ) {
            // SAFETY: registered just above; nothing uses it.
            unsafe { cuda.unregister(buf.as_ptr()) };
            return Err(e);
        }
        Ok(Peek {
            cuda: cuda.clone(),
            stream,
            buf,
            busy: false,
        })
    }

    /// Copies `len` bytes from `src`; `Ok(None)` if the copy did not finish within
    /// `patience` (then a later call waits for it to finish first, within its own
    /// patience).
    pub fn read(&mut self, src: CuDevicePtr, len: usize, patience: std::time::Duration) -> Result<Option<&[u8]>> {
        assert!(len <= self.buf.len(), "peek of {len} bytes into {}", self.buf.len());
        self.cuda.bind()?;
        let until = std::time::Instant::now() + patience;
        let done = |p: &Peek| -> Result<bool> {
            // SAFETY: a stream created in `new`.
            match unsafe { (p.cuda.api.cuStreamQuery)(p.stream) } {
                0 => Ok(true),
                CUDA_ERROR_NOT_READY => Ok(false),
                rc => Err(Error::Cuda(p.cuda.check_str(rc, "cuStreamQuery (peek)").unwrap_err())),
            }
        };
        let wait = |p: &Peek| -> Result<bool> {
            while !done(p)? {
                if std::time::Instant::now() >= until {
                    return Ok(false);
                }
                crate::watchdog::sleep(std::time::Duration::from_micros(50));
            }
            Ok(true)
        };
        if self.busy {
            if !wait(self)? {
                return Ok(None);
            }
            self.busy = false;
        }
        self.cuda.check(
            // SAFETY: `buf` is pinned (registered) and `len` bytes long at least; the driver
            // checks `src`. The copy runs on our stream; `busy` keeps `buf` its own until it is
            // seen finished.
            unsafe { (self.cuda.api.cuMemcpyDtoHAsync_v2)(self.buf.as_ptr() as *mut c_void, src, len, self.stream) },
            "cuMemcpyDtoHAsync (peek)",
        )?;
        self.busy = true;
        if !wait(self)? {
            return Ok(None);
        }
        self.busy = false;
        // SAFETY: the copy finished: `buf[..len]` holds its bytes and nothing writes them.
        Ok(Some(unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), len) }))
    }
}

impl Drop for Peek {
    fn drop(&mut self) {
        let _ = self.cuda.bind();
        // SAFETY: our stream; a copy still running on it finishes before the buffer goes
        // (a copy engine's transfer does not wait for kernels).
        unsafe {
            (self.cuda.api.cuStreamSynchronize)(self.stream);
            (self.cuda.api.cuStreamDestroy_v2)(self.stream);
            self.cuda.unregister(self.buf.as_ptr());
        }
    }
}
