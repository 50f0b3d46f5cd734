//! The regular files this process's runtimes print to, and how each runtime writes them.
//!
//! A runtime writes a regular file in one of two ways (`stream.rs`):
//! - **appending**, where the fd's offset stands at the file's end when the runtime's kernels
//!   start (the usual case: a fresh file, `>`, `>>`): each write goes to the end of the file
//!   as it is then (`RWF_APPEND`), one at a time. Another runtime of the process (a runtime
//!   per GPU, both printing to a redirected stdout) may print to the file at any time, even
//!   one built while these kernels run: its lines land after what is there, and none are
//!   overwritten. While another live runtime prints to the file too, each write also ends
//!   after a line, so that the runtimes' writes interleave between lines.
//! - **positionally**, where the offset stands inside the file (the host seeked back to
//!   write over it), and no other live runtime of the process prints to the file: each write
//!   goes to the position the lines would have had under write(2), many at a time.
//!
//! Each runtime decides at its first launch after it settled (`begin`), and keeps the
//! decision until its kernels are done (`end`). A runtime writing positionally cannot switch
//! while its kernels run, so another runtime of the file that would start meanwhile gets a
//! clear error instead of writing into its range. Files are told apart by device and inode,
//! so another fd of the same file counts too. Processes know nothing of each other: a
//! runtime and another process writing one file are two writers, as with any program.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// A regular file: `(st_dev, st_ino)`.
type Key = (u64, u64);

/// One runtime's hold on one file.
struct Holder {
    file: Key,
    runtime: u64,
    /// While its kernels run: whether it writes the file positionally. `None` between
    /// kernels.
    running: Option<bool>,
}

/// How a runtime writes one of its files while its kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// At positions of its own (the fd's offset stood inside the file, and the runtime is
    /// the file's only one).
    Positional,
    /// At the file's end, one write at a time; `whole_lines`: each write ends after a line
    /// (another live runtime prints to the file too).
    Append { whole_lines: bool },
}

impl Mode {
    /// The value of `Stream::append` for this mode.
    pub(crate) fn append_word(self) -> u32 {
        match self {
            Mode::Positional => 0,
            Mode::Append { whole_lines: false } => 1,
            Mode::Append { whole_lines: true } => gpuio_device::protocol::stream::APPEND_WHOLE_LINES,
        }
    }
}

static HOLDERS: Mutex<Vec<Holder>> = Mutex::new(Vec::new());
static NEXT_RUNTIME: AtomicU64 = AtomicU64::new(1);

/// The regular file `fd` is open on, if it is one.
pub(crate) fn key(fd: RawFd) -> Option<Key> {
    // SAFETY: fstat only fills the stat buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some((st.st_dev, st.st_ino))
    }
}

/// The size of the file `fd` is open on (0 where fstat fails).
pub(crate) fn size(fd: RawFd) -> u64 {
    // SAFETY: fstat only fills the stat buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 {
            st.st_size as u64
        } else {
            0
        }
    }
}

/// A runtime's hold on the regular files it prints to; dropping it lets them go.
pub(crate) struct PrintFiles {
    runtime: u64,
    files: Vec<Key>,
}

impl PrintFiles {
    /// Registers the regular files among `fds` (a runtime's stdout and stderr).
    pub(crate) fn claim(fds: &[RawFd]) -> PrintFiles {
        let runtime = NEXT_RUNTIME.fetch_add(1, Ordering::Relaxed);
        let mut files: Vec<Key> = fds.iter().filter_map(|&fd| key(fd)).collect();
        files.dedup();
        let mut holders = lock();
        for &file in &files {
            holders.push(Holder {
                file,
                runtime,
                running: None,
            });
        }
        PrintFiles { runtime, files }
    }

