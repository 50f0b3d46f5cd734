//! A PTX module loaded into the CUDA driver: how its PTX is compiled ([`Jit`], `jit.rs`; a whole-program
//! module as one program per kernel: `split.rs`), its kernels' parameters (read from the PTX,
//! checked at launch), globals and launches.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::Arc;

use super::driver::Cuda;
use super::ffi::*;
use super::jit::{library_registers, link_and_load, load_whole, ptx_text, whole_program_cap, Jit, JitOptions};
use crate::backend::gpu::{check_layout, Arg, LoadedModule, PackedArgs};
use crate::error::{Error, Result};
use crate::scheduling::Scheduling;

/// A loaded PTX module.
pub struct Module {
    cuda: Arc<Cuda>,
    /// The driver's modules: one, or one per kernel where PTX compiled whole was cut into a
    /// program per kernel (`split.rs`).
    handles: Vec<CuModule>,
    /// Which of `handles` holds each kernel, where there are several.
    kernel_handle: HashMap<String, usize>,
    /// Unloaded on drop (false for a module the caller loaded: [`Module::borrow_raw`]).
    owned: bool,
    /// The driver's compile time at load, in milliseconds (summed over its programs).
    jit_ms: Option<f32>,
    /// Each kernel's parameter sizes in bytes, from the PTX (`None` for a borrowed module).
    params: Option<std::collections::HashMap<String, Vec<usize>>>,
    /// The most threads a block may have, where the module was compiled for that
    /// (`GPUIO_BLOCK_THREADS`, [`super::jit::block_threads`]).
    block_threads: Option<u32>,
    /// The most threads a block of each kernel that declares launch bounds may have, from
    /// its PTX (`launch_bounds.rs`).
    max_threads: HashMap<String, u32>,
}

/// Each `.entry`'s parameter sizes in bytes, from PTX text: `.param .u32 x` is 4 bytes,
/// `.param .align 8 .b8 x[24]` 24. An entry whose parameters cannot be read is left out.
pub(crate) fn ptx_entry_params(ptx: &str) -> std::collections::HashMap<String, Vec<usize>> {
    let mut entries = std::collections::HashMap::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        rest = &rest[at + ".entry ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let Some(close) = rest[open..].find(')') else { break };
        let list = &rest[open + 1..open + close];
        let sizes: Option<Vec<usize>> = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                let words: Vec<&str> = p.split_whitespace().collect();
                // The type: `.u32`, `.b64`, `.f32`, ... (`.ptr`, `.align N` may follow it).
                let ty = words.iter().find(|w| {
                    w.len() > 2
                        && w.starts_with(['.'])
                        && matches!(w.as_bytes()[1], b'b' | b'u' | b's' | b'f')
                        && w[2..].bytes().all(|b| b.is_ascii_digit())
                })?;
                let scalar = match &ty[2..] {
                    "8" => 1,
                    "16" => 2,
                    "32" => 4,
                    "64" => 8,
                    _ => return None,
                };
                let last = words.last()?;
                Some(match last.split_once('[') {
                    Some((_, n)) => scalar * n.trim_end_matches(']').parse::<usize>().ok()?,
                    None => scalar,
                })
            })
            .collect();
        if let (false, Some(sizes)) = (name.is_empty(), sizes) {
            entries.insert(name, sizes);
        }
        rest = &rest[open + close..];
    }
    entries
}

// SAFETY: module handles are context-wide, usable from any thread with the context bound.
unsafe impl Send for Module {}
// SAFETY: as for `Send`: module handles are context-wide, usable from any thread with the context bound.
unsafe impl Sync for Module {}

impl Module {
    /// Loads PTX text (the driver compiles it for the GPU, or takes the result from its JIT
    /// cache). Where the driver refuses it, the error carries the compiler's log.
    ///
    /// How it is compiled is [`Jit::from_env`]'s choice: see [`Jit`].
    pub fn load(cuda: &Arc<Cuda>, ptx: &str) -> Result<Module> {
        Module::load_with(cuda, ptx, Jit::from_env()?)
    }

