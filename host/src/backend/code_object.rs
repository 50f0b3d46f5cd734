//! Reading AMDGPU code objects (the ELF files `gpuio-linker` builds for `amdgcn-amd-amdhsa`)
//! without ROCm: the target processor from `e_flags`, the code object version from
//! `e_ident`, the dynamic symbols, and the kernels' metadata from the `NT_AMDGPU_METADATA`
//! note (MessagePack).
//!
//! The HSA backend uses it to pick and check the code object for a GPU and to lay out
//! kernel arguments; tests use it to check the code objects the build produced.
//!
//! ```
//! use gpuio_host::code_object::{processor_name, EF_AMDGPU_MACH_AMDGCN_GFX942};
//! assert_eq!(processor_name(EF_AMDGPU_MACH_AMDGCN_GFX942), Some("gfx942"));
//! ```

use std::collections::BTreeMap;
use std::fmt;

/// `e_machine` of AMDGPU code objects.
pub const EM_AMDGPU: u16 = 224;
/// `EI_OSABI` of HSA code objects.
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// `EI_ABIVERSION` of code object v4.
pub const ELFABIVERSION_AMDGPU_HSA_V4: u8 = 2;
/// `EI_ABIVERSION` of code object v5.
pub const ELFABIVERSION_AMDGPU_HSA_V5: u8 = 3;
/// `EI_ABIVERSION` of code object v6.
pub const ELFABIVERSION_AMDGPU_HSA_V6: u8 = 4;
/// The processor bits of `e_flags`.
pub const EF_AMDGPU_MACH: u32 = 0xff;
/// `e_flags` processor of gfx90a (MI200).
pub const EF_AMDGPU_MACH_AMDGCN_GFX90A: u32 = 0x3f;
/// `e_flags` processor of gfx942 (MI300).
pub const EF_AMDGPU_MACH_AMDGCN_GFX942: u32 = 0x4c;
/// `e_flags` processor of gfx1100 (RDNA3).
pub const EF_AMDGPU_MACH_AMDGCN_GFX1100: u32 = 0x41;
/// The XNACK bits of `e_flags` (code object v4 and later).
pub const EF_AMDGPU_FEATURE_XNACK_V4: u32 = 0x300;
/// The SRAMECC bits of `e_flags` (code object v4 and later).
pub const EF_AMDGPU_FEATURE_SRAMECC_V4: u32 = 0xc00;
/// The note type of the MessagePack kernel metadata.
pub const NT_AMDGPU_METADATA: u32 = 32;

/// Processor names by `EF_AMDGPU_MACH` value (LLVM's `llvm/BinaryFormat/ELF.h`).
const MACHS: &[(u32, &str)] = &[
    (0x2c, "gfx900"),
    (0x2d, "gfx902"),
    (0x2e, "gfx904"),
    (0x2f, "gfx906"),
    (0x30, "gfx908"),
    (0x31, "gfx909"),
    (0x32, "gfx90c"),
    (0x33, "gfx1010"),
    (0x34, "gfx1011"),
    (0x35, "gfx1012"),
    (0x36, "gfx1030"),
    (0x37, "gfx1031"),
    (0x38, "gfx1032"),
    (0x39, "gfx1033"),
    (0x3d, "gfx1035"),
    (0x3e, "gfx1034"),
    (EF_AMDGPU_MACH_AMDGCN_GFX90A, "gfx90a"),
    (EF_AMDGPU_MACH_AMDGCN_GFX1100, "gfx1100"),
    (0x42, "gfx1013"),
    (0x43, "gfx1150"),
    (0x44, "gfx1103"),
    (0x45, "gfx1036"),
    (0x46, "gfx1101"),
    (0x47, "gfx1102"),
    (0x48, "gfx1200"),
    (0x4a, "gfx1151"),
    (EF_AMDGPU_MACH_AMDGCN_GFX942, "gfx942"),
    (0x4e, "gfx1201"),
    (0x4f, "gfx950"),
];

/// The processor (`gfx90a`) an `EF_AMDGPU_MACH` value names, if we know it.
pub fn processor_name(mach: u32) -> Option<&'static str> {
    MACHS.iter().find(|(m, _)| *m == mach & EF_AMDGPU_MACH).map(|(_, n)| *n)
}

