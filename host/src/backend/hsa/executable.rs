//! Code objects loaded into HSA executables: symbols, kernel metadata, argument blocks
//! and launches.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::agent::Hsa;
use super::ffi::*;
use super::queue::Dispatch;
use crate::backend::code_object::{self, CodeObject};
use crate::backend::gpu::{Arg, GpuBackend, LoadedModule};
use crate::error::{Error, Result};

/// What a dispatch needs to know about a kernel, from its symbol and the metadata.
#[derive(Clone)]
struct KernelInfo {
    kernel_object: u64,
    kernarg_segment_size: u32,
    group_segment_size: u32,
    private_segment_size: u32,
    dynamic_stack: bool,
    meta: code_object::KernelMetadata,
}

/// A code object loaded into an HSA executable for the runtime's agent.
pub struct Executable {
    hsa: Arc<Hsa>,
    handle: Handle,
    /// Zero for an executable the host program loaded (see [`Executable::attach`]).
    reader: Handle,
    /// Destroyed on drop (false: the host program owns it).
    owned: bool,
    /// Metadata of the code object (None for attached executables).
    info: Option<CodeObject>,
    kernels: Mutex<Vec<(String, KernelInfo)>>,
    /// The code object bytes, alive as long as the reader.
    _image: Vec<u8>,
}

// SAFETY: executable handles may be used from any thread.
unsafe impl Send for Executable {}
// SAFETY: as for `Send`: executable handles may be used from any thread.
unsafe impl Sync for Executable {}

impl Executable {
    /// Loads an ELF code object for the agent: checks its processor against the agent's
    /// (a clear error instead of the loader's `HSA_STATUS_ERROR_INVALID_ISA`), then reader,
    /// executable, load, freeze.
    pub fn load(hsa: &Arc<Hsa>, image: &[u8]) -> Result<Executable> {
        let info = CodeObject::parse(image).map_err(|e| Error::Config(e.to_string()))?;
        let want = code_object::processor_of_isa(&hsa.name);
        match info.processor() {
            Some(p) if p == want => {}
            other => {
                return Err(Error::Config(format!(
                    "no code object for this GPU: it is {} ({}), the code object is for {}",
                    want,
                    hsa.isa,
                    other.map_or_else(|| format!("EF_AMDGPU_MACH {:#x}", info.flags & 0xff), String::from)
                )))
            }
        }
        let image = image.to_vec();
        let api = &hsa.api;
        let mut reader = Handle(0);
        hsa.check(
            // SAFETY: `image` lives as long as the reader (both in the Executable).
            unsafe {
                (api.hsa_code_object_reader_create_from_memory)(
                    image.as_ptr() as *const c_void,
                    image.len(),
                    &mut reader,
                )
            },
            "hsa_code_object_reader_create_from_memory",
        )?;
        let mut exe = Executable {
            hsa: hsa.clone(),
            handle: Handle(0),
            reader,
            owned: true,
            info: Some(info),
            kernels: Mutex::new(Vec::new()),
            _image: image,
        };
        let mut handle = Handle(0);
        hsa.check(
            // SAFETY: valid out-pointer; no options.
            unsafe {
                (api.hsa_executable_create_alt)(
                    hsa.profile,
                    HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                    std::ptr::null(),
                    &mut handle,
                )
            },
            "hsa_executable_create_alt",
        )?;
        exe.handle = handle;
        hsa.check(
            // SAFETY: handles created above; no options; the loaded code object handle is not
            // needed.
            unsafe {
                (api.hsa_executable_load_agent_code_object)(
                    handle,
                    hsa.gpu,
                    reader,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                )
            },
            "hsa_executable_load_agent_code_object",
        )?;
        hsa.check(
            // SAFETY: a loaded executable; no options.
            unsafe { (api.hsa_executable_freeze)(handle, std::ptr::null()) },
            "hsa_executable_freeze",
        )?;
        Ok(exe)
    }

