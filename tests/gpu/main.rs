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
//! On libtest-mimic (`harness = false`): each case in each configuration is a test named
//! `CONFIG::CASE`, and libtest's options work as in any Rust suite (`--list`, `--exact`,
//! `--ignored`, `--skip`, a filter). Cases run one at a time unless `--test-threads` says
//! otherwise. A configuration's module is loaded once, before its first case, and only
//! where one of its cases runs. A case that cannot run here (no GPU, say) is ignored,
//! with a line saying why; `--ignored` runs it, and it fails with that reason. A case
//! that hangs fails: its runtime has a hang timeout, and a watchdog aborts the run naming
//! the case.
//!
//! ```text
//! cargo test --release --test gpu                       # every configuration there is
//! cargo test --release --test gpu -- --config lockstep --repeat 3
//! cargo test --release --test gpu -- --case stack --case ring  # cases whose name contains either
//! cargo test --release --test gpu -- cpu::              # a libtest filter: the cpu configuration
//! cargo test --release --test gpu -- --list
//! ```

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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use libtest_mimic::{Failed, Trial};

use gpuio::{Backend, Error, Runtime};

use cases_cudarc::{cudarc_launches_print_and_a_hang_on_its_stream_is_reported, cudarc_unavailable};
use cases_file_io::{
    file_io_4_arena_blocks_2048_threads, print_while_others_wait_for_io, stack_buffers_pwrite_pread,
    std_habits_on_a_device_file,
};
use cases_liveness::{
    a_hang_report_names_the_blocks_still_running, lines_reach_a_full_pipe_while_the_printers_compute,
    returned_lines_out_while_others_compute,
};
use cases_print::{
    a_block_shares_dynamic_shared_memory, a_locked_stdouts_pieces_make_whole_lines,
    a_print_leaves_a_kernel_its_registers, blocks_of_33_and_37_threads, divergent_call_sites, every_line_once_in_order,
    lines_of_every_shape, one_print_call_two_streams, one_warp_mixing_streams_and_pieces, print_registers_unavailable,
    results_come_back_through_outputs, strings_and_slices_as_parameters, three_dimensional_launches,
    tiny_ring_and_log_thousands_of_threads, typed_launch_passes_every_parameter_type, warp_records_near_the_log_size,
};
use cases_runtime::{
    a_hang_is_reported_then_waited_out, another_layout_is_refused, hundred_runtime_create_drop_cycles,
    idle_longer_than_sq_thread_idle, print_to_a_closed_fd_is_reported, two_runtimes_in_one_process,
};
use cases_sandbox::{a_kernel_cannot_leave_the_print_only_sandbox, a_kernel_cannot_move_host_memory_under_file_io};
use cases_scheduling::scheduling_is_the_one_asked_for;
use harness::{watchdog, Config, Scratch};
use kernels::Kernels;

/// What a case found.
type Outcome = Result<String, String>;

/// A case: its name and its body.
struct Case {
    name: &'static str,
    run: fn(Config, &Scratch) -> Outcome,
}

/// What a case needs that a configuration may lack: why it cannot run there, if it cannot.
type Unavailable = fn(Config) -> Option<String>;

/// A case that runs only where `unavailable` finds nothing missing (it says what is).
struct Optional {
    case: Case,
    unavailable: Unavailable,
}

const OPTIONAL: &[Optional] = &[
    Optional {
        case: Case {
            name: "cudarc_launches_print_and_a_hang_on_its_stream_is_reported",
            run: cudarc_launches_print_and_a_hang_on_its_stream_is_reported,
        },
        unavailable: cudarc_unavailable,
    },
    Optional {
        case: Case {
            name: "a_print_leaves_a_kernel_its_registers",
            run: a_print_leaves_a_kernel_its_registers,
        },
        unavailable: print_registers_unavailable,
    },
];

