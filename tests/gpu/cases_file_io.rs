//! File I/O from kernels: stack buffers, thousands of threads on a few arena blocks, and
//! lanes printing while their neighbours wait for I/O.

use std::os::fd::AsRawFd;

use gpuio::Sandbox;
use gpuio_test_kernels as k;

use crate::harness::{Config, Scratch};
use crate::kernels::{all_threads_ok, build, check_numbered, plain, sync, Kernels, Mem};
use crate::Outcome;

pub(crate) fn stack_buffers_pwrite_pread(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(8, 2), 32u32);
    let threads = (grid * block) as usize;
    let (file, path) = scratch.file("stack_io.bin");
    // An 8-entry SQ: the 32 lanes of a warp submitting together need slots a lap apart.
    let rt = build(config.builder().sandbox(Sandbox::FileIo).sq_entries(8))?;
    let k = Kernels::load(&rt)?;
    let mut results = Mem::zeroed(&k, threads * 8);
    let (fd, res) = (file.as_raw_fd(), results.addr());
    k.launch(k::stack_io, grid, block, (fd, res))?;
    sync(&rt)?;
    let codes = results.read_i64s();
    drop(results);
    drop(k);
    drop(rt);
    all_threads_ok(&codes, "thread, 1000 * step + errno; 998 wrong bytes read back")?;
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    for t in 0..threads {
        if bytes.get(t * 64..t * 64 + 64) != Some(&k::stack_bytes(t as u64)[..]) {
            return Err(format!("the file's bytes of thread {t} are not the ones it wrote"));
        }
    }
    Ok(format!(
        "{threads} threads, an 8-entry SQ: wrote 64 bytes each from their stacks and read them back, byte-exact"
    ))
}

pub(crate) fn file_io_4_arena_blocks_2048_threads(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(16, 4), config.pick(128, 32));
    let threads = (grid * block) as usize;
    let bytes = 4096u32;
    let block_bytes = 64 << 10;
    let rt = build(
        config
            .builder()
            .sandbox(Sandbox::FileIo)
            .arena_bytes(4 * block_bytes)
            .arena_block_bytes(block_bytes)
            .sq_entries(8),
    )?;
    let k = Kernels::load(&rt)?;
    let dir = scratch.0.join("files");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (shared, shared_path) = scratch.file("shared.bin");
    let dir_text = dir.to_str().unwrap().as_bytes().to_vec();
    let mut dir_mem = Mem::from_bytes(&k, &dir_text)?;
    let mut scratch_mem = Mem::zeroed(&k, threads * 2 * bytes as usize);
    let mut results = Mem::zeroed(&k, threads * 8);
    let (d, dl, fd, s, r) = (
        dir_mem.addr(),
        dir_text.len() as u32,
        shared.as_raw_fd(),
        scratch_mem.addr(),
        results.addr(),
    );
    k.launch(k::file_check, grid, block, (d, dl, fd, bytes, s, r))?;
    sync(&rt)?;
    all_threads_ok(&results.read_i64s(), "thread, step * 1000 + errno")?;
    let shared_bytes = std::fs::read(&shared_path).map_err(|e| e.to_string())?;
    let mut want = vec![0u8; bytes as usize];
    for t in 0..threads {
        k::random_fill(t as u64, &mut want);
        let own = std::fs::read(dir.join(format!("t{t}"))).map_err(|e| format!("thread {t}'s file: {e}"))?;
        let at = t * bytes as usize;
        if own != want || shared_bytes.get(at..at + bytes as usize) != Some(&want[..]) {
            return Err(format!("thread {t}: the bytes in its files are not the ones it wrote"));
        }
    }
    Ok(format!(
        "{threads} threads, 4 arena blocks, an 8-entry SQ: each wrote, fsynced and read back its own \
         file and its part of a shared one ({} bytes each), byte-exact",
        bytes
    ))
}

pub(crate) fn print_while_others_wait_for_io(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block, steps) = (config.pick(16, 2), config.pick(64, 16), 16u32);
    let threads = (grid * block) as usize;
    let (file, path) = scratch.file("print_while_waiting.bin");
    let (out, out_path) = scratch.file("print_while_waiting.out");
    // An 8-entry SQ and a 4 KiB log: the waiting lanes' rounds flush the printing lanes'
    // lines and wait for ring room, while the lanes waiting with them are parked.
    let b = config
        .builder()
        .sandbox(Sandbox::FileIo)
        .sq_entries(8)
        .log_bytes(4096)
        .stdout_fd(out.as_raw_fd());
    let codes = {
        let rt = build(b)?;
        let k = Kernels::load(&rt)?;
        let mut results = Mem::zeroed(&k, threads * 8);
        let (fd, res) = (file.as_raw_fd(), results.addr());
        k.launch(k::print_while_waiting, grid, block, (fd, steps, res))?;
        sync(&rt)?;
        results.read_i64s()
    };
    all_threads_ok(
        &codes,
        "thread, 10000 * step + 1000 * op + errno; 998 wrong bytes read back",
    )?;
    let text = std::fs::read_to_string(&out_path).map_err(|e| format!("stdout: {e}"))?;
    check_numbered(&text, threads as u64, steps as u64 / 2, plain)?;
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    for t in 0..threads as u64 {
        for i in (0..steps as u64).filter(|i| (t + i) % 2 == 1) {
            let at = (t * steps as u64 + i) as usize;
            if bytes.get(at * 64..at * 64 + 64) != Some(&k::stack_bytes(at as u64)[..]) {
                return Err(format!(
                    "the file's bytes of thread {t}, step {i} are not the ones it wrote"
                ));
            }
        }
    }
    Ok(format!(
        "{threads} threads, an 8-entry SQ, a 4 KiB log: {} lines and {} pwrite/pread pairs, every line once and in order, every byte back",
        text.lines().count(),
        threads * steps as usize / 2
    ))
}