    /// Before this runtime's first launch since it settled: how it writes each of its
    /// files. `inside(file)` says whether the runtime's fd for it stands inside the file
    /// (before its end). An error where the file is another live runtime's too and that
    /// runtime writes it positionally from kernels that run now: this runtime cannot start
    /// printing to it until those finish.
    pub(crate) fn begin(&self, inside: impl Fn(Key) -> bool) -> Result<Vec<(Key, Mode)>> {
        let mut holders = lock();
        let mut modes = Vec::new();
        for &file in &self.files {
            let mut others = holders.iter().filter(|h| h.file == file && h.runtime != self.runtime);
            let shared = others.clone().next().is_some();
            if others.any(|h| h.running == Some(true)) {
                return Err(Error::Config(format!(
                    "a file this runtime prints to (device {}, inode {}) is also printed to by another gpuio \
                     runtime of this process, whose running kernels write over it from a position inside it \
                     (its fd's offset stood before the file's end when they started): synchronize that \
                     runtime before launching on this one",
                    file.0, file.1
                )));
            }
            let mode = if !shared && inside(file) {
                Mode::Positional
            } else {
                Mode::Append { whole_lines: shared }
            };
            modes.push((file, mode));
        }
        for h in holders.iter_mut().filter(|h| h.runtime == self.runtime) {
            h.running = Some(modes.iter().any(|&(f, m)| f == h.file && m == Mode::Positional));
        }
        Ok(modes)
    }

    /// This runtime's kernels are done and its prints settled.
    pub(crate) fn end(&self) {
        for h in lock().iter_mut().filter(|h| h.runtime == self.runtime) {
            h.running = None;
        }
    }
}

impl Drop for PrintFiles {
    fn drop(&mut self) {
        lock().retain(|h| h.runtime != self.runtime);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Holder>> {
    HOLDERS.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn runtimes_append_share_by_whole_lines_and_a_positional_one_running_holds_off_others() {
        let dir = std::env::temp_dir().join(format!("gpuio-print-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = std::fs::File::create(dir.join("out")).unwrap();
        let other = std::fs::File::create(dir.join("other")).unwrap();
        let dup = std::fs::OpenOptions::new().write(true).open(dir.join("out")).unwrap();
        let file = key(f.as_raw_fd()).unwrap();
        let other_file = key(other.as_raw_fd()).unwrap();
        assert_eq!(key(dup.as_raw_fd()), Some(file), "another fd of the file is the file");
        let devnull = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
        assert_eq!(key(devnull.as_raw_fd()), None, "only regular files are held");
        let alone = Mode::Append { whole_lines: false };
        let shared = Mode::Append { whole_lines: true };

        // Alone at the end: appends; alone inside: positional.
        let a = PrintFiles::claim(&[f.as_raw_fd(), other.as_raw_fd()]);
        assert_eq!(a.begin(|_| false).unwrap(), [(file, alone), (other_file, alone)]);
        a.end();
        assert_eq!(a.begin(|_| true).unwrap()[0], (file, Mode::Positional));
        // A second runtime of the same file (through another fd) while `a` writes it
        // positionally: refused, with why.
        let b = PrintFiles::claim(&[dup.as_raw_fd()]);
        assert!(matches!(b.begin(|_| false), Err(Error::Config(m)) if m.contains("synchronize that runtime")));
        // Once `a` settled, both append by whole lines, wherever their offsets stand; `a`'s
        // other file is still its own.
        a.end();
        assert_eq!(b.begin(|_| true).unwrap(), [(file, shared)]);
        assert_eq!(
            a.begin(|_| true).unwrap(),
            [(file, shared), (other_file, Mode::Positional)]
        );
        a.end();
        b.end();
        drop(b);
        // `b` gone, `a` is alone again; a runtime built while `a` appends joins it: no error.
        assert_eq!(a.begin(|_| false).unwrap()[0], (file, alone));
        let c = PrintFiles::claim(&[f.as_raw_fd()]);
        assert_eq!(c.begin(|_| false).unwrap(), [(file, shared)]);
        a.end();
        c.end();
        drop(c);
        // Alone again.
        assert_eq!(a.begin(|_| false).unwrap()[0], (file, alone));
        a.end();
        drop(a);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
