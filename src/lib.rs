//! The "Protocol in Code" QoS track on a Rust core.
//!
//! Two rooms, one rule between them, and three small ones:
//!
//! * [`core`] is plain Rust: the lesson's arithmetic and the state that stores its answers. It knows
//!   nothing of Python and builds without PyO3 (`cargo test` runs it that way).
//! * `python` (behind the `python` cargo feature, which maturin turns on) adapts Python objects to
//!   the core and exports the `protocol_in_code._native` extension module. It holds no algorithm
//!   of its own: every decision it returns was made by a function in [`core`].
//! * `shared_memory` maps the file that a table shared by processes lives in, and hands the core
//!   its words; `process_mutex` is the lock each bucket of such a table holds, which the kernel
//!   frees when its holder dies; `owner_lock` is the byte of an in-flight table's file each
//!   process locks while it lives. They are the three places with `unsafe` (C library calls, and
//!   the mapped memory seen as words), which no safe form does; the rest of the crate, the glue
//!   included, denies it.

#![deny(unsafe_code)]

pub mod core;

// The host's boot and monotonic clock, which saved limiters and shared tables both ask.
pub mod host;

// A shared table's file, mapped: one `unsafe` block, in a room of its own.
#[cfg(unix)]
#[allow(unsafe_code)]
pub mod shared_memory;

// A lock in memory that processes share, freed by the kernel when its holder dies: the C
// library's robust mutex, through its calls, in a second room with `unsafe`.
#[cfg(unix)]
#[allow(unsafe_code)]
pub mod process_mutex;

// Which processes using an in-flight table are alive: a byte of its file locked by each, with
// the kernel's open-file-description locks, through `fcntl`, in a third room with `unsafe`.
#[cfg(unix)]
#[allow(unsafe_code)]
pub mod owner_lock;

// The glue's doc comments are also the Python docstrings that `help()` shows, where Markdown
// backticks around every Python name would only be noise.
#[cfg(feature = "python")]
#[allow(clippy::doc_markdown)]
mod python;
