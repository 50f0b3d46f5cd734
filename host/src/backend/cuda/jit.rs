//! How the driver compiles a module's PTX ([`Jit`]): the settings that steer it (the register
//! caps, `GPUIO_MAX_REGISTERS` and `GPUIO_PRINT_REGISTERS`, and the block size it compiles
//! for, `GPUIO_BLOCK_THREADS`), the JIT's options, and the two
//! ways in, one whole program (`cuModuleLoadDataEx`) or inputs linked by the driver
//! (`cuLink*`).

use std::ffi::{c_void, CString};

use super::driver::Cuda;
use super::ffi::*;
use crate::error::{Error, Result};

/// How the driver compiles a module's PTX at its first load (later loads take the result
/// from the driver's JIT cache, either way).
///
/// As one whole program (`ptxas` without `-c`), every kernel is compiled with its own copy
/// of every function it calls (the print path, the ring, `core::fmt`, the panic report), so
/// a module's JIT time grows as kernels x shared code: about a second a kernel, a minute
/// for a module of twenty. Compiled separately (relocatable code, which the driver's
/// linker then links), each function is compiled once, and a module takes about as long
/// as one kernel compiled whole. Calls between functions then follow the standard ABI,
/// which costs a print a few percent of its throughput (BENCHMARKS.md has both). The module
/// goes in as two inputs, the library's functions apart with a register cap of their own
/// (`GPUIO_PRINT_REGISTERS`, `library.rs`).
///
/// PTX for a target before sm_70 (the lockstep build) is always compiled whole: linked by
/// the driver, it ran with independent thread scheduling on Hopper, which would
/// make the lockstep build test nothing.
///
/// A module compiled whole is cut into one program per kernel (each with the functions and
/// data it reaches), since a whole program's compile time grows faster than its kernels
/// (a module of tens of kernels takes minutes cut so; as one program, over half as long
/// again), and the driver's JIT cache then
/// keeps each kernel's program apart, so an edit that leaves a kernel's program text
/// unchanged does not compile it again. A module whose kernels share a `static` with no
/// initial value (state they would each get a copy of) is compiled as one program.
///
/// A whole program has one register cap for all its code, where compiled separately the
/// library's functions have theirs: so a program is first compiled separately to learn the
/// registers its kernels hold there, and then whole under that cap (`whole_program_cap` in
/// this file). `GPUIO_JIT=whole` for sm_70 and later is not to be relied on: ptxas (CUDA
/// 13.0, and driver 580's JIT) compiling a whole program for sm_90 folded a test kernel's own
/// `(t + 1) % n` into a division by zero (docs/PROTOCOL.md, "Compilers").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jit {
    /// `cuModuleLoadDataEx`: one whole program. For sm_70 and later, not to be relied on:
    /// ptxas miscompiled a test kernel's own code so, where compiled separately it ran
    /// right (docs/PROTOCOL.md, "Compilers").
    Whole,
    /// `cuLinkCreate` / `cuLinkAddData` / `cuLinkComplete`: separate compilation.
    Separate,
}

impl Jit {
    /// `GPUIO_JIT=whole` or `GPUIO_JIT=separate`; unset (or empty): [`Jit::Separate`].
    pub fn from_env() -> Result<Jit> {
        match crate::settings::var("GPUIO_JIT")?.as_deref() {
            None | Some("separate") => Ok(Jit::Separate),
            Some("whole") => Ok(Jit::Whole),
            Some(v) => Err(crate::settings::invalid("GPUIO_JIT", v)),
        }
    }
}

/// `GPUIO_MAX_REGISTERS`: a cap on the registers per thread of every kernel the driver
/// compiles for gpuio (`CU_JIT_MAX_REGISTERS`, as nvcc's `-maxrregcount`), 16 to 255; unset,
/// none.
///
/// Where it serves: a module that does file I/O from device code, whose library functions
/// get no cap of their own unless asked ([`library_registers`]): a kernel of it with a
/// `println!` that never runs, or with any panic path (an index check), may hold 160-255
/// registers and, at 256 threads a block, 8 warps an SM instead of 64. What it costs: a
/// kernel whose own code needs more registers than the cap spills in its hot loop, and a
/// print or a file call that runs spills.
fn max_registers() -> Result<Option<u32>> {
    let name = "GPUIO_MAX_REGISTERS";
    crate::settings::var(name)?
        .map(|v| crate::settings::in_range(name, &v, 16..=255))
        .transpose()
}

