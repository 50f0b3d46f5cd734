#![doc = include_str!("../README.md")]
//!
//! This crate re-exports the host runtime ([`Runtime`], [`Builder`], [`Error`], ...) and, as
//! [`device`], the device runtime with its print macros.
pub use gpuio_device as device;
pub use gpuio_host::*;
