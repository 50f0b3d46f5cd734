//! Handles: what C holds is an id, never a pointer to Rust memory.
//!
//! A `gpuioruntime *` or `gpuio_module *` is a number from a counter (never reused),
//! spelled as a pointer without provenance. The registry maps live ids to their objects.
//! So a NULL, stale (destroyed) or made-up handle is an error and never a dangling
//! dereference; double destroy is always detected; and a handle destroyed by one thread
//! while another uses it stays alive (an `Arc`) until that call returns.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use gpuio_host::{GpuModule, Runtime};

use crate::status::gpuio_status::GPUIO_ERROR_INVALID_HANDLE;
use crate::status::Failure;

/// A runtime created through the C API.
pub(crate) struct RuntimeEntry {
    pub(crate) rt: Runtime,
    /// Modules whose handles were destroyed, unloaded at the next synchronize: kernels of
    /// them may still run until then. (A cycle, ModuleEntry -> RuntimeEntry, broken by
    /// every synchronize and by the runtime's destroy.)
    retired: Mutex<Vec<Arc<ModuleEntry>>>,
}

impl RuntimeEntry {
    /// Synchronizes the runtime, then unloads the modules retired before, unless it gave
    /// up ([`gpuio_host::Error::Hang`]): their kernels may still run, and the next
    /// synchronize unloads them.
    pub(crate) fn synchronize(&self) -> gpuio_host::Result<()> {
        let retired = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        let result = self.rt.synchronize();
        if matches!(result, Err(gpuio_host::Error::Hang(_))) {
            self.retired.lock().unwrap_or_else(|e| e.into_inner()).extend(retired);
        } else {
            drop(retired);
        }
        result
    }
}

/// A module of a runtime created through the C API.
pub(crate) struct ModuleEntry {
    /// Declared before `runtime`, so dropped before it: the `'static` borrow below is of
    /// the runtime that `runtime` keeps alive.
    pub(crate) module: GpuModule<'static>,
    /// Keeps the runtime `module` borrows alive.
    runtime: Arc<RuntimeEntry>,
    runtime_id: usize,
}

enum Entry {
    Runtime(Arc<RuntimeEntry>),
    Module(Arc<ModuleEntry>),
}

struct Registry {
    next: usize,
    live: BTreeMap<usize, Entry>,
}

/// Ids step by 16 from 16: they look like aligned pointers to C code that tags low bits.
const STEP: usize = 16;

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: STEP,
    live: BTreeMap::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    // The registry is consistent at every unlock (single inserts and removes).
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    fn insert(&mut self, entry: Entry) -> usize {
        let id = self.next;
        self.next += STEP;
        self.live.insert(id, entry);
        id
    }

    /// Why `id` names no live object of kind `kind`.
    fn stale(&self, id: usize, kind: &str) -> Failure {
        let why = if id == 0 {
            format!("the {kind} handle is NULL")
        } else if id.is_multiple_of(STEP) && id < self.next {
            format!("the {kind} handle {id:#x} was destroyed")
        } else {
            format!("{id:#x} is not a {kind} handle that gpuio returned")
        };
        Failure::new(GPUIO_ERROR_INVALID_HANDLE, why)
    }
}

/// Registers a runtime; returns its handle id.
pub(crate) fn add_runtime(rt: Runtime) -> usize {
    registry().insert(Entry::Runtime(Arc::new(RuntimeEntry {
        rt,
        retired: Mutex::new(Vec::new()),
    })))
}

/// The live runtime with handle id `id`.
pub(crate) fn runtime(id: usize) -> Result<Arc<RuntimeEntry>, Failure> {
    let r = registry();
    match r.live.get(&id) {
        Some(Entry::Runtime(rt)) => Ok(rt.clone()),
        Some(Entry::Module(_)) => Err(Failure::new(
            GPUIO_ERROR_INVALID_HANDLE,
            format!("{id:#x} is a module handle, not a runtime handle"),
        )),
        None => Err(r.stale(id, "runtime")),
    }
}

