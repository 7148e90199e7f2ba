//! The Majordomo broker's socket loop: one ROUTER, polled until the stop flag, feeding the sans-IO
//! [`Broker`] and sending what it asks for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::engine::broker::{Broker, BrokerConfig, BrokerStats, OpenGate, RequestGate};
use crate::proto::Frames;
use crate::MdpError;
use tickbox_zmqx::socket::{last_endpoint, poll_ms_until, PassBudget};

/// Bind a ROUTER on `endpoint` and run the broker until `stop` is set. Returns the final statistics.
/// `bound` receives the resolved endpoint (useful with `tcp://127.0.0.1:*`).
/// The ROUTER comes from `auth_gate`, whose context's ZAP handler applies `[security]`.
pub fn run_broker(
    auth_gate: &tickbox_auth::Gate,
    endpoint: &str,
    cfg: BrokerConfig,
    stop: &AtomicBool,
    bound: Option<std::sync::mpsc::Sender<String>>,
) -> Result<BrokerStats, MdpError> {
    run_broker_gated(auth_gate, endpoint, cfg, stop, bound, &mut OpenGate)
}

fn is_client_request(frames: &Frames) -> bool {
    matches!(
        (
            frames.get(1).map(Vec::as_slice),
            frames.get(2).map(Vec::as_slice)
        ),
        (Some(b""), Some(crate::proto::MDPC01)) | (Some(crate::proto::MDPC02), _)
    )
}

/// Sends everything the broker has queued. The identity frame goes first on its own, so a peer that is gone
/// (EHOSTUNREACH under `ZMQ_ROUTER_MANDATORY`, reported before anything is sent) leaves the whole message in our
/// hands for [`Broker::handle_undeliverable`].
fn send_all(socket: &zmq::Socket, broker: &mut Broker) -> Result<(), MdpError> {
    while let Some(mut out) = broker.poll_output() {
        if out.len() < 2 {
            continue;
        }
        match socket.send(out[0].as_slice(), zmq::SNDMORE) {
            Ok(()) => {}
            Err(zmq::Error::EHOSTUNREACH) => {
                broker.handle_undeliverable(Instant::now(), out);
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        out.remove(0);
        socket.send_multipart(out, 0)?;
    }
    Ok(())
}

/// [`run_broker`] with a [`RequestGate`] deciding whether client requests are served.
pub fn run_broker_gated(
    auth_gate: &tickbox_auth::Gate,
    endpoint: &str,
    cfg: BrokerConfig,
    stop: &AtomicBool,
    bound: Option<std::sync::mpsc::Sender<String>>,
    gate: &mut dyn RequestGate,
) -> Result<BrokerStats, MdpError> {
    auth_gate.check_serves(&cfg.security)?;
    // CURVE and ZAP (role `broker`) when `[security]` asks.
    let mut socket = auth_gate.socket(zmq::ROUTER, "broker")?;
    // Requests and replies are multipart: ZMQ_TCP_MAXRT and a linger longer than it (BrokerConfig's
    // stalled_peer_timeout, docs/book/src/libzmq-traps.md), so closing can never hit libzmq's clean_pipes abort.
    tickbox_zmqx::prepare_multipart_sender(
        &mut socket,
        cfg.stalled_peer_timeout.0.max(Duration::from_millis(1)),
    )?;
    // Replies are never dropped by libzmq (sndhwm 0); inbound is bounded per peer so a flood waits in the
    // sender's TCP buffers rather than in ours.
    socket.set_sndhwm(0)?;
    // A message for a peer whose connection is gone fails with EHOSTUNREACH instead of vanishing: a REQUEST
    // for a worker that died goes back to its queue (`Broker::handle_undeliverable`) rather than being lost.
    socket.set_router_mandatory(true)?;
    socket.set_rcvhwm(cfg.receive_hwm.max(0))?;
    let max_msg = match cfg.max_message_size.0 {
        0 => -1,
        n => i64::try_from(n).unwrap_or(i64::MAX),
    };
    socket.set_maxmsgsize(max_msg)?;
    socket.bind(endpoint)?;
    let last = last_endpoint(&socket)?;
    tracing::info!(endpoint = %last, "majordomo broker listening");
    if let Some(tx) = bound {
        let _ = tx.send(last);
    }
    let cfg_security = cfg.security.clone();
    let live = cfg.live.clone();
    let mut broker = Broker::new(cfg, Instant::now());
    let mut dropped_by_gate = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut deadline = now + Duration::from_millis(100);
        for d in [broker.poll_timeout(), gate.poll_timeout()]
            .into_iter()
            .flatten()
        {
            deadline = deadline.min(d);
        }
        let timeout = poll_ms_until(deadline, now);
        // A signal (Ctrl-C, SIGTERM) interrupts the poll: that is a wake-up to check `stop`, not a failure.
        let ready = match socket.poll(zmq::POLLIN, timeout) {
            Err(zmq::Error::EINTR) => 0,
            other => other?,
        };
        if ready > 0 {
            // A burst is handled in one wake-up, up to a pass's share ([`PassBudget`]): under a flood the
            // heartbeats, expiries and the gate still run every pass.
            let mut budget = PassBudget::per_socket();
            while budget.has_room() {
                match tickbox_auth::recv_with_user(&socket, zmq::DONTWAIT) {
                    Ok((frames, user)) => {
                        budget.take_frames(&frames);
                        let now = Instant::now();
                        if is_client_request(&frames) && !gate.allow(now) {
                            dropped_by_gate += 1;
                            continue;
                        }
                        // Revocation reaches a live session per message: the key is checked against the allow
                        // set the ZAP loop last read (at most a second old).
                        if cfg_security.is_listed("broker", user.as_deref()) {
                            broker.handle_input_from(now, frames, user.as_deref());
                        } else {
                            broker.handle_revoked(now, frames, user.as_deref());
                        }
                    }
                    Err(zmq::Error::EAGAIN | zmq::Error::EINTR) => break,
                    Err(e) => return Err(e.into()),
                }
                send_all(&socket, &mut broker)?;
            }
        }
        let now = Instant::now();
        if !gate.service(now) {
            break;
        }
        broker.handle_timeout(now);
        send_all(&socket, &mut broker)?;
        live.publish(now, broker.stats());
    }
    live.publish_now(broker.stats());
    if dropped_by_gate > 0 {
        tracing::info!(dropped_by_gate, "requests dropped while not active");
    }
    Ok(broker.stats().clone())
}
