//! Plans: one keyed limit whose bands depend on the client's plan ("free", "pro").
//!
//! A plan is a name and a [`Config`]. Each plan keeps its own state per key, so a key's first
//! request under a plan starts from that plan's full burst, and back on an earlier plan it
//! finds its state as it left it: a change of plan never gives more than one new burst.
//!
//! Plans whose configurations are the same limit (the same canonical encoding, so the same
//! fingerprint) are kept as one: a shared or Redis store finds a table by its configuration's
//! fingerprint, so they would share state there anyway, and every store keeps them alike.
//!
//! What can be wrong with plans, or with the plan a call names, is a [`PlanError`]: each kind
//! says what was given and what to write instead.

use std::fmt;

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

    /// The index of the configuration a call decides on: 0, the only one, for a limit without
    /// plans (`names` is `None`), which must then be given no plan; else the named plan's, which
    /// must be one of `names`. `shown` spells the plan as given, for an error.
    ///
    /// # Errors
    ///
    /// A plan given without plans, missing with them, not a name, or not one of them.
    pub fn chosen(
        names: Option<&[(String, usize)]>,
        plan: Named<'_>,
        shown: impl FnOnce() -> String,
    ) -> Result<usize, PlanError> {
        let listed = || Self::listed(names.unwrap_or_default());
        match (names, plan) {
            (None, Named::Not) => Ok(0),
            (None, _) => Err(PlanError::NoPlans { shown: shown() }),
            (Some(_), Named::Not) => Err(PlanError::Missing { listed: listed() }),
            (Some(_), Named::Other) => Err(PlanError::NotAName {
                listed: listed(),
                shown: shown(),
            }),
            (Some(known), Named::Text(name)) => {
                Self::index_of(known, name).ok_or_else(|| PlanError::Unknown {
                    listed: listed(),
                    shown: shown(),
                })
            }
        }
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

/// How a call names its plan.
#[derive(Debug, Clone, Copy)]
pub enum Named<'a> {
    /// No plan given.
    Not,
    /// A name.
    Text(&'a str),
    /// Something that is no name (not text).
    Other,
}

/// Plans that cannot be, or a plan a call cannot decide on. `shown` is the value as given;
/// `listed` the limit's plans, as [`Plans::listed`] writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// Plans given with a limit of the limiter's own (the parameters named).
    Both { given: Vec<&'static str> },
    /// Plans naming no plan.
    Empty,
    /// A plan's name that is not a non-empty text.
    BadName { shown: String, kind: String },
    /// A plan named where the limiter has no plans.
    NoPlans { shown: String },
    /// No plan named where the limiter has plans.
    Missing { listed: String },
    /// A plan named by something that is not a name.
    NotAName { listed: String, shown: String },
    /// A name that is none of the limiter's plans.
    Unknown { listed: String, shown: String },
}

impl PlanError {
    /// Whether the error is in how the call is written (plans beside a rate, a plan missing,
    /// a plan that is no name), rather than in a value given (a plan that does not exist, plans
    /// that name none).
    #[must_use]
    pub fn is_in_the_call(&self) -> bool {
        !matches!(self, Self::Empty | Self::Unknown { .. })
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Both { given } => write!(
                f,
                "give plans or {}, not both: each plan's value is its rate or its bands, as in \
                 plans={{\"free\": \"100/hour\", \"pro\": [Band(\"10/second\", burst=20)]}}",
                given.join(", ")
            ),
            Self::Empty => f.write_str(
                "plans must name at least one plan, not {}: for one limit give rate or bands",
            ),
            Self::BadName { shown, kind } => {
                write!(
                    f,
                    "a plan's name must be a non-empty str, not {shown} ({kind})"
                )
            }
            Self::NoPlans { shown } => write!(
                f,
                "plan={shown} was given, but this limiter has no plans: give it \
                 plans={{name: rate or bands, ...}} to limit each key by its plan"
            ),
            Self::Missing { listed } => {
                write!(f, "plan= is required: this limiter's plans are {listed}")
            }
            Self::NotAName { listed, shown } => write!(
                f,
                "plan must be a str naming one of this limiter's plans ({listed}), not {shown}"
            ),
            Self::Unknown { listed, shown } => {
                write!(f, "unknown plan {shown}: this limiter's plans are {listed}")
            }
        }
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

    #[test]
    fn a_call_decides_on_its_named_plan_or_is_told_what_to_name() {
        let names = [("free".to_owned(), 0), ("pro".to_owned(), 1)];
        let shown = || "'gold'".to_owned();
        assert_eq!(Plans::chosen(None, Named::Not, shown), Ok(0));
        assert_eq!(
            Plans::chosen(Some(&names), Named::Text("pro"), shown),
            Ok(1)
        );
        let unknown = Plans::chosen(Some(&names), Named::Text("gold"), shown).unwrap_err();
        assert!(!unknown.is_in_the_call());
        assert_eq!(
            unknown.to_string(),
            "unknown plan 'gold': this limiter's plans are 'free', 'pro'"
        );
        let missing = Plans::chosen(Some(&names), Named::Not, shown).unwrap_err();
        assert!(missing.is_in_the_call());
        assert_eq!(
            missing.to_string(),
            "plan= is required: this limiter's plans are 'free', 'pro'"
        );
        let none = Plans::chosen(None, Named::Text("gold"), shown).unwrap_err();
        assert!(none.to_string().starts_with("plan='gold' was given, but"));
        let other = Plans::chosen(Some(&names), Named::Other, || "3".to_owned()).unwrap_err();
        assert!(other.is_in_the_call());
        assert!(other.to_string().ends_with("('free', 'pro'), not 3"));
    }
}
