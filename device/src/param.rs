//! Kernel parameters as they travel from the host: what each parameter type of a
//! [`kernel!`](crate::kernel) is passed as ([`Param::Raw`]) and how the kernel gets its value
//! back ([`Param::from_raw`]).
//!
//! Numbers and raw pointers travel as themselves. A `&str` or a `&[T]` (of plain numbers)
//! travels as a [`RawSlice`]: the address of a copy the host's typed launch made in memory
//! the kernel can read, kept until the launch is synchronized, and its length.
//!
//! There is no `&mut [T]` parameter: every thread of a launch would hold the same `&mut`,
//! which Rust forbids (two live `&mut` to one slice); a kernel that writes takes a device
//! address (`u64`) or a raw pointer and writes through it in `unsafe`, one element per
//! thread.

use core::fmt;
use core::marker::PhantomData;

/// A string or slice as a kernel receives it: the address of its first element, in memory
/// the kernel reads, and its length in elements (bytes for `str`).
///
/// `#[repr(C)]`, 16 bytes aligned to 8: on NVIDIA one by-value parameter
/// (`.param .align 8 .b8 p[16]`), on AMD two 8-byte kernel arguments, the same bytes. Only
/// `unsafe` code makes one ([`RawSlice::new`]): a kernel's host function takes it, and
/// would otherwise read any address.
#[repr(C)]
pub struct RawSlice<T: ?Sized> {
    addr: u64,
    len: u64,
    of: PhantomData<fn() -> *const T>,
}

impl<T: ?Sized> RawSlice<T> {
    /// The slice of `len` elements at `addr`.
    ///
    /// # Safety
    /// Where a kernel receives it (the CPU backend's threads, or a GPU's: then `addr` is an
    /// address the GPU reads), `len` elements of the slice's type are there at `addr`,
    /// aligned, alive and unchanged until the kernel ends; for `str` they are UTF-8. With
    /// `len` 0 the address is never read.
    pub const unsafe fn new(addr: u64, len: u64) -> RawSlice<T> {
        RawSlice {
            addr,
            len,
            of: PhantomData,
        }
    }

    /// The address of the first element.
    pub const fn addr(&self) -> u64 {
        self.addr
    }

    /// The number of elements (bytes for `str`).
    pub const fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no elements.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: ?Sized> Clone for RawSlice<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for RawSlice<T> {}

impl<T: ?Sized> fmt::Debug for RawSlice<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawSlice {{ addr: {:#x}, len: {} }}", self.addr, self.len)
    }
}

/// A type a [`kernel!`](crate::kernel) parameter may have: numbers (and `bool`), raw
/// pointers, `&str`, and `&[T]` of [`Plain`] elements. A host's typed launch passes numbers
/// of 4 and 8 bytes, `&str` and `&[T]`; 1- and 2-byte numbers, `bool` and raw pointers are
/// for kernels the CPU backend calls directly or a host launches by name.
///
/// ```
/// use gpuio_device::param::{Param, RawSlice};
/// let s = "gpuio ✓";
/// // SAFETY: the string outlives the call.
/// let back: &str = unsafe { <&str>::from_raw(RawSlice::new(s.as_ptr() as u64, s.len() as u64)) };
/// assert_eq!(back, s);
/// let v = [1.5f64, -2.0];
/// // SAFETY: as above.
/// let back: &[f64] = unsafe { <&[f64]>::from_raw(RawSlice::new(v.as_ptr() as u64, 2)) };
/// assert_eq!(back, v);
/// // SAFETY: empty: the address is never read.
/// let empty: &[u32] = unsafe { <&[u32]>::from_raw(RawSlice::new(0, 0)) };
/// assert!(empty.is_empty());
/// assert_eq!(core::mem::size_of::<RawSlice<str>>(), 16);
/// ```
///
/// # Safety
/// An implementation's `from_raw` must give a valid `Self` for every `Raw` that the host's
/// launch passes for the type (for `RawSlice`: `len` elements at `addr`, readable, alive
/// and unchanged while the kernel runs, valid UTF-8 for `str`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a kernel parameter",
    label = "not a kernel parameter type",
    note = "kernel parameters are numbers, bool, raw pointers, &str and &[T] of numbers (not &mut [T]: every thread would hold the same &mut; take a raw pointer); a type of your own implements `gpuio_device::param::Param`"
)]
pub unsafe trait Param: Sized {
    /// What travels: the kernel entry point's parameter type.
    type Raw: Copy + 'static;