    /// [`Module::load`], compiled as `jit` says.
    pub fn load_with(cuda: &Arc<Cuda>, ptx: &str, jit: Jit) -> Result<Module> {
        cuda.bind()?;
        // The driver compiles every function a module defines: those no kernel reaches (the
        // device library's C ABI a C++ kernel does not call) left out.
        let pruned = super::split::without_unreached(ptx);
        let ptx = pruned.as_deref().unwrap_or(ptx);
        // The bounds kernels declare, which launches by name are checked against.
        let max_threads = super::launch_bounds::read(ptx);
        // Read once: what the JIT compiles for is what launches are checked against.
        let block_threads = super::jit::block_threads()?;
        // The cap of gpuio's functions, for the whole module (whether it does file I/O).
        let library_cap = library_registers()?.for_module(ptx);
        let parts = match jit {
            Jit::Whole => super::split::per_kernel(ptx),
            Jit::Separate => None,
        };
        if jit == Jit::Whole && parts.is_none() && ptx.matches(".entry ").count() > 1 {
            crate::notice::say_once(
                crate::notice::Level::Info,
                "gpuio: a module of several kernels is compiled as one whole program (its kernels \
                 share a static with no initial value, or its PTX has directives gpuio does not cut, \
                 such as debug info): its first load can take minutes; the driver's JIT cache keeps \
                 the result",
            );
        }
        let (handles, kernel_handle, jit_ms) = match parts {
            None => {
                let (handle, ms) = Module::compile_one(cuda, ptx, jit, block_threads, library_cap)?;
                (vec![handle], HashMap::new(), ms)
            }
            Some(parts) => {
                let (handles, ms) = Module::compile_each(cuda, &parts, block_threads, library_cap)?;
                let names = parts.into_iter().enumerate().map(|(i, (name, _))| (name, i));
                (handles, names.collect(), ms)
            }
        };
        Ok(Module {
            cuda: cuda.clone(),
            handles,
            kernel_handle,
            owned: true,
            jit_ms: Some(jit_ms),
            params: Some(ptx_entry_params(ptx)),
            block_threads,
            max_threads,
        })
    }

    /// Compiles and loads one PTX program as `jit` says; its handle and the driver's
    /// compile time in milliseconds. The calling thread has the context bound.
    ///
    /// `library_cap` is the register cap of the library's functions ([`library_registers`]
    /// for the module), if they get one. Compiled separately, the library's functions go in
    /// an input of their own with that cap (`library.rs`); where the driver refuses that
    /// cut, the module is compiled again as one input, and where that succeeds a notice says
    /// what the cut met (else the one input's error is returned). Compiled whole, a
    /// program gets the cap [`whole_program_cap`] finds, so its kernels hold no more
    /// registers than compiled separately.
    fn compile_one(
        cuda: &Arc<Cuda>,
        ptx: &str,
        jit: Jit,
        block_threads: Option<u32>,
        library_cap: Option<u32>,
    ) -> Result<(CuModule, f32)> {
        let mut options = JitOptions::new(block_threads, ptx)?;
        let handle = match jit {
            Jit::Whole => {
                let found = match library_cap {
                    Some(cap) => whole_program_cap(cuda, ptx, cap, block_threads)?,
                    None => None,
                };
                let spent = found.map(|(registers, spent)| {
                    options.cap_at(registers);
                    spent
                });
                let handle = load_whole(cuda, &ptx_text(ptx)?, &mut options)?;
                // The driver wrote the whole compile's time; the separate one's is added.
                options.add_wall_ms(spent.unwrap_or(0.0));
                handle
            }
            Jit::Separate => {
                let one_input = |options: &mut JitOptions| link_and_load(cuda, &[(ptx_text(ptx)?, None)], options);
                let cut = library_cap.and_then(|cap| Some((super::library::cut(ptx)?, cap)));
                match cut {
                    None => one_input(&mut options)?,
                    Some(((user, library), cap)) => {
                        let cap = options.at_most(cap);
                        let inputs = [(ptx_text(&user)?, None), (ptx_text(&library)?, Some(cap))];
                        match link_and_load(cuda, &inputs, &mut options) {
                            Ok(handle) => handle,
                            Err(refused) => {
                                let spent = options.wall_ms();
                                options = JitOptions::new(block_threads, ptx)?;
                                let handle = one_input(&mut options)?;
                                options.add_wall_ms(spent);
                                crate::notice::say_once(
                                    crate::notice::Level::Warn,
                                    &format!(
                                        "gpuio: the driver refused this module compiled in two parts (the \
                                         kernels apart from gpuio's and core's functions, which get a \
                                         register cap), and took it as one: its kernels with a print may \
                                         hold up to 255 registers. GPUIO_MAX_REGISTERS=32 caps them all \
                                         (the kernels' own code too); GPUIO_PRINT_REGISTERS=off skips the \
                                         attempt. This is gpuio's bug: please report it with this log: \
                                         {refused}"
                                    ),
                                );
                                handle
                            }
                        }
                    }
                }
            }
        };
        Ok((handle, options.wall_ms()))
    }