/// `GPUIO_BLOCK_THREADS`: the most threads a block of the module's kernels will have, 1 to
/// 1,024 (`CU_JIT_THREADS_PER_BLOCK`, as `__launch_bounds__`' first number); unset, none.
///
/// Told the block size, the JIT may give each thread up to 65,536 / that many registers (at
/// most 255), and it weighs registers against loads in flight knowing it. Where it served: a
/// 4 x 4 register tile with a print that never runs; without the setting ptxas held that
/// kernel at 64 registers by issuing its loop's 16 loads in three groups instead of one
/// (docs/PROTOCOL.md, "What a print costs the kernel around it"); with 256, 72 registers and
/// the plain kernel's loop. What it costs: a launch with larger blocks is refused
/// ([`check_block`]), and the JIT takes more registers where it likes, in every kernel of
/// the module: a grid-stride SAXPY with a never-taken print went from 32 to 42 and lost a
/// fifth of its speed, so it serves modules of register-heavy kernels.
pub(crate) fn block_threads() -> Result<Option<u32>> {
    let name = "GPUIO_BLOCK_THREADS";
    crate::settings::var(name)?
        .map(|v| crate::settings::in_range(name, &v, 1..=1024))
        .transpose()
}

/// Checks the JIT's settings (`GPUIO_MAX_REGISTERS`, `GPUIO_PRINT_REGISTERS`,
/// `GPUIO_BLOCK_THREADS`) when a runtime is built, on every backend, so that a value they
/// cannot take is refused there, not first where a CUDA module loads (which reads them
/// again).
pub(crate) fn check_settings() -> Result<()> {
    max_registers()?;
    library_registers()?;
    block_threads()?;
    Ok(())
}

/// Refuses a launch of `threads` a block where the module was compiled for at most `limit`
/// ([`block_threads`]): the driver would refuse it for want of registers, or not, by what
/// the kernel happened to need.
pub(crate) fn check_block(kernel: &str, cfg: &crate::LaunchConfig, limit: Option<u32>) -> Result<()> {
    let threads = cfg.block_threads();
    match limit {
        Some(n) if threads > u64::from(n) => Err(Error::Config(format!(
            "kernel {kernel}: a block of {threads} threads, but its module was compiled for blocks of \
             at most {n} (GPUIO_BLOCK_THREADS={n}): launch blocks of at most {n} threads, or raise \
             or unset GPUIO_BLOCK_THREADS before the module loads"
        ))),
        _ => Ok(()),
    }
}

/// The register cap of the library's functions when compiled separately (`library.rs`)
/// where `GPUIO_PRINT_REGISTERS` names none: what a kernel whose own code needs at most
/// this many gets with a print, as CUDA C's gets with a `printf` (which needs fewer still).
///
/// Why not printf's 24: at 32 registers an SM of every NVIDIA GPU gpuio runs on (sm_60 to
/// sm_90, at most 2,048 threads an SM and 65,536 registers) already holds all the threads it
/// can, so fewer registers buy a kernel no warps, and the print path spills more: capped at
/// 24, a kernel that only prints ran at 0.92-0.93x the rate (H200, `bench_gpu`: 32-byte
/// lines from Rust and C++, 128-byte from C++; Rust's 128-byte runs spread too far to tell),
/// while a never-taken print then left the FMA
/// kernel at 28 registers and SAXPY at 26 (their own code's count beside the call).
pub(crate) const LIBRARY_REGISTERS: u32 = 32;

/// What `GPUIO_PRINT_REGISTERS` asks of a module compiled separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LibraryCap {
    /// Unset: [`LIBRARY_REGISTERS`], unless the module does file I/O from device code
    /// (then none).
    Auto,
    /// A number, 16 to 255: this cap, whatever the module does.
    Cap(u32),
    /// `off`: none; the module goes in as one input.
    Off,
}

