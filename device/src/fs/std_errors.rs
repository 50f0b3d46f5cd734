//! Device errors as std's: on host builds (the CPU backend, tests) each converts into a
//! `std::io::Error`. Here, beside the errors, and not in the protocol's `arch/host/`: the
//! protocol's modules import that one, and these impls name `fs`'s types (an import up).

extern crate std;

/// On host builds a device error is also a `std::io::Error`, so host code (a CPU-backend
/// kernel's helpers, tests) can `?` it where std's is expected.
///
/// ```
/// use gpuio_device::fs::File;
/// fn host_side() -> std::io::Result<()> {
///     let _f = File::open("data/in.bin")?; // outside a kernel: ENOSYS, with the path
///     Ok(())
/// }
/// let e = host_side().unwrap_err();
/// assert_eq!(e.raw_os_error(), None); // it carries the path, so it is a custom error...
/// assert_eq!(e.kind(), std::io::Error::from_raw_os_error(38).kind()); // ...of ENOSYS's kind
/// assert!(e.to_string().ends_with(": \"data/in.bin\""));
/// let e: std::io::Error = gpuio_device::io::Errno::ENOENT.into();
/// assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
/// let e: std::io::Error = gpuio_device::fs::Error::UnexpectedEof { done: 6 }.into();
/// assert_eq!((e.kind(), e.to_string()), (std::io::ErrorKind::UnexpectedEof, "end of file after 6 bytes".into()));
/// ```
impl From<crate::errno::Errno> for std::io::Error {
    fn from(e: crate::errno::Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// The errno's kind, and the path in its text (see `From<Errno>`).
impl From<crate::fs::PathError<'_>> for std::io::Error {
    fn from(e: crate::fs::PathError<'_>) -> std::io::Error {
        let kind = std::io::Error::from_raw_os_error(e.errno.0).kind();
        std::io::Error::new(kind, std::format!("{e}"))
    }
}

/// `UnexpectedEof` and `WriteZero` keep std's kinds; a failed request its errno's, with the
/// bytes done in the text when there were any.
impl From<crate::fs::Error> for std::io::Error {
    fn from(e: crate::fs::Error) -> std::io::Error {
        use crate::fs::Error;
        use std::io::ErrorKind;
        let kind = match e {
            Error::Os { errno, done: 0 } => return errno.into(),
            Error::Os { errno, .. } => std::io::Error::from_raw_os_error(errno.0).kind(),
            Error::UnexpectedEof { .. } => ErrorKind::UnexpectedEof,
            Error::WriteZero { .. } => ErrorKind::WriteZero,
            Error::Format => ErrorKind::Other,
        };
        std::io::Error::new(kind, std::format!("{e}"))
    }
}
