//! `tickbox tune sweep`'s word flags read into the sweep's types; each error names its flag and what it takes.

use crate::sweep::{DispatchMode, Objective, Pinning};

impl Pinning {
    /// `--pin`'s values.
    pub fn parse_flags(values: &[String]) -> Result<Vec<Pinning>, String> {
        values
            .iter()
            .map(|p| {
                Pinning::parse(p)
                    .ok_or_else(|| format!("--pin takes no, io and/or plan, not {p:?}"))
            })
            .collect()
    }
}

impl DispatchMode {
    /// `--dispatch`'s values.
    pub fn parse_flags(values: &[String]) -> Result<Vec<DispatchMode>, String> {
        values
            .iter()
            .map(|d| {
                DispatchMode::parse(d).ok_or_else(|| {
                    format!("--dispatch takes round_robin and/or by_topic, not {d:?}")
                })
            })
            .collect()
    }
}

impl Objective {
    /// `--objective`, checked even when `--no-latency` (no latency measured) makes the sweep rank by throughput.
    pub fn from_flags(name: &str, no_latency: bool) -> Result<Objective, String> {
        let objective = Objective::parse(name).ok_or_else(|| {
            format!("--objective takes balanced, throughput or latency, not {name:?}")
        })?;
        Ok(if no_latency {
            Objective::Throughput
        } else {
            objective
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pinnings_and_dispatch_modes_parse_and_a_wrong_word_names_its_flag() {
        assert_eq!(
            Pinning::parse_flags(&words(&["no", "yes", "plan"])).unwrap(),
            [Pinning::No, Pinning::Io, Pinning::Plan]
        );
        assert_eq!(
            Pinning::parse_flags(&words(&["io", "all"])).unwrap_err(),
            "--pin takes no, io and/or plan, not \"all\""
        );
        assert_eq!(
            DispatchMode::parse_flags(&words(&["by_topic"])).unwrap(),
            [DispatchMode::ByTopic]
        );
        let err = DispatchMode::parse_flags(&words(&["round-robin"])).unwrap_err();
        assert_eq!(
            err,
            "--dispatch takes round_robin and/or by_topic, not \"round-robin\""
        );
    }

    #[test]
    fn no_latency_ranks_by_throughput_but_a_bad_objective_is_still_an_error() {
        assert_eq!(
            Objective::from_flags("latency", false),
            Ok(Objective::Latency)
        );
        assert_eq!(
            Objective::from_flags("latency", true),
            Ok(Objective::Throughput)
        );
        assert!(Objective::from_flags("fast", true)
            .unwrap_err()
            .starts_with("--objective takes balanced, throughput or latency"));
    }
}
