//! The data-plane half of `[security.publishers]`: whether the key that sent a frame may publish every publisher
//! id the frame claims. Sans-IO: the proxy hands in the frame and the sender's key; the verdict decides whether the
//! frame is cached, tapped and forwarded, or refused and counted.

use tickbox_auth::Grants;
use tickbox_wire::MessageRef;

/// Whether `sender` may send `frame`. A sender that is no listed publisher key is refused whatever the frame
/// says; a listed one is refused when any record claims a publisher id not bound to it. A frame that cannot be
/// decoded carries no claim and is left to the engine, which counts it as malformed.
pub(crate) fn may_send(grants: &Grants, sender: Option<&str>, frame: &[u8]) -> bool {
    let Some(ids) = sender.and_then(|s| grants.publishers.get(s)) else {
        return false;
    };
    let claims = |record: &[u8]| {
        MessageRef::decode(record).map_or(true, |m| ids.contains(&m.header().publisher_id))
    };
    if tickbox_wire::is_batch(frame) {
        match tickbox_wire::batch_records(frame) {
            Ok(records) => records.map_while(Result::ok).all(claims),
            Err(_) => true,
        }
    } else {
        claims(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use tickbox_wire::{encode_to_vec, Header, Kind, Quote};

    fn quote(publisher: u32) -> Vec<u8> {
        let header = Header::live(Kind::Quote, publisher, 1, 1);
        encode_to_vec("Q.XNAS.AAPL", &header, &Quote::default().into()).unwrap()
    }

    #[test]
    fn only_ids_bound_to_the_sender_pass() {
        let grants = Grants {
            publishers: BTreeMap::from([("feed".to_string(), BTreeSet::from([1]))]),
            ..Grants::default()
        };
        assert!(may_send(&grants, Some("feed"), &quote(1)));
        assert!(
            !may_send(&grants, Some("feed"), &quote(2)),
            "an id bound to nobody"
        );
        assert!(
            !may_send(&grants, Some("stranger"), &quote(1)),
            "a key that is no publisher"
        );
        assert!(
            !may_send(&grants, None, &quote(1)),
            "an unauthenticated sender"
        );
        assert!(
            may_send(&grants, Some("feed"), b"garbage"),
            "left to the engine's malformed count"
        );
        assert!(!may_send(&grants, None, b"garbage"));
    }
}
