//! Temporary files and directories. Each name is made unique in the process (a counter), so
//! that the same case run over two submission paths at once never shares a file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A number no other call in this process got: it keeps parallel tests' paths apart.
fn unique() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The directory of this test process (shared by its tests; left for the OS to clean).
pub fn process_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuio-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A new, empty file of this test process named after `name`, open for reading and
/// writing, and its path.
pub fn temp_file(name: &str) -> (std::fs::File, PathBuf) {
    let path = process_dir().join(format!("{}-{name}", unique()));
    (create(&path), path)
}

/// A new empty file at `path`, open for reading and writing.
pub fn create(path: impl AsRef<Path>) -> std::fs::File {
    let path = path.as_ref();
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()))
}

/// A directory of its own for a test, removed when the test ends.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory whose name contains `tag`.
    pub fn new(tag: &str) -> TempDir {
        let dir = process_dir().join(format!("{}-{tag}", unique()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// `name` inside the directory, as a string (what the device's `fs` API takes).
    pub fn str(&self, name: &str) -> String {
        self.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
