//! `gpuio_status`, the thread's last error message, and the boundary every exported
//! function goes through ([`call`]): errors become a status and a message, panics too.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use gpuio_host::Error;

/// `CUDA_ERROR_NOT_FOUND`: a missing kernel or global in a module.
const CUDA_ERROR_NOT_FOUND: i64 = 500;

/// `gpuio_status`: what a call did (`GPUIO_OK` is 0).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum gpuio_status {
    /// Success.
    GPUIO_OK = 0,
    /// A NULL pointer, a non-UTF-8 name, a zero grid or block, uninitialised options, ...
    GPUIO_ERROR_INVALID_ARGUMENT = 1,
    /// The handle is NULL, destroyed, or not the kind of handle the call takes.
    GPUIO_ERROR_INVALID_HANDLE = 2,
    /// An option is out of range ([`Error::Config`]).
    GPUIO_ERROR_CONFIG = 3,
    /// The backend cannot run here, or cannot do this ([`Error::BackendUnavailable`]).
    GPUIO_ERROR_BACKEND_UNAVAILABLE = 4,
    /// io_uring cannot be used here ([`Error::UringUnavailable`]).
    GPUIO_ERROR_URING_UNAVAILABLE = 5,
    /// A system call failed ([`Error::Os`]).
    GPUIO_ERROR_OS = 6,
    /// A GPU driver call failed ([`Error::Cuda`]).
    GPUIO_ERROR_DRIVER = 7,
    /// No such kernel or global in the code object.
    GPUIO_ERROR_NOT_FOUND = 8,
    /// A kernel failed ([`Error::Kernel`]).
    GPUIO_ERROR_KERNEL = 9,
    /// Fire-and-forget prints failed ([`Error::Print`]).
    GPUIO_ERROR_PRINT = 10,
    /// Not allowed from where it was called (inside or outside a CPU kernel).
    GPUIO_ERROR_WRONG_CONTEXT = 11,
    /// A Rust panic, caught at the boundary.
    GPUIO_ERROR_INTERNAL = 12,
    /// Nothing moved for the hang timeout ([`Error::Hang`]).
    GPUIO_ERROR_HANG = 13,
}

use gpuio_status::*;

/// Every status with its name, in value order (`gpuio_status_name`, and the ABI test).
pub(crate) const STATUS_NAMES: [(gpuio_status, &CStr); 14] = [
    (GPUIO_OK, c"GPUIO_OK"),
    (GPUIO_ERROR_INVALID_ARGUMENT, c"GPUIO_ERROR_INVALID_ARGUMENT"),
    (GPUIO_ERROR_INVALID_HANDLE, c"GPUIO_ERROR_INVALID_HANDLE"),
    (GPUIO_ERROR_CONFIG, c"GPUIO_ERROR_CONFIG"),
    (GPUIO_ERROR_BACKEND_UNAVAILABLE, c"GPUIO_ERROR_BACKEND_UNAVAILABLE"),
    (GPUIO_ERROR_URING_UNAVAILABLE, c"GPUIO_ERROR_URING_UNAVAILABLE"),
    (GPUIO_ERROR_OS, c"GPUIO_ERROR_OS"),
    (GPUIO_ERROR_DRIVER, c"GPUIO_ERROR_DRIVER"),
    (GPUIO_ERROR_NOT_FOUND, c"GPUIO_ERROR_NOT_FOUND"),
    (GPUIO_ERROR_KERNEL, c"GPUIO_ERROR_KERNEL"),
    (GPUIO_ERROR_PRINT, c"GPUIO_ERROR_PRINT"),
    (GPUIO_ERROR_WRONG_CONTEXT, c"GPUIO_ERROR_WRONG_CONTEXT"),
    (GPUIO_ERROR_INTERNAL, c"GPUIO_ERROR_INTERNAL"),
    (GPUIO_ERROR_HANG, c"GPUIO_ERROR_HANG"),
];

/// The name of the status with value `value`, or `GPUIO_STATUS_UNKNOWN`.
pub(crate) fn status_name(value: i32) -> &'static CStr {
    STATUS_NAMES
        .iter()
        .find(|(s, _)| *s as i32 == value)
        .map_or(c"GPUIO_STATUS_UNKNOWN", |(_, n)| n)
}

/// A failed call: its status and what to tell the caller.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: gpuio_status,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: gpuio_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    /// A bad argument.
    pub(crate) fn arg(message: impl Into<String>) -> Failure {
        Failure::new(GPUIO_ERROR_INVALID_ARGUMENT, message)
    }
}

