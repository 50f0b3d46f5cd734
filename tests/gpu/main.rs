//! The GPU suite: kernels shaped as users write them (odd block sizes, lanes diverging
//! between call sites and streams, `print!` pieces, lines of every shape, stack buffers in
//! file I/O, thousands of threads on a tiny ring, idle kernels, several runtimes), run over
//! every configuration this machine has:
//!
//! - `cpu`: the CPU backend (always; the kernels run on host threads, one lane each);
//! - `cuda`: CUDA, the `sm_90` PTX, independent thread scheduling;
//! - `lockstep`: CUDA, the `sm_60` PTX, which the GPU runs with the lanes of each warp in
//!   lockstep, as AMD GPUs run wavefronts (`gpuio_device::protocol::arch` on why that matters).
//!
//! On libtest itself: each case in each configuration is a `#[test]` named `CONFIG::CASE`
//! (`cpu::every_line_once_in_order`), so `--list`, `--exact`, `--skip`, `--test-threads`,
//! `--show-output` and filters work as in any Rust suite. The cases run one at a time
//! whatever `--test-threads` says (they share the GPU, and the liveness and hang cases time
//! what they check). A configuration's module is loaded before its first case, with a line
//! on stderr saying what runs it. A case that cannot run here (no GPU, no cudarc feature)
//! passes as skipped, as the repository's other GPU tests do: one `SKIPPED` line per
//! configuration or case on stderr and in `GPUIO_SKIP_LOG`. A case that hangs fails: its
//! runtime has a hang timeout, and a watchdog aborts the run naming the case.
//!
//! ```text
//! cargo test --release --test gpu                       # every configuration there is
//! cargo test --release --test gpu -- lockstep::         # one configuration
//! GPUIO_GPU_SUITE_REPEAT=3 cargo test --release --test gpu -- lockstep::
//! cargo test --release --test gpu -- stack ring         # cases whose name contains either
//! cargo test --release --test gpu -- --list
//! ```
//!
//! Not libtest-mimic: it builds clap, and a root crate's dev-dependencies are built for
//! every example, the README's first command included (it took that from 24 s to 42-45 s).

mod cases_cudarc;
mod cases_file_io;
mod cases_liveness;
mod cases_print;
mod cases_runtime;
mod cases_sandbox;
mod cases_scheduling;
#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;
mod harness;
mod kernels;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use gpuio::{Backend, Error, Runtime};

use cases_cudarc::{
    cudarc_a_refused_launch_and_a_synchronize_naming_another_stream,
    cudarc_launches_print_and_a_hang_on_its_stream_is_reported, cudarc_slices_and_streams_in_typed_launches,
    cudarc_unavailable,
};
use cases_file_io::{
    a_files_end_and_nested_directories, file_io_4_arena_blocks_2048_threads, print_while_others_wait_for_io,
    stack_buffers_pwrite_pread, std_habits_on_a_device_file,
};
use cases_liveness::{
    a_hang_report_names_the_blocks_still_running, lines_reach_a_full_pipe_while_the_printers_compute,
    returned_lines_out_while_others_compute,
};
use cases_print::{
    a_block_shares_dynamic_shared_memory, a_locked_stdouts_pieces_make_whole_lines,
    a_print_leaves_a_kernel_its_registers, blocks_of_33_and_37_threads, divergent_call_sites,
    each_thread_writes_its_own_element, every_line_once_in_order, launch_bounds_are_kept, lines_of_every_shape,
    one_print_call_two_streams, one_warp_mixing_streams_and_pieces, print_registers_unavailable,
    results_come_back_through_outputs, strings_and_slices_as_parameters, three_dimensional_launches,
    tiny_ring_and_log_thousands_of_threads, typed_launch_passes_every_parameter_type, warp_records_near_the_log_size,
};
use cases_runtime::{
    a_hang_is_reported_then_waited_out, a_launch_call_that_waits_for_its_kernel, another_layout_is_refused,
    hundred_runtime_create_drop_cycles, idle_longer_than_sq_thread_idle, print_to_a_closed_fd_is_reported,
    two_runtimes_in_one_process,
};
use cases_sandbox::{a_kernel_cannot_leave_the_print_only_sandbox, a_kernel_cannot_move_host_memory_under_file_io};
use cases_scheduling::scheduling_is_the_one_asked_for;
use common::skip;
use harness::{watchdog, Config, Scratch};
use kernels::Kernels;

