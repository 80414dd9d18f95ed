//! A shared table's file: found or made, checked, mapped, and tidied away when nobody uses it.
//!
//! This module has one `unsafe` block: the mapped bytes seen as atomic words. Everything else
//! about a table is [`core::exact::shared`](crate::core::exact::shared), which sees only
//! `&[AtomicU64]`.
//!
//! Beside this file, which finds, makes and maps a table's file: `names.rs` (the default folder
//! and the files' names), `secret.rs` (the host's secret, kept in that folder) and `error.rs`
//! (what went wrong, said with the file it is about).
//!
//! **Where.** A table named `name` lives in one file per configuration,
//! `protocol-in-code-qos.<name>.<form>.<fingerprint>.v<layout>.table`, in the folder the caller
//! gives (`path=`) or, by default, in a folder of this user's own:
//! `protocol-in-code-qos-<uid>` in `/dev/shm` where that exists (a folder in memory: the file
//! survives the processes, not a reboot), otherwise in the system's temporary folder. The
//! configuration's fingerprint, the form (`one`, or `keys<max_keys>`) and the layout's version
//! are in the name, so two workers of different limits under one name never share a file, and a
//! deploy that changes the limit, or upgrades to another layout, starts a fresh table.
//!
//! **Whose.** `/dev/shm` is writable by every user of the host, and file names are
//! predictable, so a table is only ever used if this user made it: the default folder is made
//! with mode 0700 and refused if it is anyone else's or open to others; every table's file is
//! made with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600, and on every open its owner and
//! mode are checked on the open descriptor. A file of another user, or one that others may
//! read or write, is refused with an error that names it, its owner and the fix ([`OpenError::NotOurs`]).
//!
//! **Making one.** A new table is written in a file of a name of its own, with its whole size
//! reserved on the file system first (`fallocate`): a table that does not fit is an error at
//! open that says the size ([`OpenError::Space`]), never a `SIGBUS` at a later write to a page
//! that a full `tmpfs` cannot give. It is then linked under the table's name in one step:
//! nobody ever opens a table that is half written. Two processes making the same table at once
//! both try to link; one wins, and the other opens the winner's.
//!
//! **Who uses it.** Every process that has a table open holds a shared `flock` on its file.
//! When a process opens a limiter's tables (one, or one per plan), it removes the files of the
//! same name, of other configurations, that nobody holds (an exclusive lock taken without
//! waiting tells), so one name leaves behind at most one file per configuration in use, and
//! nobody's live table is removed. The name of each file is read by its whole grammar, from
//! the right: `api` never takes the files of `api.keys` or `api.one` for its own. A process
//! that opens a file checks, once it holds its lock, that the name still leads to it; if it
//! was removed or replaced meanwhile, it opens again.
//!
//! **Bad files.** The size is checked against the header before any slot is read, and a file
//! that is not a table of this version is refused with an error that says what is wrong. A
//! live table's file truncated by its own user (nobody else can write it) cannot be seen by
//! a decision without a system call each time: accesses to whole pages past the new end raise
//! `SIGBUS` (the process ends), and slots in the page the new end falls in read as zeros, so
//! their keys look new. `len`, `stats` and the keys' listing check the size first
//! ([`Mapped::intact`]) and raise instead, and the next open refuses the file.
//!
//! **A reboot.** Times in a table are readings of the monotonic clock, which restarts at boot.
//! A table kept on disk across a reboot (`path=` a folder on disk) records the boot it was
//! written in; the first process to open it in a new boot writes a copy with every time moved
//! to the new clock, so each key keeps what it was owed, and renames the copy over the old
//! file. A process killed while copying leaves the old file as it was (and a draft that the
//! next opener removes), so carrying over is done whole or not at all, however often it is
//! cut short. Where the boot cannot be read (no `/proc`), a table is taken to be of this boot.

mod error;
mod names;
pub mod seats;
mod secret;

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Deref;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use memmap2::MmapRaw;
use rustix::fs::{flock, FallocateFlags, FlockOperation};