/// The processor part of an HSA ISA or agent name: `gfx90a` from
/// `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-` or from `gfx90a`.
pub fn processor_of_isa(isa: &str) -> &str {
    let tail = isa.rsplit("--").next().unwrap_or(isa);
    tail.split(':').next().unwrap_or(tail)
}

/// What a code object is, from its headers and metadata note.
#[derive(Clone, Debug)]
pub struct CodeObject {
    /// `e_machine` ([`EM_AMDGPU`] for AMDGPU code objects).
    pub machine: u16,
    /// `EI_OSABI` ([`ELFOSABI_AMDGPU_HSA`]).
    pub os_abi: u8,
    /// `EI_ABIVERSION`: 2, 3, 4 for code object v4, v5, v6.
    pub abi_version: u8,
    /// `e_type` (3: `ET_DYN`).
    pub kind: u16,
    /// `e_flags`: processor and feature bits.
    pub flags: u32,
    /// The `.dynsym` symbols: name and whether it is defined.
    pub dynamic_symbols: Vec<(String, bool)>,
    /// `amdhsa.version` of the metadata, e.g. `[1, 2]` for code object v5.
    pub metadata_version: Vec<u64>,
    /// `amdhsa.target` of the metadata, e.g. `amdgcn-amd-amdhsa--gfx90a`, if present.
    pub metadata_target: Option<String>,
    /// The kernels the metadata describes.
    pub kernels: Vec<KernelMetadata>,
}

/// One kernel of the metadata note.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelMetadata {
    /// `.name`: the kernel's source name.
    pub name: String,
    /// `.symbol`: its kernel descriptor symbol, `<name>.kd`.
    pub symbol: String,
    /// `.kernarg_segment_size`: bytes of arguments, hidden ones included.
    pub kernarg_segment_size: u64,
    /// `.kernarg_segment_align`.
    pub kernarg_segment_align: u64,
    /// `.group_segment_fixed_size`: static LDS bytes per work-group.
    pub group_segment_fixed_size: u64,
    /// `.private_segment_fixed_size`: scratch bytes per work-item, without a dynamic stack.
    pub private_segment_fixed_size: u64,
    /// `.uses_dynamic_stack`: scratch needs are not known at compile time (recursion,
    /// indirect calls: `core::fmt`); the launcher must size the private segment.
    pub uses_dynamic_stack: bool,
    /// `.args`, explicit and hidden.
    pub args: Vec<KernelArg>,
}

/// One kernel argument of the metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelArg {
    /// `.offset` in the kernarg segment.
    pub offset: u64,
    /// `.size` in bytes.
    pub size: u64,
    /// `.value_kind`: `by_value`, `global_buffer`, ... or `hidden_*`.
    pub value_kind: String,
}

impl KernelArg {
    /// Whether the launcher, not the caller, supplies it (`hidden_*`).
    pub fn is_hidden(&self) -> bool {
        self.value_kind.starts_with("hidden_")
    }
}

impl KernelMetadata {
    /// The explicit (caller-supplied) arguments, in order.
    pub fn explicit_args(&self) -> impl Iterator<Item = &KernelArg> {
        self.args.iter().filter(|a| !a.is_hidden())
    }
}

/// Why a file is not a well-formed AMDGPU code object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a well-formed AMDGPU code object: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

fn bad<T>(why: impl Into<String>) -> Result<T, Malformed> {
    Err(Malformed(why.into()))
}

/// A section header: (sh_type, sh_link, sh_offset, sh_size, sh_entsize).
type Section = (u32, usize, usize, usize, usize);

/// A little-endian ELF64 file, read with bounds checks.
struct Elf<'a>(&'a [u8]);

