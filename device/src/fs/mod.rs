//! Files from device code: [`File`], opened with [`OpenOptions`] (like std's), closed when
//! dropped.
//!
//! ```
//! use gpuio_device::fs::{File, OpenOptions};
//! // In a kernel launched by a gpuio runtime whose sandbox allows file I/O.
//! fn kernel() -> Result<(), gpuio_device::fs::Error> {
//!     let f = OpenOptions::new().read(true).write(true).create(true).open("/tmp/gpuio-doc")?;
//!     f.write_all_at(b"0123456789", 0)?;
//!     let mut back = [0u8; 4];
//!     f.read_exact_at(&mut back, 3)?;
//!     assert_eq!(&back, b"3456");
//!     f.sync_all()?;
//!     Ok(()) // dropping `f` closes it
//! }
//! # assert!(kernel().is_err()); // outside a kernel there is no runtime: ENOSYS
//! ```
//!
//! Its parts: [`File`] (`file.rs`) with its [`OpenOptions`] (`open_options.rs`) and a
//! [`BufWriter`] to gather small writes (`buf_writer.rs`); the calls on paths, directories
//! among them (`dir.rs`); the errors, with the path asked for (`error.rs`), and on host
//! builds their conversions into `std::io::Error` (`std_errors.rs`).

mod buf_writer;
mod dir;
mod error;
mod file;
mod open_options;
// Host builds only: GPU builds have no std.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
mod std_errors;

pub use buf_writer::BufWriter;
pub use dir::{create_dir, create_dir_all, remove_dir, remove_file, rename};
pub use error::{Error, PathError};
pub use file::{File, SeekFrom, FORMAT_CHUNK};
pub use open_options::OpenOptions;

// `open(2)` flags (Linux; the same values on x86-64 and arm64).
/// `O_RDONLY`: open for reading only.
pub const O_RDONLY: i32 = 0;
/// `O_WRONLY`: open for writing only.
pub const O_WRONLY: i32 = 1;
/// `O_RDWR`: open for reading and writing.
pub const O_RDWR: i32 = 2;
/// `O_CREAT`: create the file if it does not exist.
pub const O_CREAT: i32 = 0o100;
/// `O_EXCL`: with `O_CREAT`, fail with `EEXIST` if the file exists.
pub const O_EXCL: i32 = 0o200;
/// `O_TRUNC`: truncate an existing regular file to 0 bytes.
pub const O_TRUNC: i32 = 0o1000;
/// `O_APPEND`: every write goes to the end of the file.
pub const O_APPEND: i32 = 0o2000;
/// `O_CLOEXEC`: close the descriptor on `execve(2)`.
pub const O_CLOEXEC: i32 = 0o2000000;
