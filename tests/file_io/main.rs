//! Device file I/O (`gpuio_device::io`, `gpuio_device::fs`) against this machine's kernel,
//! on the CPU backend: the device code runs on host threads, the requests go through the
//! real io_uring (tests `io_uring::*`) or the host-thread fallback (tests `host_thread::*`),
//! and results come back through the device's own completion routing.
//!
//! This file holds the helpers the modules share and runs their cases over every
//! submission path (`over_submissions!`); the cases, by what they test:
//!
//! - `transfers`: bytes written and read back (a file per thread, one file shared, a file
//!   larger than the arena, host buffers, async requests) and `group_copy`, a warp's staging copy;
//! - `solo_ring`: a lone thread's small requests on the solo ring, and its holder's waits;
//! - `errors`: errnos, end of file, permission denied (its child process, `permission_child`,
//!   is here: the parent runs it by its exact name), the `PrintOnly` refusal, calls outside a kernel;
//! - `configuration`: arena and ring settings the builder refuses, requests on their block's ring;
//! - `std_habits`: a cursor, `write!`, a `BufWriter` and `dbg!` as std has them;
//! - `directories`: directories, renames, removals, `File::len` and `create_dir_all`.

#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;
mod configuration;
mod directories;
mod errors;
mod solo_ring;
mod std_habits;
mod transfers;

use std::sync::{Arc, Mutex};

use common::child::child_mode;
use common::Suite;
use gpuio::device::fs::{File, OpenOptions};
use gpuio::{Backend, Runtime, Sandbox, Submission};

use directories::{
    a_files_length_its_end_and_nested_directories,
    a_files_length_takes_the_requests_its_docs_say_and_ends_on_a_growing_file_or_a_pipe,
    create_dir_all_over_symlinks_fifos_and_files_as_std_and_its_request_counts,
    directories_renames_removals_and_lengths_as_std_has_them,
};
use errors::{
    end_of_file_is_reported_with_the_count, errors_reach_the_caller, open_in_kernel, permission_denied,
    print_only_sandbox_refuses_file_io_and_reports_it,
};
use solo_ring::{
    a_lone_threads_requests_take_the_solo_ring, small_requests_of_many_threads_share_the_solo_ring_and_the_others,
};
use std_habits::std_habits_cursor_write_macros_and_a_buffered_writer;
use transfers::{
    async_transfers_overlap, file_larger_than_the_arena, host_buffer_is_read_and_written_directly,
    per_thread_files_write_fsync_read_back, shared_file_distinct_offsets,
};

/// A file-I/O runtime, its ring consumed by `sub`, with a small arena, so that transfers split into many pieces.
pub(crate) fn runtime(sub: Suite, arena: usize, block: usize) -> Runtime {
    Runtime::builder()
        .backend(Backend::Cpu)
        .submission(sub.submission)
        .sqpoll(sub.sqpoll)
        .rings(sub.rings)
        .solo(sub.solo)
        .solo_waits_on_tail(sub.solo_on_tail)
        .sandbox(Sandbox::FileIo)
        .arena_bytes(arena)
        .arena_block_bytes(block)
        .build()
        .expect("runtime")
}

over_submissions!(
    per_thread_files_write_fsync_read_back,
    shared_file_distinct_offsets,
    file_larger_than_the_arena,
    end_of_file_is_reported_with_the_count,
    errors_reach_the_caller,
    permission_denied,
    host_buffer_is_read_and_written_directly,
    async_transfers_overlap,
    print_only_sandbox_refuses_file_io_and_reports_it,
    a_lone_threads_requests_take_the_solo_ring,
    small_requests_of_many_threads_share_the_solo_ring_and_the_others,
    std_habits_cursor_write_macros_and_a_buffered_writer,
    directories_renames_removals_and_lengths_as_std_has_them,
    a_files_length_its_end_and_nested_directories,
    a_files_length_takes_the_requests_its_docs_say_and_ends_on_a_growing_file_or_a_pipe,
    create_dir_all_over_symlinks_fifos_and_files_as_std_and_its_request_counts,
);

/// Deterministic pseudo-random bytes, different for each seed: the generator the kernels
/// crate's file kernels use (`gpuio_test_kernels::random_fill`).
pub(crate) fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    gpuio_test_kernels::random_fill(seed, &mut v);
    v
}

/// From device code: a new empty file at `path` (emptied if it is there), open for reading
/// and writing.
pub(crate) fn create_rw(path: &str) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| format!("open: {e}"))
}

/// From device code: `Ok` if the first `data.len()` bytes of `file` read back as `data`.
pub(crate) fn reads_back(file: &File, data: &[u8]) -> Result<(), String> {
    let mut back = vec![0u8; data.len()];
    file.read_exact_at(&mut back, 0).map_err(|e| format!("read: {e}"))?;
    if back != data {
        return Err("read back other bytes".into());
    }
    Ok(())
}

/// Failures the kernel threads saw, for the test thread to assert on.
pub(crate) type Failures = Arc<Mutex<Vec<String>>>;

pub(crate) fn fail(failures: &Failures, msg: String) {
    failures.lock().unwrap().push(msg);
}

pub(crate) fn assert_no_failures(failures: &Failures) {
    let f = failures.lock().unwrap();
    assert!(
        f.is_empty(),
        "{} thread(s) failed, first: {:?}",
        f.len(),
        &f[..f.len().min(4)]
    );
}

#[test]
#[ignore = "runs as a child process of permission_denied"]
fn permission_child() {
    let Some(path) = child_mode() else {
        return;
    };
    // The parent's path, given as GPUIO_URING.
    let submission = Submission::from_env().unwrap().expect("GPUIO_URING");
    let sub = Suite {
        submission,
        ..Suite::HOST_THREAD
    };
    // SAFETY: plain syscalls that change this process's credentials.
    unsafe {
        assert_eq!(libc::setgid(65534), 0, "setgid");
        assert_eq!(libc::setuid(65534), 0, "setuid");
    }
    println!("child saw {:?}", open_in_kernel(sub, &path));
}