use crate::core::exact::config::Config;
use crate::core::exact::shared::layout::LayoutError;
use crate::core::exact::shared::Table;
use crate::host;

pub use error::OpenError;
use error::{errno_at, io_at};
pub use names::{default_folder, table_path, FOLDER_VARIABLE, LONGEST_NAME};
use names::{not_ours, table_name_of};
pub use secret::{host_secret, SECRET_BYTES};

/// A file's bytes, mapped, seen as 64-bit atomic words.
pub struct Mapped {
    map: MmapRaw,
    /// Held for the shared lock on it (released when the file is closed).
    file: File,
    path: PathBuf,
}

impl Deref for Mapped {
    type Target = [AtomicU64];

    fn deref(&self) -> &[AtomicU64] {
        let words = self.map.len() / 8;
        // SAFETY:
        // * The pointer is the start of a live mapping of `map.len()` bytes, owned by `self.map`
        //   and unmapped only when `self` is dropped, after every borrow of `self` ends.
        // * A mapping starts on a page boundary, so it is aligned for `AtomicU64`, and `words`
        //   whole words lie within it.
        // * `AtomicU64` has the size and alignment of `u64` and accepts any bit pattern, and is
        //   only ever read and written through atomic operations, here and in every other
        //   process mapping the file (all of them run this code), so concurrent access from
        //   other threads and processes is not a data race. The words of the buckets' locks
        //   are the C library's, touched only through its mutex calls (`process_mutex`).
        // * The file is never shrunk by this crate; a file truncated by another program under
        //   a live mapping raises SIGBUS on access to a page past its end (see the module's
        //   docs), which is not undefined behaviour but the process ending.
        #[allow(clippy::cast_ptr_alignment)] // a page boundary: see the second point above
        let start = self.map.as_ptr().cast::<AtomicU64>();
        unsafe { std::slice::from_raw_parts(start, words) }
    }
}

impl Mapped {
    /// Whether the file still holds every mapped byte: a table truncated while in use is an
    /// error here (see the module's docs), where a decision would read zeros or end the process.
    ///
    /// # Errors
    ///
    /// [`OpenError::Truncated`], or what `fstat` says.
    pub fn intact(&self) -> Result<(), OpenError> {
        let length = self.file.metadata().map_err(io_at(&self.path))?.len();
        let mapped = self.map.len() as u64;
        if length < mapped {
            return Err(OpenError::Truncated {
                path: self.path.clone(),
                length,
                expected: mapped,
            });
        }
        Ok(())
    }
}

/// Open the tables of one limiter named `name` in `folder`, making those there are not: one
/// per `(config, max_keys)` (one without plans, one per plan with them; `max_keys` `None` is the
/// one-key form). `seed` gives a new table's key seed. Then remove the files of `name` that
/// none of them is, and nobody holds.
///
/// # Errors
///
/// A bad name, a file the system will not let us open or make, a file that is not ours, or
/// not such a table (see [`OpenError`]).
pub fn open(
    folder: &Path,
    name: &str,
    tables: &[(&Config, Option<u64>)],
    seed: impl Fn() -> (u64, u64),
) -> Result<Vec<(Table<Mapped>, PathBuf)>, OpenError> {
    let opened = tables
        .iter()
        .map(|&(config, max_keys)| open_one(folder, name, config, max_keys, &seed))
        .collect::<Result<Vec<_>, _>>()?;
    let ours: Vec<&Path> = opened.iter().map(|(_, path)| path.as_path()).collect();
    remove_stale(folder, name, &ours);
    Ok(opened)
}