/// The status of a host runtime error.
pub(crate) fn status_of(e: &Error) -> gpuio_status {
    match e {
        Error::UringUnavailable(_) => GPUIO_ERROR_URING_UNAVAILABLE,
        Error::Os { .. } => GPUIO_ERROR_OS,
        Error::BackendUnavailable { .. } => GPUIO_ERROR_BACKEND_UNAVAILABLE,
        Error::Config(_) => GPUIO_ERROR_CONFIG,
        Error::Print(_) => GPUIO_ERROR_PRINT,
        Error::Kernel(_) => GPUIO_ERROR_KERNEL,
        // A kernel's request that the io_uring sandbox refused.
        Error::Refused(_) => GPUIO_ERROR_KERNEL,
        Error::Hang(_) => GPUIO_ERROR_HANG,
        Error::InsideKernel { .. } => GPUIO_ERROR_WRONG_CONTEXT,
        // Results read while kernels may still write them (not reachable from C today).
        Error::KernelsRunning { .. } => GPUIO_ERROR_WRONG_CONTEXT,
        // Completions overflowed the CQ: the device broke its own credit rule, a gpuio bug.
        Error::CqOverflow { .. } => GPUIO_ERROR_INTERNAL,
        // cuModuleGetFunction / cuModuleGetGlobal on a missing name.
        Error::Cuda(d) if d.code == Some(CUDA_ERROR_NOT_FOUND) => GPUIO_ERROR_NOT_FOUND,
        // A missing kernel or global in an HSA executable; no code object for this GPU.
        Error::Hsa(d) if d.message.contains("hsa_executable_get_symbol_by_name") => GPUIO_ERROR_NOT_FOUND,
        Error::NoCodeObject { .. } => GPUIO_ERROR_NOT_FOUND,
        // CUDA driver errors, and those of drivers to come.
        _ => GPUIO_ERROR_DRIVER,
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::new(status_of(&e), e.to_string())
    }
}

thread_local! {
    /// The message of this thread's latest call: empty after a success.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// What the thread's latest call did, for `gpuio_last_error`.
pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"(gpuio: this thread is exiting)".as_ptr())
}

fn set_last_error(message: Option<String>) {
    let _ = LAST_ERROR.try_with(|l| {
        let mut l = l.borrow_mut();
        match message {
            // A success clears the message (cheaply: gpuio_print comes here per line).
            None if l.is_empty() => {}
            None => *l = CString::default(),
            Some(m) => {
                let m = m.replace('\0', "\\0");
                *l = CString::new(m).unwrap_or_default();
            }
        }
    });
}

/// Runs an exported function's body: its error, or a panic, becomes a status and the
/// thread's last error message.
pub(crate) fn call(body: impl FnOnce() -> Result<(), Failure>) -> gpuio_status {
    // AssertUnwindSafe: after a panic the caller gets GPUIO_ERROR_INTERNAL; the runtime's
    // own locks recover from poisoning (they take the inner value), so a later call sees
    // consistent state or reports its own error.
    let (status, message) = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => (GPUIO_OK, None),
        Ok(Err(f)) => (f.status, Some(f.message)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            (
                GPUIO_ERROR_INTERNAL,
                Some(format!("internal error: gpuio panicked: {what}")),
            )
        }
    };
    set_last_error(message);
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: last_error returns a NUL-terminated string owned by this thread, valid
        // until its next call; it is copied at once.
        unsafe { CStr::from_ptr(last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_an_internal_error_with_its_message() {
        assert_eq!(call(|| panic!("boom")), GPUIO_ERROR_INTERNAL);
        assert!(last().contains("gpuio panicked: boom"), "{}", last());
        assert_eq!(call(|| Ok(())), GPUIO_OK);
        assert_eq!(last(), "", "a success clears the message");
    }

    #[test]
    fn errors_map_to_statuses() {
        let cuda = |code, name: &str| {
            status_of(&Error::Cuda(gpuio_host::DriverError::call(
                "cuX",
                code,
                name,
                &code.to_string(),
            )))
        };
        assert_eq!(cuda(500, "CUDA_ERROR_NOT_FOUND"), GPUIO_ERROR_NOT_FOUND);
        assert_eq!(cuda(218, "CUDA_ERROR_INVALID_PTX"), GPUIO_ERROR_DRIVER);
        assert_eq!(status_of(&Error::Config("x".into())), GPUIO_ERROR_CONFIG);
        let hang = gpuio_host::HangReport {
            waiting_for: gpuio_host::Waiting::GpuKernels,
            stalled: std::time::Duration::from_secs(1),
            ring: gpuio_host::RingWords::default(),
            tickets: None,
            other_rings: Vec::new(),
            solo: None,
            streams: Vec::new(),
            running: Box::default(),
            wake_error: None,
        };
        assert_eq!(status_of(&Error::Hang(Box::new(hang))), GPUIO_ERROR_HANG);
        assert_eq!(status_of(&Error::CqOverflow { sq_flags: 2 }), GPUIO_ERROR_INTERNAL);
        assert_eq!(
            status_of(&Error::InsideKernel {
                call: "Runtime::launch"
            }),
            GPUIO_ERROR_WRONG_CONTEXT
        );
        let f = Failure::new(GPUIO_ERROR_OS, "a\0b");
        assert_eq!(call(|| Err(f)), GPUIO_ERROR_OS);
        assert_eq!(last(), "a\\0b", "interior NULs cannot cut the message short");
        for (i, (s, _)) in STATUS_NAMES.iter().enumerate() {
            assert_eq!(*s as usize, i, "STATUS_NAMES in value order");
        }
        assert_eq!(status_name(-1), c"GPUIO_STATUS_UNKNOWN");
    }
}
