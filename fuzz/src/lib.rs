//! The fuzz cases, shared with the stable tests that run them without coverage guidance.

pub mod format_case;
