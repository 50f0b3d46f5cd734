//! The sandbox against this machine's kernel (CPU backend), over io_uring, the host-thread
//! fallback and inline alike (`over_submissions!`): requests a policy forbids are refused
//! with `EACCES`, never executed, and reported by `synchronize`; device writes cannot read
//! outside the print logs (`WRITE_FIXED` from registered logs, `EFAULT` elsewhere); the
//! requests it allows run. Each refusal test has a control that runs the same SQE where it
//! is allowed, so an `EACCES` cannot come from a malformed SQE.
//!
//! This file runs the modules' cases over every submission path; the modules:
//!
//! - `sqes`: SQEs made by hand, and running them on a ring while a kernel runs;
//! - `policies`: what `PrintOnly`, `FileIo` and `Off` refuse and run;
//! - `fixed_files`: the print files' fixed slots: a closed stdout, a `dup2` after the build,
//!   device requests that would open into or close the slots;
//! - `file_root`: `Builder::file_root`: opens beneath it only, and what it does not confine.

#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;
mod file_root;
mod fixed_files;
mod policies;
mod sqes;

use file_root::{
    a_file_root_confines_what_it_says_and_the_docs_say_the_rest, file_io_with_a_root_opens_only_beneath_it,
};
use fixed_files::{
    a_closed_stdout_is_reported_at_synchronize_with_or_without_fixed_files,
    fixed_files_keep_the_file_the_fd_named_at_build, no_device_request_opens_into_or_closes_the_print_files_slots,
};
use policies::{
    file_io_allows_file_requests_and_transfers_of_its_own_memory_and_refuses_the_rest,
    off_runs_what_the_policies_refuse, print_only_refuses_openat_and_unlinkat_reports_them_and_runs_neither,
    print_only_refuses_writes_that_do_not_come_from_the_logs_to_a_registered_file,
};

over_submissions!(
    print_only_refuses_openat_and_unlinkat_reports_them_and_runs_neither,
    print_only_refuses_writes_that_do_not_come_from_the_logs_to_a_registered_file,
    file_io_allows_file_requests_and_transfers_of_its_own_memory_and_refuses_the_rest,
    off_runs_what_the_policies_refuse,
    a_closed_stdout_is_reported_at_synchronize_with_or_without_fixed_files,
    fixed_files_keep_the_file_the_fd_named_at_build,
    file_io_with_a_root_opens_only_beneath_it,
    no_device_request_opens_into_or_closes_the_print_files_slots,
    a_file_root_confines_what_it_says_and_the_docs_say_the_rest,
);
