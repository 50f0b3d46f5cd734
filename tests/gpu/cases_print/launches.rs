//! What a launch hands its threads and gets back: a block's dynamic shared memory, 3-D
//! launches, every parameter type, strings and slices, results through `Output`s; and the
//! launch bounds a kernel declares.

use std::os::fd::AsRawFd;

use gpuio::LaunchConfig;
use gpuio_test_kernels as k;

use crate::harness::{Config, Scratch};
use crate::kernels::{build, check_numbered, run_printing, sync, Kernels};
use crate::Outcome;

/// Dynamic shared memory and `sync_threads`: each block's threads pass words around
/// through their block's shared memory for 3 rounds (`shared_memory_rounds`), under the
/// 48 KiB a launch gets without opting in, past it (CUDA: the launch raises the kernel's
/// limit), and with none (the kernel sees an empty region).
pub(crate) fn a_block_shares_dynamic_shared_memory(config: Config, scratch: &Scratch) -> Outcome {
    let rounds = 3u32;
    let launches = [
        (config.pick(4, 2), config.pick(256, 8), config.pick(1024, 32)),
        (config.pick(2, 1), config.pick(128, 4), 64 << 10),
        (1, config.pick(64, 4), 0),
    ];
    let mut said = Vec::new();
    for (i, &(grid, block, bytes)) in launches.iter().enumerate() {
        let (out_file, path) = scratch.file(&format!("shared-{i}.out"));
        {
            let rt = build(config.builder().stdout_fd(out_file.as_raw_fd()))?;
            let k = Kernels::load(&rt)?;
            k.launch_with(
                k::shared_memory_rounds,
                LaunchConfig::linear(grid, block).with_shared_mem(bytes),
                (rounds,),
            )?;
            sync(&rt)?;
        }
        let out = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        let mut seen = std::collections::BTreeSet::new();
        for line in out.lines() {
            let field = |key: &str| line.split(' ').find_map(|w| w.strip_prefix(key)?.parse::<u64>().ok());
            let (Some(t), Some(len)) = (field("t="), field("len=")) else {
                return Err(format!("a torn line {line:?}"));
            };
            if len != bytes as u64 {
                return Err(format!("{line:?}: the launch gave {bytes} bytes"));
            }
            let (b, n) = (t / block as u64, block as u64);
            let neighbour = |r: u64| b * 1_000_000 + r * 1_000 + (t % n + 1) % n;
            let expected = if bytes == 0 {
                line.ends_with(" short")
            } else {
                field("next=") == Some(neighbour(rounds as u64 - 1))
                    && field("sum=") == Some((0..rounds as u64).map(neighbour).sum())
            };
            if !expected {
                return Err(format!("{line:?}: not what block {b}'s shared words held"));
            }
            if !seen.insert(t) {
                return Err(format!("{line:?}: thread {t} twice"));
            }
        }
        if seen.len() != (grid * block) as usize {
            return Err(format!("{} of {} threads printed", seen.len(), grid * block));
        }
        said.push(format!("{grid} x {block} threads with {bytes} bytes"));
    }
    Ok(format!(
        "{} (3 rounds each, every thread read its neighbour's words)",
        said.join(", ")
    ))
}

/// A 3-D launch: every (block, thread) pair in x, y and z runs once, sees the launch's
/// sizes, and its `global_thread_idx` is the linear rank over all three (x fastest).
pub(crate) fn three_dimensional_launches(config: Config, scratch: &Scratch) -> Outcome {
    let cfg = if config.gpu() {
        LaunchConfig::new((3, 2, 2), (8, 4, 2))
    } else {
        LaunchConfig::new((2, 2, 1), (2, 3, 2))
    };
    let (out_file, path) = scratch.file("dims.out");
    {
        let rt = build(config.builder().stdout_fd(out_file.as_raw_fd()))?;
        let k = Kernels::load(&rt)?;
        k.launch_with(k::dims_3d, cfg, ())?;
        sync(&rt)?;
    }
    let out = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let (g, b) = (cfg.grid, cfg.block);
    let per_block = b.count();
    let mut seen = std::collections::BTreeSet::new();
    for line in out.lines() {
        let field = |key: &str| -> Result<[u64; 3], String> {
            let v = line
                .split(' ')
                .find_map(|w| w.strip_prefix(key))
                .ok_or_else(|| format!("no {key} in {line:?}"))?;
            let n: Vec<u64> = v.split(',').filter_map(|x| x.parse().ok()).collect();
            n.try_into().map_err(|_| format!("a torn {key} in {line:?}"))
        };
        let t: u64 = line
            .strip_prefix("t=")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("a torn line {line:?}"))?;
        let (bi, ti) = (field("b=")?, field("th=")?);
        if field("g=")? != [g.x as u64, g.y as u64, g.z as u64] || field("bd=")? != [b.x as u64, b.y as u64, b.z as u64]
        {
            return Err(format!("{line:?}: the launch was {cfg:?}"));
        }
        let block_rank = bi[0] + g.x as u64 * (bi[1] + g.y as u64 * bi[2]);
        let thread_rank = ti[0] + b.x as u64 * (ti[1] + b.y as u64 * ti[2]);
        if t != block_rank * per_block + thread_rank {
            return Err(format!("{line:?}: global_thread_idx is not the linear rank"));
        }
        if !seen.insert(t) {
            return Err(format!("{line:?}: thread {t} twice"));
        }
    }
    if seen.len() as u64 != cfg.threads() {
        return Err(format!("{} of {} threads printed", seen.len(), cfg.threads()));
    }
    Ok(format!(
        "({}, {}, {}) blocks of ({}, {}, {}) threads: each of the {} once, ids and sizes as launched",
        g.x,
        g.y,
        g.z,
        b.x,
        b.y,
        b.z,
        cfg.threads()
    ))
}

