//! A shared table's file: found or made, checked, mapped, and tidied away when nobody uses it.
//!
//! This is the crate's one module with `unsafe` in it (one block: the mapped bytes seen as
//! atomic words). Everything else about a table is [`core::exact::shared`](crate::core::exact::shared),
//! which sees only `&[AtomicU64]`.
//!
//! **Where.** A table named `name` lives in one file per configuration,
//! `protocol-in-code-qos.<name>.<form>.<fingerprint>.table`, in `/dev/shm` where that exists (a
//! folder in memory: the file survives the processes, not a reboot), otherwise in the system's
//! temporary folder, or in the folder the caller gives. The configuration's fingerprint and the
//! form (`one`, or `keys<max_keys>`) are in the name, so two workers of different limits under
//! one name never share a file, and a deploy that changes the limit starts a fresh table.
//!
//! **Making one.** A new table is written in a file of a name of its own (made with mode 0600,
//! so only its user can open it), then linked under the table's name in one step: nobody ever
//! opens a table that is half written. Two processes making the same table at once both try to
//! link; one wins, and the other opens the winner's.
//!
//! **Who uses it.** Every process that has a table open holds a shared `flock` on its file.
//! When a process opens a table, it removes the files of the same name and other
//! configurations that nobody holds (an exclusive lock taken without waiting tells), so one
//! name leaves behind at most one file per configuration in use, and nobody's live table is
//! removed. A process that opens a file checks, once it holds its lock, that the name still
//! leads to it; if it was removed meanwhile, it opens again.
//!
//! **Bad files.** The size is checked against the header before any slot is read, and a file
//! that is not a table of this version is refused with an error that says what is wrong. A
//! process of the same user that truncates a live table's file makes the processes using it
//! fail with `SIGBUS` on their next access, as for any mapped file: a table is for the
//! processes of one service, not a boundary against its own user.
//!
//! **A reboot.** Times in a table are readings of the monotonic clock, which restarts at boot.
//! A table kept on disk across a reboot (`path=` a folder on disk) records the boot it was
//! written in; the first process to open it in a new boot moves every time in it to the new
//! clock, so each key keeps what it was owed, as a saved limiter's restore does.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Deref;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use memmap2::MmapRaw;
use rustix::fs::{flock, FlockOperation};

use crate::core::exact::config::Config;
use crate::core::exact::shared::layout::LayoutError;
use crate::core::exact::shared::Table;
use crate::host;

/// The first part of every table's file name.
const PREFIX: &str = "protocol-in-code-qos.";

/// The longest table name.
pub const LONGEST_NAME: usize = 100;

/// A file's bytes, mapped, seen as 64-bit atomic words.
pub struct Mapped {
    map: MmapRaw,
    /// Held for the shared lock on it (released when the file is closed).
    file: File,
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
        //   other threads and processes is not a data race.
        // * The file is never shrunk by this crate; a file truncated by another program under
        //   a live mapping raises SIGBUS on access (see the module's docs), which is not
        //   undefined behaviour but the process ending.
        #[allow(clippy::cast_ptr_alignment)] // a page boundary: see the third point above
        let start = self.map.as_ptr().cast::<AtomicU64>();
        unsafe { std::slice::from_raw_parts(start, words) }
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
        }
    }
}

impl std::error::Error for OpenError {}

fn io_at(path: &Path) -> impl Fn(io::Error) -> OpenError + '_ {
    move |error| OpenError::Io(path.to_path_buf(), error)
}

/// The folder tables live in unless told: `/dev/shm` if there is one, else the temporary one.
#[must_use]
pub fn default_folder() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
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
    Ok(folder.join(format!("{PREFIX}{name}.{form}.{fingerprint:016x}.table")))
}

/// Open the table `name` of `config` in `folder`, making it if there is none; `max_keys`
/// `None` is the one-key form (one slot). `seed` gives a new table's key seed.
///
/// # Errors
///
/// A bad name, a file the system will not let us open or make, or a file that is not such a
/// table (see [`OpenError`]).
pub fn open(
    folder: &Path,
    name: &str,
    config: &Config,
    max_keys: Option<u64>,
    seed: impl Fn() -> (u64, u64),
) -> Result<(Table<Mapped>, PathBuf), OpenError> {
    let path = table_path(folder, name, config, max_keys)?;
    loop {
        let file = match open_existing(&path)? {
            Some(file) => file,
            None => match make(&path, config, max_keys, &seed)? {
                Some(file) => file,
                None => continue, // another process linked its table first: open that
            },
        };
        flock(&file, FlockOperation::LockShared).map_err(|e| io_at(&path)(e.into()))?;
        if !still_named(&path, &file)? {
            continue; // removed while we were opening it: nobody else will use it
        }
        let table = map(&path, file, config, max_keys)?;
        let table = re_anchored(table, &path)?;
        if !still_named(&path, &table.words().file)? {
            continue; // removed while re-anchoring held no lock on it: open it again
        }
        remove_stale(folder, name, &path);
        return Ok((table, path));
    }
}

/// `O_NOFOLLOW`: a table's name that is a symbolic link is refused, not followed.
#[allow(clippy::cast_possible_wrap)] // the flag's bits, as `open` takes them
fn no_follow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

fn open_existing(path: &Path) -> Result<Option<File>, OpenError> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(no_follow())
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(io_at(path)(error)),
    }
}

