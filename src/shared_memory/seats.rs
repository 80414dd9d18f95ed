//! An in-flight table's file: found or made, checked and mapped, as a rate table's is, and the
//! owner slot its process holds.
//!
//! The file of the in-flight limit `name` is `protocol-in-code-qos.<name>.seats-<form>.v<layout>.seats`
//! (`form` is `one`, or `keys<max_keys>`), beside the rate tables, under the same rules of
//! folder, owner and mode (see the parent module). The limit is not in the name: it lives in the
//! file, where `resize` changes it for every process, so every process that opens the name uses
//! the file's limit (and the first to open it sets it). A rate table's grammar never reads
//! these names, so opening a rate limiter never removes an in-flight table.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::error::{io_at, OpenError};
use super::names::{checked_name, PREFIX};
use super::{found_or_made, mapped, new_file, no_follow, still_named, Mapped};
use crate::core::exact::shared::layout::LayoutError;
use crate::core::seats::shared::{Layout, SharedSeats, OWNERS, VERSION};
use crate::owner_lock;

/// The file of the in-flight table `name` of `max_keys` keys (`None`: one limit) in `folder`.
///
/// # Errors
///
/// If `name` cannot be a file name.
pub fn seats_path(folder: &Path, name: &str, max_keys: Option<u64>) -> Result<PathBuf, OpenError> {
    let name = checked_name(name)?;
    let form = max_keys.map_or_else(|| "one".to_owned(), |keys| format!("keys{keys}"));
    Ok(folder.join(format!("{PREFIX}{name}.seats-{form}.v{VERSION}.seats")))
}

/// An in-flight table, opened, and its file.
pub struct Opened {
    pub seats: SharedSeats<Mapped>,
    pub path: PathBuf,
}

/// Open the in-flight table `name` in `folder`, making it with `limit` seats if there is none.
///
/// # Errors
///
/// As for a rate table ([`OpenError`]); a limit of 0 (which the caller checks first) is a
/// [`OpenError::Layout`] of the draft.
pub fn open_seats(
    folder: &Path,
    name: &str,
    layout: Layout,
    max_keys: Option<u64>,
    limit: u64,
    seed: impl Fn() -> (u64, u64),
) -> Result<Opened, OpenError> {
    let path = seats_path(folder, name, max_keys)?;
    loop {
        let keyed = max_keys.is_some();
        let file = found_or_made(&path, || make(folder, &path, layout, keyed, limit, &seed))?;
        if !still_named(&path, &file)? {
            continue;
        }
        let seats = SharedSeats::open(mapped(&path, file)?, layout)
            .map_err(|error| OpenError::Layout(path.clone(), error))?;
        return Ok(Opened { seats, path });
    }
}

/// Make a new table of `limit` seats under a draft's name and link it at `path`; `None` if
/// another process linked one there first. (`keyed`: a table of a keyed limit, which a
/// smaller `max_keys` makes smaller.)
fn make(
    folder: &Path,
    path: &Path,
    layout: Layout,
    keyed: bool,
    limit: u64,
    seed: &impl Fn() -> (u64, u64),
) -> Result<Option<File>, OpenError> {
    let bytes = u64::try_from(layout.words() * 8).expect("a table's size fits 64 bits");
    let draft = path.with_extension(format!("{}.{:x}.draft", std::process::id(), seed().0));
    let words = new_file(folder, &draft, path, bytes, "an in-flight table", keyed)?;
    let made = (|| {
        let file = words.file.try_clone().map_err(io_at(&draft))?;
        SharedSeats::create(words, layout, limit, seed())
            .map_err(|_| OpenError::Layout(draft.clone(), LayoutError::Shape("limit", limit)))?;
        file.sync_data().map_err(io_at(&draft))?;
        match std::fs::hard_link(&draft, path) {
            Ok(()) => Ok(Some(file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(error) => Err(io_at(path)(error)),
        }
    })();
    let _ = std::fs::remove_file(&draft);
    made
}

/// An owner slot of an open table, held through a descriptor of its own (close-on-exec, as
/// every file Rust opens): given back, with anything the process still holds, when dropped.
pub struct Owner {
    pub slot: usize,
    file: File,
}

impl Owner {
    /// Take a free owner slot of `seats` (one whose byte nobody holds), reclaiming what a dead
    /// process left in it.
    ///
    /// # Errors
    ///
    /// If the file cannot be opened again, or every slot is held by a live process.
    pub fn claim(seats: &SharedSeats<Mapped>, path: &Path) -> Result<Self, OpenError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(no_follow())
            .open(path)
            .map_err(io_at(path))?;
        let (ours, mapped) = (
            file.metadata().map_err(io_at(path))?,
            seats.words().file.metadata().map_err(io_at(path))?,
        );
        if (ours.dev(), ours.ino()) != (mapped.dev(), mapped.ino()) {
            return Err(OpenError::Io(
                path.to_path_buf(),
                io::Error::other("the table's file was replaced while it was being opened"),
            ));
        }
        for slot in 0..OWNERS {
            if owner_lock::try_hold(&file, slot).map_err(io_at(path))? {
                seats.claim(slot);
                return Ok(Owner { slot, file });
            }
        }
        Err(OpenError::Io(
            path.to_path_buf(),
            io::Error::other(format!(
                "{OWNERS} processes have this in-flight table open already"
            )),
        ))
    }

    /// Reclaim what the processes that are gone left in `seats`: each owner slot in use but
    /// ours whose byte can be locked. Returns how many were gone.
    ///
    /// # Errors
    ///
    /// What `fcntl` says.
    pub fn reclaim_the_dead(&self, seats: &SharedSeats<Mapped>) -> io::Result<usize> {
        let mut gone = 0;
        for slot in seats.owners_in_use() {
            if slot != self.slot && owner_lock::try_hold(&self.file, slot)? {
                seats.reclaim(slot);
                owner_lock::let_go(&self.file, slot)?;
                gone += 1;
            }
        }
        Ok(gone)
    }

    /// Let go of the slot, giving back what the process still holds in it.
    pub fn let_go(self, seats: &SharedSeats<Mapped>) {
        seats.reclaim(self.slot);
        drop(self.file);
    }
}