fn open_one(
    folder: &Path,
    name: &str,
    config: &Config,
    max_keys: Option<u64>,
    seed: &impl Fn() -> (u64, u64),
) -> Result<(Table<Mapped>, PathBuf), OpenError> {
    let path = table_path(folder, name, config, max_keys)?;
    let mut tries_to_move = 0;
    loop {
        let file = found_or_made(&path, || make(folder, &path, config, max_keys, seed))?;
        flock(&file, FlockOperation::LockShared).map_err(errno_at(&path))?;
        if !still_named(&path, &file)? {
            continue; // removed or replaced while we were opening it
        }
        let table = map(&path, file, config, max_keys)?;
        tries_to_move += 1;
        if let Some(table) = of_this_boot(table, folder, &path, tries_to_move)? {
            let meta = table.words().file.metadata().map_err(io_at(&path))?;
            let table = table.with_identity((meta.dev(), meta.ino()));
            return Ok((table, path));
        }
    }
}

/// `O_NOFOLLOW`: a table's name that is a symbolic link is refused, not followed.
#[allow(clippy::cast_possible_wrap)] // the flag's bits, as `open` takes them
fn no_follow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// `O_NONBLOCK`: opening a FIFO (which a table never is) does not wait for its other end.
#[allow(clippy::cast_possible_wrap)] // the flag's bits, as `open` takes them
fn non_blocking() -> i32 {
    rustix::fs::OFlags::NONBLOCK.bits() as i32
}

/// The table file at `path`, opened if it is there, else made by `make` (which gives `None`
/// when another process linked its table there first: that one is opened). A file that is not
/// a regular file of this user's is refused, checked before its lock is waited for: another
/// user's file is refused, not waited on.
fn found_or_made(
    path: &Path,
    mut make: impl FnMut() -> Result<Option<File>, OpenError>,
) -> Result<File, OpenError> {
    let file = loop {
        if let Some(file) = open_existing(path)? {
            break file;
        }
        if let Some(file) = make()? {
            break file;
        }
    };
    let meta = file.metadata().map_err(io_at(path))?;
    let path = path.to_owned();
    if let Some(why) = not_ours(&meta) {
        return Err(OpenError::NotOurs { path, why });
    }
    if !meta.is_file() {
        let why = "it is not a regular file".into();
        return Err(OpenError::NotOurs { path, why });
    }
    Ok(file)
}

fn open_existing(path: &Path) -> Result<Option<File>, OpenError> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(no_follow() | non_blocking())
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(refused(path, error)),
    }
}

/// Why the file at `path` could not be opened: another user's file, or a symbolic link, said
/// so; anything else as the system said it.
fn refused(path: &Path, error: io::Error) -> OpenError {
    let denied = matches!(
        error.raw_os_error(),
        Some(libc::EACCES | libc::EPERM | libc::ELOOP)
    );
    match std::fs::symlink_metadata(path) {
        Ok(meta) if denied && meta.file_type().is_symlink() => OpenError::NotOurs {
            path: path.to_path_buf(),
            why: "it is a symbolic link".into(),
        },
        Ok(meta) if denied => match not_ours(&meta) {
            Some(why) => OpenError::NotOurs {
                path: path.to_path_buf(),
                why,
            },
            None => OpenError::Io(path.to_path_buf(), error),
        },
        _ => OpenError::Io(path.to_path_buf(), error),
    }
}

/// A new file of ours for a table of `bytes` bytes at `path` (a draft's name, never a table's):
/// made with `O_EXCL | O_NOFOLLOW` and mode 0600, locked shared (another process opening the
/// name removes the drafts nobody holds, never one being written), its whole size reserved.
/// If the folder has no room, the error names `what` is made, the `table` it is for, and
/// whether a smaller `max_keys` would make it smaller.
fn new_file(
    folder: &Path,
    path: &Path,
    table: &Path,
    bytes: u64,
    what: &'static str,
    max_keys: bool,
) -> Result<Mapped, OpenError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(no_follow())
        .open(path)
        .map_err(io_at(path))?;
    flock(&file, FlockOperation::LockShared).map_err(errno_at(path))?;
    reserve(&file, bytes).map_err(|error| {
        let _ = std::fs::remove_file(path);
        let no_room = matches!(
            error.raw_os_error(),
            Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
        );
        if !no_room {
            return OpenError::Io(path.to_path_buf(), error);
        }
        let free = rustix::fs::fstatvfs(&file)
            .ok()
            .map(|fs| fs.f_bavail.saturating_mul(fs.f_frsize));
        OpenError::Space {
            what,
            table: table.to_path_buf(),
            folder: folder.to_path_buf(),
            bytes,
            free,
            max_keys,
            error,
        }
    })?;
    mapped(path, file)
}

