//! Pipes, and a reader slower than the kernels that write into them.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::thread::JoinHandle;
use std::time::Duration;

/// A pipe: `(read end, write end)`, both close-on-exec.
pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds that we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh fds from pipe2, owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// A pipe of one page (the minimum; the default is 64 KiB), so that a few KiB of output
/// fill it and the writers outrun any reader at once.
pub fn small_pipe() -> (OwnedFd, OwnedFd) {
    let (r, w) = pipe();
    // SAFETY: F_SETPIPE_SZ only resizes the buffer of our own pipe.
    let size = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    assert!(size >= 4096, "F_SETPIPE_SZ: {}", std::io::Error::last_os_error());
    (r, w)
}

/// Reads `r` to its end, 1 KiB per millisecond at most, on a thread of its own; the
/// thread returns what it read.
pub fn slow_reader(r: OwnedFd) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut file = std::fs::File::from(r);
        let (mut out, mut buf) = (Vec::new(), [0u8; 1024]);
        loop {
            match file.read(&mut buf) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => panic!("read: {e}"),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// Fills the pipe until a write would block; returns how many bytes it holds.
pub fn fill(w: RawFd) -> usize {
    // SAFETY: fcntl only changes the file status flags of our pipe.
    let flags = unsafe { libc::fcntl(w, libc::F_GETFL) };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fcntl(w, libc::F_SETFL, flags | libc::O_NONBLOCK) }, 0);
    let chunk = [b'x'; 512];
    let mut filled = 0;
    loop {
        // SAFETY: `chunk` is valid for its length.
        let n = unsafe { libc::write(w, chunk.as_ptr().cast(), chunk.len()) };
        if n < 0 {
            assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EAGAIN));
            break;
        }
        filled += n as usize;
    }
    // Blocking again: a non-blocking pipe would fail the runtime's writes with EAGAIN.
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fcntl(w, libc::F_SETFL, flags) }, 0);
    assert!(filled > 0);
    filled
}