    /// Compiles and loads each `(kernel, PTX)` program as a whole program, one after
    /// another (the driver compiles one at a time: loaded from several threads, the
    /// programs' compile times add up to the wall time all the same); their handles in
    /// order and the summed compile time. On an error those loaded are unloaded and the
    /// error, naming its kernel, returned.
    fn compile_each(
        cuda: &Arc<Cuda>,
        parts: &[(String, String)],
        block_threads: Option<u32>,
        library_cap: Option<u32>,
    ) -> Result<(Vec<CuModule>, f32)> {
        let (mut handles, mut ms) = (Vec::with_capacity(parts.len()), 0.0);
        for (name, ptx) in parts {
            match Module::compile_one(cuda, ptx, Jit::Whole, block_threads, library_cap) {
                Ok((handle, t)) => {
                    handles.push(handle);
                    ms += t;
                }
                Err(e) => {
                    for h in handles {
                        // SAFETY: loaded above and never used: nothing of it runs.
                        unsafe { (cuda.api.cuModuleUnload)(h) };
                    }
                    return Err(match e {
                        Error::Cuda(mut why) => {
                            why.message = format!("kernel {name}: {}", why.message);
                            Error::Cuda(why)
                        }
                        other => other,
                    });
                }
            }
        }
        Ok((handles, ms))
    }

    /// How long the driver spent compiling the PTX when it loaded this module, in
    /// milliseconds (close to 0 when its JIT cache had it); `None` for a borrowed module.
    pub fn jit_ms(&self) -> Option<f32> {
        self.jit_ms
    }

    /// A module the caller loaded itself; it is not unloaded when this drops.
    ///
    /// # Safety
    /// `handle` is a `CUmodule` loaded in `cuda`'s context (its device's primary context),
    /// and stays loaded as long as this `Module` (and anything launched from it) is used.
    /// Launches through it pass each kernel's parameters exactly (their PTX is not known
    /// here to check them).
    pub unsafe fn borrow_raw(cuda: &Arc<Cuda>, handle: *mut c_void) -> Module {
        Module {
            cuda: cuda.clone(),
            handles: vec![handle],
            kernel_handle: HashMap::new(),
            owned: false,
            jit_ms: None,
            params: None,
            block_threads: None,
            max_threads: HashMap::new(),
        }
    }

