//! One spelling for what several config sections and commands choose alike: the back-pressure strategy of a
//! publishing socket ([`BackPressure`], modelled on iceoryx2's `backpressure_strategy`) and the high-water marks
//! (`send_hwm`, `receive_hwm`). Older spellings still read, each with a deprecation warning naming the new one
//! ([`RENAMED_KEYS`], [`warn_renamed_keys`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a publisher does when a subscriber's queue is full (its high-water mark reached).
///
/// `block` is libzmq's `ZMQ_XPUB_NODROP`: the send waits (boundedly, so Ctrl-C is still seen) and the slowest
/// subscriber paces the publisher; nothing is lost. `drop` is a plain PUB's behaviour: the message is dropped
/// for that subscriber alone, who sees the loss as a gap; the others are unaffected.
///
/// Config spelling: `back_pressure = "block"` or `"drop"`. The older booleans (`no_drop = true`, `lossless =
/// true`: block) still read, as does `slow_subscriber`, with a deprecation warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackPressure {
    /// Wait for room (`ZMQ_XPUB_NODROP`): lossless, paced by the slowest subscriber.
    Block,
    /// Drop for the subscriber whose queue is full (a plain PUB).
    Drop,
}

impl BackPressure {
    /// `Block` for `true`: what the older boolean spellings (`no_drop`, `lossless`) meant.
    pub fn from_blocks(blocks: bool) -> Self {
        if blocks {
            BackPressure::Block
        } else {
            BackPressure::Drop
        }
    }

    /// Whether sends wait for room (the socket needs `ZMQ_XPUB_NODROP`).
    pub fn blocks(self) -> bool {
        self == BackPressure::Block
    }

    /// The spelling config and flags use.
    pub fn as_str(self) -> &'static str {
        match self {
            BackPressure::Block => "block",
            BackPressure::Drop => "drop",
        }
    }
}

impl fmt::Display for BackPressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackPressure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "block" => Ok(BackPressure::Block),
            "drop" => Ok(BackPressure::Drop),
            other => Err(format!("`{other}`: expected block or drop")),
        }
    }
}

impl<'de> Deserialize<'de> for BackPressure {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = BackPressure;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"block\" or \"drop\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BackPressure, E> {
                v.parse().map_err(E::custom)
            }
            // The older spellings were booleans meaning "block" (`no_drop = true`, `lossless = true`).
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<BackPressure, E> {
                Ok(BackPressure::from_blocks(v))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `#[serde(with = "tickbox_zmqx::naming::as_no_drop")]` for a [`BackPressure`] field that a file format stores
/// as the older boolean (`no_drop`: `true` for block), so files written before still read and files written now
/// still read elsewhere.
pub mod as_no_drop {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::BackPressure;

    /// Writes `Block` as `true`, `Drop` as `false`.
    pub fn serialize<S: Serializer>(back_pressure: &BackPressure, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(back_pressure.blocks())
    }

    /// Reads the boolean (or a `"block"`/`"drop"` spelling).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BackPressure, D::Error> {
        BackPressure::deserialize(d)
    }
}

/// A config key spelled another way before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenamedKey {
    /// The table holding it: dotted, `*` standing for any one name (`context.sockets.*`).
    pub table: &'static str,
    /// The old spelling, still read.
    pub old: &'static str,
    /// The spelling to write.
    pub new: &'static str,
}

const fn renamed(table: &'static str, old: &'static str, new: &'static str) -> RenamedKey {
    RenamedKey { table, old, new }
}

/// Every renamed key the config still reads (each type reads its old spelling through `#[serde(alias)]`).
pub const RENAMED_KEYS: &[RenamedKey] = &[
    renamed("feed", "sndhwm", "send_hwm"),
    renamed("feed", "no_drop", "back_pressure"),
    renamed("recorder", "rcvhwm", "receive_hwm"),
    renamed("recorder", "sndhwm", "send_hwm"),
    renamed("recorder", "lossless", "back_pressure"),
    renamed("subscriber", "rcv_hwm", "receive_hwm"),
    renamed("lvc", "slow_subscriber", "back_pressure"),
    renamed("context.sockets.*", "sndhwm", "send_hwm"),
    renamed("context.sockets.*", "rcvhwm", "receive_hwm"),
];

