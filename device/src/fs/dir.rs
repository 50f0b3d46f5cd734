//! Calls on paths: removing, creating (with every parent) and renaming files and
//! directories, as std's `fs` functions.

use super::PathError;
use crate::io::{self, Errno};

/// Removes the file `path`, as std's `fs::remove_file` (a directory: `EISDIR`).
///
/// ```no_run
/// use gpuio_device::fs;
/// fs::create_dir("out")?;
/// fs::File::create("out/part.tmp")?.write_all(b"done")?;
/// fs::rename("out/part.tmp", "out/part")?;
/// fs::remove_file("out/part")?;
/// fs::remove_dir("out")?;
/// # Ok::<(), gpuio_device::fs::Error>(())
/// ```
pub fn remove_file(path: &str) -> Result<(), PathError<'_>> {
    io::remove_file(path).map_err(|errno| PathError { errno, path })
}

/// Removes the empty directory `path`, as std's `fs::remove_dir`.
pub fn remove_dir(path: &str) -> Result<(), PathError<'_>> {
    io::remove_dir(path).map_err(|errno| PathError { errno, path })
}

/// Creates the directory `path` (mode 0o777 less the host's umask), as std's
/// `fs::create_dir`; its parent must exist.
pub fn create_dir(path: &str) -> Result<(), PathError<'_>> {
    io::create_dir(path, 0o777).map_err(|errno| PathError { errno, path })
}

/// Creates the directory `path` and every missing parent (mode 0o777 less the host's
/// umask), as std's `fs::create_dir_all`: `Ok` where `path` is already a directory, also
/// where other threads create the same directories at the same time, and through symlinks
/// to directories; where it meets something else, std's errno (`EEXIST` for a file, FIFO
/// or symlink to nothing at `path` or, for a symlink to nothing, above it; `ENOTDIR` for
/// a file or FIFO above it).
///
/// It asks for `path` first and walks back one parent per `ENOENT`, then forward: a
/// directory whose parent exists costs one request; each missing parent two more. Where
/// `path` exists, one more request asks whether it is a directory (`mkdirat` of `path/.`,
/// which opens nothing); anything else there is `EEXIST`.
///
/// ```no_run
/// use gpuio_device::fs;
/// fs::create_dir_all("out/run-1/parts")?;
/// fs::File::create("out/run-1/parts/0")?.write_all(b"done")?;
/// # Ok::<(), gpuio_device::fs::Error>(())
/// ```
pub fn create_dir_all(path: &str) -> Result<(), PathError<'_>> {
    let fail = |errno| PathError { errno, path };
    // Trailing slashes name the same directory; "" and "/" are there already. (Byte loops
    // here, not `str`'s pattern searches: those compare slices, which on AMD GPUs links
    // `memcmp`, a symbol no GPU code object has.)
    let whole = &path[..without_trailing_slashes(path.as_bytes(), path.len())];
    if whole.is_empty() {
        return Ok(());
    }
    // Back: the deepest prefix that mkdir makes or finds (ENOENT: its parent is missing).
    let mut made = whole.len();
    // Whether the walk back stopped at a name that exists, not at a directory it made.
    let mut found = false;
    loop {
        match io::create_dir(&whole[..made], 0o777) {
            Ok(()) => break,
            // Found: a directory; if not, the next mkdir says ENOTDIR, or ENOENT where it
            // is a symlink to nothing.
            Err(Errno::EEXIST) if made < whole.len() => {
                found = true;
                break;
            }
            Err(Errno::EEXIST) => {
                return if is_dir(whole)? {
                    Ok(())
                } else {
                    Err(fail(Errno::EEXIST))
                }
            }
            Err(Errno::ENOENT) => match parent_end(&whole[..made]) {
                Some(end) => made = end,
                None => return Err(fail(Errno::ENOENT)),
            },
            Err(errno) => return Err(fail(errno)),
        }
    }
    // Forward: each component after it, in turn.
    while made < whole.len() {
        let bytes = whole.as_bytes();
        let mut start = made;
        while start < bytes.len() && bytes[start] == b'/' {
            start += 1;
        }
        let next = bytes[start..]
            .iter()
            .position(|&c| c == b'/')
            .map_or(bytes.len(), |i| start + i);
        match io::create_dir(&whole[..next], 0o777) {
            Ok(()) => {}
            // Another thread made it meanwhile.
            Err(Errno::EEXIST) if next < whole.len() => {}
            // Under the name found, which exists but leads nowhere (a dangling symlink):
            // EEXIST, as std's create_dir_all says it (of that name; this error names the
            // whole path, as every error of this call does).
            Err(Errno::ENOENT) if found => return Err(fail(Errno::EEXIST)),
            Err(Errno::EEXIST) => {
                return if is_dir(whole)? {
                    Ok(())
                } else {
                    Err(fail(Errno::EEXIST))
                }
            }
            Err(errno) => return Err(fail(errno)),
        }
        made = next;
        found = false;
    }
    Ok(())
}

/// Where the parent of `path` (no trailing slash) ends, without the slashes before the last
/// component; `None` where it has none to make (a single component, or one under `/`).
fn parent_end(path: &str) -> Option<usize> {
    let bytes = path.as_bytes();
    let slash = bytes.iter().rposition(|&c| c == b'/')?;
    let end = without_trailing_slashes(bytes, slash);
    (end > 0).then_some(end)
}

/// Where `bytes[..end]` ends without the slashes at its end.
fn without_trailing_slashes(bytes: &[u8], mut end: usize) -> usize {
    while end > 0 && bytes[end - 1] == b'/' {
        end -= 1;
    }
    end
}

/// Whether `path`, which exists, is a directory ([`io::is_dir`]: one request).
fn is_dir(path: &str) -> Result<bool, PathError<'_>> {
    io::is_dir(path).map_err(|errno| PathError { errno, path })
}

/// Renames `from` to `to`, replacing `to` if it is a file, as std's `fs::rename`. The error
/// names `from`.
pub fn rename<'p>(from: &'p str, to: &str) -> Result<(), PathError<'p>> {
    io::rename(from, to).map_err(|errno| PathError { errno, path: from })
}