/// Make a new table in a file of its own and link it at `path`; `None` if another process
/// linked one there first (or removed the draft: then the caller tries again).
fn make(
    path: &Path,
    config: &Config,
    max_keys: Option<u64>,
    seed: &impl Fn() -> (u64, u64),
) -> Result<Option<File>, OpenError> {
    let layout = Table::<Mapped>::layout(config, max_keys);
    let bytes = u64::try_from(layout.words() * 8).expect("a table's size fits 64 bits");
    let draft = path.with_extension(format!("{}.{:x}.new", std::process::id(), seed().0));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&draft)
        .map_err(io_at(&draft))?;
    let made = (|| {
        // Held from the start, as on every table: another process opening this name removes
        // the drafts nobody holds (their makers are gone), never one still being made.
        flock(&file, FlockOperation::LockShared).map_err(|e| io_at(&draft)(e.into()))?;
        file.set_len(bytes).map_err(io_at(&draft))?;
        let words = mapped(&draft, file.try_clone().map_err(io_at(&draft))?)?;
        Table::create(words, config, max_keys, seed(), host::boot_number())
            .map_err(|error| OpenError::Layout(draft.clone(), error))?;
        match std::fs::hard_link(&draft, path) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            // Our draft removed as stale in the instant between its making and its lock: make
            // another.
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(io_at(path)(error)),
        }
    })();
    let _ = std::fs::remove_file(&draft);
    Ok(made?.then_some(file))
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
    Ok(Mapped { map, file })
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

/// `table`, its times moved to this boot's clock if it was written in another (see the
/// module's docs), under the file's exclusive lock so that nobody decides meanwhile.
fn re_anchored(table: Table<Mapped>, path: &Path) -> Result<Table<Mapped>, OpenError> {
    let boot = host::boot_number();
    if table.boot() == boot {
        return Ok(table);
    }
    let file = &table.words().file;
    let failed = |e: rustix::io::Errno| io_at(path)(e.into());
    // Not a blocking wait for the exclusive lock: the first process to move the clock keeps
    // the table open (its shared lock) for as long as it runs, and a process that had seen the
    // old boot would wait for it for ever. So: try, and while another holds the file, let go
    // of it entirely (so that the one that can move the clock does) and look again.
    while table.boot() != boot {
        match flock(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                if table.boot() != boot {
                    let by = table
                        .latest()
                        .map_or(0, |latest| host::monotonic_ns().saturating_sub(latest));
                    table.re_anchor(by, boot);
                }
                break;
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                flock(file, FlockOperation::Unlock).map_err(failed)?;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(error) => return Err(failed(error)),
        }
    }
    flock(file, FlockOperation::LockShared).map_err(failed)?;
    Ok(table)
}

/// Remove the tables of `name` in `folder`, other than `ours`, that no process holds, and
/// drafts whose maker is gone. Best effort: whatever cannot be looked at is left.
fn remove_stale(folder: &Path, name: &str, ours: &Path) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    let start = format!("{PREFIX}{name}.");
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let extension = path.extension().and_then(|e| e.to_str());
        let ends = matches!(extension, Some("table" | "new"));
        // Another name that shares this one's start ("api" and "api.v2") is not ours.
        let rest = file_name.strip_prefix(&start).unwrap_or("");
        let form = rest.split('.').next().unwrap_or("");
        let ours_by_name = form == "one" || form.starts_with("keys");
        if path == ours || !ends || !ours_by_name {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).open(&path) else {
            continue;
        };
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_ok()
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
mod tests {
    use super::*;
    use crate::core::exact::config::{BandConfig, Ratio};

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

    #[test]
    fn two_opens_share_one_table_and_the_file_is_private() {
        let folder = folder("share");
        let (first, path) = open(&folder, "api", &config(5), Some(10), || (1, 2)).unwrap();
        let (second, _) = open(&folder, "api", &config(5), Some(10), || (3, 4)).unwrap();
        let digest = first.digest(b"k");
        assert_eq!(second.digest(b"k"), digest);
        first.check(digest, 5, 0);
        assert_eq!(second.available(digest, 0), 0);
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn another_configuration_is_another_file_and_unused_ones_are_removed() {
        let folder = folder("deploy");
        let (old, old_path) = open(&folder, "api", &config(5), Some(10), || (1, 2)).unwrap();
        let (_, new_path) = open(&folder, "api", &config(6), Some(10), || (1, 2)).unwrap();
        assert_ne!(old_path, new_path);
        assert!(old_path.exists(), "a table in use is never removed");
        drop(old);
        let (_, again) = open(&folder, "api", &config(6), Some(10), || (1, 2)).unwrap();
        assert_eq!(again, new_path);
        assert!(!old_path.exists(), "nobody held the old one");
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn bad_names_and_bad_files_are_refused() {
        let folder = folder("bad");
        for name in ["", ".hidden", "a/b", "a b", &"x".repeat(101)] {
            assert!(matches!(
                open(&folder, name, &config(5), None, || (1, 2)),
                Err(OpenError::Name(_))
            ));
        }
        let path = table_path(&folder, "t", &config(5), None).unwrap();
        for bytes in [vec![], vec![0; 7], vec![0; 64], b"QOSTABLE".repeat(40)] {
            std::fs::write(&path, bytes).unwrap();
            let error = open(&folder, "t", &config(5), None, || (1, 2))
                .err()
                .unwrap();
            assert!(matches!(error, OpenError::Layout(..)), "{error}");
        }
        std::fs::remove_dir_all(folder).unwrap();
    }
}