/// A renamed key found in a config document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenamedKeyUse {
    /// Where, dotted (`context.sockets.feed.sndhwm`).
    pub path: String,
    /// The spelling to write instead.
    pub new: &'static str,
}

/// The old spellings `doc` (a whole tickbox config) uses, in [`RENAMED_KEYS`] order.
pub fn renamed_keys_in(doc: &toml::Table) -> Vec<RenamedKeyUse> {
    let mut found = Vec::new();
    for key in RENAMED_KEYS {
        let mut tables: Vec<(String, &toml::Table)> = vec![(String::new(), doc)];
        for part in key.table.split('.') {
            let mut next = Vec::new();
            for (path, table) in tables {
                let children: Vec<(&String, &toml::Value)> = if part == "*" {
                    table.iter().collect()
                } else {
                    table.get_key_value(part).into_iter().collect()
                };
                for (name, value) in children {
                    if let Some(t) = value.as_table() {
                        next.push((format!("{path}{name}."), t));
                    }
                }
            }
            tables = next;
        }
        for (path, table) in tables {
            if table.contains_key(key.old) {
                found.push(RenamedKeyUse {
                    path: format!("{path}{}", key.old),
                    new: key.new,
                });
            }
        }
    }
    found
}

/// Parses `text` as TOML (quietly doing nothing if it is not: the typed parse reports that) and warns once per
/// old spelling it uses.
pub fn warn_renamed_keys(text: &str) -> Vec<RenamedKeyUse> {
    let Ok(doc) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let found = renamed_keys_in(&doc);
    for f in &found {
        tracing::warn!(
            "config key `{}` is deprecated: write `{}` (the old spelling still reads for now)",
            f.path,
            f.new
        );
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    struct Section {
        #[serde(alias = "no_drop")]
        back_pressure: BackPressure,
    }

    #[test]
    fn back_pressure_reads_its_spelling_and_the_old_booleans() {
        for (text, want) in [
            ("back_pressure = \"block\"", BackPressure::Block),
            ("back_pressure = \"drop\"", BackPressure::Drop),
            ("no_drop = true", BackPressure::Block),
            ("no_drop = false", BackPressure::Drop),
        ] {
            let s: Section = toml::from_str(text).unwrap();
            assert_eq!(s.back_pressure, want, "{text}");
        }
        assert!(toml::from_str::<Section>("back_pressure = \"lossy\"").is_err());
        let written = toml::to_string(&Section {
            back_pressure: BackPressure::Block,
        })
        .unwrap();
        assert_eq!(written.trim(), "back_pressure = \"block\"");
        assert_eq!("BLOCK".parse::<BackPressure>(), Ok(BackPressure::Block));
        assert!(BackPressure::from_blocks(true).blocks() && !BackPressure::Drop.blocks());
    }

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    struct Stored {
        #[serde(rename = "no_drop", with = "super::as_no_drop")]
        back_pressure: BackPressure,
    }

    #[test]
    fn a_format_that_stores_the_boolean_keeps_it() {
        for (back_pressure, text) in [
            (BackPressure::Block, "no_drop = true"),
            (BackPressure::Drop, "no_drop = false"),
        ] {
            let written = toml::to_string(&Stored { back_pressure }).unwrap();
            assert_eq!(written.trim(), text);
            assert_eq!(
                toml::from_str::<Stored>(text).unwrap().back_pressure,
                back_pressure
            );
        }
    }

    #[test]
    fn old_spellings_are_found_with_their_new_names() {
        let text = "[feed]\nsndhwm = 5\nsend_hwm = 6\n[subscriber]\nrcv_hwm = 1\n\
                    [context.sockets.feed]\nrcvhwm = 2\n[context.sockets.replay]\nsndhwm = 3\n[lvc]\nbind = \"x\"\n";
        let found = warn_renamed_keys(text);
        let got: Vec<(&str, &str)> = found.iter().map(|f| (f.path.as_str(), f.new)).collect();
        assert_eq!(
            got,
            [
                ("feed.sndhwm", "send_hwm"),
                ("subscriber.rcv_hwm", "receive_hwm"),
                ("context.sockets.replay.sndhwm", "send_hwm"),
                ("context.sockets.feed.rcvhwm", "receive_hwm"),
            ]
        );
        assert!(warn_renamed_keys("[feed]\nsend_hwm = 1\n").is_empty());
        assert!(warn_renamed_keys("not = [toml").is_empty());
    }
}
