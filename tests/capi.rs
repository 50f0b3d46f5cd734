//! The C API from real C and C++ hosts (`tests/capi/host.c` with `host_gpu.c`, `tests/capi/host.cpp`).
//!
//! Each test builds `gpuio-capi` (`cargo build -p gpuio-capi`, same profile and target
//! directory as this test: `cargo test` does not build other members' C libraries), then
//! compiles the host with the system compiler (`CC`/`CXX`, else `cc`/`c++`) with
//! `-Wall -Wextra -Werror -pedantic`: the C host against `libgpuio.a`, the C++ host against
//! `libgpuio.so` through `gpuio.pc` (the README's command). Then it runs the host and
//! checks its output whole. The header's sizes, offsets and values are checked against
//! the Rust definitions by `gpuio-capi`'s own `abi` test.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

#[allow(dead_code)]
mod common;
use common::c_hosts::{build_capi, compile, compiler, pc_fields, root, toolchain_here, words, Built};
use common::skip;

/// The example kernels' PTX, built by build.rs (for the GPU part).
const PTX_PATH: &str = gpuio_kernels_gpu::PTX_PATH;

/// How long a host may run before the test kills it and fails.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Builds the C libraries once per test binary.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| build_capi(&[]))
}

/// The C host, statically linked against libgpuio.a (C99, warnings are errors).
fn c_host() -> &'static Path {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| {
        let b = built();
        let pc = pc_fields(&b.libdir.join("gpuio.pc"));
        let exe = b.bin.join("host_c");
        let mut args = words("-std=c99 -Wall -Wextra -Werror -pedantic -O1");
        args.extend(words(&pc["Cflags"]));
        args.push(root().join("tests/capi/host.c").display().to_string());
        args.push(root().join("tests/capi/host_gpu.c").display().to_string());
        args.push(b.libdir.join("libgpuio.a").display().to_string());
        args.extend(words(&pc["Libs.private"]));
        args.extend(["-o".into(), exe.display().to_string()]);
        compile(&compiler(false), &args);
        exe
    })
}

/// The C++ host, linked against libgpuio.so with `pkg-config --cflags --libs gpuio`
/// (or the same flags read from gpuio.pc where pkg-config is missing).
fn cpp_host() -> &'static Path {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| {
        let b = built();
        let exe = b.bin.join("host_cpp");
        let pkg_config = Command::new("pkg-config")
            .args(["--cflags", "--libs", "gpuio"])
            .env("PKG_CONFIG_PATH", &b.libdir)
            .output();
        let flags = match pkg_config {
            Ok(out) if out.status.success() => words(&String::from_utf8_lossy(&out.stdout)),
            other => {
                eprintln!("pkg-config unavailable ({other:?}): using gpuio.pc's fields directly");
                let pc = pc_fields(&b.libdir.join("gpuio.pc"));
                words(&format!("{} {}", pc["Cflags"], pc["Libs"]))
            }
        };
        let mut args = words("-std=c++17 -Wall -Wextra -Werror -pedantic -O1");
        args.push(root().join("tests/capi/host.cpp").display().to_string());
        args.extend(flags);
        args.extend(["-o".into(), exe.display().to_string()]);
        compile(&compiler(true), &args);
        exe
    })
}

/// The C++ kernels of `tests/capi/device_printf.cpp`, built as the C++ host is, with
/// gpuio's device header (`device/include`).
fn device_printf_host() -> &'static Path {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| {
        let b = built();
        let pc = pc_fields(&b.libdir.join("gpuio.pc"));
        let exe = b.bin.join("device_printf");
        let mut args = words("-std=c++17 -Wall -Wextra -Werror -pedantic -O1");
        args.push(format!("-I{}", root().join("device/include").display()));
        args.push(root().join("tests/capi/device_printf.cpp").display().to_string());
        args.extend(words(&format!("{} {}", pc["Cflags"], pc["Libs"])));
        args.extend(["-o".into(), exe.display().to_string()]);
        compile(&compiler(true), &args);
        exe
    })
}

