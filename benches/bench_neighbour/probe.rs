//! The probes: this executable re-run in probe mode, in a session (or process group) of its
//! own: `date` run again and again, a busy loop, a sleeper.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{CLI, DATE_EVERY, SLEEP};

/// This executable in probe mode `kind` for `secs`, in a process group (or session) of its
/// own; it prints its results to the pipe on its stdout.
pub(crate) fn spawn_probe(kind: &str, secs: f64, setsid: bool) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args(["--probe", kind, &secs.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    if setsid {
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    } else {
        cmd.process_group(0);
    }
    cmd.spawn().expect("spawning a probe")
}

/// Probe mode: `KIND SECS`. Runs for SECS and prints its results, one a line.
pub(crate) fn probe(args: &[String]) {
    let (Some(kind), Some(secs)) = (args.first(), args.get(1).and_then(|s| s.parse::<f64>().ok())) else {
        CLI.fail("--probe KIND SECS")
    };
    let window = Duration::from_secs_f64(secs);
    let start = Instant::now();
    match kind.as_str() {
        "date" => {
            // Each run's wall time, from the spawn to the reaped exit, in ns.
            let mut out = Vec::new();
            while start.elapsed() < window {
                let t = Instant::now();
                let status = Command::new("/bin/date")
                    .stdout(Stdio::null())
                    .status()
                    .expect("/bin/date");
                out.push(t.elapsed());
                assert!(status.success(), "/bin/date: {status}");
                std::thread::sleep(DATE_EVERY);
            }
            for d in out {
                println!("{}", d.as_nanos());
            }
        }
        "busy" => {
            let cpu = || {
                std::fs::read_to_string("/proc/self/stat")
                    .ok()
                    .and_then(|s| stat_cpu(&s))
                    .unwrap_or(f64::NAN)
            };
            let c0 = cpu();
            let mut x = 0u64;
            while start.elapsed() < window {
                for _ in 0..1000 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            let share = (cpu() - c0) / start.elapsed().as_secs_f64();
            println!("{share}");
        }
        "sleep" => {
            let mut out = Vec::new();
            while start.elapsed() < window {
                let t = Instant::now();
                std::thread::sleep(SLEEP);
                out.push(t.elapsed().saturating_sub(SLEEP));
            }
            for d in out {
                println!("{}", d.as_nanos());
            }
        }
        _ => CLI.fail(&format!("unknown probe {kind}")),
    }
}

/// utime + stime of a `/proc/.../stat` line, in seconds.
pub(crate) fn stat_cpu(stat: &str) -> Option<f64> {
    // After the `(comm)`, which may hold spaces: fields 3.. ; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf reads a constant.
    Some(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}
