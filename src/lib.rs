//! The "Protocol in Code" QoS track on a Rust core.
//!
//! Two rooms, one rule between them:
//!
//! * [`core`] is plain Rust: the lesson's arithmetic and the state that stores its answers. It knows
//!   nothing of Python and builds without PyO3 (`cargo test` runs it that way).
//! * `python` (behind the `python` cargo feature, which maturin turns on) adapts Python objects to
//!   the core and exports the `protocol_in_code._native` extension module. It holds no algorithm
//!   of its own: every decision it returns was made by a function in [`core`].

pub mod core;

// The glue's doc comments are also the Python docstrings that `help()` shows, where Markdown
// backticks around every Python name would only be noise.
#[cfg(feature = "python")]
#[allow(clippy::doc_markdown)]
mod python;