/// The live module with handle id `id`.
pub(crate) fn module(id: usize) -> Result<Arc<ModuleEntry>, Failure> {
    let r = registry();
    match r.live.get(&id) {
        Some(Entry::Module(m)) => Ok(m.clone()),
        Some(Entry::Runtime(_)) => Err(Failure::new(
            GPUIO_ERROR_INVALID_HANDLE,
            format!("{id:#x} is a runtime handle, not a module handle"),
        )),
        None => Err(r.stale(id, "module")),
    }
}

/// Makes a module of the runtime with handle id `runtime_id` with `make`, and registers
/// it; returns its handle id.
pub(crate) fn add_module(
    runtime_id: usize,
    make: impl FnOnce(&'static Runtime) -> gpuio_host::Result<GpuModule<'static>>,
) -> Result<usize, Failure> {
    let entry = runtime(runtime_id)?;
    // SAFETY: the Runtime lives inside the Arc's allocation, which does not move and
    // stays allocated while any clone of the Arc lives. The only place this reference
    // goes is the GpuModule stored in a ModuleEntry (or dropped right here on failure),
    // and that ModuleEntry holds a clone of the Arc in a field dropped after the module.
    // So the reference never outlives the Runtime, though its type says 'static.
    let rt: &'static Runtime = unsafe { &*(&entry.rt as *const Runtime) };
    let module = make(rt)?;
    let id = registry().insert(Entry::Module(Arc::new(ModuleEntry {
        module,
        runtime: entry,
        runtime_id,
    })));
    Ok(id)
}

/// Unregisters the runtime with handle id `id` and every module of it. Returns them; the
/// caller drops the modules, then the runtime (which synchronizes).
pub(crate) fn remove_runtime(id: usize) -> Result<(Arc<RuntimeEntry>, Vec<Arc<ModuleEntry>>), Failure> {
    let mut r = registry();
    let rt = match r.live.get(&id) {
        Some(Entry::Runtime(_)) => match r.live.remove(&id) {
            Some(Entry::Runtime(rt)) => rt,
            _ => unreachable!("checked under the same lock"),
        },
        Some(Entry::Module(_)) => {
            return Err(Failure::new(
                GPUIO_ERROR_INVALID_HANDLE,
                format!("{id:#x} is a module handle: destroy it with gpuio_module_destroy"),
            ))
        }
        None => return Err(r.stale(id, "runtime")),
    };
    let module_ids: Vec<usize> = r
        .live
        .iter()
        .filter_map(|(mid, e)| match e {
            Entry::Module(m) if m.runtime_id == id => Some(*mid),
            _ => None,
        })
        .collect();
    let modules = module_ids
        .into_iter()
        .filter_map(|mid| match r.live.remove(&mid) {
            Some(Entry::Module(m)) => Some(m),
            _ => None,
        })
        .collect();
    Ok((rt, modules))
}

/// Unregisters the module with handle id `id`; its runtime unloads it at its next
/// synchronize (or destroy).
pub(crate) fn retire_module(id: usize) -> Result<(), Failure> {
    let m = remove_module(id)?;
    let runtime = m.runtime.clone();
    runtime.retired.lock().unwrap_or_else(|e| e.into_inner()).push(m);
    Ok(())
}

/// Unregisters the module with handle id `id`.
pub(crate) fn remove_module(id: usize) -> Result<Arc<ModuleEntry>, Failure> {
    let mut r = registry();
    match r.live.get(&id) {
        Some(Entry::Module(_)) => match r.live.remove(&id) {
            Some(Entry::Module(m)) => Ok(m),
            _ => unreachable!("checked under the same lock"),
        },
        Some(Entry::Runtime(_)) => Err(Failure::new(
            GPUIO_ERROR_INVALID_HANDLE,
            format!("{id:#x} is a runtime handle: destroy it with gpuio_runtime_destroy"),
        )),
        None => Err(r.stale(id, "module")),
    }
}
