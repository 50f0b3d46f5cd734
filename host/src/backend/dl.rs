//! Run-time loading of driver libraries (`dlopen`), so that building needs no GPU stack:
//! [`Library`] and [`dl_api!`](crate::backend::dl::dl_api), which declares a table of
//! entry points and loads it from a library.

use std::ffi::{c_void, CStr};

/// A library opened with `dlopen`, closed on drop.
pub(crate) struct Library(*mut c_void);

// SAFETY: a dlopen handle is a process-wide token that dlsym and dlclose accept from any
// thread (glibc serializes them internally).
unsafe impl Send for Library {}
// SAFETY: as for `Send`: `&Library` only allows dlsym, which is thread-safe.
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
        // SAFETY: the handle came from dlopen and no symbol of it is used after the drop
        // (the tables that hold them are dropped with the library's owner).
        unsafe { libc::dlclose(self.0) };
    }
}

/// Declares `struct Api`, one `unsafe extern "C" fn` field per entry point, and
/// `Api::load(&Library)`, which looks each one up by name and says which one the library
/// lacks. `$lib` names the library in that message; `$doc` says where the signatures
/// come from.
///
/// ```ignore
/// dl_api! { "libcuda.so.1", "Driver entry points (signatures from `cuda.h`).",
///     cuInit: fn(u32) -> CuResult;
/// }
/// ```
macro_rules! dl_api {
    ($lib:literal, $doc:literal, $($(#[$attr:meta])* $name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        #[doc = $doc]
        #[allow(non_snake_case)]
        pub(crate) struct Api {
            $($(#[$attr])* pub(crate) $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Api {
            pub(crate) fn load(lib: &$crate::backend::dl::Library) -> std::result::Result<Api, String> {
                Ok(Api {
                    $($name: {
                        let name = std::ffi::CString::new(stringify!($name)).expect("no NUL in a symbol name");
                        // SAFETY: the field's type is the entry point's documented
                        // signature (`$doc` says from which header).
                        unsafe { lib.symbol(&name) }.ok_or(concat!($lib, " lacks ", stringify!($name)))?
                    },)*
                })
            }
        }
    };
}
pub(crate) use dl_api;
