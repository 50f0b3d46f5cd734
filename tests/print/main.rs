//! println! end to end on the CPU backend, over both submission paths: the machine's real
//! io_uring (SQPOLL), tests `io_uring::*`, and the host-thread fallback, tests
//! `host_thread::*` (see `over_submissions!` in tests/common).
//!
//! Each test checks one of the protocol's invariants (docs/PROTOCOL.md) and fails if it is
//! broken. This file runs the modules' cases over every submission path; the modules:
//!
//! - `backpressure`: many lines through a tiny ring, log and pipe: writers wait, nothing is lost or hangs;
//! - `waker`: the waker's looks while a kernel is quiet, a lone printer's batches, the doorbell;
//! - `whole_lines`: lines longer than the log, logs of two sizes, a warp's record: each line whole;
//! - `formatting`: as std formats, a locked stdout's pieces, prints inside and failures of a `Display`;
//! - `output_files`: where lines land: stderr, closed fds, offsets, files shared with the host or another runtime;
//! - `backend`: forcing a GPU backend.

mod backend;
mod backpressure;
#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;
mod formatting;
mod output_files;
mod waker;
mod whole_lines;

use backpressure::{
    a_slow_pipe_reader_loses_nothing_and_the_writers_wait, a_tiny_log_with_lines_near_its_size_does_not_hang,
    sixty_four_threads_hundred_thousand_lines_into_a_file, tiny_ring_and_arena_apply_backpressure,
};
use formatting::{
    a_display_that_fails_ends_its_line_with_a_mark_and_is_reported, a_locked_stdouts_pieces_make_whole_lines,
    a_print_inside_a_display_comes_out_once_before_its_line, c_printf_returns_the_bytes_it_printed,
    formatting_matches_std,
};
use output_files::{
    a_runtime_that_would_overwrite_another_ones_running_kernel_says_why,
    a_stream_that_printed_nothing_leaves_a_shared_offset_alone, host_writes_between_kernels_stay_in_order,
    positional_writes_land_at_their_offset_wherever_the_fd_points,
    printing_to_a_closed_fd_is_reported_and_nothing_hangs,
    stderr_goes_to_its_own_fd_and_shares_a_stream_with_stdout_when_the_file_is_one,
    two_runtimes_printing_to_one_file_at_once_lose_nothing,
};
use waker::{
    a_quiet_kernel_costs_few_waker_looks_and_its_late_lines_all_get_out, a_thread_printing_alone_batches_its_lines,
};
use whole_lines::{
    a_warp_println_is_one_record_in_lane_order, lines_that_fit_the_line_buffer_but_not_the_log_stay_whole,
    logs_of_two_sizes_keep_every_line_of_both_streams, long_lines_stay_whole,
};

over_submissions!(
    sixty_four_threads_hundred_thousand_lines_into_a_file,
    tiny_ring_and_arena_apply_backpressure,
    a_slow_pipe_reader_loses_nothing_and_the_writers_wait,
    printing_to_a_closed_fd_is_reported_and_nothing_hangs,
    formatting_matches_std,
    a_locked_stdouts_pieces_make_whole_lines,
    long_lines_stay_whole,
    lines_that_fit_the_line_buffer_but_not_the_log_stay_whole,
    stderr_goes_to_its_own_fd_and_shares_a_stream_with_stdout_when_the_file_is_one,
    logs_of_two_sizes_keep_every_line_of_both_streams,
    host_writes_between_kernels_stay_in_order,
    positional_writes_land_at_their_offset_wherever_the_fd_points,
    a_stream_that_printed_nothing_leaves_a_shared_offset_alone,
    two_runtimes_printing_to_one_file_at_once_lose_nothing,
    a_runtime_that_would_overwrite_another_ones_running_kernel_says_why,
    a_warp_println_is_one_record_in_lane_order,
    a_tiny_log_with_lines_near_its_size_does_not_hang,
    a_quiet_kernel_costs_few_waker_looks_and_its_late_lines_all_get_out,
    a_thread_printing_alone_batches_its_lines,
    a_print_inside_a_display_comes_out_once_before_its_line,
    a_display_that_fails_ends_its_line_with_a_mark_and_is_reported,
    c_printf_returns_the_bytes_it_printed,
);