const CASES: &[Case] = &[
    Case {
        name: "scheduling_is_the_one_asked_for",
        run: scheduling_is_the_one_asked_for,
    },
    Case {
        name: "blocks_of_33_and_37_threads",
        run: blocks_of_33_and_37_threads,
    },
    Case {
        name: "every_line_once_in_order",
        run: every_line_once_in_order,
    },
    Case {
        name: "divergent_call_sites",
        run: divergent_call_sites,
    },
    Case {
        name: "one_warp_mixing_streams_and_pieces",
        run: one_warp_mixing_streams_and_pieces,
    },
    Case {
        name: "one_print_call_two_streams",
        run: one_print_call_two_streams,
    },
    Case {
        name: "a_locked_stdouts_pieces_make_whole_lines",
        run: a_locked_stdouts_pieces_make_whole_lines,
    },
    Case {
        name: "three_dimensional_launches",
        run: three_dimensional_launches,
    },
    Case {
        name: "a_block_shares_dynamic_shared_memory",
        run: a_block_shares_dynamic_shared_memory,
    },
    Case {
        name: "results_come_back_through_outputs",
        run: results_come_back_through_outputs,
    },
    Case {
        name: "typed_launch_passes_every_parameter_type",
        run: typed_launch_passes_every_parameter_type,
    },
    Case {
        name: "strings_and_slices_as_parameters",
        run: strings_and_slices_as_parameters,
    },
    Case {
        name: "lines_of_every_shape",
        run: lines_of_every_shape,
    },
    Case {
        name: "tiny_ring_and_log_thousands_of_threads",
        run: tiny_ring_and_log_thousands_of_threads,
    },
    Case {
        name: "warp_records_near_the_log_size",
        run: warp_records_near_the_log_size,
    },
    Case {
        name: "returned_lines_out_while_others_compute",
        run: returned_lines_out_while_others_compute,
    },
    Case {
        name: "lines_reach_a_full_pipe_while_the_printers_compute",
        run: lines_reach_a_full_pipe_while_the_printers_compute,
    },
    Case {
        name: "a_kernel_cannot_leave_the_print_only_sandbox",
        run: a_kernel_cannot_leave_the_print_only_sandbox,
    },
    Case {
        name: "a_kernel_cannot_move_host_memory_under_file_io",
        run: a_kernel_cannot_move_host_memory_under_file_io,
    },
    Case {
        name: "stack_buffers_pwrite_pread",
        run: stack_buffers_pwrite_pread,
    },
    Case {
        name: "file_io_4_arena_blocks_2048_threads",
        run: file_io_4_arena_blocks_2048_threads,
    },
    Case {
        name: "std_habits_on_a_device_file",
        run: std_habits_on_a_device_file,
    },
    Case {
        name: "print_while_others_wait_for_io",
        run: print_while_others_wait_for_io,
    },
    Case {
        name: "idle_longer_than_sq_thread_idle",
        run: idle_longer_than_sq_thread_idle,
    },
    Case {
        name: "print_to_a_closed_fd_is_reported",
        run: print_to_a_closed_fd_is_reported,
    },
    Case {
        name: "a_hang_is_reported_then_waited_out",
        run: a_hang_is_reported_then_waited_out,
    },
    Case {
        name: "a_hang_report_names_the_blocks_still_running",
        run: a_hang_report_names_the_blocks_still_running,
    },
    Case {
        name: "two_runtimes_in_one_process",
        run: two_runtimes_in_one_process,
    },
    Case {
        name: "hundred_runtime_create_drop_cycles",
        run: hundred_runtime_create_drop_cycles,
    },
    Case {
        name: "another_layout_is_refused",
        run: another_layout_is_refused,
    },
];

/// The suite's own options (`--config`, `--repeat`, `--case`), apart from libtest's.
struct Own {
    configs: Vec<Config>,
    repeat: u32,
    cases: Vec<String>,
}

/// Takes the suite's own options out of `args`; the rest are libtest's (`--list`, `--exact`,
/// `--test-threads`, `--ignored`, a filter, ...), which `libtest_mimic` reads.
fn own_options(mut args: impl Iterator<Item = String>) -> (Own, Vec<String>) {
    let mut own = Own {
        configs: Vec::new(),
        repeat: 1,
        cases: Vec::new(),
    };
    let mut rest = Vec::new();
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = |what: &str| inline.clone().or_else(|| args.next()).unwrap_or_else(|| usage(what));
        match flag.as_str() {
            "--config" => {
                let v = value("--config cpu|cuda|lockstep");
                let c = Config::ALL.into_iter().find(|c| c.name() == v);
                own.configs
                    .push(c.unwrap_or_else(|| usage(&format!("unknown config {v:?}"))));
            }
            "--repeat" => own.repeat = value("--repeat N").parse().unwrap_or_else(|_| usage("--repeat N")),
            "--case" => own.cases.push(value("--case NAME")),
            "--help" | "-h" => {
                println!("{SUITE_USAGE}\n\nand libtest's options:");
                rest.push(a);
            }
            _ => rest.push(a),
        }
    }
    if own.configs.is_empty() {
        own.configs = Config::ALL.to_vec();
    }
    (own, rest)
}