    /// The address and size of a global variable. In a module compiled as one program per
    /// kernel ([`Jit::Whole`]), each program that uses a global has its own copy: where
    /// there are several, this is an error that says so (a write to one copy would reach
    /// one kernel only).
    pub fn global(&self, name: &str) -> Result<(CuDevicePtr, usize)> {
        let mut copies = self.global_copies(name)?;
        if copies.len() > 1 {
            return Err(Error::Config(format!(
                "global {name}: this module was compiled as one program per kernel (compiled \
                 whole: GPUIO_JIT=whole, or the lockstep build), and {} of its kernels have a \
                 copy of it each; load it with GPUIO_JIT=separate to have one",
                copies.len()
            )));
        }
        Ok(copies.swap_remove(0))
    }

    /// Every copy of a global variable: one per program that has it.
    pub(crate) fn global_copies(&self, name: &str) -> Result<Vec<(CuDevicePtr, usize)>> {
        self.cuda.bind()?;
        let cname = CString::new(name).map_err(|_| Error::Config(format!("bad symbol name {name:?}")))?;
        let mut copies = Vec::new();
        let mut missing = Ok(());
        for &handle in &self.handles {
            let (mut d, mut n) = (0, 0);
            // SAFETY: valid out-pointers and a loaded module.
            let rc = unsafe { (self.cuda.api.cuModuleGetGlobal_v2)(&mut d, &mut n, handle, cname.as_ptr()) };
            match (rc, self.cuda.check(rc, &format!("cuModuleGetGlobal({name})"))) {
                (_, Ok(())) => copies.push((d, n)),
                // A program of a cut module that does not use the global has none.
                (CUDA_ERROR_NOT_FOUND, Err(e)) => missing = Err(e),
                (_, Err(e)) => return Err(e),
            }
        }
        match (copies.is_empty(), missing) {
            (true, Err(e)) => Err(e),
            _ => Ok(copies),
        }
    }

