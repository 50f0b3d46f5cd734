//! The default sandbox against a kernel that tries to leave it: a write from a host
//! address, a `WRITE_FIXED` from outside the print log, an open, a read. Each is refused
//! by the kernel (or the fallback) without running, and the output holds only what the
//! kernel printed.

use std::os::fd::AsRawFd;

use gpuio::{Error, Sandbox};
use gpuio_test_kernels as k;

use crate::harness::{Config, Scratch};
use crate::kernels::{build, Kernels, Mem};
use crate::Outcome;

pub(crate) fn a_kernel_cannot_leave_the_print_only_sandbox(config: Config, scratch: &Scratch) -> Outcome {
    let (out, path) = scratch.file("escape.out");
    let escaped = std::path::Path::new("escaped");
    if escaped.exists() {
        return Err("a file named `escaped` is already in the working directory".into());
    }
    let rt = build(config.builder().stdout_fd(out.as_raw_fd()))?;
    let stats = rt.stats();
    if (stats.sandbox, stats.fixed_files, stats.fixed_logs) != (Sandbox::PrintOnly, true, true) {
        return Err(format!(
            "the default sandbox with fixed files and logs, not {:?} / {} / {}",
            stats.sandbox, stats.fixed_files, stats.fixed_logs
        ));
    }
    let k = Kernels::load(&rt)?;
    // Host memory the GPU is given the address of (not mapped for it: only the kernel's
    // io_uring could read it).
    let secret = Box::new(*b"SECRET!!");
    let secret_addr = secret.as_ptr() as u64;
    let mut results = Mem::zeroed(&k, 5 * 8);
    let res = results.addr();
    k.launch(k::escape_attempts, 1, 32, (secret_addr, res))?;
    let refused = match rt.synchronize() {
        Err(Error::Refused(r)) => r,
        other => return Err(format!("expected the refusals to be reported, got {other:?}")),
    };
    let got = results.read_i64s();
    drop(results);
    drop(k);
    drop(rt);
    let created = escaped.exists();
    if created {
        let _ = std::fs::remove_file(escaped);
    }
    // The third: requests go through the solo ring or a shared one, and only the print
    // ring (ring 0) holds the logs.
    let want = [
        -libc::EACCES,
        -libc::EFAULT,
        -libc::EFAULT,
        -libc::EACCES,
        -libc::EACCES,
    ]
    .map(i64::from);
    if got != want {
        return Err(format!(
            "results (plain WRITE, WRITE_FIXED of the secret, WRITE_FIXED from the log on a request \
             ring, OPENAT, READ) \
             {got:?}, want {want:?}"
        ));
    }
    if refused.requests != 3 || refused.errno != libc::EACCES {
        return Err(format!(
            "reported {} refusal(s), errno {}: {refused}",
            refused.requests, refused.errno
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    if bytes != b"allowed\n" || created {
        return Err(format!("the output got {bytes:?}; `escaped` created: {created}"));
    }
    Ok(
        "a plain WRITE, an OPENAT and a READ refused (EACCES, 3 reported), WRITE_FIXED of host memory or \
        on a request ring EFAULT; only the kernel's println reached stdout"
            .into(),
    )
}

/// `FileIo` against a kernel that moves host memory with its transfers: a plain `WRITE` is
/// refused, a `WRITE_FIXED` or `READ_FIXED` of host memory faults, whichever buffer it
/// names; a device `pwrite` (staged through the arena) to the same file runs.
pub(crate) fn a_kernel_cannot_move_host_memory_under_file_io(config: Config, scratch: &Scratch) -> Outcome {
    let (out, path) = scratch.file("file-io-escape.out");
    let rt = build(config.builder().sandbox(Sandbox::FileIo))?;
    let stats = rt.stats();
    if (stats.sandbox, stats.fixed_logs, stats.fixed_transfers) != (Sandbox::FileIo, true, true) {
        return Err(format!(
            "FileIo with its memory registered, not {:?} / fixed logs {} / fixed transfers {}",
            stats.sandbox, stats.fixed_logs, stats.fixed_transfers
        ));
    }
    let k = Kernels::load(&rt)?;
    let mut secret = Box::new(*b"SECRET!!");
    let secret_addr = secret.as_mut_ptr() as u64;
    let mut results = Mem::zeroed(&k, 5 * 8);
    let res = results.addr();
    let fd = out.as_raw_fd() as u32;
    k.launch(k::file_io_escape_attempts, 1, 32, (fd, secret_addr, res))?;
    let refused = match rt.synchronize() {
        Err(Error::Refused(r)) => r,
        other => {
            return Err(format!(
                "expected the plain WRITE's refusal to be reported, got {other:?}"
            ))
        }
    };
    let got = results.read_i64s();
    drop(results);
    drop(k);
    drop(rt);
    let want = [-libc::EACCES, -libc::EFAULT, -libc::EFAULT, -libc::EFAULT, 8].map(i64::from);
    if got != want {
        return Err(format!(
            "results (plain WRITE, WRITE_FIXED naming the arena, READ_FIXED naming the arena, naming \
             an empty host-buffer slot, the device's pwrite) {got:?}, want {want:?}"
        ));
    }
    if refused.requests != 1 || refused.errno != libc::EACCES {
        return Err(format!(
            "reported {} refusal(s), errno {}: {refused}",
            refused.requests, refused.errno
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    if bytes != b"allowed\n" || &*secret != b"SECRET!!" {
        return Err(format!("the output got {bytes:?}, the secret is {:?}", &*secret));
    }
    Ok("a plain WRITE refused (EACCES, reported), three *_FIXED of host memory EFAULT; the device's pwrite ran".into())
}