/// Runs a host to completion (killing it after [`TIMEOUT`]).
fn run(exe: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(exe)
        .args(args)
        .env_remove("GPUIO_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let pid = child.id() as libc::pid_t;
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        out.read_to_end(&mut v).map(|_| v)
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).map(|_| v)
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(TIMEOUT) {
        Ok(status) => status.expect("wait"),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped (the
            // waiting thread has not returned).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{} {args:?} ran longer than {TIMEOUT:?}: killed", exe.display());
        }
    };
    let stdout = out_reader.join().unwrap().expect("read stdout");
    let stderr = err_reader.join().unwrap().expect("read stderr");
    Output { status, stdout, stderr }
}

/// Shows the host's stderr (`cargo test -- --nocapture` prints it) and checks its status.
fn expect_success(what: &str, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The host's report (the kernels' own "e=<thread>" lines are checked, not shown).
    let report: String = stderr
        .lines()
        .filter(|l| !l.starts_with("e="))
        .map(|l| format!("{l}\n"))
        .collect();
    eprintln!("--- {what}: stderr\n{report}--- {what}: {}", out.status);
    assert!(out.status.success(), "{what} failed: {}\n{stderr}", out.status);
    assert!(!stderr.contains("FAIL"), "{what} reported a failure");
}

#[test]
fn c_host_cpu_backend_prints_every_line_exactly_once() {
    if !toolchain_here("c_host_cpu_backend_prints_every_line_exactly_once") {
        return;
    }
    let (threads, lines) = (64u64, 200u32);
    let out = run(c_host(), &["cpu", &threads.to_string(), &lines.to_string()]);
    expect_success("C host, CPU backend", &out);

    // stdout, per thread: lines i=0..half, the long line, i=half..lines, the non-UTF-8 line.
    let half = lines / 2;
    let mut next = vec![0u32; threads as usize]; // events seen per thread
    let events = lines + 2;
    for line in out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let text = String::from_utf8_lossy(line);
        let (kind, rest) = text.split_once("t=").unwrap_or_else(|| panic!("torn line {text:?}"));
        let t: usize = rest
            .split(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("torn line {text:?}"));
        let e = next.get_mut(t).unwrap_or_else(|| panic!("thread {t} in {text:?}"));
        let want_i = if *e < half { *e } else { e.wrapping_sub(1) };
        match kind {
            "" => assert_eq!(text, format!("t={t} i={want_i}"), "thread {t}: event {e}"),
            "L " => {
                assert_eq!(*e, half, "thread {t}: the long line out of order");
                let prefix = format!("L t={t} ");
                assert_eq!(line.len(), 10_000 - 1, "long line of thread {t} torn");
                assert!(line.starts_with(prefix.as_bytes()) && line[prefix.len()..].iter().all(|&b| b == b'x'));
            }
            "B " => {
                assert_eq!(*e, events - 1, "thread {t}: the non-UTF-8 line out of order");
                assert_eq!(
                    line,
                    format!("B t={t} ")
                        .into_bytes()
                        .into_iter()
                        .chain([0xff, 0xfe])
                        .collect::<Vec<_>>()
                );
            }
            _ => panic!("unexpected line {text:?}"),
        }
        *e += 1;
    }
    assert!(next.iter().all(|&n| n == events), "lines lost: {next:?}");

    // stderr: one e=<t> line per thread (the rest is the host's own report).
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut seen = vec![0; threads as usize];
    for t in stderr.lines().filter_map(|l| l.strip_prefix("e=")) {
        seen[t.parse::<usize>().unwrap()] += 1;
    }
    assert!(seen.iter().all(|&n| n == 1), "eprint lines: {seen:?}");
    eprintln!(
        "{} lines from {threads} C kernel threads (printf, 10 KB lines, non-UTF-8 bytes, eprintf): \
         each exactly once, whole, in order",
        threads * events as u64
    );
}

