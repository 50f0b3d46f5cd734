//! The structs and enum values of `gpuio.h`, with the C names (checked against the
//! header by the `abi` test: sizes, field offsets, values).
//!
//! Enum-typed values that C passes in are plain integers here (`i32`), checked before
//! use: C may put any value in an enum.
#![allow(non_camel_case_types)]

use std::ffi::c_void;

/// `gpuio_runtime`: opaque; a handle is an id (see `handles`).
#[repr(C)]
pub struct gpuio_runtime {
    _opaque: [u8; 0],
}

/// `gpuio_module`: opaque; a handle is an id (see `handles`).
#[repr(C)]
pub struct gpuio_module {
    _opaque: [u8; 0],
}

/// `gpuio_backend` values.
pub const GPUIO_BACKEND_AUTO: i32 = 0;
/// The CPU backend.
pub const GPUIO_BACKEND_CPU: i32 = 1;
/// The CUDA backend.
pub const GPUIO_BACKEND_CUDA: i32 = 2;
/// The HSA backend.
pub const GPUIO_BACKEND_HSA: i32 = 3;
/// `GPUIO_SANDBOX_PRINT_ONLY`.
pub const GPUIO_SANDBOX_PRINT_ONLY: i32 = 0;
/// `GPUIO_SANDBOX_FILE_IO`.
pub const GPUIO_SANDBOX_FILE_IO: i32 = 1;
/// `GPUIO_SANDBOX_OFF`.
pub const GPUIO_SANDBOX_OFF: i32 = 2;

/// `gpuio_runtime_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpuio_runtime_options {
    /// `sizeof(gpuio_runtime_options)`, set by `gpuio_runtime_options_init`.
    pub struct_size: u32,
    /// A `gpuio_backend`.
    pub backend: i32,
    /// SQ entries; 0: default.
    pub sq_entries: u32,
    /// CQ entries; 0: twice the SQ.
    pub cq_entries: u32,
    /// Log bytes per output; 0: backend default.
    pub log_bytes: u64,
    /// Where prints go.
    pub stdout_fd: i32,
    /// Where error prints go.
    pub stderr_fd: i32,
    /// Writes in flight per regular-file output; 0: default.
    pub max_flights: u32,
    /// SQPOLL idle time; 0: default.
    pub sq_thread_idle_ms: u32,
    /// GPU thread stack; 0: default.
    pub gpu_stack_bytes: u64,
    /// File-I/O arena bytes; 0: default.
    pub arena_bytes: u64,
    /// Arena block bytes; 0: default.
    pub arena_block_bytes: u64,
    /// A `gpuio_sandbox`.
    pub sandbox: i32,
    /// Milliseconds without progress after which synchronize gives up; 0: default
    /// (`GPUIO_HANG_TIMEOUT`, else none).
    pub hang_timeout_ms: u64,
    /// io_uring rings; 0: default (`GPUIO_RINGS`, else on a GPU one per four free cores
    /// near it, 1 to 4, and 1 on the CPU backend).
    pub rings: u32,
    /// Must be 0 (no padding at the end: see `gpuio.h`).
    pub reserved: u32,
    /// The GPU to run on, numbered from 0 ([`Builder::gpu`](gpuio_host::Builder::gpu));
    /// -1: default (`GPUIO_GPU`, else the first).
    pub gpu: i32,
    /// Must be 0 (as `reserved`).
    pub reserved2: u32,
}

impl Default for gpuio_runtime_options {
    /// Every field 0, except `gpu`: -1, the default GPU (0 would name GPU 0).
    fn default() -> Self {
        gpuio_runtime_options {
            struct_size: 0,
            backend: 0,
            sq_entries: 0,
            cq_entries: 0,
            log_bytes: 0,
            stdout_fd: 0,
            stderr_fd: 0,
            max_flights: 0,
            sq_thread_idle_ms: 0,
            gpu_stack_bytes: 0,
            arena_bytes: 0,
            arena_block_bytes: 0,
            sandbox: 0,
            hang_timeout_ms: 0,
            rings: 0,
            reserved: 0,
            gpu: -1,
            reserved2: 0,
        }
    }
}

