//! Run-time loading of driver libraries (`dlopen`), so that building needs no GPU stack.

use std::ffi::{c_void, CStr};

/// A library opened with `dlopen`, closed on drop.
pub(crate) struct Library(*mut c_void);

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

impl Library {
    pub(crate) fn open(name: &CStr) -> Option<Library> {
        // SAFETY: dlopen with a valid C string; the handle is closed on drop.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            None
        } else {
            Some(Library(h))
        }
    }

    /// # Safety
    /// `T` must be the symbol's real type (a function pointer type).
    pub(crate) unsafe fn symbol<T: Copy>(&self, name: &CStr) -> Option<T> {
        // SAFETY: valid handle and C string.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        // SAFETY: the caller guarantees `T` is a pointer-sized function type.
        (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen.
        unsafe { libc::dlclose(self.0) };
    }
}