/// What a case found.
type Outcome = Result<String, String>;

/// A case's body.
type Run = fn(Config, &Scratch) -> Outcome;

/// What a case needs that a configuration may lack: why it cannot run there, if it cannot.
type Unavailable = fn(Config) -> Option<String>;

/// The `#[test]` of each case in one configuration: `$config::$case`.
macro_rules! configuration {
    ($config:ident, $value:expr, [$($case:ident),*], [$($opt:ident if $available:ident),*]) => {
        mod $config {
            $(
                #[test]
                fn $case() {
                    crate::run_case($value, stringify!($case), crate::$case, None);
                }
            )*
            $(
                #[test]
                fn $opt() {
                    crate::run_case($value, stringify!($opt), crate::$opt, Some(crate::$available));
                }
            )*
        }
    };
}

/// The suite: every case in every configuration; an optional case runs only where its
/// `if` function finds nothing missing.
macro_rules! suite {
    (cases: [$($case:ident),* $(,)?], optional: [$($opt:ident if $available:ident),* $(,)?] $(,)?) => {
        /// How many cases a configuration has.
        const CASES: usize = [$(stringify!($case)),*, $(stringify!($opt)),*].len();
        configuration!(cpu, crate::Config::Cpu, [$($case),*], [$($opt if $available),*]);
        configuration!(cuda, crate::Config::Cuda, [$($case),*], [$($opt if $available),*]);
        configuration!(lockstep, crate::Config::Lockstep, [$($case),*], [$($opt if $available),*]);
    };
}

suite! {
    cases: [
        scheduling_is_the_one_asked_for,
        blocks_of_33_and_37_threads,
        every_line_once_in_order,
        divergent_call_sites,
        one_warp_mixing_streams_and_pieces,
        one_print_call_two_streams,
        a_locked_stdouts_pieces_make_whole_lines,
        three_dimensional_launches,
        launch_bounds_are_kept,
        a_block_shares_dynamic_shared_memory,
        results_come_back_through_outputs,
        typed_launch_passes_every_parameter_type,
        strings_and_slices_as_parameters,
        lines_of_every_shape,
        tiny_ring_and_log_thousands_of_threads,
        warp_records_near_the_log_size,
        returned_lines_out_while_others_compute,
        lines_reach_a_full_pipe_while_the_printers_compute,
        a_kernel_cannot_leave_the_print_only_sandbox,
        a_kernel_cannot_move_host_memory_under_file_io,
        stack_buffers_pwrite_pread,
        file_io_4_arena_blocks_2048_threads,
        std_habits_on_a_device_file,
        a_files_end_and_nested_directories,
        each_thread_writes_its_own_element,
        print_while_others_wait_for_io,
        idle_longer_than_sq_thread_idle,
        a_launch_call_that_waits_for_its_kernel,
        print_to_a_closed_fd_is_reported,
        a_hang_is_reported_then_waited_out,
        a_hang_report_names_the_blocks_still_running,
        two_runtimes_in_one_process,
        hundred_runtime_create_drop_cycles,
        another_layout_is_refused,
    ],
    optional: [
        cudarc_launches_print_and_a_hang_on_its_stream_is_reported if cudarc_unavailable,
        cudarc_slices_and_streams_in_typed_launches if cudarc_unavailable,
        cudarc_a_refused_launch_and_a_synchronize_naming_another_stream if cudarc_unavailable,
        a_print_leaves_a_kernel_its_registers if print_registers_unavailable,
    ],
}