    /// Wraps a frozen executable that the host program loaded itself for this agent (the
    /// C API's "attach"): it is not destroyed on drop. Its kernels' explicit arguments are
    /// not known (no metadata), so `launch` lays them out in order at natural alignment.
    ///
    /// # Safety
    /// `handle` is a frozen executable of this HSA runtime, loaded for [`Hsa::agent`], that
    /// outlives the returned value.
    pub unsafe fn attach(hsa: &Arc<Hsa>, handle: Handle) -> Executable {
        Executable {
            hsa: hsa.clone(),
            handle,
            reader: Handle(0),
            owned: false,
            info: None,
            kernels: Mutex::new(Vec::new()),
            _image: Vec::new(),
        }
    }

    /// The executable's handle.
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// The address and size of a global variable.
    pub fn global(&self, name: &str) -> Result<(u64, usize)> {
        let s = self.hsa.symbol(self.handle, name)?;
        let size = self
            .hsa
            .symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE)?;
        let addr = self
            .hsa
            .symbol_info::<u64>(s, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS)?;
        Ok((addr, size as usize))
    }

    /// Points this executable's `gpuio_context` at `context`.
    pub fn install_context(&self, context: u64) -> Result<()> {
        self.hsa.install_context(self.handle, context)
    }

    /// Checks that the executable has a kernel `name` (its descriptor symbol `name.kd`).
    pub fn check_kernel(&self, name: &str) -> Result<()> {
        self.kernel(name).map(|_| ())
    }

    /// The kernel `name`: its descriptor symbol `name.kd` and its metadata.
    fn kernel(&self, name: &str) -> Result<KernelInfo> {
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = kernels.iter().find(|(n, _)| n == name) {
            return Ok(k.clone());
        }
        let meta = match &self.info {
            Some(info) => info
                .kernel(name)
                .cloned()
                .ok_or_else(|| Error::Config(format!("the code object has no kernel {name:?}")))?,
            None => code_object::KernelMetadata::default(),
        };
        let hsa = &self.hsa;
        let s = hsa.symbol(self.handle, &format!("{name}.kd"))?;
        let kind = hsa.symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_TYPE)?;
        if kind != HSA_SYMBOL_KIND_KERNEL {
            return Err(Error::Config(format!("{name}.kd is not a kernel (symbol kind {kind})")));
        }
        let k = KernelInfo {
            kernel_object: hsa.symbol_info::<u64>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT)?,
            kernarg_segment_size: hsa.symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE)?,
            group_segment_size: hsa.symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE)?,
            private_segment_size: hsa.symbol_info::<u32>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE)?,
            dynamic_stack: hsa.symbol_info::<bool>(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK)?,
            meta,
        };
        kernels.push((name.to_string(), k.clone()));
        Ok(k)
    }

    /// Launches `name` on `grid` work-groups of `block` work-items (x) with `args`
    /// (asynchronous; the runtime's synchronize waits); [`Executable::launch_with`] in
    /// three dimensions.
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        self.launch_with(name, crate::launch::LaunchConfig::linear(grid, block), args)
    }

    /// Launches `name` on the work-groups and work-items of `cfg`, in up to three
    /// dimensions, with `args` (asynchronous; the runtime's synchronize waits).
    ///
    /// Explicit arguments are checked against the kernel's metadata (count and sizes) and
    /// placed at its offsets; hidden arguments get the launch's values (block counts,
    /// group sizes, grid dimensions) or zero.
    pub fn launch_with(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg]) -> Result<()> {
        let k = self.kernel(name)?;
        cfg.refuse_shared_mem("an AMD GPU (HSA)")?;
        let shape = Shape::of(cfg)?;
        let kernarg = kernarg_bytes(&k, name, &shape, args)?;
        let block_mem = self.hsa.alloc_kernarg(kernarg.len())?;
        // SAFETY: `block_mem` holds at least `kernarg.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(kernarg.as_ptr(), block_mem, kernarg.len()) };
        self.hsa
            .kernargs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(block_mem as usize);
        let stack = self.hsa.stack_bytes.load(Ordering::Relaxed).min(u32::MAX as usize) as u32;
        let private_segment_size = if k.dynamic_stack {
            k.private_segment_size.max(stack)
        } else {
            k.private_segment_size
        };
        // SAFETY: a kernel object of this executable, its arguments laid out as its
        // metadata says, in kernarg memory freed only by `synchronize`.
        unsafe {
            self.hsa.dispatch(&Dispatch {
                kernel_object: k.kernel_object,
                kernarg: block_mem,
                block: shape.block,
                grid_size: shape.grid_size,
                dims: shape.dims,
                private_segment_size,
                group_segment_size: k.group_segment_size,
            })
        }
    }
}