impl LibraryCap {
    /// The cap for a module of this PTX text, if any.
    pub(super) fn for_module(self, ptx: &str) -> Option<u32> {
        match self {
            LibraryCap::Auto if super::library::does_file_io(ptx) => None,
            LibraryCap::Auto => Some(LIBRARY_REGISTERS),
            LibraryCap::Cap(n) => Some(n),
            LibraryCap::Off => None,
        }
    }
}

/// `GPUIO_PRINT_REGISTERS`: the register cap of gpuio's and core's device functions (the
/// print path, the panic report, `core::fmt`): 16 to 255, or `off` (none: compiled with the
/// kernels, as one input); unset, [`LIBRARY_REGISTERS`] where
/// the module does no file I/O from device code, none where it does.
///
/// What the cap costs: those functions spill to local memory where they would use more, and
/// a kernel that does nothing but print runs 64 warps an SM instead of 8, at 0.81-0.85x the
/// uncapped rate with 8 of them at a time writing records (docs/PROTOCOL.md says where the
/// rest goes, as far as it was found); file
/// I/O more so (its bulk copy keeps 32 16-byte loads in flight a lane: at 32 registers
/// staged `pread` into device memory ran at under a quarter of its uncapped rate, which is
/// why a module that does file I/O is left uncapped unless asked); what it saves: a kernel's
/// register count is the larger of its own code's and the cap, where uncapped a print raises
/// it to 160-255 (see [`max_registers`]). A module compiled whole (the lockstep build,
/// `GPUIO_JIT=whole`) gets the same counts by another way ([`whole_program_cap`]); a
/// lockstep kernel that only prints runs below its uncapped rate, more so than on sm_70+
/// (no print turns there: BENCHMARKS.md has the figures).
pub(crate) fn library_registers() -> Result<LibraryCap> {
    match crate::settings::var("GPUIO_PRINT_REGISTERS")? {
        None => Ok(LibraryCap::Auto),
        Some(v) if v.eq_ignore_ascii_case("off") => Ok(LibraryCap::Off),
        Some(v) => crate::settings::in_range("GPUIO_PRINT_REGISTERS", &v, 16..=255).map(LibraryCap::Cap),
    }
}

/// The driver's JIT options for one compile, passed by pointer to `cuModuleLoadDataEx` or
/// `cuLinkCreate`: a buffer for its error log, with its size, and a slot for the compile
/// time. The log's heap buffer does not move with the struct, but the driver also keeps
/// pointers to `options` and `values` themselves (`cuLinkCreate` holds them until
/// `cuLinkDestroy`, and writes the compile time at `cuLinkComplete`): the struct must stay
/// where it is, borrowed, from the first call to the last, as `load_whole` and
/// `link_and_load` keep it.
pub(super) struct JitOptions {
    log: Vec<u8>,
    /// The options, and one value each: the error log, its size, the wall time (its value
    /// the driver's output), then the register cap and the block size where asked for (a
    /// cap [`JitOptions::cap_at`] adds comes last).
    options: Vec<u32>,
    values: Vec<*mut c_void>,
    /// Whether the PTX declares launch bounds (`launch_bounds.rs`): a register cap then
    /// needs `CU_JIT_OVERRIDE_DIRECTIVE_VALUES` ([`JitOptions::hold_to_the_cap`]).
    bounded: bool,
}