    /// What a thread of kernel `name` holds, as the driver compiled it
    /// (`cuFuncGetAttribute`: `NUM_REGS`, `LOCAL_SIZE_BYTES`, `SHARED_SIZE_BYTES`).
    pub fn resources(&self, name: &str) -> Result<crate::launch::KernelResources> {
        let f = self.function(name)?;
        let attribute = |which: i32, what: &str| -> Result<u32> {
            let mut v = 0i32;
            // SAFETY: an attribute query of a function of a loaded module, writing one int.
            let rc = unsafe { (self.cuda.api.cuFuncGetAttribute)(&mut v, which, f) };
            self.cuda.check(rc, &format!("cuFuncGetAttribute({what}) of {name}"))?;
            Ok(v.max(0) as u32)
        };
        Ok(crate::launch::KernelResources {
            registers: attribute(CU_FUNC_ATTRIBUTE_NUM_REGS, "NUM_REGS")?,
            local_bytes: attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "LOCAL_SIZE_BYTES")?,
            shared_bytes: attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "SHARED_SIZE_BYTES")?,
            max_block_threads: attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK")?,
        })
    }

    pub(crate) fn function(&self, name: &str) -> Result<CuFunction> {
        self.cuda.bind()?;
        let cname = CString::new(name).map_err(|_| Error::Config(format!("bad kernel name {name:?}")))?;
        let mut f = std::ptr::null_mut();
        let handle = self.handles[self.kernel_handle.get(name).copied().unwrap_or(0)];
        self.cuda.check(
            // SAFETY: valid out-pointer and a loaded module.
            unsafe { (self.cuda.api.cuModuleGetFunction)(&mut f, handle, cname.as_ptr()) },
            &format!("cuModuleGetFunction({name})"),
        )?;
        Ok(f)
    }

    /// Launches `name` on `grid` blocks of `block` threads with `args` (asynchronous).
    ///
    /// `args` must match the kernel's parameters in number and size (a `u32` or `f32` for a
    /// 4-byte parameter, a `u64`, `f64` or pointer for an 8-byte one): checked against the
    /// PTX, an [`Error::Config`] names the difference. (A borrowed module has no PTX here:
    /// [`Module::borrow_raw`]'s caller vouches for its launches.)
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        self.launch_with(name, crate::launch::LaunchConfig::linear(grid, block), args)
    }

    /// As [`Module::launch`], on the blocks and threads of `cfg` (up to three dimensions).
    pub fn launch_with(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg]) -> Result<()> {
        self.launch_on_stream(name, cfg, args, 0)
    }

    /// As [`Module::launch_with`], on `stream` (a `CUstream` of this context as an address;
    /// 0: the null stream).
    pub(crate) fn launch_on_stream(
        &self,
        name: &str,
        cfg: crate::launch::LaunchConfig,
        args: &[Arg],
        stream: usize,
    ) -> Result<()> {
        let f = self.function(name)?;
        if let Some(params) = &self.params {
            let Some(sizes) = params.get(name) else {
                return Err(Error::Config(format!(
                    "kernel {name}: its parameters could not be read from the PTX, so it cannot \
                     be launched safely with arguments from here"
                )));
            };
            let given: Vec<usize> = args.iter().map(Arg::size).collect();
            if &given != sizes {
                return Err(Error::Config(format!(
                    "kernel {name} takes {} parameter(s) of {sizes:?} bytes; the launch passed {} \
                     argument(s) of {given:?} bytes (u32/f32: 4, u64/f64/pointers: 8, slices: 16)",
                    sizes.len(),
                    given.len()
                )));
            }
        }
        super::jit::check_block(name, &cfg, self.block_threads)?;
        crate::launch::check_launch_bounds(name, &cfg, self.max_threads.get(name).copied())?;
        if cfg.shared_mem_bytes > SHARED_MEM_WITHOUT_OPT_IN {
            self.cuda.opt_in_shared_mem(f, name, cfg.shared_mem_bytes)?;
        }
        // SAFETY: `cuLaunchKernel` is the driver's launch entry point and `f` a kernel of
        // this module; the arguments are one per kernel parameter, each at least as large as
        // the parameter (checked above against the PTX; for a borrowed module,
        // `borrow_raw`'s caller vouches), and `PackedArgs::launch` keeps them alive until
        // the call returns (the driver copies them); `stream` is the null stream or one of
        // this context that the caller holds alive (`Kernels::launch_on`'s `Arc<CudaStream>`).
        self.cuda.check(
            unsafe { PackedArgs::new(args).launch(self.cuda.api.cuLaunchKernel, f, &cfg, stream as *mut c_void) },
            &format!("cuLaunchKernel({name})"),
        )
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = self.cuda.bind();
        for &handle in &self.handles {
            // SAFETY: loaded in `load`; no kernel of it runs once the runtime synchronized.
            unsafe { (self.cuda.api.cuModuleUnload)(handle) };
        }
    }
}

impl LoadedModule for Module {
    fn launch(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg]) -> Result<()> {
        Module::launch_with(self, name, cfg, args)
    }

    fn launch_on(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg], stream: usize) -> Result<()> {
        Module::launch_on_stream(self, name, cfg, args, stream)
    }

    fn global(&self, name: &str) -> Result<(u64, usize)> {
        Module::global(self, name)
    }

    fn global_copies(&self, name: &str) -> Result<Vec<(u64, usize)>> {
        Module::global_copies(self, name)
    }

    fn check_kernel(&self, name: &str) -> Result<()> {
        self.function(name).map(drop)
    }

    fn jit_ms(&self) -> Option<f32> {
        Module::jit_ms(self)
    }

    fn resources(&self, name: &str) -> Result<Option<crate::launch::KernelResources>> {
        Module::resources(self, name).map(Some)
    }
}