impl Elf<'_> {
    fn bytes(&self, at: usize, n: usize) -> Result<&[u8], Malformed> {
        at.checked_add(n)
            .and_then(|end| self.0.get(at..end))
            .ok_or_else(|| Malformed(format!("offset {at:#x}+{n} is past the end ({} bytes)", self.0.len())))
    }
    fn u16(&self, at: usize) -> Result<u16, Malformed> {
        Ok(u16::from_le_bytes(self.bytes(at, 2)?.try_into().unwrap()))
    }
    fn u32(&self, at: usize) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.bytes(at, 4)?.try_into().unwrap()))
    }
    fn u64(&self, at: usize) -> Result<usize, Malformed> {
        let v = u64::from_le_bytes(self.bytes(at, 8)?.try_into().unwrap());
        usize::try_from(v).or_else(|_| bad(format!("value {v:#x} does not fit an offset")))
    }

    /// The section headers.
    fn sections(&self) -> Result<Vec<Section>, Malformed> {
        let (off, entsize, count) = (self.u64(40)?, self.u16(58)? as usize, self.u16(60)? as usize);
        if count > 0 && entsize != 64 {
            return bad(format!("e_shentsize {entsize}"));
        }
        (0..count)
            .map(|i| {
                let h = off + i * entsize;
                Ok((
                    self.u32(h + 4)?,
                    self.u32(h + 40)? as usize,
                    self.u64(h + 24)?,
                    self.u64(h + 32)?,
                    self.u64(h + 56)?,
                ))
            })
            .collect()
    }
}

impl CodeObject {
    /// Reads headers, dynamic symbols and the metadata note of an AMDGPU code object.
    pub fn parse(bytes: &[u8]) -> Result<CodeObject, Malformed> {
        if bytes.len() < 64 || bytes[..4] != *b"\x7fELF" {
            return bad("no ELF header");
        }
        if bytes[4] != 2 || bytes[5] != 1 {
            return bad("not a little-endian ELF64 file");
        }
        let elf = Elf(bytes);
        let sections = elf.sections()?;
        let mut co = CodeObject {
            machine: elf.u16(18)?,
            os_abi: bytes[7],
            abi_version: bytes[8],
            kind: elf.u16(16)?,
            flags: elf.u32(48)?,
            dynamic_symbols: Vec::new(),
            metadata_version: Vec::new(),
            metadata_target: None,
            kernels: Vec::new(),
        };
        if co.machine != EM_AMDGPU {
            return bad(format!("e_machine is {}, not EM_AMDGPU ({EM_AMDGPU})", co.machine));
        }
        const SHT_NOTE: u32 = 7;
        const SHT_DYNSYM: u32 = 11;
        for &(kind, link, off, size, entsize) in &sections {
            if kind == SHT_DYNSYM {
                if entsize != 24 {
                    return bad(format!(".dynsym entry size {entsize}"));
                }
                let &(_, _, stroff, strsize, _) = sections
                    .get(link)
                    .ok_or_else(|| Malformed(".dynsym links to no section".into()))?;
                let strings = elf.bytes(stroff, strsize)?;
                for i in 1..size / 24 {
                    let s = off + i * 24;
                    let at = elf.u32(s)? as usize;
                    let name = strings
                        .get(at..)
                        .and_then(|t| t.split(|&b| b == 0).next())
                        .ok_or_else(|| Malformed("symbol name out of range".into()))?;
                    // st_shndx != SHN_UNDEF
                    co.dynamic_symbols
                        .push((String::from_utf8_lossy(name).into_owned(), elf.u16(s + 6)? != 0));
                }
            } else if kind == SHT_NOTE {
                let mut at = off;
                let end = off + size;
                while at + 12 <= end {
                    let (namesz, descsz, ty) = (elf.u32(at)? as usize, elf.u32(at + 4)? as usize, elf.u32(at + 8)?);
                    let name = elf.bytes(at + 12, namesz)?;
                    let desc_at = at + 12 + namesz.next_multiple_of(4);
                    let desc = elf.bytes(desc_at, descsz)?;
                    if ty == NT_AMDGPU_METADATA && name.strip_suffix(&[0]).unwrap_or(name) == b"AMDGPU" {
                        co.read_metadata(desc)?;
                    }
                    at = desc_at + descsz.next_multiple_of(4);
                }
            }
        }
        Ok(co)
    }