/// A typed launch (`Runtime::kernels`, `Kernels::launch`) hands each parameter type to
/// every thread as it was passed: values at the edges of their types, signed ones negative.
pub(crate) fn typed_launch_passes_every_parameter_type(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 2), 33);
    let args = (u32::MAX - 1, -7i32, u64::MAX - 2, i64::MIN + 3, 1.5f32, -0.1f64);
    let (out, _) = run_printing(config.builder(), scratch, k::every_param_type, (grid, block), args)?;
    let (a, b, c, d, e, f) = args;
    let want = format!(" u32={a} i32={b} u64={c} i64={d} f32={e} f64={f}");
    every_thread_printed(&out, grid * block, &want)?;
    Ok(format!("{} threads each got {want:?}", grid * block))
}

/// A typed launch's `&str` and `&[T]` parameters reach every thread whole: a UTF-8 name, a
/// slice of several pages, an empty slice; the copies stay until the synchronize.
pub(crate) fn strings_and_slices_as_parameters(config: Config, scratch: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(4, 2), 33);
    let name = String::from("files/ünïcødé ✓.txt");
    let values: Vec<u64> = (1..=3000).collect();
    // The name by reference, the values moved in: both copied at launch.
    let args = (&name, values.clone(), 0.25f32, &[0u8; 0]);
    let (out, _) = run_printing(config.builder(), scratch, k::strings_and_slices, (grid, block), args)?;
    let want = format!(
        " name={name} n=3000 sum={} last=3000 scale=0.25 empty=0",
        values.iter().sum::<u64>()
    );
    every_thread_printed(&out, grid * block, &want)?;
    Ok(format!("{} threads each read {want:?}", grid * block))
}

/// Results come back through `Output`s (`Out<T>` parameters): every element written by its
/// thread, reading before the synchronize refused, and an Output dropped while its kernel
/// may still write it kept until the kernel is done.
pub(crate) fn results_come_back_through_outputs(config: Config, _: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(40, 4), config.pick(256, 16));
    let n = (grid * block) as usize - 3; // the last 3 threads write nothing
    let x: Vec<u64> = (0..n as u64).map(|i| i * 7 + 1).collect();
    let rt = build(config.builder())?;
    let k = Kernels::load(&rt)?;
    let mut squares = rt.output::<u64>(n).map_err(|e| format!("output: {e}"))?;
    let mut halves = rt.output::<f32>(n + 3).map_err(|e| format!("output: {e}"))?;
    k.launch(k::squares_into, grid, block, (&x, &mut squares, &mut halves))?;
    let early = match squares.read() {
        Err(e) => e.to_string(),
        Ok(_) => return Err("an Output was read before the synchronize".into()),
    };
    // Dropped while its kernel may still run: kept until the synchronize finds it done.
    let mut dropped = rt.output::<u64>(n).map_err(|e| format!("output: {e}"))?;
    let mut spare = rt.output::<f32>(n).map_err(|e| format!("output: {e}"))?;
    k.launch(k::squares_into, grid, block, (&x, &mut dropped, &mut spare))?;
    drop(dropped);
    drop(spare);
    sync(&rt)?;
    let (sq, hv) = (
        squares.read().map_err(|e| e.to_string())?,
        halves.read().map_err(|e| e.to_string())?,
    );
    for i in 0..n {
        if sq[i] != x[i] * x[i] + i as u64 || hv[i] != x[i] as f32 / 2.0 {
            return Err(format!("element {i}: {} and {}, from x = {}", sq[i], hv[i], x[i]));
        }
    }
    if hv[n..] != [0.0; 3] {
        return Err(format!("elements nothing wrote are {:?}, not zero", &hv[n..]));
    }
    Ok(format!(
        "{n} u64 and {n} f32 results from {} threads, each right; read before the synchronize: {early}",
        grid * block
    ))
}

/// Checks that each of `threads` threads printed one line `t=<t> i=0<want>`.
fn every_thread_printed(out: &str, threads: u32, want: &str) -> Result<(), String> {
    check_numbered(out, u64::from(threads), 1, |_, _, rest| {
        if rest == want {
            Ok(())
        } else {
            Err(format!("{rest:?}, expected {want:?}"))
        }
    })
}

