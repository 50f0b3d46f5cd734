//! The GPU code objects that build.rs produced from `kernels/` are well formed, without any
//! GPU: the PTX module declares the kernels, the target and the context global; the amdgcn
//! object is an AMDGPU ELF for gfx90a (code object v5) exporting the kernel descriptors and
//! the context global, with no undefined symbols.

#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;

use std::path::Path;

fn read(var: &str, path: &str) -> Vec<u8> {
    assert!(
        !path.is_empty(),
        "{var} is empty: this build skipped the GPU kernels (GPUIO_SKIP_GPU_BUILD=1); rebuild without it"
    );
    std::fs::read(Path::new(path)).unwrap_or_else(|e| panic!("reading {var}={path}: {e}"))
}

#[test]
fn ptx_declares_kernels_target_and_context() {
    if !common::gpu_code_built(
        "ptx_declares_kernels_target_and_context",
        &[
            gpuio_kernels_gpu::TEST_PTX_PATH,
            gpuio_kernels_gpu::TEST_HSACO_PATHS[0].1,
        ],
    ) {
        return;
    }
    let ptx = read("TEST_PTX_PATH", gpuio_kernels_gpu::TEST_PTX_PATH);
    let ptx = String::from_utf8(ptx).expect("PTX is text");
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    assert!(lines.contains(&".target sm_90"), "no `.target sm_90`");
    for kernel in ["hello", "stress"] {
        let entry = format!(".visible .entry {kernel}(");
        assert!(lines.iter().any(|l| l.starts_with(&entry)), "no `{entry}`");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(".visible .global") && l.contains(" gpuio_context[")),
        "no visible global `gpuio_context`"
    );
    // An `.extern` symbol is one nobody defined: the module would fail to load, except
    // for the CUDA system calls the driver supplies when it compiles the PTX (`vprintf`,
    // used by the printf comparison kernel; nvcc declares it the same way).
    let driver_call = |l: &str| {
        ["vprintf", "malloc", "free", "__assertfail"]
            .iter()
            .any(|s| l.split_whitespace().last().map(|w| w.trim_end_matches('(')) == Some(*s))
    };
    // The dynamic shared memory window (`gpuio_device::dynamic_shared_memory`) is an
    // unsized `.extern .shared` array, as nvcc writes `extern __shared__`: the launch sizes
    // it, nothing links it.
    let dynamic_shared = ".extern .shared .align 16 .b8 gpuio_dynamic_shared[];";
    assert!(lines.contains(&dynamic_shared), "no `{dynamic_shared}`");
    let undefined: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with(".extern") && !driver_call(l) && **l != dynamic_shared)
        .collect();
    assert!(
        undefined.is_empty(),
        "the PTX has undefined (.extern) symbols: {undefined:?}"
    );
}

#[test]
fn hsaco_is_gfx90a_code_object_with_kernels_and_context() {
    if !common::gpu_code_built(
        "hsaco_is_gfx90a_code_object_with_kernels_and_context",
        &[
            gpuio_kernels_gpu::TEST_PTX_PATH,
            gpuio_kernels_gpu::TEST_HSACO_PATHS[0].1,
        ],
    ) {
        return;
    }
    let elf = Elf::parse(read("TEST_HSACO_PATHS", gpuio_kernels_gpu::TEST_HSACO_PATHS[0].1));
    const EM_AMDGPU: u16 = 224;
    const ELFOSABI_AMDGPU_HSA: u8 = 64;
    const ELFABIVERSION_AMDGPU_HSA_V5: u8 = 3;
    const EF_AMDGPU_MACH: u32 = 0xff;
    const EF_AMDGPU_MACH_AMDGCN_GFX90A: u32 = 0x3f;
    const ET_DYN: u16 = 3;
    assert_eq!(elf.machine(), EM_AMDGPU, "e_machine");
    assert_eq!(elf.os_abi(), ELFOSABI_AMDGPU_HSA, "EI_OSABI");
    assert_eq!(
        elf.abi_version(),
        ELFABIVERSION_AMDGPU_HSA_V5,
        "EI_ABIVERSION (code object v5)"
    );
    assert_eq!(elf.kind(), ET_DYN, "e_type");
    assert_eq!(
        elf.flags() & EF_AMDGPU_MACH,
        EF_AMDGPU_MACH_AMDGCN_GFX90A,
        "e_flags mach"
    );

    let symbols = elf.dynamic_symbols();
    for name in ["hello.kd", "stress.kd", "gpuio_context", "hello", "stress"] {
        let sym = symbols
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no dynamic symbol {name}"));
        assert!(sym.defined, "{name} is undefined");
    }
    let undefined: Vec<&str> = symbols.iter().filter(|s| !s.defined).map(|s| s.name.as_str()).collect();
    assert!(undefined.is_empty(), "undefined dynamic symbols: {undefined:?}");
}

