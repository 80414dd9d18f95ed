//! The host's secret: random bytes every process of this user on this host reads alike.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::error::io_at;
use super::names::{not_ours, PREFIX};
use super::{no_follow, open_existing, OpenError};
use crate::host;

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
