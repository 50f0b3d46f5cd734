//! [`Sandbox::FileIo`](crate::sandbox::Sandbox::FileIo) confined to a directory
//! ([`Builder::file_root`](crate::Builder::file_root)), enforced by the Linux kernel with
//! Landlock.
//!
//! io_uring runs a ring's requests with the credentials of the thread that created it: its
//! SQPOLL thread takes them at setup (`ctx->sq_creds`), and the workers it starts inherit
//! them; the fallback's thread inherits its creator's as any thread does. An io_uring ring
//! without SQPOLL (the CPU backend's, which a file root asks for) runs them with its
//! submitter's, the waker's, which is started on the same thread. Rings performed inline
//! (the CPU backend's default) take no file root: their performers are the kernel threads,
//! which run the program's code too. A Landlock domain lives in those credentials. So each ring
//! (and that waker) is created on a short-lived thread that first
//! restricts itself (`landlock_restrict_self`, which binds only the calling thread, after
//! `PR_SET_NO_NEW_PRIVS`, also only that thread's) to the file-system accesses beneath the
//! root: every device open, read, write, create or removal by path outside it fails with
//! `EACCES`, whatever path the device names (`..` and symlinks included: Landlock checks
//! the file reached). Files already open (stdout, stderr, descriptors the host passes) are
//! not paths, and stay usable. The program's own threads are not restricted.
//!
//! What Landlock does not check: `O_PATH` opens (no file is opened for access: a kernel
//! learns whether any path exists, and its type), the inode behind a path (a hard link
//! inside the root, placed there by someone else, reaches a file outside), and the mode of
//! a created file (set-id bits; as root, a set-user-ID-root file). The fallback's thread
//! refuses the first and the last itself (`fallback::execute`, `HostRing::confine_to_root`);
//! on io_uring, which runs requests with no code of gpuio's in between, they stay open and
//! `Builder::file_root` says so.
//!
//! `tests/sandbox/file_root.rs` checks that SQPOLL's requests, the waker's and the fallback's are
//! confined, and what is not.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result};

const SYS_LANDLOCK_CREATE_RULESET: libc::c_long = 444;
const SYS_LANDLOCK_ADD_RULE: libc::c_long = 445;
const SYS_LANDLOCK_RESTRICT_SELF: libc::c_long = 446;
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_RULE_PATH_BENEATH: u32 = 1;

/// `struct landlock_ruleset_attr`, its first member (the kernel takes a shorter struct).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the uapi header).
#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// The file-system accesses Landlock ABI `abi` can handle: all of them are handled (denied
/// outside the root) and allowed beneath it.
fn fs_accesses(abi: i64) -> u64 {
    // EXECUTE .. MAKE_SYM (ABI 1), REFER (2), TRUNCATE (3), IOCTL_DEV (5).
    let mut a = (1u64 << 13) - 1;
    if abi >= 2 {
        a |= 1 << 13;
    }
    if abi >= 3 {
        a |= 1 << 14;
    }
    if abi >= 5 {
        a |= 1 << 15;
    }
    a
}

fn os(what: &'static str) -> Error {
    Error::Os {
        what,
        source: std::io::Error::last_os_error(),
    }
}

/// Restricts the calling thread (and threads it creates from now on) to file-system
/// accesses beneath `root`. Call it only on a thread made for it.
pub(crate) fn confine_this_thread(root: &Path) -> Result<()> {
    // SAFETY: with a null attribute and size 0, the call only returns the ABI version.
    let abi = unsafe {
        libc::syscall(
            SYS_LANDLOCK_CREATE_RULESET,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi < 1 {
        return Err(Error::Config(format!(
            "a file root needs Landlock (Linux 5.13, with landlock among the LSMs), which this \
             kernel does not offer ({}): drop Builder::file_root, or enable Landlock",
            std::io::Error::last_os_error()
        )));
    }
    let path = CString::new(root.as_os_str().as_bytes())
        .map_err(|_| Error::Config(format!("file_root {} contains a NUL byte", root.display())))?;
    // SAFETY: a NUL-terminated path; O_PATH opens no file for I/O.
    let dir = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if dir < 0 {
        return Err(Error::Config(format!(
            "file_root {}: {} (it must be an existing directory)",
            root.display(),
            std::io::Error::last_os_error()
        )));
    }
    let accesses = fs_accesses(abi);
    let attr = RulesetAttr {
        handled_access_fs: accesses,
    };
    // SAFETY: `attr` is a valid ruleset attribute of the size passed.
    let ruleset = unsafe { libc::syscall(SYS_LANDLOCK_CREATE_RULESET, &attr, size_of::<RulesetAttr>(), 0u32) };
    let result = (|| {
        if ruleset < 0 {
            return Err(os("landlock_create_ruleset"));
        }
        let beneath = PathBeneath {
            allowed_access: accesses,
            parent_fd: dir,
        };
        // SAFETY: a valid path-beneath rule naming our O_PATH fd.
        if unsafe {
            libc::syscall(
                SYS_LANDLOCK_ADD_RULE,
                ruleset,
                LANDLOCK_RULE_PATH_BENEATH,
                &beneath,
                0u32,
            )
        } < 0
        {
            return Err(os("landlock_add_rule"));
        }
        // SAFETY: prctl without pointers; it binds this thread only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(os("prctl(PR_SET_NO_NEW_PRIVS)"));
        }
        // SAFETY: our ruleset fd; restricts the calling thread only.
        if unsafe { libc::syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0u32) } < 0 {
            return Err(os("landlock_restrict_self"));
        }
        Ok(())
    })();
    // SAFETY: fds opened above, ours to close.
    unsafe {
        libc::close(dir);
        if ruleset >= 0 {
            libc::close(ruleset as i32);
        }
    }
    result
}