/// Just enough of a little-endian ELF64 reader for the checks above.
struct Elf {
    bytes: Vec<u8>,
}

struct Symbol {
    name: String,
    defined: bool,
}

impl Elf {
    fn parse(bytes: Vec<u8>) -> Elf {
        assert!(bytes.len() >= 64 && bytes[..4] == *b"\x7fELF", "not an ELF file");
        assert_eq!(bytes[4], 2, "not ELFCLASS64");
        assert_eq!(bytes[5], 1, "not little-endian");
        Elf { bytes }
    }

    fn u8(&self, at: usize) -> u8 {
        self.bytes[at]
    }
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.bytes[at..at + 2].try_into().unwrap())
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap())
    }
    fn u64(&self, at: usize) -> usize {
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().unwrap()) as usize
    }

    fn os_abi(&self) -> u8 {
        self.u8(7)
    }
    fn abi_version(&self) -> u8 {
        self.u8(8)
    }
    fn kind(&self) -> u16 {
        self.u16(16)
    }
    fn machine(&self) -> u16 {
        self.u16(18)
    }
    fn flags(&self) -> u32 {
        self.u32(48)
    }

    /// Section headers as (sh_type, sh_link, sh_offset, sh_size, sh_entsize).
    fn sections(&self) -> Vec<(u32, usize, usize, usize, usize)> {
        let (off, entsize, count) = (self.u64(40), self.u16(58) as usize, self.u16(60) as usize);
        assert_eq!(entsize, 64, "e_shentsize");
        (0..count)
            .map(|i| {
                let h = off + i * entsize;
                (
                    self.u32(h + 4),
                    self.u32(h + 40) as usize,
                    self.u64(h + 24),
                    self.u64(h + 32),
                    self.u64(h + 56),
                )
            })
            .collect()
    }

    /// The `.dynsym` symbols (without the null symbol at index 0).
    fn dynamic_symbols(&self) -> Vec<Symbol> {
        const SHT_DYNSYM: u32 = 11;
        let sections = self.sections();
        let &(_, link, off, size, entsize) = sections.iter().find(|s| s.0 == SHT_DYNSYM).expect("no .dynsym section");
        assert_eq!(entsize, 24, "Elf64_Sym size");
        let (_, _, strtab, strsize, _) = sections[link];
        let strings = &self.bytes[strtab..strtab + strsize];
        (1..size / entsize)
            .map(|i| {
                let s = off + i * entsize;
                let name_at = self.u32(s) as usize;
                let len = strings[name_at..]
                    .iter()
                    .position(|&b| b == 0)
                    .expect("unterminated symbol name");
                Symbol {
                    name: String::from_utf8_lossy(&strings[name_at..name_at + len]).into_owned(),
                    defined: self.u16(s + 6) != 0, // st_shndx != SHN_UNDEF
                }
            })
            .collect()
    }
}

