//! Whether a process is alive, asked of the kernel: a byte of a file that the process locks
//! while it lives, and the kernel lets go of when it does not.
//!
//! An in-flight table must give back the seats of a process that died holding them (killed,
//! exited, or replaced by `exec`). Who is alive cannot be learnt from a process id: ids repeat
//! across PID namespaces (containers sharing `/dev/shm`), and `/proc` may be missing or hide
//! other users' processes. So each process that uses a table takes an owner slot, and locks
//! the slot's byte of the table's file with an *open file description* lock (`F_OFD_SETLK`).
//! Such a lock belongs to the open file, not to a process id: the kernel drops it when the last
//! descriptor of that open file is closed, which a process's death does, and `exec` too (the
//! file is opened close-on-exec). Another process that can lock the byte has proof that its
//! owner is gone, in any PID namespace, without `/proc`. The bytes lie far past the file's end
//! ([`BASE`]): a lock may cover bytes a file does not have, and these never touch a word.
//!
//! A child of `fork` shares its parent's open files, and so its locks: the glue closes the
//! child's copy in the child at once (see `python/seats/shared.rs`), so that a parent that
//! dies is seen dead while its child lives.
//!
//! Elsewhere than Linux, the lock is a classic `F_SETLK` lock, which belongs to the process:
//! it is dropped on death and `exec` too, but two users of one table in one process do not
//! exclude each other.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Where the owners' bytes start in a table's file: far past its end.
pub const BASE: u64 = 1 << 40;

#[cfg(target_os = "linux")]
const SET: libc::c_int = libc::F_OFD_SETLK;
#[cfg(not(target_os = "linux"))]
const SET: libc::c_int = libc::F_SETLK;

/// Set the lock of kind `kind` (write or unlock) on owner `owner`'s byte, without waiting:
/// false if another open file holds it.
fn set(file: &File, owner: usize, kind: libc::c_int) -> io::Result<bool> {
    let start = BASE + owner as u64;
    // SAFETY: `flock` is a plain C struct of integers, for which all zeros is a valid value
    // (and what `F_OFD_SETLK` requires of `l_pid`).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::c_short::try_from(kind).expect("a lock kind fits a short");
    lock.l_whence = libc::c_short::try_from(libc::SEEK_SET).expect("SEEK_SET fits a short");
    lock.l_start = libc::off_t::try_from(start).expect("the owners' bytes fit an offset");
    lock.l_len = 1;
    // SAFETY: the descriptor is open for the lifetime of `file`, and `lock` is a valid `flock`
    // that `fcntl` only reads for this command.
    let code = unsafe { libc::fcntl(file.as_raw_fd(), SET, &raw const lock) };
    if code == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(error),
    }
}

/// Lock owner `owner`'s byte through `file`: true if it was free (its owner, if any, is gone),
/// false if a live open file holds it. A file holding it already gets it again.
///
/// # Errors
///
/// What `fcntl` says, other than "held".
pub fn try_hold(file: &File, owner: usize) -> io::Result<bool> {
    set(file, owner, libc::F_WRLCK)
}

/// Let go of owner `owner`'s byte, held through `file`.
///
/// # Errors
///
/// What `fcntl` says.
pub fn let_go(file: &File, owner: usize) -> io::Result<()> {
    set(file, owner, libc::F_UNLCK).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_is_held_by_one_open_file_until_it_lets_go_or_closes() {
        let path = std::env::temp_dir().join(format!("owner-lock-{}", std::process::id()));
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .unwrap()
        };
        let (first, second) = (open(), open());
        assert!(try_hold(&first, 3).unwrap());
        assert!(
            !try_hold(&second, 3).unwrap(),
            "another open file is refused"
        );
        assert!(try_hold(&second, 4).unwrap(), "another byte is free");
        let_go(&first, 3).unwrap();
        assert!(try_hold(&second, 3).unwrap());
        drop(second);
        assert!(
            try_hold(&first, 3).unwrap(),
            "closing the file let go of its bytes"
        );
        let _ = std::fs::remove_file(&path);
    }
}
