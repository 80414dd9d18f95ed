//! Why a table could not be opened, said with the file it is about.

use std::io;
use std::path::{Path, PathBuf};

use super::LONGEST_NAME;
use crate::core::exact::shared::layout::LayoutError;

/// Why a table could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The table's name cannot be a file name.
    Name(String),
    /// The file system said no.
    Io(PathBuf, io::Error),
    /// The file is not a table this process can use.
    Layout(PathBuf, LayoutError),
    /// The file, or the default folder, is another user's, or open to other users.
    NotOurs {
        path: PathBuf,
        /// What is wrong with it, in words.
        why: String,
    },
    /// A new table, or a table's copy, does not fit the file system of its folder.
    Space {
        /// What was being written: a new table, or a copy of one moved to this boot's clock.
        what: &'static str,
        /// The table's file, as it would have been named: the user finds the limiter's name
        /// in it, and so which limiter did not fit.
        table: PathBuf,
        folder: PathBuf,
        bytes: u64,
        free: Option<u64>,
        /// Whether a smaller `max_keys` makes the table smaller (a keyed table's), so the
        /// error may say so.
        max_keys: bool,
        error: io::Error,
    },
    /// A table of another boot that processes keep open, so it cannot be moved to this
    /// boot's clock.
    OtherBoot(PathBuf),
    /// The file was truncated while in use.
    Truncated {
        path: PathBuf,
        length: u64,
        expected: u64,
    },
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(name) => write!(
                f,
                "name={name:?} cannot name a table: use 1 to {LONGEST_NAME} letters, digits, \
                 '-', '_' or '.', not starting with '.'"
            ),
            Self::Io(path, error) => write!(f, "{}: {error}", path.display()),
            Self::Layout(path, error) => write!(f, "{} is refused: {error}", path.display()),
            Self::NotOurs { path, why } => write!(
                f,
                "{} is refused: {why}. A table is used only if this user made it and nobody else \
                 can read or write it; remove it if it is a stale one of this service's, or give \
                 path= a folder that only this user can write",
                path.display()
            ),
            Self::Space {
                what,
                table,
                folder,
                bytes,
                free,
                max_keys,
                error,
            } => {
                write!(
                    f,
                    "{}: {what} of {bytes} bytes does not fit in {} ({error}",
                    table.display(),
                    folder.display()
                )?;
                if let Some(free) = free {
                    write!(f, "; {free} bytes are free there")?;
                }
                write!(
                    f,
                    "). A container's /dev/shm is 64 MiB unless given more (docker run \
                     --shm-size); give path= a folder with room"
                )?;
                if *max_keys {
                    f.write_str(", or a smaller max_keys")?;
                }
                Ok(())
            }
            Self::OtherBoot(path) => write!(
                f,
                "{} holds times of another boot of this machine, and processes that cannot read \
                 the boot (no /proc) keep it open, so it cannot be moved to this boot's clock: \
                 stop them, or remove the file, then open it again",
                path.display()
            ),
            Self::Truncated {
                path,
                length,
                expected,
            } => write!(
                f,
                "{} was truncated to {length} bytes while in use, where the table is {expected} \
                 bytes: its keys are no longer all there (remove() it and open the limiter again \
                 for a new table)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for OpenError {}

pub(super) fn io_at(path: &Path) -> impl Fn(io::Error) -> OpenError + '_ {
    move |error| OpenError::Io(path.to_path_buf(), error)
}

pub(super) fn errno_at(path: &Path) -> impl Fn(rustix::io::Errno) -> OpenError + '_ {
    move |error| OpenError::Io(path.to_path_buf(), error.into())
}
