//! `--broker EP` registers a component's `tickbox.<component>.status` Majordomo service; `tickbox call` reads it.

use crate::common;

use std::time::{Duration, Instant};

use common::{call_service, spawn_printing_endpoint};

#[test]
fn feed_serves_its_status_through_the_broker() {
    let (_broker, broker_ep) = spawn_printing_endpoint(&["broker", "--bind", "tcp://127.0.0.1:*"]);
    let (_feed, _feed_ep) = spawn_printing_endpoint(&[
        "feed",
        "--rate",
        "2000",
        "--duration",
        "15s",
        "--broker",
        &broker_ep,
    ]);
    // The worker registers asynchronously and the snapshot refreshes every 500 ms: poll, bounded.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = call_service(&broker_ep, "tickbox.feed.status", &[], 1000);
        if code == 0 && body.contains("\"last_sequence\"") && !body.contains("\"last_sequence\":0")
        {
            let status: serde_json::Value =
                serde_json::from_str(body.trim()).expect("status is JSON");
            assert_eq!(status["component"], "feed");
            assert!(
                status["shards"][0]["quotes"].as_u64().unwrap() > 0,
                "{body}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no usable status: exit {code}, body {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // An unknown service is answered at once by the broker's MMI: 404, exit 1, well inside one attempt's timeout.
    let asked = Instant::now();
    let (code, body) = call_service(&broker_ep, "tickbox.nothing.status", &[], 5000);
    assert_eq!((code, body.trim()), (1, "404"));
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "{:?}",
        asked.elapsed()
    );
}
