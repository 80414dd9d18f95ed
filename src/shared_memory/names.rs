//! Where tables live: the default folder, this user's own, and the names of tables' files.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::error::io_at;
use super::OpenError;
use crate::core::exact::config::Config;
use crate::core::exact::shared::layout::VERSION;

/// The first part of every table's file name, and of the default folder's.
pub(super) const PREFIX: &str = "protocol-in-code-qos.";

/// The longest table name.
pub const LONGEST_NAME: usize = 100;

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
pub(super) fn not_ours(meta: &std::fs::Metadata) -> Option<String> {
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
pub(super) fn checked_name(name: &str) -> Result<&str, OpenError> {
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
pub(super) fn table_name_of(file: &str) -> Option<&str> {
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