/// A `&str` or `&[T]` parameter is laid out as the launches pass it (`Arg::Slice`): one
/// 16-byte parameter aligned to 8 in PTX; two 8-byte arguments, address then length, in an
/// amdgcn code object (the LLVM AMDGPU backend splits the aggregate).
#[test]
fn slice_parameters_have_the_layout_the_launches_pass() {
    let name = "slice_parameters_have_the_layout_the_launches_pass";
    if !common::gpu_code_built(
        name,
        &[
            gpuio_kernels_gpu::TEST_PTX_PATH,
            gpuio_kernels_gpu::TEST_HSACO_PATHS[0].1,
        ],
    ) {
        return;
    }
    // `strings_and_slices(name: &str, values: &[u64], scale: f32, empty: &[u8])`.
    let ptx = String::from_utf8(read("TEST_PTX_PATH", gpuio_kernels_gpu::TEST_PTX_PATH)).expect("PTX is text");
    let at = ptx
        .find(".visible .entry strings_and_slices(")
        .expect("no strings_and_slices entry");
    let params: Vec<&str> = ptx[at..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with(')'))
        .map(|l| l.trim().trim_end_matches(','))
        .collect();
    let want = [
        ".param .align 8 .b8 strings_and_slices_param_0[16]",
        ".param .align 8 .b8 strings_and_slices_param_1[16]",
        ".param .f32 strings_and_slices_param_2",
        ".param .align 8 .b8 strings_and_slices_param_3[16]",
    ];
    assert_eq!(params, want, "the PTX parameters of strings_and_slices");
    let image = read("TEST_HSACO_PATHS", gpuio_kernels_gpu::TEST_HSACO_PATHS[0].1);
    let object = gpuio::code_object::CodeObject::parse(&image).expect("a code object");
    let kernel = object
        .kernel("strings_and_slices")
        .expect("strings_and_slices in the metadata");
    let args: Vec<(u64, u64, &str)> = kernel
        .explicit_args()
        .map(|a| (a.offset, a.size, a.value_kind.as_str()))
        .collect();
    let v = "by_value";
    assert_eq!(
        args,
        [
            (0, 8, v),
            (8, 8, v),
            (16, 8, v),
            (24, 8, v),
            (32, 4, v),
            (40, 8, v),
            (48, 8, v)
        ],
        "the gfx90a kernel arguments of strings_and_slices"
    );
}

/// The device library for C++ kernels defines, with C linkage, every function that
/// `device/include/gpuio/device.h` declares for them (`GPUIO_DEVICE` with no body), for
/// each NVIDIA target it was built for; and leaves no function undefined (`.extern .func`).
#[test]
fn the_device_library_defines_what_the_device_header_declares() {
    let built: Vec<&(&str, &[u8])> = gpuio_kernels_gpu::C_LIBRARY_NVPTX
        .iter()
        .filter(|(_, ptx)| !ptx.is_empty())
        .collect();
    if built.is_empty() {
        common::skip(
            "the_device_library_defines_what_the_device_header_declares",
            "no device library was built on this machine (GPUIO_GPU_TARGETS=all builds every target)",
        );
        return;
    }
    let header = include_str!("../device/include/gpuio/device.h");
    // The declarations: `GPUIO_DEVICE` lines but the C++ helpers (`inline`, with bodies,
    // or `= delete`). Each must be `GPUIO_DEVICE <type> <name>(...);` on one line, or it
    // is not read (and the count below fails).
    let lines: Vec<&str> = header
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("GPUIO_DEVICE ") && !l.contains(" inline ") && !l.contains("= delete"))
        .collect();
    let declared: Vec<&str> = lines
        .iter()
        .filter(|l| l.ends_with(");"))
        .filter_map(|l| l[..l.find('(')?].split_whitespace().last())
        .map(|n| n.trim_start_matches('*'))
        .collect();
    assert!(
        declared.len() == lines.len() && declared.contains(&"gpuio_printf_args") && declared.contains(&"gpuio_close"),
        "the header's {} declarations were not all read: {declared:?}",
        lines.len()
    );
    for (arch, ptx) in built {
        let ptx = std::str::from_utf8(ptx).expect("PTX is text");
        let defined = |name: &str| {
            ptx.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with(".visible .func") && l.split(|c: char| c.is_whitespace() || c == '(').any(|w| w == name)
            })
        };
        let missing: Vec<&&str> = declared.iter().filter(|n| !defined(n)).collect();
        assert!(
            missing.is_empty(),
            "the {arch} device library does not define {missing:?}"
        );
        let undefined: Vec<&str> = ptx
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with(".extern .func"))
            .collect();
        assert!(
            undefined.is_empty(),
            "the {arch} device library leaves {undefined:?} undefined"
        );
    }
}