/// Give `file` its `bytes` bytes, every page allocated now: a page a full `tmpfs` cannot give
/// is this error, not a `SIGBUS` at the first write to it. File systems without `fallocate`
/// get a byte written in each page.
fn reserve(file: &File, bytes: u64) -> io::Result<()> {
    let mut reserved = rustix::fs::fallocate(file, FallocateFlags::empty(), 0, bytes);
    while reserved == Err(rustix::io::Errno::INTR) {
        reserved = rustix::fs::fallocate(file, FallocateFlags::empty(), 0, bytes);
    }
    match reserved {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
            file.set_len(bytes)?;
            (0..bytes)
                .step_by(4096)
                .try_for_each(|offset| file.write_all_at(&[0], offset))
        }
        Err(error) => Err(error.into()),
    }
}

/// A draft's name beside `path`: the table's, with this process and a random number, ending
/// `.new`.
fn draft_path(path: &Path, random: u64) -> PathBuf {
    path.with_extension(format!("{}.{random:x}.new", std::process::id()))
}

/// Make a new table in a file of its own and link it at `path`; `None` if another process
/// linked one there first (or removed the draft: then the caller tries again).
fn make(
    folder: &Path,
    path: &Path,
    config: &Config,
    max_keys: Option<u64>,
    seed: &impl Fn() -> (u64, u64),
) -> Result<Option<File>, OpenError> {
    let layout = Table::<Mapped>::layout(config, max_keys);
    let bytes = u64::try_from(layout.words() * 8).expect("a table's size fits 64 bits");
    let draft = draft_path(path, seed().0);
    let words = new_file(folder, &draft, path, bytes, "a table", max_keys.is_some())?;
    let made = (|| {
        let file = words.file.try_clone().map_err(io_at(&draft))?;
        Table::create(words, config, max_keys, seed(), host::boot_number())
            .map_err(|error| OpenError::Layout(draft.clone(), error))?;
        // Written through before it is named: on a disk, a table is whole after a power cut.
        file.sync_data().map_err(io_at(&draft))?;
        match std::fs::hard_link(&draft, path) {
            Ok(()) => Ok(Some(file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            // Our draft removed as stale in the instant between its making and its lock: make
            // another.
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_at(path)(error)),
        }
    })();
    let _ = std::fs::remove_file(&draft);
    made
}

/// Whether `path` still names `file` (it may have been removed, or replaced, meanwhile).
fn still_named(path: &Path, file: &File) -> Result<bool, OpenError> {
    let ours = file.metadata().map_err(io_at(path))?;
    Ok(match std::fs::symlink_metadata(path) {
        Ok(named) => named.ino() == ours.ino() && named.dev() == ours.dev(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => false,
        Err(error) => return Err(io_at(path)(error)),
    })
}

fn mapped(path: &Path, file: File) -> Result<Mapped, OpenError> {
    let length = file.metadata().map_err(io_at(path))?.len();
    if length % 8 != 0 || length < 8 {
        return Err(OpenError::Layout(
            path.to_path_buf(),
            LayoutError::Size {
                words: usize::try_from(length / 8).unwrap_or(usize::MAX),
                expected: None,
            },
        ));
    }
    let map = MmapRaw::map_raw(&file).map_err(io_at(path))?;
    Ok(Mapped {
        map,
        file,
        path: path.to_path_buf(),
    })
}

fn map(
    path: &Path,
    file: File,
    config: &Config,
    max_keys: Option<u64>,
) -> Result<Table<Mapped>, OpenError> {
    Table::open(mapped(path, file)?, config, max_keys)
        .map_err(|error| OpenError::Layout(path.to_path_buf(), error))
}

/// How many times (a millisecond apart) an opener waits for the others to let go of a table of
/// another boot before it gives up.
const TRIES_TO_MOVE: u32 = 1000;

/// `table` if its times are of this boot's clock, or else the copy of it that this process
/// moved to this clock and renamed into its place; `None` if another process holds the file
/// (the caller lets go of it, and opens the name again).
///
/// Only a process that holds the file alone (its exclusive lock, taken without waiting) moves
/// it. Others let go and look again, [`TRIES_TO_MOVE`] times, then give up with
/// [`OpenError::OtherBoot`]: a table of another boot that stays open is held by processes that
/// cannot read the boot (no `/proc`), and deciding on it as it is would decide at the old
/// boot's times.
fn of_this_boot(
    table: Table<Mapped>,
    folder: &Path,
    path: &Path,
    tries: u32,
) -> Result<Option<Table<Mapped>>, OpenError> {
    let boot = host::boot_number();
    if boot == 0 || table.boot() == 0 || table.boot() == boot {
        return Ok(Some(table));
    }
    match flock(
        &table.words().file,
        FlockOperation::NonBlockingLockExclusive,
    ) {
        Ok(()) if still_named(path, &table.words().file)? => {
            let by = table
                .latest()
                .map_or(0, |latest| host::monotonic_ns().saturating_sub(latest));
            let bytes = table.words().map.len() as u64;
            let draft = draft_path(path, host::fresh_seed().0);
            let what = "a copy of the table, its times moved to this boot's clock,";
            let words = new_file(folder, &draft, path, bytes, what, false)?;
            let copy = table
                .moved_into(words, by, boot)
                .map_err(|error| OpenError::Layout(draft.clone(), error))
                .and_then(|copy| {
                    copy.words().file.sync_data().map_err(io_at(&draft))?;
                    Ok(copy)
                });
            let moved = copy.and_then(|copy| match std::fs::rename(&draft, path) {
                Ok(()) => Ok(Some(copy)),
                // The draft taken for a stale one in the instant before its lock: again.
                Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(error) => Err(io_at(path)(error)),
            });
            if !matches!(moved, Ok(Some(_))) {
                let _ = std::fs::remove_file(&draft);
            }
            moved
        }
        Ok(()) => Ok(None), // removed or replaced meanwhile: open the name again
        Err(rustix::io::Errno::WOULDBLOCK) if tries < TRIES_TO_MOVE => {
            drop(table); // let go of it, so that a process that can move it does
            std::thread::sleep(Duration::from_millis(1));
            Ok(None)
        }
        Err(rustix::io::Errno::WOULDBLOCK) => Err(OpenError::OtherBoot(path.to_path_buf())),
        Err(error) => Err(errno_at(path)(error)),
    }
}

/// Remove the tables and drafts of `name` in `folder`, other than `ours`, that no process
/// holds. Best effort: whatever cannot be looked at is left.
fn remove_stale(folder: &Path, name: &str, ours: &[&Path]) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let of_name = path
            .file_name()
            .and_then(|file| file.to_str())
            .and_then(table_name_of);
        if of_name != Some(name) || ours.contains(&path.as_path()) {
            continue;
        }
        // Never blocking (a FIFO planted under such a name would wait for a writer for ever),
        // and only ever a regular file.
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(no_follow() | non_blocking())
            .open(&path)
        else {
            continue;
        };
        if file.metadata().is_ok_and(|meta| meta.is_file())
            && flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok()
            && still_named(&path, &file).unwrap_or(false)
        {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Remove the file of a table (for tests and tooling). Processes that have it open keep using
/// it until they open it again; the next process to open the name makes a new one.
///
/// # Errors
///
/// If the file cannot be removed (a missing file is not an error).
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        done => done,
    }
}

#[cfg(test)]
mod tests;
