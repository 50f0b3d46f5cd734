//! The few HSA runtime calls gpuio needs, loaded from `libhsa-runtime64.so.1` at run time:
//! our own binding (no maintained crate binds HSA), with the types and enum values of
//! ROCR-Runtime's `hsa.h` and `hsa_ext_amd.h`. Building needs no ROCm; where the runtime,
//! the driver or a GPU is absent, [`Hsa::open`] says why.
//!
//! What it does, in HSA terms:
//! - `hsa_init`, then the first GPU agent (and the first CPU agent, which owns the system
//!   memory pools): its name (`gfx90a`), its ISA name, its product name;
//! - memory pools: the GPU's coarse-grained global pool (the protocol state), the CPU's
//!   kernarg pool (kernel arguments), the CPU's fine-grained global pool (to make host
//!   memory GPU-visible, see [`Hsa::lock`]);
//! - code objects: `hsa_code_object_reader_create_from_memory`,
//!   `hsa_executable_create_alt`, `hsa_executable_load_agent_code_object`,
//!   `hsa_executable_freeze`, symbols by name (`<kernel>.kd`, `gpuio_context`);
//! - dispatch: one multi-producer AQL queue; a kernel dispatch packet whose header is
//!   stored last with a release store, then the doorbell; one completion signal that
//!   counts dispatches in flight.

mod agent;
mod executable;
mod ffi;
mod queue;

pub use agent::Hsa;
pub use executable::Executable;
pub use ffi::{Handle, HsaQueue, Status, HSA_STATUS_ERROR_OUT_OF_RESOURCES};