/// Checks and loads a PTX image for a runtime that asked for `lockstep` scheduling or not,
/// compiled as `jit` says: its text, its `gpuio_layout` (refused before the driver compiles
/// it, which can take tens of seconds; the runtime checks the loaded global too) and its
/// target's scheduling; with the scheduling its code runs with, where the target tells.
pub(crate) fn load_ptx_image(
    cuda: &Arc<Cuda>,
    image: &[u8],
    lockstep: bool,
    jit: Jit,
) -> Result<(Module, Option<Scheduling>)> {
    let ptx = std::str::from_utf8(image.strip_suffix(&[0]).unwrap_or(image))
        .map_err(|_| Error::Config("the CUDA backend loads PTX text, and this is not text".into()))?;
    if let Some(layout) = ptx_layout(ptx) {
        check_layout(layout)?;
    }
    let scheduling = Scheduling::of_ptx(ptx);
    if lockstep && scheduling != Some(Scheduling::Lockstep) {
        return Err(Error::Config(format!(
            "lockstep scheduling was asked for (Builder::lockstep or GPUIO_LOCKSTEP=1), but \
             this PTX targets {}: build the kernels for sm_60 too (gpuio-linker --arch sm_60) \
             and load them with load_matching",
            ptx.lines()
                .find_map(|l| l.trim().strip_prefix(".target"))
                .map_or("no .target", str::trim)
        )));
    }
    // PTX for a target before sm_70 is compiled as one whole program, always: compiled
    // separately and linked by the driver, the sm_60 build runs with independent thread
    // scheduling (the GPU suite's lockstep probe finds every lane taking a lock that
    // lockstep lanes cannot), which would make the lockstep build test nothing.
    let jit = match scheduling {
        Some(Scheduling::Lockstep) => Jit::Whole,
        _ => jit,
    };
    Ok((Module::load_with(cuda, ptx, jit)?, scheduling))
}

/// The value of `gpuio_layout` as the PTX text initializes it
/// (`.global .align 8 .b8 gpuio_layout[8] = {b0, ..., b7};`, little-endian bytes), if it
/// does so.
fn ptx_layout(ptx: &str) -> Option<u64> {
    let line = ptx.lines().find(|l| l.contains(" gpuio_layout[8] = {"))?;
    let inner = line.split_once('{')?.1.split_once('}')?.0;
    let bytes: Vec<u8> = inner.split(',').map(|b| b.trim().parse().ok()).collect::<Option<_>>()?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod param_tests {
    use super::ptx_entry_params;

    #[test]
    fn entry_parameters_are_read_from_the_ptx() {
        let ptx = ".visible .entry hello()\n{\n\tret;\n}\n\
                   .visible .entry table(\n\t.param .u32 table_param_0\n)\n{\n}\n\
                   .visible .entry mix(\n\t.param .u64 .ptr .align 1 mix_param_0,\n\t.param .f32 mix_param_1,\n\
                   \t.param .align 8 .b8 mix_param_2[24]\n)\n{\n}\n";
        let p = ptx_entry_params(ptx);
        assert_eq!(p["hello"], Vec::<usize>::new());
        assert_eq!(p["table"], [4]);
        assert_eq!(p["mix"], [8, 4, 24]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_read_from_ptx_text() {
        use gpuio_device::protocol::context::CONTEXT_LAYOUT;
        let b = CONTEXT_LAYOUT.to_le_bytes().map(|x| x.to_string()).join(", ");
        let ptx = format!(".version 7.8\n.visible .global .align 8 .b8 gpuio_layout[8] = {{{b}}};\n");
        assert_eq!(ptx_layout(&ptx), Some(CONTEXT_LAYOUT));
        assert!(check_layout(CONTEXT_LAYOUT).is_ok());
        let other = ptx
            .replacen("= {", "= {1, ", 1)
            .replacen(&format!(", {}}}", CONTEXT_LAYOUT >> 56), "}", 1);
        let layout = ptx_layout(&other).expect("still 8 bytes");
        assert_ne!(layout, CONTEXT_LAYOUT);
        assert!(check_layout(layout)
            .unwrap_err()
            .to_string()
            .contains("another version"));
        assert_eq!(ptx_layout(".target sm_90\n"), None);
        assert_eq!(ptx_layout(".global .align 8 .b8 gpuio_layout[8] = {1, 2};"), None);
    }
}
