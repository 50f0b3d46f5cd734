//! Reading output back (the checker is in `common`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::common::{verify, Check};

/// A [`Check`] as report fields, from the child to the parent (`Report::check` reads
/// them back).
impl Check {
    pub(crate) fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("bytes", self.bytes.to_string()),
            ("read", self.read.to_string()),
            ("good", self.good.to_string()),
            ("malformed", self.malformed.to_string()),
            ("duplicate", self.duplicate.to_string()),
            ("disorder", self.disorder.to_string()),
        ]
    }
}

/// A file mapped read-only.
pub(crate) struct Mapped {
    pub(crate) ptr: *mut libc::c_void,
    pub(crate) len: usize,
}

impl Mapped {
    pub(crate) fn open(path: &Path) -> std::io::Result<Mapped> {
        let file = File::open(path)?;
        let len = file.metadata()?.len() as usize;
        if len == 0 {
            return Ok(Mapped {
                ptr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a fresh private read-only mapping of `len` bytes of an open file; the
        // mapping outlives the fd (closed when `file` drops), as mmap allows.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped { ptr, len })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` readable bytes until `self` drops. Nobody writes the
        // file while we read it (the writer synchronized or exited).
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmaps exactly the mapping made in `open`; no slice of it outlives `self`.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}

/// Maps, checks and leaves the file in place.
pub(crate) fn check_file(path: &Path, threads: u64, lines: u64, width: u32) -> Check {
    match Mapped::open(path) {
        Ok(m) => verify(m.bytes(), threads, lines, width),
        Err(e) => {
            eprintln!("bench_gpu: cannot read {}: {e}", path.display());
            Check::default()
        }
    }
}