impl JitOptions {
    /// The options of every compile: the error log and the wall time, the register cap
    /// `GPUIO_MAX_REGISTERS` asks for ([`max_registers`]), and `block_threads`, the block
    /// size to compile for (`GPUIO_BLOCK_THREADS`, [`block_threads`], read once per load).
    /// `ptx` is what will be compiled, read only for whether it declares launch bounds.
    pub(super) fn new(block_threads: Option<u32>, ptx: &str) -> Result<Self> {
        let mut log = vec![0u8; 16 << 10];
        let mut values = vec![
            log.as_mut_ptr() as *mut c_void,
            log.len() as *mut c_void,
            std::ptr::null_mut(),
        ];
        let mut options = vec![
            CU_JIT_ERROR_LOG_BUFFER,
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            CU_JIT_WALL_TIME,
        ];
        if let Some(cap) = max_registers()? {
            options.push(CU_JIT_MAX_REGISTERS);
            values.push(cap as usize as *mut c_void);
        }
        if let Some(n) = block_threads {
            // In and out: the driver writes back the block size it compiled for.
            options.push(CU_JIT_THREADS_PER_BLOCK);
            values.push(n as usize as *mut c_void);
        }
        let mut jit = JitOptions {
            log,
            options,
            values,
            bounded: super::launch_bounds::declares_any(ptx),
        };
        jit.hold_to_the_cap();
        Ok(jit)
    }

    /// Where a register cap is set and the PTX declares launch bounds, lets the cap win:
    /// ptxas ignores `-maxrregcount` for a kernel with `.maxntid` (as nvcc does for a kernel
    /// with `__launch_bounds__`), and compiled whole a bounded tile then took 128 registers
    /// where its program's cap said 72. `CU_JIT_OVERRIDE_DIRECTIVE_VALUES` (an option of
    /// recent drivers: CUDA 13's has it) makes the options take precedence over the
    /// directives: the cap, and
    /// also `GPUIO_BLOCK_THREADS` where set, over each kernel's `.maxntid` (a kernel then
    /// compiled for that many threads, which its launches are checked against too). Only
    /// then, so that a module without bounds compiles as it always did.
    fn hold_to_the_cap(&mut self) {
        let capped = self.options.contains(&CU_JIT_MAX_REGISTERS);
        if self.bounded && capped && !self.options.contains(&CU_JIT_OVERRIDE_DIRECTIVE_VALUES) {
            self.options.push(CU_JIT_OVERRIDE_DIRECTIVE_VALUES);
            // The value travels in the pointer-sized slot itself: 1, enabled.
            self.values.push(std::ptr::without_provenance_mut(1));
        }
    }

    /// The register cap every input gets (`GPUIO_MAX_REGISTERS`, or what
    /// [`JitOptions::cap_at`] set), if any.
    pub(super) fn cap(&self) -> Option<u32> {
        let at = self.options.iter().position(|&o| o == CU_JIT_MAX_REGISTERS)?;
        Some(self.values[at] as usize as u32)
    }

    /// `registers`, or the cap every input gets where that is lower.
    pub(super) fn at_most(&self, registers: u32) -> u32 {
        self.cap().map_or(registers, |all| all.min(registers))
    }

    /// Caps every kernel of the compile at `registers` (or at `GPUIO_MAX_REGISTERS` where
    /// that is lower).
    pub(super) fn cap_at(&mut self, registers: u32) {
        let registers = self.at_most(registers);
        match self.options.iter().position(|&o| o == CU_JIT_MAX_REGISTERS) {
            Some(at) => self.values[at] = registers as usize as *mut c_void,
            None => {
                self.options.push(CU_JIT_MAX_REGISTERS);
                self.values.push(registers as usize as *mut c_void);
            }
        }
        self.hold_to_the_cap();
    }

    /// The driver's error `rc` from `what`, with the JIT's log where it wrote one.
    pub(super) fn error(&self, cuda: &Cuda, rc: CuResult, what: &str) -> Error {
        let end = self.log.iter().position(|&b| b == 0).unwrap_or(self.log.len());
        let log = String::from_utf8_lossy(&self.log[..end]);
        let mut why = cuda.check_str(rc, what).unwrap_err();
        if !log.trim().is_empty() {
            why.message.push_str(":\n");
            why.message.push_str(log.trim_end());
        }
        Error::Cuda(why)
    }

    /// The compile time, in milliseconds: the driver writes a float into the pointer-sized
    /// slot.
    pub(super) fn wall_ms(&self) -> f32 {
        f32::from_bits(self.values[2] as usize as u32)
    }

    /// Counts `ms` of an earlier attempt in the compile time.
    pub(super) fn add_wall_ms(&mut self, ms: f32) {
        self.values[2] = (self.wall_ms() + ms).to_bits() as usize as *mut c_void;
    }
}

