//! A shared table's file: found or made, checked, mapped, and tidied away when nobody uses it.
//!
//! This module has one `unsafe` block: the mapped bytes seen as atomic words. Everything else
//! about a table is [`core::exact::shared`](crate::core::exact::shared), which sees only
//! `&[AtomicU64]`.
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

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Deref;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use memmap2::MmapRaw;
use rustix::fs::{flock, FallocateFlags, FlockOperation};

use crate::core::exact::config::Config;
use crate::core::exact::shared::layout::{LayoutError, VERSION};
use crate::core::exact::shared::Table;
use crate::host;

/// The first part of every table's file name, and of the default folder's.
const PREFIX: &str = "protocol-in-code-qos.";

/// The longest table name.
pub const LONGEST_NAME: usize = 100;

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
        folder: PathBuf,
        bytes: u64,
        free: Option<u64>,
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
                folder,
                bytes,
                free,
                error,
            } => {
                write!(
                    f,
                    "{}: {what} of {bytes} bytes does not fit ({error}",
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
                if *what == "a table" {
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

fn io_at(path: &Path) -> impl Fn(io::Error) -> OpenError + '_ {
    move |error| OpenError::Io(path.to_path_buf(), error)
}

fn errno_at(path: &Path) -> impl Fn(rustix::io::Errno) -> OpenError + '_ {
    move |error| OpenError::Io(path.to_path_buf(), error.into())
}

/// The environment variable that moves the default folder (a test suite's own, a deployment's
/// `/run/...`): every process that reads it opens its tables there.
pub const FOLDER_VARIABLE: &str = "PROTOCOL_IN_CODE_QOS_FOLDER";

/// The folder tables live in unless told: the folder [`FOLDER_VARIABLE`] names, if set, or else
/// `protocol-in-code-qos-<uid>`, this user's own, in `/dev/shm` if there is one, else in the
/// temporary folder; made with mode 0700 if missing, and checked either way.
///
/// # Errors
///
/// If it cannot be made, or is not this user's own folder closed to others
/// ([`OpenError::NotOurs`]).
pub fn default_folder() -> Result<PathBuf, OpenError> {
    let named = std::env::var_os(FOLDER_VARIABLE).filter(|named| !named.is_empty());
    let folder = named.map_or_else(
        || {
            let shm = Path::new("/dev/shm");
            let base = if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            };
            let uid = rustix::process::geteuid().as_raw();
            base.join(format!("{}{uid}", PREFIX.replace('.', "-")))
        },
        PathBuf::from,
    );
    match std::fs::DirBuilder::new().mode(0o700).create(&folder) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(OpenError::Io(folder, error)),
    }
    let meta = std::fs::symlink_metadata(&folder).map_err(io_at(&folder))?;
    if !meta.is_dir() {
        return Err(OpenError::NotOurs {
            path: folder,
            why: "it is not a folder (a symbolic link or a file is in its place)".into(),
        });
    }
    if let Some(why) = not_ours(&meta) {
        return Err(OpenError::NotOurs { path: folder, why });
    }
    Ok(folder)
}

/// What makes a file or folder of this metadata not this user's private one, if anything.
fn not_ours(meta: &std::fs::Metadata) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    if meta.uid() != me {
        Some(format!(
            "it is owned by uid {}, another user than this process's (uid {me})",
            meta.uid()
        ))
    } else if mode & 0o077 != 0 {
        Some(format!(
            "its mode is {mode:#o}, which lets other users in (a table's file is 0o600, its \
             folder 0o700)"
        ))
    } else {
        None
    }
}

/// Whether `name` may name a table.
fn checked_name(name: &str) -> Result<&str, OpenError> {
    let fits = (1..=LONGEST_NAME).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    if fits {
        Ok(name)
    } else {
        Err(OpenError::Name(name.to_owned()))
    }
}

