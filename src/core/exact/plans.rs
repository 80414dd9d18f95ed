//! Plans: one keyed limit whose bands depend on the client's plan ("free", "pro").
//!
//! A plan is a name and a [`Config`]. Each plan keeps its own state per key, so a key's first
//! request under a plan starts from that plan's full burst, and back on an earlier plan it
//! finds its state as it left it: a change of plan never gives more than one new burst.
//!
//! Plans whose configurations are the same limit (the same canonical encoding, so the same
//! fingerprint) are kept as one: a shared or Redis store finds a table by its configuration's
//! fingerprint, so they would share state there anyway, and every store keeps them alike.

use crate::core::exact::config::Config;

/// The plans of one limit: each name with the index of its configuration in `configs`, and the
/// distinct configurations, in the order first named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plans {
    pub names: Vec<(String, usize)>,
    pub configs: Vec<Config>,
}

impl Plans {
    /// The plans `named`, in order; plans of the same configuration share it.
    #[must_use]
    pub fn new(plans: impl IntoIterator<Item = (String, Config)>) -> Self {
        let mut names = Vec::new();
        let mut configs: Vec<Config> = Vec::new();
        for (name, config) in plans {
            let encoded = config.encode();
            let index = configs
                .iter()
                .position(|known| known.encode() == encoded)
                .unwrap_or_else(|| {
                    configs.push(config);
                    configs.len() - 1
                });
            names.push((name, index));
        }
        Self { names, configs }
    }

    /// The index of the configuration of the plan `name`, if there is such a plan.
    #[must_use]
    pub fn index_of(names: &[(String, usize)], name: &str) -> Option<usize> {
        names
            .iter()
            .find(|(known, _)| known == name)
            .map(|&(_, index)| index)
    }

    /// The names, as a message lists them: `'free', 'pro'`.
    #[must_use]
    pub fn listed(names: &[(String, usize)]) -> String {
        names
            .iter()
            .map(|(name, _)| format!("'{name}'"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::exact::config::{BandConfig, Ratio};

    fn config(rate: u64, burst: u64) -> Config {
        let band = BandConfig::new(Ratio::new(rate, 1).unwrap(), Some(burst), None).unwrap();
        Config::new(vec![band]).unwrap()
    }

    #[test]
    fn plans_of_one_limit_share_its_configuration_and_are_found_by_name() {
        let plans = Plans::new([
            ("free".to_owned(), config(1, 2)),
            ("pro".to_owned(), config(10, 20)),
            ("trial".to_owned(), config(1, 2)),
        ]);
        assert_eq!(plans.configs, vec![config(1, 2), config(10, 20)]);
        assert_eq!(Plans::index_of(&plans.names, "trial"), Some(0));
        assert_eq!(Plans::index_of(&plans.names, "pro"), Some(1));
        assert_eq!(Plans::index_of(&plans.names, "gold"), None);
        assert_eq!(Plans::listed(&plans.names), "'free', 'pro', 'trial'");
    }
}