#[test]
fn c_host_error_paths_return_statuses_with_messages() {
    if !toolchain_here("c_host_error_paths_return_statuses_with_messages") {
        return;
    }
    let out = run(c_host(), &["errors"]);
    expect_success("C host, error paths", &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Forcing HSA: a runtime on an AMD GPU, elsewhere unavailable with the reason.
    let forced = [
        "ok: create forcing hsa: GPUIO_OK: the backend is present here",
        "ok: create forcing hsa: GPUIO_ERROR_BACKEND_UNAVAILABLE: the hsa backend is unavailable: ",
    ];
    assert!(
        forced.iter().any(|w| stderr.contains(w)),
        "the C host's report has neither of {forced:?}"
    );
    for want in [
        "destroy again: GPUIO_ERROR_INVALID_HANDLE: the runtime handle 0x",
        "is not a runtime handle that gpuio returned",
        "attach_hsa_executable: GPUIO_ERROR_BACKEND_UNAVAILABLE",
        "this runtime runs on the cpu backend",
        "attach_hip_module(NULL): GPUIO_ERROR_INVALID_ARGUMENT: hip_module is NULL",
        "attach_hip_module: GPUIO_ERROR_BACKEND_UNAVAILABLE: the hip backend is unavailable: libgpuio was built \
         without its `hip` feature",
        "synchronize inside a kernel: GPUIO_ERROR_WRONG_CONTEXT",
        "synchronize a waiting kernel: GPUIO_ERROR_HANG: synchronize gave up (hang timeout): nothing has moved for",
        "synchronize the released kernel: GPUIO_OK",
        "create with the previous struct_size: GPUIO_OK",
        "link_ptx(a small buffer): GPUIO_ERROR_INVALID_ARGUMENT: buf holds 8 bytes and the joined text needs",
        "link_ptx(two targets): GPUIO_ERROR_CONFIG: invalid configuration: cannot join these PTX modules: module 1's \
         .target is sm_60, an earlier one's sm_90",
        "link_ptx(the library last): GPUIO_ERROR_CONFIG: invalid configuration: cannot join these PTX modules: \
         module 0 uses `gpuio_puts`, which module 1 defines: put module 1 first",
        "link_ptx(no modules): GPUIO_ERROR_INVALID_ARGUMENT: no modules to join (count is 0)",
        "link_ptx(NULL len): GPUIO_ERROR_INVALID_ARGUMENT: len is NULL",
        "link_ptx(not UTF-8): GPUIO_ERROR_INVALID_ARGUMENT: modules[0] is not PTX text: not UTF-8 at byte 0",
        "load_linked on the cpu backend: GPUIO_ERROR_BACKEND_UNAVAILABLE: the cuda backend is unavailable: \
         gpuio_module_load_linked joins PTX, which the CUDA backend loads; this runtime runs on the cpu backend",
        "16 lines lost",
        "0 failure(s)",
    ] {
        assert!(stderr.contains(want), "no {want:?} in the C host's report");
    }
}

#[test]
fn c_host_gpu_hello_from_ptx() {
    if !toolchain_here("c_host_gpu_hello_from_ptx") {
        return;
    }
    let out = run(c_host(), &["gpu", PTX_PATH]);
    if out.status.code() == Some(77) {
        skip(
            "c_host_gpu_hello_from_ptx",
            String::from_utf8_lossy(&out.stderr).trim().trim_start_matches("skip: "),
        );
        return;
    }
    expect_success("C host, CUDA backend", &out);
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    // hello 8 x 128 from the file, 1 x 16 from memory, 2 x 32 attached and launched by the
    // host itself; stress 2 x 64 threads x 3 lines padded to 40 bytes.
    let mut hello: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut stress = vec![0u32; 128];
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("hello from thread ") {
            let (t, n) = rest.split_once(" of ").unwrap_or_else(|| panic!("torn line {line:?}"));
            hello.entry(n.parse().unwrap()).or_default().push(t.parse().unwrap());
        } else {
            assert_eq!(line.len() + 1, 40, "padded to 40 bytes: {line:?}");
            let (t, i) = common::stress_line(line);
            assert_eq!(i, stress[t], "thread {t}: out of order or duplicated");
            stress[t] += 1;
        }
    }
    assert_eq!(hello.keys().copied().collect::<Vec<_>>(), [16, 64, 1024]);
    for (n, mut ts) in hello {
        ts.sort_unstable();
        assert_eq!(
            ts,
            (0..n).collect::<Vec<_>>(),
            "hello from {n} threads: each exactly once"
        );
    }
    assert!(stress.iter().all(|&n| n == 3), "stress lines lost: {stress:?}");
    eprintln!("C host on the GPU: hello (file, memory, attached module) and stress: every line exactly once");
}