/// The file of the table `name` of `config` and `max_keys` (`None`: the one-key form) in
/// `folder`.
///
/// # Errors
///
/// If `name` cannot be a file name.
pub fn table_path(
    folder: &Path,
    name: &str,
    config: &Config,
    max_keys: Option<u64>,
) -> Result<PathBuf, OpenError> {
    let name = checked_name(name)?;
    let form = max_keys.map_or_else(|| "one".to_owned(), |keys| format!("keys{keys}"));
    let fingerprint = config.fingerprint();
    Ok(folder.join(format!(
        "{PREFIX}{name}.{form}.{fingerprint:016x}.v{VERSION}.table"
    )))
}

/// The name of the table whose file, or draft of a file, is called `file`, read by the whole
/// grammar from the right (names may hold dots): `<name>.<form>.<16 hex digits>[.v<layout>]`
/// then `.table`, or then `.<pid>.<hex>.new` for a draft. `None` for any other file.
fn table_name_of(file: &str) -> Option<&str> {
    fn last(text: &str, fits: impl Fn(&str) -> bool) -> Option<&str> {
        let (rest, part) = text.rsplit_once('.')?;
        fits(part).then_some(rest)
    }
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    let hex = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_hexdigit());
    let rest = file.strip_prefix(PREFIX)?;
    let stem = match rest.strip_suffix(".table") {
        Some(stem) => stem,
        None => last(last(rest.strip_suffix(".new")?, hex)?, digits)?,
    };
    // Layouts before version 2 had no version in the name.
    let stem = last(stem, |part| part.strip_prefix('v').is_some_and(digits)).unwrap_or(stem);
    let stem = last(stem, |part| part.len() == 16 && hex(part))?;
    let name = last(stem, |form| {
        form == "one" || form.strip_prefix("keys").is_some_and(digits)
    })?;
    checked_name(name).ok()
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
        let file = match open_existing(&path)? {
            Some(file) => file,
            None => match make(folder, &path, config, max_keys, seed)? {
                Some(file) => file,
                None => continue, // another process linked its table first: open that
            },
        };
        // Checked before its lock is waited for: another user's file is refused, not waited on.
        let meta = file.metadata().map_err(io_at(&path))?;
        if let Some(why) = not_ours(&meta) {
            return Err(OpenError::NotOurs { path, why });
        }
        if !meta.is_file() {
            let why = "it is not a regular file".into();
            return Err(OpenError::NotOurs { path, why });
        }
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
fn new_file(
    folder: &Path,
    path: &Path,
    bytes: u64,
    what: &'static str,
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
            folder: folder.to_path_buf(),
            bytes,
            free,
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
    let words = new_file(folder, &draft, bytes, "a table")?;
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
            let words = new_file(folder, &draft, bytes, what)?;
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

/// How many bytes [`host_secret`] holds.
pub const SECRET_BYTES: usize = 32;

/// A secret that every process of this user on this host reads alike: [`SECRET_BYTES`] random
/// bytes in the file `protocol-in-code-qos.secret` of `folder`. The first caller makes it,
/// from the kernel's random source, in a draft of its own (mode 0600) that it links under the
/// secret's name in one step, so nobody reads half a secret; two callers making it at once
/// both try to link, and the loser reads the winner's. The file is checked as a table's is:
/// a regular file of this user that nobody else may read. It lasts as long as the folder:
/// in `/dev/shm`, until the host reboots.
///
/// # Errors
///
/// A file the system will not let us read or make, one that is not ours, or one that is not
/// a secret of [`SECRET_BYTES`] bytes (then it names the file to remove).
pub fn host_secret(folder: &Path) -> Result<[u8; SECRET_BYTES], OpenError> {
    let path = folder.join(format!("{PREFIX}secret"));
    loop {
        if let Some(file) = open_existing(&path)? {
            let meta = file.metadata().map_err(io_at(&path))?;
            let why = if meta.is_file() {
                not_ours(&meta)
            } else {
                Some("it is not a regular file".into())
            };
            if let Some(why) = why {
                return Err(OpenError::NotOurs { path, why });
            }
            let mut secret = [0_u8; SECRET_BYTES];
            if meta.len() != SECRET_BYTES as u64 || file.read_exact_at(&mut secret, 0).is_err() {
                let why = format!("it is not a secret of {SECRET_BYTES} bytes: remove it");
                return Err(OpenError::Io(
                    path,
                    io::Error::new(io::ErrorKind::InvalidData, why),
                ));
            }
            return Ok(secret);
        }
        let mut secret = [0_u8; SECRET_BYTES];
        for chunk in secret.chunks_mut(16) {
            let (high, low) = host::fresh_seed();
            chunk[..8].copy_from_slice(&high.to_le_bytes());
            chunk[8..].copy_from_slice(&low.to_le_bytes());
        }
        let draft = folder.join(format!(
            "{PREFIX}secret.{}.{:x}.new",
            std::process::id(),
            host::fresh_seed().0
        ));
        let linked = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(no_follow())
                .open(&draft)?;
            io::Write::write_all(&mut file, &secret)?;
            file.sync_data()?;
            match std::fs::hard_link(&draft, &path) {
                Ok(()) => Ok(true),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(error) => Err(error),
            }
        })();
        let _ = std::fs::remove_file(&draft);
        if linked.map_err(io_at(&path))? {
            return Ok(secret);
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
mod tests {
    use super::*;
    use crate::core::exact::config::{BandConfig, Ratio};
    use std::os::unix::fs::PermissionsExt;

    fn config(burst: u64) -> Config {
        let band = BandConfig::new(Ratio::new(10, 1).unwrap(), Some(burst), None).unwrap();
        Config::new(vec![band]).unwrap()
    }

    fn folder(test: &str) -> PathBuf {
        let folder = std::env::temp_dir().join(format!("qos-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).unwrap();
        folder
    }

    fn open_one(
        folder: &Path,
        name: &str,
        config: &Config,
        max_keys: Option<u64>,
    ) -> Result<(Table<Mapped>, PathBuf), OpenError> {
        open(folder, name, &[(config, max_keys)], || (1, 2)).map(|mut opened| opened.remove(0))
    }

    #[test]
    fn two_opens_share_one_table_and_the_file_is_private() {
        let folder = folder("share");
        let (first, path) = open_one(&folder, "api", &config(5), Some(10)).unwrap();
        let (second, _) = open_one(&folder, "api", &config(5), Some(10)).unwrap();
        let digest = first.digest(b"k");
        assert_eq!(second.digest(b"k"), digest);
        assert_eq!(first.identity(), second.identity(), "one file, one table");
        first.check(digest, 5, 0);
        assert_eq!(second.available(digest, 0), 0);
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn another_configuration_is_another_file_and_unused_ones_are_removed() {
        let folder = folder("deploy");
        let (old, old_path) = open_one(&folder, "api", &config(5), Some(10)).unwrap();
        let (_, new_path) = open_one(&folder, "api", &config(6), Some(10)).unwrap();
        assert_ne!(old_path, new_path);
        assert!(old_path.exists(), "a table in use is never removed");
        drop(old);
        let (_, again) = open_one(&folder, "api", &config(6), Some(10)).unwrap();
        assert_eq!(again, new_path);
        assert!(!old_path.exists(), "nobody held the old one");
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn the_tables_of_one_limiter_are_one_set_and_other_names_are_never_removed() {
        let folder = folder("set");
        let mut paths = Vec::new();
        for name in ["api.keys", "api.one", "api.keystone", "api.keys2"] {
            paths.push(open_one(&folder, name, &config(5), Some(10)).unwrap().1);
        }
        let plans = [(&config(5), Some(10)), (&config(6), Some(10))];
        let opened = open(&folder, "api", &plans, || (1, 2)).unwrap();
        paths.extend(opened.into_iter().map(|(_, path)| path));
        // Nobody holds any of them now: opening the plans again, one set, removes none.
        let opened = open(&folder, "api", &plans, || (1, 2)).unwrap();
        assert_eq!(opened.len(), 2);
        for path in &paths {
            assert!(path.exists(), "{} was removed", path.display());
        }
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn a_file_name_is_read_by_its_whole_grammar() {
        let table = |name: &str| {
            let path = table_path(Path::new("/x"), name, &config(5), Some(10)).unwrap();
            path.file_name().unwrap().to_str().unwrap().to_owned()
        };
        for name in [
            "api",
            "api.keys",
            "api.one",
            "api.keys2.one",
            "v2",
            "a.0123456789abcdef",
        ] {
            assert_eq!(table_name_of(&table(name)), Some(name));
            let draft = draft_path(Path::new(&table(name)), 0xbeef);
            assert_eq!(table_name_of(draft.to_str().unwrap()), Some(name));
        }
        // The layout before version 2: no version in the name.
        let old = "protocol-in-code-qos.api.keys.one.0123456789abcdef.table";
        assert_eq!(table_name_of(old), Some("api.keys"));
        for other in [
            "protocol-in-code-qos.api.table",
            "protocol-in-code-qos.api.keysx.0123456789abcdef.table",
            "protocol-in-code-qos.api.one.0123.table",
            "something-else.api.one.0123456789abcdef.table",
        ] {
            assert_eq!(table_name_of(other), None, "{other}");
        }
    }

    #[test]
    fn a_file_open_to_others_or_a_link_is_refused_and_never_used() {
        let folder = folder("mode");
        let (table, path) = open_one(&folder, "t", &config(5), None).unwrap();
        drop(table);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = open_one(&folder, "t", &config(5), None).err().unwrap();
        assert!(matches!(error, OpenError::NotOurs { .. }), "{error}");
        assert!(error.to_string().contains("0o644"), "{error}");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/null", &path).unwrap();
        let error = open_one(&folder, "t", &config(5), None).err().unwrap();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn a_table_of_another_boot_is_replaced_by_a_whole_copy_on_this_boots_clock() {
        let folder = folder("boot");
        if host::boot_number() == 0 {
            return; // no boot to tell apart
        }
        let (table, path) = open_one(&folder, "t", &config(5), Some(10)).unwrap();
        let digest = table.digest(b"k");
        let far = host::monotonic_ns() + 1_000_000_000_000;
        table.check(digest, 5, far); // spent, a thousand seconds ahead of this clock
        let words = table.words();
        words[8].store(1, std::sync::atomic::Ordering::Relaxed); // "another boot"
        drop(table);
        let (moved, again) = open_one(&folder, "t", &config(5), Some(10)).unwrap();
        assert_eq!(again, path);
        assert_eq!(moved.boot(), host::boot_number());
        // Moved to this clock: still spent now, as it was at its last call.
        assert_eq!(moved.available(digest, host::monotonic_ns()), 0);
        let leftovers: Vec<_> = std::fs::read_dir(&folder).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "the copy replaced the old file");
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn bad_names_and_bad_files_are_refused() {
        let folder = folder("bad");
        for name in ["", ".hidden", "a/b", "a b", &"x".repeat(101)] {
            assert!(matches!(
                open_one(&folder, name, &config(5), None),
                Err(OpenError::Name(_))
            ));
        }
        let path = table_path(&folder, "t", &config(5), None).unwrap();
        for bytes in [vec![], vec![0; 7], vec![0; 64], b"QOSTABLE".repeat(40)] {
            std::fs::write(&path, bytes).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            let error = open_one(&folder, "t", &config(5), None).err().unwrap();
            assert!(matches!(error, OpenError::Layout(..)), "{error}");
        }
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn the_host_secret_is_made_once_read_alike_and_checked() {
        let folder = folder("secret");
        let first = host_secret(&folder).unwrap();
        assert_eq!(host_secret(&folder).unwrap(), first, "read alike");
        assert_ne!(first, [0; SECRET_BYTES]);
        let path = folder.join("protocol-in-code-qos.secret");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        let only_it = std::fs::read_dir(&folder).unwrap().count();
        assert_eq!(only_it, 1, "no draft left behind");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            host_secret(&folder),
            Err(OpenError::NotOurs { .. })
        ));
        std::fs::write(&path, b"short").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let error = host_secret(&folder).unwrap_err().to_string();
        assert!(error.contains("remove it"), "{error}");
        std::fs::remove_file(&path).unwrap();
        assert_ne!(
            host_secret(&folder).unwrap(),
            first,
            "a new secret once removed"
        );
    }
}
