//! Kernel parameters as they travel from the host: what each parameter type of a
//! [`kernel!`](crate::kernel) is passed as ([`Param::Raw`]) and how the kernel gets its value
//! back ([`Param::from_raw`]).
//!
//! Numbers and raw pointers travel as themselves. A `&str` or a `&[T]` (of plain numbers)
//! travels as a [`RawSlice`]: the address of a copy the host's typed launch made in memory
//! the kernel can read, kept until the launch is synchronized, and its length.
//!
//! There is no `&mut [T]` parameter: every thread of a launch would hold the same `&mut`,
//! which Rust forbids (two live `&mut` to one slice). A kernel that writes results takes an
//! [`Out<T>`]: the host passes an `Output` it made with `Runtime::output` and reads it
//! once the kernel is done; the threads write its elements through `unsafe` methods whose
//! contract is CUDA's (no two threads write one element, or read one another writes,
//! without ordering). It travels as a `RawSlice<[Cell<T>]>`, so that no read-only slice of
//! the host's can be passed for it (its writes would be lost with the copy).

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
    note = "kernel parameters are numbers, bool, raw pointers, &str and &[T] of numbers, and Out<T> for results (not &mut [T]: every thread would hold the same &mut); a type of your own implements `gpuio_device::param::Param`"
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

/// A slice the threads of a kernel write their results into: the host passes an `Output`
/// it allocated (`gpuio_host::Runtime::output`) and reads it once the kernel is done.
///
/// Not a `&mut [T]`: every thread of the launch receives the same slice. Each thread writes
/// its own element, the one at its [`global_thread_idx`](crate::global_thread_idx), safely
/// with [`Out::write_own`]: no other thread of the launch has that index, and the host
/// passes an `Output` to no launch that may run beside another launch given it. Other
/// elements are written and read through `unsafe` methods whose contract is CUDA's: while
/// the kernel runs, no two threads write one element, and no thread reads an element another
/// writes, unless something orders them (a `sync_threads`, an atomic). Indices are checked
/// (a panic past the end).
///
/// Made by the kernel's entry from what the host's launch passed; made by hand
/// (`Param::from_raw`, `unsafe`), it must also keep `write_own`'s promise: no two threads
/// that may run at once and have the same [`global_thread_idx`](crate::global_thread_idx)
/// (outside a launch every host thread is thread 0) write through `Out`s over the same
/// memory.
///
/// ```
/// use core::cell::Cell;
/// use gpuio_device::param::{Out, Param, RawSlice};
/// let mut results = [0u32; 4];
/// // SAFETY: the array outlives `out` and nothing else touches it meanwhile.
/// let out: Out<u32> = unsafe { Out::from_raw(RawSlice::<[Cell<u32>]>::new(results.as_mut_ptr() as u64, 4)) };
/// for i in 0..out.len() {
///     // SAFETY: one writer per element.
///     unsafe { out.write(i, i as u32 * 10) };
/// }
/// assert_eq!(results, [0, 10, 20, 30]);
/// ```
pub struct Out<'a, T> {
    ptr: *mut T,
    len: usize,
    life: PhantomData<&'a [core::cell::Cell<T>]>,
}

impl<T> Clone for Out<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Out<'_, T> {}

impl<T: Plain> Out<'_, T> {
    /// Its number of elements.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's address, for code that writes through pointers itself.
    #[inline(always)]
    pub fn as_mut_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Writes `v` to this thread's own element, the one at its
    /// [`global_thread_idx`](crate::global_thread_idx); returns whether there is one (a
    /// thread past the end writes nothing), for launches with more threads than elements.
    ///
    /// ```
    /// use core::cell::Cell;
    /// use gpuio_device::param::{Out, Param, RawSlice};
    /// let mut results = [0u64; 2];
    /// // SAFETY: the array outlives `out`, and nothing else writes it meanwhile.
    /// let out: Out<u64> = unsafe { Out::from_raw(RawSlice::<[Cell<u64>]>::new(results.as_mut_ptr() as u64, 2)) };
    /// // Outside a launch the calling thread is thread 0.
    /// assert!(out.write_own(7));
    /// assert_eq!(results, [7, 0]);
    /// ```
    #[inline(always)]
    pub fn write_own(&self, v: T) -> bool {
        let i = crate::global_thread_idx();
        if i >= self.len as u64 {
            return false;
        }
        // SAFETY: in bounds (checked); the host's `Output` holds `len` aligned elements while
        // the kernel runs. No other thread writes element `i` meanwhile: no other thread of
        // this launch has index `i`, the host passes the `Output` to no launch that may run
        // beside another given it (`from_raw`'s contract), and a thread that writes `i`
        // through `write` breaks that method's own contract.
        unsafe { self.ptr.add(i as usize).write(v) };
        true
    }

    /// Writes `v` to element `i` (a panic if `i` is past the end, reported at the caller's
    /// line).
    ///
    /// # Safety
    /// While the kernel runs no other thread writes element `i`, or reads it, unless
    /// something orders the two accesses (see the type's docs).
    #[inline(always)]
    #[track_caller]
    pub unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len, "Out::write: index {i} past its {} elements", self.len);
        // SAFETY: in bounds (checked); the host's `Output` holds `len` aligned elements
        // while the kernel runs; the caller rules out racing accesses.
        unsafe { self.ptr.add(i).write(v) }
    }

    /// Reads element `i` (a panic if `i` is past the end, reported at the caller's line):
    /// what the host's `Output` held (zero for an element nothing wrote), or what a thread
    /// wrote.
    ///
    /// # Safety
    /// No other thread writes element `i` while this reads it, unless ordered before it.
    #[inline(always)]
    #[track_caller]
    pub unsafe fn read(&self, i: usize) -> T {
        assert!(i < self.len, "Out::read: index {i} past its {} elements", self.len);
        // SAFETY: as in `write`; `T: Plain` makes any bytes there a value.
        unsafe { self.ptr.add(i).read() }
    }
}

impl<T> fmt::Debug for Out<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Out {{ addr: {:p}, len: {} }}", self.ptr, self.len)
    }
}

// SAFETY: `from_raw`'s caller passes `len` elements at `addr`, aligned for `T` and
// writable, alive while the kernel runs (the host's `Output`), which no launch that may run
// at the same time writes (the host refuses an `Output` to a launch beside another given
// it: `write_own` counts on it); `T: Plain` makes any bytes there values. An empty one is
// never dereferenced (its accessors check the index).
unsafe impl<'a, T: Plain> Param for Out<'a, T> {
    type Raw = RawSlice<[core::cell::Cell<T>]>;

    #[inline(always)]
    unsafe fn from_raw(raw: RawSlice<[core::cell::Cell<T>]>) -> Out<'a, T> {
        let ptr = if raw.len == 0 {
            core::ptr::NonNull::<T>::dangling().as_ptr()
        } else {
            raw.addr as *mut T
        };
        Out {
            ptr,
            len: raw.len as usize,
            life: PhantomData,
        }
    }
}