pub(crate) fn std_habits_on_a_device_file(config: Config, scratch: &Scratch) -> Outcome {
    let (err, err_path) = scratch.file("habits.err");
    let b = config.builder().sandbox(Sandbox::FileIo).stderr_fd(err.as_raw_fd());
    let (threads, dir) = run_in_a_directory(config, b, scratch, "habits", k::std_habits)?;
    for t in 0..threads {
        let text = std::fs::read_to_string(dir.join(format!("h{t}"))).map_err(|e| format!("thread {t}'s file: {e}"))?;
        let want: String = std::iter::once(format!("t={t} sq={}\n", t * t))
            .chain((0..20).map(|i| format!("{t} {i}\n")))
            .chain(std::iter::once("end\n".to_string()))
            .collect();
        if text != want {
            return Err(format!("thread {t}'s file holds {text:?}, not {want:?}"));
        }
    }
    let said = std::fs::read_to_string(&err_path).map_err(|e| e.to_string())?;
    if !(said.starts_with("[") && said.contains("src/files.rs:") && said.ends_with("] t = 0\n")) {
        return Err(format!("dbg! printed {said:?}"));
    }
    Ok(format!(
        "{threads} threads: writeln! on a File, 20 lines through a BufWriter and one by its io trait, seek and read_exact back, byte-exact; dbg! as std's"
    ))
}

/// A device file's length (`File::len`, found by reads), `SeekFrom::End`, and
/// `fs::create_dir_all` by a quarter of the threads each on one path at once.
pub(crate) fn a_files_end_and_nested_directories(config: Config, scratch: &Scratch) -> Outcome {
    let b = config.builder().sandbox(Sandbox::FileIo);
    let (threads, dir) = run_in_a_directory(config, b, scratch, "ends", k::file_ends_and_directories)?;
    for t in 0..threads {
        let len = std::fs::metadata(dir.join(format!("e{t}")))
            .map_err(|e| e.to_string())?
            .len();
        let want: usize = (0..t % 200 + 1).map(|i| format!("{t} {i}\n").len()).sum();
        if len != want as u64 {
            return Err(format!("thread {t}'s file is {len} bytes, not {want}"));
        }
    }
    for q in 0..threads.min(4) {
        if !dir.join(format!("deep/{q}/a/b")).is_dir() {
            return Err(format!(
                "create_dir_all made no {}",
                dir.join(format!("deep/{q}/a/b")).display()
            ));
        }
    }
    Ok(format!(
        "{threads} threads: len() of files of 1 to 200 lines, the last 4 bytes read from SeekFrom::End(-4), create_dir_all by {} threads a path at once",
        threads / 4
    ))
}

/// Runs `kernel(dir, dir_len, results)` on 4 blocks of 64 threads (2 of 16 on the CPU) of a
/// runtime from `b`, `dir` being a fresh directory `name` in the scratch, and checks that
/// every thread's `results` entry is 0 (else `1000 * step + errno`); returns the thread
/// count and the directory, the runtime gone.
fn run_in_a_directory(
    config: Config,
    b: gpuio::Builder,
    scratch: &Scratch,
    name: &str,
    kernel: gpuio::Kernel<fn(u64, u32, u64)>,
) -> Result<(usize, std::path::PathBuf), String> {
    let (grid, block) = (config.pick(4, 2), config.pick(64, 16));
    let threads = (grid * block) as usize;
    let rt = build(b)?;
    let k = Kernels::load(&rt)?;
    let dir = scratch.0.join(name);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let dir_text = dir.to_str().unwrap().as_bytes().to_vec();
    let mut dir_mem = Mem::from_bytes(&k, &dir_text)?;
    let mut results = Mem::zeroed(&k, threads * 8);
    k.launch(
        kernel,
        grid,
        block,
        (dir_mem.addr(), dir_text.len() as u32, results.addr()),
    )?;
    sync(&rt)?;
    all_threads_ok(&results.read_i64s(), "thread, step * 1000 + errno")?;
    drop(results);
    drop(dir_mem);
    drop(k);
    drop(rt);
    Ok((threads, dir))
}