#[test]
fn cpp_host_cpu_backend_through_the_shared_library() {
    if !toolchain_here("cpp_host_cpu_backend_through_the_shared_library") {
        return;
    }
    let (threads, lines) = (32u64, 100u64);
    let out = run(cpp_host(), &[&threads.to_string(), &lines.to_string()]);
    expect_success("C++ host", &out);
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    let mut next = vec![0u64; threads as usize];
    for line in stdout.lines() {
        let (t, i) = line
            .strip_prefix("c++ t=")
            .and_then(|r| r.split_once(" i="))
            .unwrap_or_else(|| panic!("torn line {line:?}"));
        let (t, i): (usize, u64) = (t.parse().unwrap(), i.parse().unwrap());
        assert_eq!(i, next[t], "thread {t}: out of order or duplicated");
        next[t] += 1;
    }
    assert!(next.iter().all(|&n| n == lines), "lines lost: {next:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("double destroy: GPUIO_ERROR_INVALID_HANDLE"));
}

/// C++ kernels on the CPU backend print through `gpuio/device.h`: each of 64 threads'
/// `gpuio_printf` line is the one the C library's `snprintf` makes of the same format and
/// arguments (integers of every width, floats in every notation, strings, a character, a
/// pointer), with the same count; `gpuio_puts` and `gpuio_write` print a line each; a
/// format it does not take (`%n`) prints nothing, returns -1 and says why on stderr.
#[test]
fn cpp_kernels_print_through_the_device_header() {
    if !toolchain_here("cpp_kernels_print_through_the_device_header") {
        return;
    }
    let out = run(device_printf_host(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    let mut got: Vec<&str> = std::str::from_utf8(&out.stdout).expect("UTF-8").lines().collect();
    let mut want: Vec<&str> = stderr.lines().filter_map(|l| l.strip_prefix("want: ")).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(want.len(), 66, "{stderr}");
    assert_eq!(got, want);
    assert!(
        stderr.contains(
            "gpuio_printf: `%n` is not taken: it writes through a pointer (the conversion at byte 0 of the format)"
        ),
        "{stderr}"
    );
}

/// The device header is C too: C99 with every warning an error, its argument record 16
/// bytes as the Rust side's (`gpuio_printf_arg`).
#[test]
fn the_device_header_compiles_as_c() {
    if !toolchain_here("the_device_header_compiles_as_c") {
        return;
    }
    assert_eq!(std::mem::size_of::<gpuio::device::c_abi::gpuio_printf_arg>(), 16);
    let b = built();
    let src = b.bin.join("device_header.c");
    std::fs::write(
        &src,
        "#include <gpuio/device.h>\n\
         _Static_assert(sizeof(gpuio_printf_arg) == 16, \"the Rust side's size\");\n\
         int f(int x) {\n\
         \x20   gpuio_printf_arg a[1] = {{GPUIO_PRINTF_INT, (uint64_t)(int64_t)x}};\n\
         \x20   return gpuio_printf_args(\"%d\\n\", a, 1) + gpuio_puts(\"x\") + gpuio_fsync(3);\n\
         }\n",
    )
    .unwrap();
    let mut args = words("-std=c99 -Wall -Wextra -Werror -pedantic -c");
    args.push(format!("-I{}", root().join("device/include").display()));
    args.push(src.display().to_string());
    args.extend(["-o".into(), b.bin.join("device_header.o").display().to_string()]);
    compile(&compiler(false), &args);
}

#[test]
fn c_hello_example_builds_with_the_readme_command() {
    // README: cc host/capi/examples/hello.c $(pkg-config --cflags --libs gpuio) -o target/hello
    hello_example("c_hello_example_builds_with_the_readme_command", "hello.c", &[]);
}

#[test]
fn cpp_hello_example_builds_with_the_usage_command_and_runs() {
    // USAGE.md: c++ -std=c++17 host/capi/examples/hello.cpp $(pkg-config ...) -o target/hello_cpp;
    // given the kernels' PTX where a CUDA GPU can run it, else with no argument (the CPU
    // backend; an AMD GPU would want a .hsaco, not this PTX).
    let ptx_runs_here = std::fs::metadata(PTX_PATH).is_ok_and(|m| m.len() > 0)
        && gpuio::cuda::Cuda::device_count().is_ok_and(|n| n > 0);
    let args: &[&str] = if ptx_runs_here { &[PTX_PATH] } else { &[] };
    hello_example(
        "cpp_hello_example_builds_with_the_usage_command_and_runs",
        "hello.cpp",
        args,
    );
}

#[test]
fn usage_shows_the_cpp_examples_own_lines() {
    // USAGE.md's "A C++ host" block is hello.cpp's core: each of its lines (less a
    // trailing `//` comment) is a line of the file CI compiles, in the file's order.
    let usage = std::fs::read_to_string(root().join("docs/USAGE.md")).expect("docs/USAGE.md");
    let file = std::fs::read_to_string(root().join("host/capi/examples/hello.cpp")).expect("hello.cpp");
    let lines: Vec<&str> = file.lines().map(str::trim).collect();
    let block = usage
        .split("```cpp\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a ```cpp block in USAGE.md");
    let mut after = 0;
    for line in block.lines() {
        let code = line.split("  //").next().unwrap_or(line).trim();
        let at = lines[after..]
            .iter()
            .position(|l| *l == code)
            .unwrap_or_else(|| panic!("USAGE.md's C++ line {code:?} is not in hello.cpp after the line before it"));
        after += at + 1;
    }
}

/// Builds `host/capi/examples/<file>` as its comment says (C with `cc`, C++ with `c++
/// -std=c++17`, flags from `pkg-config --cflags --libs gpuio`), runs it with `args` and
/// checks its 1,024 hello lines: each thread's exactly once.
fn hello_example(test: &str, file: &str, args: &[&str]) {
    if !toolchain_here(test) {
        return;
    }
    let b = built();
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "gpuio"])
        .env("PKG_CONFIG_PATH", &b.libdir)
        .output();
    let pc = match pc {
        Ok(pc) => pc,
        Err(e) => {
            skip(test, &format!("no pkg-config ({e})"));
            return;
        }
    };
    assert!(
        pc.status.success(),
        "pkg-config: {}",
        String::from_utf8_lossy(&pc.stderr)
    );
    let cxx = file.ends_with(".cpp");
    let exe = b.bin.join(file.replace('.', "_"));
    let mut cmd = if cxx {
        words("-std=c++17 -Wall -Wextra -Werror -pedantic")
    } else {
        Vec::new()
    };
    cmd.push(root().join("host/capi/examples").join(file).display().to_string());
    cmd.extend(words(&String::from_utf8_lossy(&pc.stdout)));
    cmd.extend(["-o".into(), exe.display().to_string()]);
    compile(&compiler(cxx), &cmd);
    let out = run(&exe, args);
    expect_success(file, &out);
    let lines: std::collections::BTreeSet<&[u8]> =
        out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 1024, "{file}: 1024 distinct lines");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with(b"hello from thread ") && l.ends_with(b" of 1024")),
        "{file}: a line that is not a hello"
    );
    assert_eq!(
        out.stdout.iter().filter(|&&b| b == b'\n').count(),
        1024,
        "{file}: each once"
    );
    eprintln!("{file}: {}", String::from_utf8_lossy(&out.stderr).trim());
}