    fn read_metadata(&mut self, desc: &[u8]) -> Result<(), Malformed> {
        let mut r = MsgPack { bytes: desc, at: 0 };
        let root = r.value(0)?;
        let root = root.as_map().ok_or_else(|| Malformed("metadata is not a map".into()))?;
        if let Some(v) = root.get("amdhsa.version").and_then(Value::as_array) {
            self.metadata_version = v.iter().filter_map(Value::as_u64).collect();
        }
        self.metadata_target = root.get("amdhsa.target").and_then(Value::as_str).map(String::from);
        let kernels = root.get("amdhsa.kernels").and_then(Value::as_array).unwrap_or(&[]);
        for k in kernels {
            let k = k
                .as_map()
                .ok_or_else(|| Malformed("a kernel's metadata is not a map".into()))?;
            let num = |key: &str| k.get(key).and_then(Value::as_u64);
            let need = |key: &str| num(key).ok_or_else(|| Malformed(format!("kernel metadata lacks {key}")));
            let text = |key: &str| k.get(key).and_then(Value::as_str).unwrap_or("").to_string();
            let mut args = Vec::new();
            for a in k.get(".args").and_then(Value::as_array).unwrap_or(&[]) {
                let a = a
                    .as_map()
                    .ok_or_else(|| Malformed("an argument's metadata is not a map".into()))?;
                args.push(KernelArg {
                    offset: a.get(".offset").and_then(Value::as_u64).unwrap_or(0),
                    size: a.get(".size").and_then(Value::as_u64).unwrap_or(0),
                    value_kind: a.get(".value_kind").and_then(Value::as_str).unwrap_or("").to_string(),
                });
            }
            self.kernels.push(KernelMetadata {
                name: text(".name"),
                symbol: text(".symbol"),
                kernarg_segment_size: need(".kernarg_segment_size")?,
                kernarg_segment_align: num(".kernarg_segment_align").unwrap_or(8),
                group_segment_fixed_size: need(".group_segment_fixed_size")?,
                private_segment_fixed_size: need(".private_segment_fixed_size")?,
                uses_dynamic_stack: k.get(".uses_dynamic_stack").and_then(Value::as_bool).unwrap_or(false),
                args,
            });
        }
        Ok(())
    }

    /// The processor (`gfx90a`) of `e_flags`, if we know it.
    pub fn processor(&self) -> Option<&'static str> {
        processor_name(self.flags)
    }

    /// The code object version (4, 5, 6) of `EI_ABIVERSION`, for HSA code objects.
    pub fn version(&self) -> Option<u32> {
        match (self.os_abi, self.abi_version) {
            (ELFOSABI_AMDGPU_HSA, ELFABIVERSION_AMDGPU_HSA_V4) => Some(4),
            (ELFOSABI_AMDGPU_HSA, ELFABIVERSION_AMDGPU_HSA_V5) => Some(5),
            (ELFOSABI_AMDGPU_HSA, ELFABIVERSION_AMDGPU_HSA_V6) => Some(6),
            _ => None,
        }
    }

    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Option<&KernelMetadata> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// Whether the dynamic symbol `name` is defined.
    pub fn defines(&self, name: &str) -> bool {
        self.dynamic_symbols.iter().any(|(n, d)| n == name && *d)
    }
}

/// A MessagePack value (the subset code object metadata uses, and the rest of the format
/// parsed so that nothing is misread).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `nil`.
    Nil,
    /// `true`/`false`.
    Bool(bool),
    /// Any integer.
    Int(i128),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Binary data.
    Bin(Vec<u8>),
    /// An array.
    Array(Vec<Value>),
    /// A map with string keys (other keys are kept as their text form).
    Map(BTreeMap<String, Value>),
}

impl Value {
    fn as_map(&self) -> Option<&BTreeMap<String, Value>> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
    fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
    fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }
    fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

/// Parses one MessagePack document.
pub fn parse_msgpack(bytes: &[u8]) -> Result<Value, Malformed> {
    MsgPack { bytes, at: 0 }.value(0)
}