/// Each thread writes its own element of an `Output` with no `unsafe` (`Out::write_own`),
/// threads past its end nothing; the same `Output` given to a second launch before a
/// synchronize is refused where the two may run at once (the CPU backend) and taken where
/// they run one after the other (CUDA's null stream).
pub(crate) fn each_thread_writes_its_own_element(config: Config, _: &Scratch) -> Outcome {
    let (grid, block) = (config.pick(8, 2), config.pick(128, 16));
    let n = (grid * block) as usize - 5;
    let rt = build(config.builder())?;
    let k = Kernels::load(&rt)?;
    let mut out = rt.output::<u64>(n).map_err(|e| format!("output: {e}"))?;
    k.launch(k::own_elements, grid, block, (&mut out,))?;
    let again = k.launch(k::own_elements, grid, block, (&mut out,));
    let second = match (config.gpu(), again) {
        (true, Ok(())) => "taken on the null stream".to_string(),
        (false, Err(e)) if e.contains("may still run beside it") => "refused on the CPU backend".to_string(),
        (gpu, other) => return Err(format!("a second launch with the Output (gpu: {gpu}): {other:?}")),
    };
    sync(&rt)?;
    let got = out.read().map_err(|e| e.to_string())?;
    if let Some(i) = (0..n).find(|&i| got[i] != 3 * i as u64 + 1) {
        return Err(format!("element {i} is {}, not {}", got[i], 3 * i + 1));
    }
    // After the synchronize the Output goes to a launch again.
    k.launch(k::own_elements, grid, block, (&mut out,))?;
    sync(&rt)?;
    Ok(format!(
        "{n} elements from {} threads, each its own, none past the end; a second launch before a synchronize {second}",
        grid * block
    ))
}

/// A kernel declared for blocks of at most 64 threads (`#[launch_bounds(64, 2)]`): a launch
/// of (4, 4, 4) threads a block runs every thread once; blocks of 65 are refused by the
/// typed launch on every backend, and by a launch by name on CUDA (which reads the bound
/// from the PTX); there the JIT compiled the kernel for 64 (the driver's
/// `MAX_THREADS_PER_BLOCK` of it), where an unbounded kernel that prints gets what its
/// registers allow (256 at 255 registers, in the test module, which does file I/O).
pub(crate) fn launch_bounds_are_kept(config: Config, scratch: &Scratch) -> Outcome {
    let (out_file, path) = scratch.file("bounded.out");
    let cfg = LaunchConfig::new(2, (4, 4, 4));
    let mut said = Vec::new();
    {
        let rt = build(config.builder().stdout_fd(out_file.as_raw_fd()))?;
        let k = Kernels::load(&rt)?;
        k.launch_with(k::bounded_64, cfg, ())?;
        let refused = |what: &str, r: Result<(), String>| match r {
            Err(e) if e.contains("declares blocks of at most 64") && e.contains("#[launch_bounds]") => Ok(()),
            Err(e) => Err(format!("{what}: refused, but not for its bound: {e}")),
            Ok(()) => Err(format!(
                "{what}: blocks of 65 threads ran past the kernel's bound of 64"
            )),
        };
        refused("the typed launch", k.launch(k::bounded_64, 1, 65, ()))?;
        said.push("typed launch of 65 refused".to_string());
        // On NVIDIA (AMD's code objects do not carry the bound to the host).
        if let Some(m) = k.module().filter(|m| m.cuda().is_some()) {
            let by_name = m.launch_with("bounded_64", LaunchConfig::linear(1, 65), &[]);
            refused("the launch by name", by_name.map_err(|e| e.to_string()))?;
            said.push("by name refused".to_string());
            let max = |name: &str| -> Result<u32, String> {
                m.resources(name)
                    .map_err(|e| e.to_string())?
                    .map(|r| r.max_block_threads)
                    .ok_or_else(|| format!("{name}: no resources"))
            };
            // dims_3d prints as bounded_64 does, unbounded: what the registers alone allow.
            let (bounded, other) = (max("bounded_64")?, max("dims_3d")?);
            if bounded != 64 || other <= 64 {
                return Err(format!(
                    "the driver's MAX_THREADS_PER_BLOCK: bounded_64 {bounded}, dims_3d {other}: the JIT \
                     was not told the bound (64 for bounded_64, more for dims_3d, which has none)"
                ));
            }
            said.push(format!("JIT compiled it for 64 (dims_3d, unbounded: {other})"));
        }
        sync(&rt)?;
    }
    let out = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    check_numbered(&out, cfg.threads(), 1, |_, _, tail| match tail.trim() {
        "bd=64" => Ok(()),
        _ => Err(format!("{tail:?}: the block had 64 threads")),
    })?;
    Ok(format!(
        "{} threads of 2 blocks of (4, 4, 4) ran once each; {}",
        cfg.threads(),
        said.join(", ")
    ))
}