/// PTX text as the driver takes it: NUL-terminated, refused where it holds a NUL.
pub(super) fn ptx_text(ptx: &str) -> Result<CString> {
    CString::new(ptx).map_err(|_| Error::Config("PTX text contains a NUL byte".into()))
}

/// Compiles `text` as one whole program and loads it (`cuModuleLoadDataEx`).
pub(super) fn load_whole(cuda: &Cuda, text: &CString, jit: &mut JitOptions) -> Result<CuModule> {
    let mut handle = std::ptr::null_mut();
    // SAFETY: a NUL-terminated PTX image, a valid out-pointer, and one value per option:
    // the error log buffer (alive for the call) with its size, and a slot the driver
    // writes the compile time into.
    let rc = unsafe {
        (cuda.api.cuModuleLoadDataEx)(
            &mut handle,
            text.as_ptr() as *const c_void,
            jit.options.len() as u32,
            jit.options.as_mut_ptr(),
            jit.values.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(jit.error(cuda, rc, "cuModuleLoadDataEx"));
    }
    Ok(handle)
}

/// The registers a program compiled whole may hold so that a print costs its kernels no
/// more than compiled separately: the most that any of its kernels holds when the program
/// is compiled separately, the library's functions apart under `cap` (`library.rs`), with
/// the driver's compile time of that in milliseconds; `None` where the program has no
/// library function, or the driver refuses the cut (the program is then compiled uncapped,
/// and a notice says so once, with the driver's error).
///
/// Why: compiled whole, a kernel's register count is the most that anything it may call
/// uses, and a print's formatting reaches `core`'s float formatting (253 registers), so a
/// never-taken `println!` took a kernel of 15 registers to 255. A whole program has one cap
/// for all its code (`CU_JIT_MAX_REGISTERS`); the separate compile says what the kernels'
/// own code needs beside a capped library, and the whole compile then gets that cap: the
/// library's functions spill, the kernels' own code keeps what it needs. What it costs: a
/// separate compile beside the whole one at the first load (the driver's JIT cache keeps
/// both).
pub(super) fn whole_program_cap(
    cuda: &Cuda,
    ptx: &str,
    cap: u32,
    block_threads: Option<u32>,
) -> Result<Option<(u32, f32)>> {
    let (Some((user, library)), Some(items)) = (super::library::cut(ptx), super::split::items(ptx)) else {
        return Ok(None);
    };
    let kernels = items
        .iter()
        .filter(|i| i.kind == super::split::Kind::Entry)
        .map(|i| i.name);
    let mut options = JitOptions::new(block_threads, ptx)?;
    let cap = options.at_most(cap);
    let inputs = [(ptx_text(&user)?, None), (ptx_text(&library)?, Some(cap))];
    let handle = match link_and_load(cuda, &inputs, &mut options) {
        Ok(handle) => handle,
        Err(refused) => {
            crate::notice::say_once(
                crate::notice::Level::Warn,
                &format!(
                    "gpuio: the driver refused this module compiled in two parts (the kernels apart \
                     from gpuio's and core's functions, which get a register cap), which gpuio does \
                     only to learn the registers to compile it whole with: its kernels with a print \
                     may hold up to 255 registers. GPUIO_MAX_REGISTERS=32 caps them all (the \
                     kernels' own code too). This is gpuio's bug: please report it with this log: \
                     {refused}"
                ),
            );
            return Ok(None);
        }
    };
    let mut most = Some(0u32);
    for name in kernels {
        let read = (|| {
            let name = CString::new(name).ok()?;
            let (mut f, mut registers) = (std::ptr::null_mut(), 0i32);
            // SAFETY: a valid out-pointer and a module loaded above, not yet unloaded.
            let rc = unsafe { (cuda.api.cuModuleGetFunction)(&mut f, handle, name.as_ptr()) };
            if rc != 0 {
                return None;
            }
            // SAFETY: an attribute query of a function of that module, writing one int.
            let rc = unsafe { (cuda.api.cuFuncGetAttribute)(&mut registers, CU_FUNC_ATTRIBUTE_NUM_REGS, f) };
            (rc == 0).then_some(registers.max(0) as u32)
        })();
        most = most.zip(read).map(|(a, b)| a.max(b));
    }
    // SAFETY: loaded above and never launched: nothing of it runs.
    unsafe { (cuda.api.cuModuleUnload)(handle) };
    Ok(most.filter(|&r| r > 0).map(|r| (r, options.wall_ms())))
}

/// Compiles `inputs` function by function (`cuLink*`: each function once), each input
/// with its own register cap where it has one, links them and loads the linked image.
pub(super) fn link_and_load(cuda: &Cuda, inputs: &[(CString, Option<u32>)], jit: &mut JitOptions) -> Result<CuModule> {
    let mut state = std::ptr::null_mut();
    // SAFETY: one value per option, as in `load_whole`; the log buffer and `values` outlive
    // the link state (destroyed below, on every path).
    let rc = unsafe {
        (cuda.api.cuLinkCreate_v2)(
            jit.options.len() as u32,
            jit.options.as_mut_ptr(),
            jit.values.as_mut_ptr(),
            &mut state,
        )
    };
    if rc != 0 {
        return Err(jit.error(cuda, rc, "cuLinkCreate"));
    }
    let linked = (|| {
        for (i, (text, cap)) in inputs.iter().enumerate() {
            let mut option = [CU_JIT_MAX_REGISTERS];
            let mut value = [cap.unwrap_or(0) as usize as *mut c_void];
            let n = u32::from(cap.is_some());
            let name = if i == 0 { c"gpuio kernels" } else { c"gpuio library" };
            // SAFETY: `state` is a live link state; the PTX image is its bytes including
            // the NUL, the name a NUL-terminated string; `n` options (0 or the register
            // cap), each with its value, alive for the call.
            let rc = unsafe {
                (cuda.api.cuLinkAddData_v2)(
                    state,
                    CU_JIT_INPUT_PTX,
                    text.as_ptr() as *mut c_void,
                    text.as_bytes_with_nul().len(),
                    name.as_ptr(),
                    n,
                    option.as_mut_ptr(),
                    value.as_mut_ptr(),
                )
            };
            if rc != 0 {
                return Err(jit.error(cuda, rc, "cuLinkAddData"));
            }
        }
        let (mut cubin, mut size) = (std::ptr::null_mut(), 0usize);
        // SAFETY: valid out-pointers; the cubin belongs to `state` and is loaded before
        // `state` is destroyed.
        let rc = unsafe { (cuda.api.cuLinkComplete)(state, &mut cubin, &mut size) };
        if rc != 0 {
            return Err(jit.error(cuda, rc, "cuLinkComplete"));
        }
        let mut handle = std::ptr::null_mut();
        // SAFETY: `cubin` is the image cuLinkComplete produced, still owned by the live
        // `state`.
        let rc = unsafe { (cuda.api.cuModuleLoadData)(&mut handle, cubin) };
        if rc != 0 {
            return Err(jit.error(cuda, rc, "cuModuleLoadData (linked image)"));
        }
        Ok(handle)
    })();
    // SAFETY: `state` came from cuLinkCreate and is destroyed once.
    unsafe { (cuda.api.cuLinkDestroy)(state) };
    linked
}

#[cfg(test)]
mod tests {
    use super::check_block;

    #[test]
    fn a_block_larger_than_the_module_was_compiled_for_is_refused_naming_the_setting() {
        let block = |x, y| crate::LaunchConfig::new((1, 1, 1), (x, y, 1));
        assert!(check_block("k", &block(1024, 1), None).is_ok());
        assert!(check_block("k", &block(256, 1), Some(256)).is_ok());
        assert!(check_block("k", &block(64, 4), Some(256)).is_ok());
        let e = check_block("tile", &block(128, 4), Some(256)).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid configuration: kernel tile: a block of 512 threads, but its module was compiled for \
             blocks of at most 256 (GPUIO_BLOCK_THREADS=256): launch blocks of at most 256 threads, or \
             raise or unset GPUIO_BLOCK_THREADS before the module loads"
        );
    }
}