struct MsgPack<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl MsgPack<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Malformed> {
        let s = self
            .at
            .checked_add(n)
            .and_then(|end| self.bytes.get(self.at..end))
            .ok_or_else(|| Malformed("MessagePack metadata ends early".into()))?;
        self.at += n;
        Ok(s)
    }
    fn uint(&mut self, n: usize) -> Result<u64, Malformed> {
        Ok(self.take(n)?.iter().fold(0u64, |v, &b| (v << 8) | b as u64))
    }
    fn int(&mut self, n: usize) -> Result<i64, Malformed> {
        let v = self.uint(n)?;
        let shift = 64 - 8 * n as u32;
        Ok(((v << shift) as i64) >> shift)
    }
    fn str(&mut self, n: usize) -> Result<Value, Malformed> {
        Ok(Value::Str(String::from_utf8_lossy(self.take(n)?).into_owned()))
    }
    fn array(&mut self, n: usize, depth: u32) -> Result<Value, Malformed> {
        (0..n)
            .map(|_| self.value(depth + 1))
            .collect::<Result<_, _>>()
            .map(Value::Array)
    }
    fn map(&mut self, n: usize, depth: u32) -> Result<Value, Malformed> {
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let key = match self.value(depth + 1)? {
                Value::Str(s) => s,
                other => format!("{other:?}"),
            };
            let value = self.value(depth + 1)?;
            m.insert(key, value);
        }
        Ok(Value::Map(m))
    }

    fn value(&mut self, depth: u32) -> Result<Value, Malformed> {
        if depth > 64 {
            return bad("MessagePack metadata nests too deeply");
        }
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => Value::Int(tag as i128),
            0x80..=0x8f => self.map((tag & 0x0f) as usize, depth)?,
            0x90..=0x9f => self.array((tag & 0x0f) as usize, depth)?,
            0xa0..=0xbf => self.str((tag & 0x1f) as usize)?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.uint(1 << (tag - 0xc4))? as usize;
                Value::Bin(self.take(n)?.to_vec())
            }
            0xc7..=0xc9 => {
                // ext: length, type byte, data
                let n = self.uint(1 << (tag - 0xc7))? as usize;
                Value::Bin(self.take(n + 1)?[1..].to_vec())
            }
            0xca => Value::Float(f32::from_bits(self.uint(4)? as u32) as f64),
            0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Value::Int(self.uint(1 << (tag - 0xcc))? as i128),
            0xd0..=0xd3 => Value::Int(self.int(1 << (tag - 0xd0))? as i128),
            0xd4..=0xd8 => {
                // fixext 1, 2, 4, 8, 16: type byte, data
                let n = 1usize << (tag - 0xd4);
                Value::Bin(self.take(n + 1)?[1..].to_vec())
            }
            0xd9..=0xdb => {
                let n = self.uint(1 << (tag - 0xd9))? as usize;
                self.str(n)?
            }
            0xdc | 0xdd => {
                let n = self.uint(if tag == 0xdc { 2 } else { 4 })? as usize;
                self.array(n, depth)?
            }
            0xde | 0xdf => {
                let n = self.uint(if tag == 0xde { 2 } else { 4 })? as usize;
                self.map(n, depth)?
            }
            0xe0..=0xff => Value::Int((tag as i8) as i128),
            0xc1 => return bad("MessagePack tag 0xc1 is never used"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msgpack_values() {
        // {"a": [1, -1, 300, "xy", true, nil], "b": {"c": 65536}}
        let doc = [
            0x82, 0xa1, b'a', 0x96, 0x01, 0xff, 0xcd, 0x01, 0x2c, 0xa2, b'x', b'y', 0xc3, 0xc0, 0xa1, b'b', 0x81, 0xa1,
            b'c', 0xce, 0x00, 0x01, 0x00, 0x00,
        ];
        let v = parse_msgpack(&doc).unwrap();
        let m = v.as_map().unwrap();
        assert_eq!(
            m["a"],
            Value::Array(vec![
                Value::Int(1),
                Value::Int(-1),
                Value::Int(300),
                Value::Str("xy".into()),
                Value::Bool(true),
                Value::Nil
            ])
        );
        assert_eq!(m["b"].as_map().unwrap()["c"].as_u64(), Some(65536));
        assert!(parse_msgpack(&doc[..doc.len() - 1]).is_err(), "truncated input");
        assert!(parse_msgpack(&[0xd0, 0x80]).unwrap() == Value::Int(-128));
    }

    #[test]
    fn isa_names() {
        assert_eq!(processor_of_isa("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"), "gfx90a");
        assert_eq!(processor_of_isa("gfx1100"), "gfx1100");
        assert_eq!(processor_name(0x53f), Some("gfx90a"));
        assert_eq!(processor_name(EF_AMDGPU_MACH_AMDGCN_GFX1100), Some("gfx1100"));
        assert_eq!(processor_name(0), None);
    }

    #[test]
    fn rejects_non_elf() {
        assert!(CodeObject::parse(b"not an elf").is_err());
        let mut header = [0u8; 64];
        header[..6].copy_from_slice(b"\x7fELF\x02\x01");
        header[18] = 62; // EM_X86_64
        assert!(CodeObject::parse(&header).unwrap_err().0.contains("EM_AMDGPU"));
    }
}
