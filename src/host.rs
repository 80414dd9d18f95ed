//! What this host says about time: the boot it is in, and its monotonic clock.
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
}
