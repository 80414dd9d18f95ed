//! How large a keyed table may be: the most keys it holds and, in this process, the locks it
//! is split into. Checked here once, for either home, before a table is made.
//!
//! A table's memory is fixed by `max_keys` when it is made (it refuses new keys rather than
//! grow), so a size is worth checking with care: at least one key, no more than the home can
//! address, and no more shards than keys (a shard with no key to hold is a lock for nothing).

use std::fmt;

use crate::core::exact::shared::layout::MOST_KEYS;

/// `max_keys` unless given.
pub const DEFAULT_MAX_KEYS: u64 = 100_000;

/// The most shards a table in this process may have: far more locks than threads gains nothing.
pub const MAX_SHARDS: u64 = 65_536;

/// The most shards a table is split into by default: enough that threads on different keys
/// rarely meet. (The shards share one count of keys, so their number does not change when a
/// new key is refused.)
pub const DEFAULT_SHARDS: u64 = 16;

/// A table in this process: its most keys, and its shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InProcess {
    pub max_keys: usize,
    pub shards: usize,
}

/// A size no table can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeError {
    /// No key at all.
    NoKeys,
    /// Shards out of their range, 1 to the smaller of `max_keys` and [`MAX_SHARDS`].
    Shards { max_keys: u64, shards: u64 },
    /// More than this machine's memory can be indexed by.
    Unaddressable { param: &'static str, value: u64 },
    /// A shared table's `max_keys` beyond what its file's layout can number.
    SharedKeys { max_keys: u64 },
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoKeys => f.write_str("max_keys must be at least 1, not 0"),
            Self::Shards { max_keys, shards } => write!(
                f,
                "shards must be between 1 and max_keys ({max_keys}), at most {MAX_SHARDS}, not \
                 {shards}"
            ),
            Self::Unaddressable { param, value } => {
                write!(f, "{param}={value} is more than this machine can address")
            }
            Self::SharedKeys { max_keys } => {
                write!(f, "max_keys must be between 1 and 2**32, not {max_keys}")
            }
        }
    }
}

/// A table in this process of `max_keys` keys, split into `shards` locks (by default as many
/// as [`DEFAULT_SHARDS`], or as keys if fewer).
///
/// # Errors
///
/// A size out of range, or beyond what this machine can address.
pub fn in_process(max_keys: u64, shards: Option<u64>) -> Result<InProcess, SizeError> {
    if max_keys == 0 {
        return Err(SizeError::NoKeys);
    }
    let shards = shards.unwrap_or(DEFAULT_SHARDS.min(max_keys));
    if !(1..=max_keys.min(MAX_SHARDS)).contains(&shards) {
        return Err(SizeError::Shards { max_keys, shards });
    }
    let addressed = |param, value: u64| {
        usize::try_from(value).map_err(|_| SizeError::Unaddressable { param, value })
    };
    Ok(InProcess {
        max_keys: addressed("max_keys", max_keys)?,
        shards: addressed("shards", shards)?,
    })
}

/// A shared table of `max_keys` keys: at least 1, at most the layout's [`MOST_KEYS`].
///
/// # Errors
///
/// A `max_keys` out of that range.
pub fn shared(max_keys: u64) -> Result<u64, SizeError> {
    if (1..=MOST_KEYS).contains(&max_keys) {
        Ok(max_keys)
    } else {
        Err(SizeError::SharedKeys { max_keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_has_sixteen_shards_unless_it_holds_fewer_keys() {
        let size = |max_keys| in_process(max_keys, None).unwrap().shards;
        assert_eq!(size(100_000), 16);
        assert_eq!(size(3), 3);
        assert_eq!(
            in_process(10, Some(2)),
            Ok(InProcess {
                max_keys: 10,
                shards: 2
            })
        );
    }

    #[test]
    fn a_size_out_of_range_is_refused_saying_the_range() {
        assert_eq!(in_process(0, None), Err(SizeError::NoKeys));
        let too_many = in_process(10, Some(11)).unwrap_err();
        assert_eq!(
            too_many.to_string(),
            "shards must be between 1 and max_keys (10), at most 65536, not 11"
        );
        assert!(in_process(1 << 20, Some(MAX_SHARDS + 1)).is_err());
        assert!(in_process(10, Some(0)).is_err());
        assert_eq!(shared(MOST_KEYS), Ok(MOST_KEYS));
        assert_eq!(
            shared(0).unwrap_err().to_string(),
            "max_keys must be between 1 and 2**32, not 0"
        );
        assert!(shared(MOST_KEYS + 1).is_err());
    }
}