const SUITE_USAGE: &str =
    "usage: gpu [--config cpu|cuda|lockstep]... [--repeat N] [--case NAME]... [libtest's options] [FILTER]
  each case is a test named CONFIG::CASE (CONFIG::CASE#ROUND past the first round);
  --config runs only these configurations, --case only cases whose name contains NAME";

/// Whether libtest's filter and `--skip`s select `name` (as `libtest_mimic` decides, for
/// the trials it runs; here, to load a configuration's module only where a case of it runs).
fn selected(args: &libtest_mimic::Arguments, name: &str) -> bool {
    let matches = |f: &str| if args.exact { name == f } else { name.contains(f) };
    args.filter.as_deref().is_none_or(matches) && !args.skip.iter().any(|s| matches(s))
}

fn main() -> std::process::ExitCode {
    let (own, rest) = own_options(std::env::args());
    let mut args = libtest_mimic::Arguments::from_iter(rest);
    // One case at a time unless asked: the cases share the GPU, and the liveness and hang
    // cases time what they check.
    args.test_threads.get_or_insert(1);
    let cases: Vec<(&Case, Option<Unavailable>)> = CASES
        .iter()
        .map(|c| (c, None))
        .chain(OPTIONAL.iter().map(|o| (&o.case, Some(o.unavailable))))
        .filter(|(c, _)| own.cases.is_empty() || own.cases.iter().any(|f| c.name.contains(f.as_str())))
        .collect();
    let scratch_root = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let found = Arc::new(Mutex::new(Vec::<String>::new()));
    let (mut trials, mut skipped) = (Vec::new(), Vec::new());
    for &config in &own.configs {
        let names: Vec<(String, &Case, Option<Unavailable>)> = (1..=own.repeat)
            .flat_map(|round| {
                cases.iter().map(move |&(case, unavailable)| {
                    let name = match round {
                        1 => format!("{}::{}", config.name(), case.name),
                        r => format!("{}::{}#{r}", config.name(), case.name),
                    };
                    (name, case, unavailable)
                })
            })
            .collect();
        // Listing needs no GPU; a configuration none of whose cases runs needs no module.
        let runs = !args.list && names.iter().any(|(n, ..)| selected(&args, n));
        let missing = if runs { unavailable(config) } else { None };
        if runs {
            match &missing {
                Some(why) => {
                    println!("gpu suite: {}: skipped, {why}", config.name());
                    skipped.push(format!("{} ({} cases): {why}", config.name(), cases.len()));
                }
                None => println!("gpu suite: {}: {}", config.name(), describe(config)),
            }
        }
        for (name, case, unavailable) in names {
            // A case that cannot run here is ignored, saying why; `--ignored` runs it, and
            // it fails with that reason.
            let why = missing.clone().or_else(|| {
                let why = unavailable.filter(|_| runs).and_then(|u| u(config))?;
                if selected(&args, &name) {
                    println!("gpu suite: {name}: skipped, {why}");
                    skipped.push(format!("{} ({}): {why}", case.name, config.name()));
                }
                Some(why)
            });
            let trial = match why {
                Some(why) => Trial::test(name, move || Err(why.into())).with_ignored_flag(true),
                None => {
                    let scratch = scratch_root.join(format!("gpuio-gpu-suite-{}-{}", std::process::id(), trials.len()));
                    let (run, found) = (case.run, found.clone());
                    Trial::test(name.clone(), move || {
                        run_case(&name, run, config, Scratch(scratch), &found)
                    })
                }
            };
            trials.push(trial);
        }
    }
    if args.filter.is_some() && !trials.iter().any(|t| selected(&args, t.name())) {
        eprintln!(
            "gpu suite: no case's name matches {:?} (`--list` lists them: CONFIG::CASE)",
            args.filter.as_deref().unwrap_or_default()
        );
    }
    let conclusion = libtest_mimic::run(&args, trials);
    let found = found.lock().unwrap_or_else(|e| e.into_inner());
    if !found.is_empty() {
        println!("gpu suite: what the cases found:");
        for f in found.iter() {
            println!("  {f}");
        }
    }
    if let Ok(log) = std::env::var("GPUIO_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            for s in &skipped {
                let _ = writeln!(f, "gpu suite, {s}");
            }
        }
    }
    for s in &skipped {
        println!("  SKIPPED {s}");
    }
    conclusion.exit_code()
}

/// Runs one case in `scratch` (made empty first, removed after) under a watchdog; what it
/// found goes into `found`.
fn run_case(
    name: &str,
    run: fn(Config, &Scratch) -> Outcome,
    config: Config,
    scratch: Scratch,
    found: &Mutex<Vec<String>>,
) -> Result<(), Failed> {
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(&scratch.0).expect("scratch directory");
    let t0 = Instant::now();
    let dog = watchdog(name.to_string(), 150);
    let outcome = std::panic::catch_unwind(|| run(config, &scratch)).unwrap_or_else(|p| Err(panic_text(&*p)));
    drop(dog);
    let _ = std::fs::remove_dir_all(&scratch.0);
    let secs = t0.elapsed().as_secs_f64();
    match outcome {
        Ok(detail) => {
            found
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{name} ({secs:.2} s): {detail}"));
            Ok(())
        }
        Err(why) => Err(format!("after {secs:.2} s: {why}").into()),
    }
}

fn usage(why: &str) -> ! {
    eprintln!("gpu suite: {why}\n{SUITE_USAGE}");
    std::process::exit(2);
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned());
    format!("panicked: {}", msg.unwrap_or_else(|| "(no message)".into()))
}

/// Why `config` cannot run here, if it cannot.
fn unavailable(config: Config) -> Option<String> {
    if !config.gpu() {
        return None;
    }
    match Runtime::builder().backend(Backend::Cuda).build() {
        Ok(_) => None,
        Err(Error::BackendUnavailable { reason, .. }) => Some(format!("no CUDA GPU ({reason})")),
        Err(e) => Some(format!("the CUDA runtime failed: {e}")),
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
