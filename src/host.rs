//! What this host says about time (the boot it is in, and its monotonic clock) and chance (a
//! new table's seed).
//!
//! Times a limiter keeps are readings of the monotonic clock (`time.monotonic_ns`), which every
//! process of the host reads alike and which starts again at boot. So a saved limiter (a
//! pickle) and a shared table (a file) record the boot their times belong to, and carry them
//! over to this boot's clock when they are read in another. Both ask this module.

use std::sync::OnceLock;

/// This boot of this machine: Linux's random boot id, as it is written
/// (`/proc/sys/kernel/random/boot_id`). `None` where the platform has no such id.
pub fn boot_id() -> Option<&'static str> {
    static BOOT_ID: OnceLock<Option<String>> = OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|id| id.trim().to_owned())
                .filter(|id| !id.is_empty())
        })
        .as_deref()
}

/// [`boot_id`] as a number (its 32 hex digits), 0 where there is none.
#[must_use]
pub fn boot_number() -> u128 {
    boot_id()
        .and_then(|id| u128::from_str_radix(&id.replace('-', ""), 16).ok())
        .unwrap_or(0)
}

/// The monotonic clock behind `time.monotonic_ns`, in nanoseconds. (`std::time::Instant` reads
/// the same clock but never shows its value.)
#[cfg(unix)]
#[must_use]
pub fn monotonic_ns() -> i64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    now.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec)
}

/// A new shared table's seed, from the kernel's random source. Not std's `RandomState`: it
/// draws once per thread and then counts, so processes forked from one parent would seed
/// their tables alike, and a stacked decision orders a host's tables by their seeds.
#[cfg(unix)]
#[must_use]
pub fn fresh_seed() -> (u64, u64) {
    let mut bytes = [0_u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(count) => filled += count,
            Err(rustix::io::Errno::INTR) => {}
            // No random source at all (a kernel without getrandom): std's seed, as before.
            Err(_) => return crate::core::exact::keyed::random_seed(),
        }
    }
    let word = |at: usize| {
        let mut eight = [0_u8; 8];
        eight.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(eight)
    };
    (word(0), word(8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_is_one_for_the_process_and_the_clock_goes_forward() {
        assert_eq!(boot_id(), boot_id());
        if cfg!(target_os = "linux") {
            assert_ne!(boot_number(), 0);
        }
        let first = monotonic_ns();
        assert!(monotonic_ns() >= first);
    }

    #[test]
    fn every_seed_is_new() {
        assert_ne!(fresh_seed(), fresh_seed());
    }
}