/// A launch as an AQL packet and the hidden arguments say it: work-groups per dimension,
/// work-items per work-group, work-items in the grid, and how many dimensions it uses.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    groups: [u32; 3],
    block: [u16; 3],
    grid_size: [u32; 3],
    dims: u16,
}

impl Shape {
    /// `cfg` checked: at most 1,024 work-items per work-group (each size a u16), and each
    /// dimension's work-items a u32, as the packet holds them.
    fn of(cfg: crate::launch::LaunchConfig) -> Result<Shape> {
        cfg.check()?;
        let (g, b) = (cfg.grid, cfg.block);
        let items = b.count();
        if items > 1024 {
            return Err(Error::Config(format!(
                "({}, {}, {}) work-items per work-group ({items}): expected 1 to 1024 in all",
                b.x, b.y, b.z
            )));
        }
        let mut grid_size = [0u32; 3];
        for (i, (groups, block)) in [(g.x, b.x), (g.y, b.y), (g.z, b.z)].into_iter().enumerate() {
            grid_size[i] = groups.checked_mul(block).ok_or_else(|| {
                Error::Config(format!(
                    "{groups} x {block} work-items in dimension {} do not fit the packet's u32",
                    ["x", "y", "z"][i]
                ))
            })?;
        }
        let dims = if g.z > 1 || b.z > 1 {
            3
        } else if g.y > 1 || b.y > 1 {
            2
        } else {
            1
        };
        // Each block size is at most 1,024 (their product is), so it fits a u16.
        Ok(Shape {
            groups: [g.x, g.y, g.z],
            block: [b.x as u16, b.y as u16, b.z as u16],
            grid_size,
            dims,
        })
    }
}

/// Lays out a kernel's argument block.
fn kernarg_bytes(k: &KernelInfo, name: &str, shape: &Shape, args: &[Arg]) -> Result<Vec<u8>> {
    let given = args.len();
    // As the code object lists them: a slice is two 8-byte arguments.
    let args = &Arg::amdgcn(args)[..];
    let value = |a: &Arg| a.bytes()[..a.size()].to_vec();
    let mut bytes = vec![0u8; k.kernarg_segment_size as usize];
    let mut put = |offset: u64, v: &[u8]| {
        let at = offset as usize;
        let end = at + v.len();
        if end > bytes.len() {
            bytes.resize(end, 0);
        }
        bytes[at..end].copy_from_slice(v);
    };
    if k.meta.args.is_empty() && k.meta.name.is_empty() {
        // No metadata (an attached executable): explicit arguments in order, naturally
        // aligned; hidden arguments stay zero.
        let mut at = 0u64;
        for a in args {
            let v = value(a);
            at = at.next_multiple_of(v.len() as u64);
            put(at, &v);
            at += v.len() as u64;
        }
        return Ok(bytes);
    }
    let explicit: Vec<&code_object::KernelArg> = k.meta.explicit_args().collect();
    if explicit.len() != args.len() {
        return Err(Error::Config(if given == args.len() {
            format!("kernel {name} takes {} argument(s), {given} given", explicit.len())
        } else {
            format!(
                "kernel {name} takes {} argument(s) in its code object, {} given ({given} \
                 arguments, each string or slice counted as two: its address and its length)",
                explicit.len(),
                args.len()
            )
        }));
    }
    for (i, (m, a)) in explicit.iter().zip(args).enumerate() {
        let v = value(a);
        if m.size != v.len() as u64 {
            return Err(Error::Config(format!(
                "kernel {name}: code-object argument {i} is {} bytes, {a:?} is {}",
                m.size,
                v.len()
            )));
        }
        put(m.offset, &v);
    }
    for h in k.meta.args.iter().filter(|a| a.is_hidden()) {
        let axis = |kind: &str| match kind.as_bytes().last() {
            Some(b'x') => 0,
            Some(b'y') => 1,
            _ => 2,
        };
        let v: Option<Vec<u8>> = match (h.value_kind.as_str(), h.size) {
            (kind @ ("hidden_block_count_x" | "hidden_block_count_y" | "hidden_block_count_z"), 4) => {
                Some(shape.groups[axis(kind)].to_ne_bytes().to_vec())
            }
            (kind @ ("hidden_group_size_x" | "hidden_group_size_y" | "hidden_group_size_z"), 2) => {
                Some(shape.block[axis(kind)].to_ne_bytes().to_vec())
            }
            ("hidden_grid_dims", 2) => Some(shape.dims.to_ne_bytes().to_vec()),
            // Remainders (the grid is whole work-groups), global offsets, and the
            // buffers we do not provide (hostcall, heap, queues): zero.
            _ => None,
        };
        if let Some(v) = v {
            put(h.offset, &v);
        }
    }
    Ok(bytes)
}