/// One case at a time, whatever `--test-threads` says.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs case `name` in `config`, `GPUIO_GPU_SUITE_REPEAT` times (default once), each round
/// in a scratch directory of its own under a watchdog; panics with what failed. Where the
/// configuration or the case cannot run here it says so once and returns.
fn run_case(config: Config, name: &str, run: Run, unavailable: Option<Unavailable>) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = missing(config) {
        // One line for the configuration, at its first case.
        static SAID: [OnceLock<()>; 3] = [const { OnceLock::new() }; 3];
        SAID[config as usize].get_or_init(|| skip(&format!("{}::* ({CASES} cases)", config.name()), &why));
        return;
    }
    if let Some(why) = unavailable.and_then(|u| u(config)) {
        return skip(&format!("{}::{name}", config.name()), &why);
    }
    announce(config);
    let repeat: u32 = match std::env::var("GPUIO_GPU_SUITE_REPEAT") {
        Ok(v) => match v.parse() {
            Ok(n) if n >= 1 => n,
            _ => panic!("GPUIO_GPU_SUITE_REPEAT={v}: a number of rounds, 1 or more"),
        },
        Err(_) => 1,
    };
    let scratch_root = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    for round in 1..=repeat {
        let what = format!(
            "{}::{name}{}",
            config.name(),
            if repeat > 1 {
                format!(" (round {round})")
            } else {
                String::new()
            }
        );
        let scratch = Scratch(scratch_root.join(format!("gpuio-gpu-suite-{}", std::process::id())));
        let _ = std::fs::remove_dir_all(&scratch.0);
        std::fs::create_dir_all(&scratch.0).expect("scratch directory");
        let t0 = Instant::now();
        let dog = watchdog(what.clone(), 150);
        // Removed after the case, also when it panics.
        struct Remove<'a>(&'a Path);
        impl Drop for Remove<'_> {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(self.0);
            }
        }
        let remove = Remove(&scratch.0);
        let outcome = run(config, &scratch);
        drop(dog);
        drop(remove);
        let secs = t0.elapsed().as_secs_f64();
        match outcome {
            // Shown with `--show-output` (or `--nocapture`), as any test's output.
            Ok(detail) => println!("{what} ({secs:.2} s): {detail}"),
            Err(why) => panic!("{what} failed after {secs:.2} s: {why}"),
        }
    }
}

/// Why `config` cannot run here, if it cannot (asked once).
fn missing(config: Config) -> Option<String> {
    static MISSING: [OnceLock<Option<String>>; 3] = [const { OnceLock::new() }; 3];
    MISSING[config as usize].get_or_init(|| unavailable(config)).clone()
}

/// Loads `config`'s module once, before its first case, saying on stderr what runs it.
fn announce(config: Config) {
    static ANNOUNCED: [OnceLock<()>; 3] = [const { OnceLock::new() }; 3];
    ANNOUNCED[config as usize].get_or_init(|| {
        let line = format!("gpu suite: {}: {}\n", config.name(), describe(config));
        let _ = std::io::stderr().write_all(line.as_bytes());
    });
}

/// Why `config` cannot run here, if it cannot.
fn unavailable(config: Config) -> Option<String> {
    if !config.gpu() {
        return None;
    }
    match Runtime::builder().backend(Backend::Cuda).build() {
        Ok(_) => None,
        Err(Error::BackendUnavailable { reason, .. }) => Some(format!("no CUDA GPU ({reason})")),
        // Any other failure is not a reason to skip: the cases run, and fail with it.
        Err(_) => None,
    }
}

/// The device and the scheduling its module runs with, as a line.
fn describe(config: Config) -> String {
    let rt = match config.builder().build() {
        Ok(rt) => rt,
        Err(e) => return format!("(runtime failed: {e})"),
    };
    let t0 = Instant::now();
    match Kernels::load(&rt) {
        Ok(k) => format!(
            "{} backend{}, {}{}",
            rt.backend().name(),
            rt.device_name().map(|n| format!(" on {n}")).unwrap_or_default(),
            k.scheduling(),
            match k.module().and_then(|m| m.jit_ms()) {
                Some(ms) => format!(
                    "; first module load {:.1} s (the driver's JIT: {:.1} s)",
                    t0.elapsed().as_secs_f64(),
                    ms / 1000.0
                ),
                None => String::new(),
            }
        ),
        Err(e) => format!("(loading the kernels failed: {e})"),
    }
}