/// The sizes `gpuio_runtime_options` had, oldest first, up to this version's: a caller
/// built against an older `gpuio.h` passes an older size, and the fields it lacks take
/// their defaults.
pub(crate) const OPTIONS_SIZES: [usize; 5] = [
    // Up to gpu_stack_bytes.
    std::mem::offset_of!(gpuio_runtime_options, arena_bytes),
    // Up to sandbox (padded to 8 bytes).
    std::mem::offset_of!(gpuio_runtime_options, hang_timeout_ms),
    // Up to hang_timeout_ms.
    std::mem::offset_of!(gpuio_runtime_options, rings),
    // Up to reserved.
    std::mem::offset_of!(gpuio_runtime_options, gpu),
    size_of::<gpuio_runtime_options>(),
];

/// `gpuio_output_errors`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct gpuio_output_errors {
    /// The file descriptor.
    pub fd: i32,
    /// Write requests that failed.
    pub failed_writes: u32,
    /// The errno of the latest failure.
    pub last_errno: i32,
    /// Lines whose `Display` returned an error (cut there and marked; written, not lost).
    pub format_errors: u32,
    /// Bytes not written.
    pub lost_bytes: u64,
    /// Lines among them.
    pub lost_lines: u64,
}

/// `GPUIO_MAX_OUTPUTS`.
pub const GPUIO_MAX_OUTPUTS: usize = 8;

// Every output the runtime has fits in a report.
const _: () = assert!(gpuio_device::protocol::context::STREAMS <= GPUIO_MAX_OUTPUTS);

/// `gpuio_sync_report`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct gpuio_sync_report {
    /// Entries used in `outputs`.
    pub num_outputs: u32,
    /// One per output that lost writes.
    pub outputs: [gpuio_output_errors; GPUIO_MAX_OUTPUTS],
}

/// `gpuio_thread`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct gpuio_thread {
    /// Index of the thread in its block.
    pub thread_idx: u32,
    /// Index of the block in the grid.
    pub block_idx: u32,
    /// Threads per block.
    pub block_dim: u32,
    /// Blocks in the grid.
    pub grid_dim: u32,
    /// `block_idx * block_dim + thread_idx`.
    pub global_idx: u64,
}

/// `gpuio_cpu_kernel`. "C-unwind": a C++ exception thrown out of it is caught by the CPU
/// backend's `catch_unwind`, which aborts on foreign exceptions (defined behaviour, not UB).
pub type gpuio_cpu_kernel = Option<unsafe extern "C-unwind" fn(thread: *const gpuio_thread, user: *mut c_void)>;

/// `gpuio_arg_kind` values.
pub const GPUIO_ARG_U32: i32 = 1;
/// A 64-bit integer or device pointer.
pub const GPUIO_ARG_U64: i32 = 2;
/// A float.
pub const GPUIO_ARG_F32: i32 = 3;
/// A double.
pub const GPUIO_ARG_F64: i32 = 4;

/// The value union of `gpuio_arg`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union gpuio_arg_value {
    /// `GPUIO_ARG_U32`.
    pub u32: u32,
    /// `GPUIO_ARG_U64`.
    pub u64: u64,
    /// `GPUIO_ARG_F32`.
    pub f32: f32,
    /// `GPUIO_ARG_F64`.
    pub f64: f64,
}

/// `gpuio_arg`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpuio_arg {
    /// A `gpuio_arg_kind`.
    pub kind: i32,
    /// The value.
    pub value: gpuio_arg_value,
}

impl gpuio_arg {
    /// The argument for the host runtime, or `None` for an unknown kind.
    pub(crate) fn to_arg(self) -> Option<gpuio_host::Arg> {
        // SAFETY: every member of the union is plain data, valid for any bits. The one
        // read is the one `kind` names, which the header's helpers (gpuio_arg_u32, ...)
        // write; they zero all 8 bytes first, so every byte read was written by C.
        unsafe {
            Some(match self.kind {
                GPUIO_ARG_U32 => gpuio_host::Arg::U32(self.value.u32),
                GPUIO_ARG_U64 => gpuio_host::Arg::U64(self.value.u64),
                GPUIO_ARG_F32 => gpuio_host::Arg::F32(self.value.f32),
                GPUIO_ARG_F64 => gpuio_host::Arg::F64(self.value.f64),
                _ => return None,
            })
        }
    }
}