    /// The parameter's value from what travelled.
    ///
    /// # Safety
    /// `raw` is what the host's launch passed for this parameter (see the trait).
    unsafe fn from_raw(raw: Self::Raw) -> Self;
}

macro_rules! as_themselves {
    ($($t:ty),*) => {$(
        // SAFETY: every value of the type is valid; it travels as itself.
        unsafe impl Param for $t {
            type Raw = $t;

            #[inline(always)]
            unsafe fn from_raw(raw: $t) -> $t {
                raw
            }
        }
    )*};
}

as_themselves!(u8, i8, u16, i16, u32, i32, u64, i64, usize, isize, f32, f64, bool);

// SAFETY: a raw pointer is valid as any value; dereferencing it is the kernel's `unsafe`.
unsafe impl<T: 'static> Param for *const T {
    type Raw = *const T;

    #[inline(always)]
    unsafe fn from_raw(raw: *const T) -> *const T {
        raw
    }
}

// SAFETY: as for `*const T`.
unsafe impl<T: 'static> Param for *mut T {
    type Raw = *mut T;

    #[inline(always)]
    unsafe fn from_raw(raw: *mut T) -> *mut T {
        raw
    }
}

/// An element type a `&[T]` parameter may have: a plain number, for which every bit
/// pattern is a value and which has no padding, so the host's bytes are the kernel's values.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes is a valid `Self`; the type has no
/// padding, the same layout on the host and on the GPU (`#[repr(C)]` of such fields, for a
/// struct), and an alignment of at most 8.
pub unsafe trait Plain: Copy + 'static {}

// SAFETY: integers and floats: every bit pattern is a value; alignment at most 8.
unsafe impl Plain for u8 {}
// SAFETY: as above (8 bytes on the 64-bit hosts and GPUs gpuio runs on).
unsafe impl Plain for usize {}
// SAFETY: as above.
unsafe impl Plain for isize {}
// SAFETY: as above.
unsafe impl Plain for i8 {}
// SAFETY: as above.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for i16 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for i32 {}
// SAFETY: as above.
unsafe impl Plain for u64 {}
// SAFETY: as above.
unsafe impl Plain for i64 {}
// SAFETY: as above.
unsafe impl Plain for f32 {}
// SAFETY: as above.
unsafe impl Plain for f64 {}

// SAFETY: `from_raw`'s caller passes `len` bytes of UTF-8 at `addr` (the host copied them
// from a `&str`), alive and unchanged while the kernel runs; an empty one reads nothing.
unsafe impl<'a> Param for &'a str {
    type Raw = RawSlice<str>;

    #[inline(always)]
    unsafe fn from_raw(raw: RawSlice<str>) -> &'a str {
        if raw.len == 0 {
            return "";
        }
        // SAFETY: see the impl.
        unsafe { core::str::from_utf8_unchecked(core::slice::from_raw_parts(raw.addr as *const u8, raw.len as usize)) }
    }
}

// SAFETY: `from_raw`'s caller passes `len` elements at `addr`, aligned (the host copied
// them from a `&[T]` to an address aligned for `T`), alive and unchanged while the kernel
// runs; `T: Plain` makes any bytes there values.
unsafe impl<'a, T: Plain> Param for &'a [T] {
    type Raw = RawSlice<[T]>;

    #[inline(always)]
    unsafe fn from_raw(raw: RawSlice<[T]>) -> &'a [T] {
        if raw.len == 0 {
            return &[];
        }
        // SAFETY: see the impl.
        unsafe { core::slice::from_raw_parts(raw.addr as *const T, raw.len as usize) }
    }
}