impl Drop for Executable {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: created in `load`; no kernel of it runs once the runtime synchronized.
        unsafe {
            if self.handle != Handle(0) {
                (self.hsa.api.hsa_executable_destroy)(self.handle);
            }
            if self.reader != Handle(0) {
                (self.hsa.api.hsa_code_object_reader_destroy)(self.reader);
            }
        }
    }
}

impl LoadedModule for Executable {
    fn launch(&self, name: &str, cfg: crate::launch::LaunchConfig, args: &[Arg]) -> Result<()> {
        Executable::launch_with(self, name, cfg, args)
    }

    fn global(&self, name: &str) -> Result<(u64, usize)> {
        Executable::global(self, name)
    }

    fn check_kernel(&self, name: &str) -> Result<()> {
        Executable::check_kernel(self, name)
    }

    /// Through the loader's symbol (a `gpuio_context` the loader relocated), not a copy.
    fn install_context(&self, _gpu: &dyn GpuBackend, context: u64) -> Result<()> {
        Executable::install_context(self, context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(args: &[(&str, u64, u64)], size: u32) -> KernelInfo {
        KernelInfo {
            kernel_object: 0,
            kernarg_segment_size: size,
            group_segment_size: 0,
            private_segment_size: 0,
            dynamic_stack: false,
            meta: code_object::KernelMetadata {
                name: "k".into(),
                args: args
                    .iter()
                    .map(|&(kind, offset, size)| code_object::KernelArg {
                        offset,
                        size,
                        value_kind: kind.into(),
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }

    #[test]
    fn kernargs_follow_the_metadata() {
        let k = kernel(
            &[
                ("by_value", 0, 4),
                ("by_value", 8, 8),
                ("hidden_block_count_x", 16, 4),
                ("hidden_block_count_y", 20, 4),
                ("hidden_group_size_x", 28, 2),
                ("hidden_grid_dims", 40, 2),
                ("hidden_queue_ptr", 48, 8),
            ],
            64,
        );
        let linear = |g, b| Shape::of(crate::launch::LaunchConfig::linear(g, b)).unwrap();
        let b = kernarg_bytes(&k, "k", &linear(7, 256), &[Arg::U32(5), Arg::U64(9)]).unwrap();
        assert_eq!(b.len(), 64);
        assert_eq!(b[0..4], 5u32.to_ne_bytes());
        assert_eq!(b[8..16], 9u64.to_ne_bytes());
        assert_eq!(b[16..20], 7u32.to_ne_bytes());
        assert_eq!(b[20..24], 1u32.to_ne_bytes());
        assert_eq!(b[28..30], 256u16.to_ne_bytes());
        assert_eq!(b[40..42], 1u16.to_ne_bytes());
        assert!(b[48..56].iter().all(|&x| x == 0));
        assert!(
            kernarg_bytes(&k, "k", &linear(1, 1), &[Arg::U32(5)]).is_err(),
            "too few"
        );
        assert!(
            kernarg_bytes(&k, "k", &linear(1, 1), &[Arg::U64(5), Arg::U64(9)]).is_err(),
            "wrong size"
        );
    }

    #[test]
    fn a_three_dimensional_launch_fills_every_dimension() {
        let k = kernel(
            &[
                ("hidden_block_count_x", 0, 4),
                ("hidden_block_count_y", 4, 4),
                ("hidden_block_count_z", 8, 4),
                ("hidden_group_size_x", 12, 2),
                ("hidden_group_size_y", 14, 2),
                ("hidden_group_size_z", 16, 2),
                ("hidden_grid_dims", 18, 2),
            ],
            24,
        );
        let shape = Shape::of(crate::launch::LaunchConfig::new((3, 2, 5), (8, 4, 2))).unwrap();
        assert_eq!(
            shape,
            Shape {
                groups: [3, 2, 5],
                block: [8, 4, 2],
                grid_size: [24, 8, 10],
                dims: 3
            }
        );
        let b = kernarg_bytes(&k, "k", &shape, &[]).unwrap();
        let u32_at = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
        let u16_at = |at: usize| u16::from_ne_bytes(b[at..at + 2].try_into().unwrap());
        assert_eq!([u32_at(0), u32_at(4), u32_at(8)], [3, 2, 5]);
        assert_eq!([u16_at(12), u16_at(14), u16_at(16), u16_at(18)], [8, 4, 2, 3]);
        // Two dimensions where z is 1; one where y and z are.
        assert_eq!(
            Shape::of(crate::launch::LaunchConfig::new((3, 2), (8, 1)))
                .unwrap()
                .dims,
            2
        );
        assert_eq!(Shape::of(crate::launch::LaunchConfig::new(3, 8)).unwrap().dims, 1);
        // More than 1,024 work-items per work-group, and a dimension past the packet's u32.
        let e = Shape::of(crate::launch::LaunchConfig::new(1, (32, 32, 2)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected 1 to 1024"), "{e}");
        let e = Shape::of(crate::launch::LaunchConfig::new((1 << 31, 1, 1), (4, 1, 1)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("dimension x"), "{e}");
    }

    #[test]
    fn a_slice_is_two_kernargs_as_the_amdgpu_backend_lowers_it() {
        // `fn k(a: u32, s: RawSlice<str>, b: u64)` as rustc's amdgcn code object lists it:
        // the 16-byte aggregate as two 8-byte arguments at 8 and 16.
        let k = kernel(
            &[
                ("by_value", 0, 4),
                ("by_value", 8, 8),
                ("by_value", 16, 8),
                ("by_value", 24, 8),
            ],
            32,
        );
        let args = [Arg::U32(1), Arg::Slice { addr: 0x1000, len: 5 }, Arg::U64(2)];
        let b = kernarg_bytes(
            &k,
            "k",
            &Shape::of(crate::launch::LaunchConfig::linear(1, 1)).unwrap(),
            &args,
        )
        .unwrap();
        assert_eq!(b[8..16], 0x1000u64.to_ne_bytes());
        assert_eq!(b[16..24], 5u64.to_ne_bytes());
        assert_eq!(b[24..32], 2u64.to_ne_bytes());
    }

    #[test]
    fn packet_layout() {
        assert_eq!(std::mem::offset_of!(HsaQueue, doorbell_signal), 16);
        assert_eq!(std::mem::offset_of!(HsaQueue, size), 24);
        assert_eq!(std::mem::offset_of!(DispatchPacket, private_segment_size), 24);
        assert_eq!(std::mem::offset_of!(DispatchPacket, kernarg_address), 40);
    }

    #[test]
    fn open_says_why_not() {
        // On machines without an AMD GPU: a reason naming the cause; with one: a GPU.
        match Hsa::open() {
            Ok(h) => assert!(h.agent_name().starts_with("gfx")),
            Err(why) => assert!(
                why.contains("libhsa-runtime64.so.1 not found")
                    || why.contains("/dev/kfd")
                    || why.contains("no AMD GPU agent")
                    || why.contains("hsa_init failed"),
                "{why}"
            ),
        }
    }
}
