//! Small helpers every socket loop needs, kept here so the protocol crates do not each carry a copy: the
//! endpoint a socket actually bound (resolves `tcp://127.0.0.1:*` to the chosen port), the conversion of a
//! wait into the millisecond timeout `zmq::poll` takes, the reading of a socket monitor's event, a send without
//! waiting that calls a queue full only when it is, the share of a socket one pass of a loop takes, and the gate
//! of a warning a peer can trigger at will.

use std::time::{Duration, Instant};

/// The endpoint `socket` last bound or connected, as text. libzmq endpoints are ASCII, so a non-UTF-8 answer
/// cannot happen in practice; if it did, the bytes are kept lossily rather than failing a running server.
/// (The crate-root `last_endpoint` is the strict variant returning `ZmqxError`.)
pub fn last_endpoint(socket: &zmq::Socket) -> zmq::Result<String> {
    Ok(socket
        .get_last_endpoint()?
        .unwrap_or_else(|raw| String::from_utf8_lossy(&raw).into_owned()))
}

/// `wait` as a `zmq::poll` timeout in milliseconds, saturating at `i64::MAX` (a negative timeout would mean
/// "forever" to libzmq, so an overflow must never wrap).
pub fn poll_ms(wait: Duration) -> i64 {
    i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)
}

/// Milliseconds from `now` until `deadline` as a `zmq::poll` timeout; 0 once the deadline has passed.
pub fn poll_ms_until(deadline: Instant, now: Instant) -> i64 {
    poll_ms(deadline.saturating_duration_since(now))
}

/// A socket monitor's event as libzmq frames it: its first frame holds the event id (2 bytes) and its value
/// (4 bytes: a descriptor, a ZAP status code or an error number), little-endian; the second names the endpoint.
/// `None` for a first frame too short to be one.
pub fn monitor_event(frames: &[Vec<u8>]) -> Option<(zmq::SocketEvent, u32)> {
    let f = frames.first()?;
    let id = u16::from_le_bytes([*f.first()?, *f.get(1)?]);
    let value = f
        .get(2..6)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    Some((zmq::SocketEvent::from_raw(id), value))
}

/// Runs `send`, a send without waiting, and calls the peer's queue full (`Err(EAGAIN)`) only when it is full by
/// the peer's latest reads.
///
/// libzmq tells a socket how far its peer has read through commands, and a send applies pending commands at most
/// about once a millisecond. So a queue whose reader has caught up can still look full to a socket that keeps
/// sending, and with a small high-water mark a message that fits is refused (a 4-reply Freelance queue dropped a
/// well-behaved client's reply under load). On `EAGAIN` this applies every pending command, as `ZMQ_EVENTS`
/// does, and runs `send` once more. libzmq refuses a message only at its first frame, so `send` must be a whole
/// message or its first frame, which a refusal leaves unsent.
pub fn unless_stale_full<T>(
    socket: &zmq::Socket,
    mut send: impl FnMut() -> zmq::Result<T>,
) -> zmq::Result<T> {
    match send() {
        Err(zmq::Error::EAGAIN) => {
            socket.get_events()?;
            send()
        }
        other => other,
    }
}

/// `frames` as one message, without waiting; `Err(EAGAIN)` only when the peer's queue is really full
/// ([`unless_stale_full`]).
pub fn send_multipart_now(socket: &zmq::Socket, frames: &[Vec<u8>]) -> zmq::Result<()> {
    unless_stale_full(socket, || socket.send_multipart(frames, zmq::DONTWAIT))
}

/// What one pass of a socket loop takes from one socket before it runs its timers and sends what it owes: at
/// most 4,096 messages, and no more once it has taken 4 MiB. It always takes at least one.
///
/// A loop that reads a socket until it runs dry does nothing else while a peer sends faster than the loop reads:
/// its heartbeats, expiries, replies, counters and stop flag all wait, and whatever it owes others piles up in
/// memory. A Paranoid Pirate queue under a flood of requests from three clients declared its one live worker dead
/// (its heartbeats went unread for the 300 ms of its liveness) and lost the request that worker held; a Clone
/// server once held 4,096 updates of up to 1 MiB in one pass, seconds without HUGZ. Bounded passes work a backlog
/// off over many short passes, each of which does everything a pass does. The bytes bound keeps a pass of large
/// messages short; the count bound, one of small ones (4,096 takes a millisecond or two).
///
/// ```
/// # use tickbox_zmqx::socket::PassBudget;
/// let mut budget = PassBudget::per_socket();
/// let mut taken = 0;
/// while budget.has_room() {
///     // A socket that always has a 256 KiB message queued.
///     budget.take(256 << 10);
///     taken += 1;
/// }
/// assert_eq!(taken, 16);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassBudget {
    messages: usize,
    bytes: usize,
}

impl PassBudget {
    /// One socket's share of one pass.
    pub fn per_socket() -> Self {
        PassBudget {
            messages: 4096,
            bytes: 4 << 20,
        }
    }

    /// Whether the pass may take another message from the socket.
    #[inline]
    pub fn has_room(&self) -> bool {
        self.messages > 0 && self.bytes > 0
    }

    /// Counts a message of `len` bytes as taken.
    #[inline]
    pub fn take(&mut self, len: usize) {
        self.messages = self.messages.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(len);
    }

    /// Counts a message of these frames as taken.
    #[inline]
    pub fn take_frames(&mut self, frames: &[Vec<u8>]) {
        self.take(frames.iter().map(Vec::len).sum());
    }
}

/// The gate of a warning a peer can trigger at will (a malformed frame, a refused request): at most one line a
/// second, and each line says how many were held back since the last. What is held back is still counted where
/// the summary and `--json` read it; the gate only spares the log. It reads no clock, so a sans-IO engine can use it
/// with the time they are given.
#[derive(Debug, Clone, Default)]
pub struct WarnGate {
    next: Option<Instant>,
    held_back: u64,
}

impl WarnGate {
    /// How long after a line the next one may be written.
    pub const EVERY: Duration = Duration::from_secs(1);

    /// A gate that lets the first line through.
    pub const fn new() -> Self {
        WarnGate {
            next: None,
            held_back: 0,
        }
    }

    /// `Some(lines held back since the last one)` when a line may be written at `now`; `None` (and one more held
    /// back) when not.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        if self.next.is_some_and(|next| now < next) {
            self.held_back += 1;
            return None;
        }
        self.next = Some(now + Self::EVERY);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_gate_lets_one_line_a_second_through_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut gate = WarnGate::new();
        assert_eq!(gate.allow(t0), Some(0), "the first line goes");
        for ms in [1, 500, 999] {
            assert_eq!(gate.allow(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(
            gate.allow(t0 + Duration::from_secs(1)),
            Some(3),
            "the next line says how many were held back"
        );
        assert_eq!(gate.allow(t0 + Duration::from_millis(1500)), None);
        assert_eq!(gate.allow(t0 + Duration::from_secs(5)), Some(1));
    }

    /// How many messages of `len` bytes one pass takes from a socket that has more than enough queued.
    fn taken_in_one_pass(len: usize) -> usize {
        let mut budget = PassBudget::per_socket();
        let mut taken = 0;
        while budget.has_room() {
            budget.take(len);
            taken += 1;
        }
        taken
    }

    #[test]
    fn a_pass_stops_at_its_bytes_for_large_messages_and_at_its_count_for_small_ones() {
        assert_eq!(
            taken_in_one_pass(256 << 10),
            16,
            "4 MiB of 256 KiB messages"
        );
        assert_eq!(taken_in_one_pass(1 << 20), 4, "4 MiB of 1 MiB messages");
        assert_eq!(
            taken_in_one_pass(100),
            4096,
            "small messages stop at the count"
        );
        assert_eq!(taken_in_one_pass(0), 4096, "empty messages too");
        // A message larger than a pass's bytes is still taken, alone: a pass always makes progress.
        assert_eq!(taken_in_one_pass(8 << 20), 1);
        let mut budget = PassBudget::per_socket();
        budget.take_frames(&[vec![0; 3 << 20], vec![0; 1 << 20]]);
        assert!(!budget.has_room(), "a message's frames count together");
    }

    #[test]
    fn poll_timeouts_saturate_and_never_go_negative() {
        assert_eq!(poll_ms(Duration::from_millis(250)), 250);
        assert_eq!(poll_ms(Duration::from_micros(999)), 0);
        assert_eq!(poll_ms(Duration::MAX), i64::MAX);
        let now = Instant::now();
        assert_eq!(poll_ms_until(now, now + Duration::from_secs(1)), 0);
        assert_eq!(poll_ms_until(now + Duration::from_millis(40), now), 40);
    }

    #[test]
    fn monitor_events_are_read_from_their_first_frame() {
        let mut first = (zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as u16)
            .to_le_bytes()
            .to_vec();
        first.extend(400u32.to_le_bytes());
        let frames = vec![first, b"tcp://127.0.0.1:5556".to_vec()];
        assert_eq!(
            monitor_event(&frames),
            Some((zmq::SocketEvent::HANDSHAKE_FAILED_AUTH, 400))
        );
        // An id without a value reads as 0; less than an id is no event.
        let bare = vec![(zmq::SocketEvent::ACCEPTED as u16).to_le_bytes().to_vec()];
        assert_eq!(monitor_event(&bare), Some((zmq::SocketEvent::ACCEPTED, 0)));
        assert_eq!(monitor_event(&[vec![1]]), None);
        assert_eq!(monitor_event(&[]), None);
    }

    #[test]
    fn a_queue_its_reader_has_drained_is_never_called_full() {
        const HWM: i32 = 4;
        let ctx = zmq::Context::new();
        let router = ctx.socket(zmq::ROUTER).unwrap();
        router.set_linger(0).unwrap();
        router.set_router_mandatory(true).unwrap();
        router.set_sndhwm(HWM).unwrap();
        router.bind("tcp://127.0.0.1:*").unwrap();
        let peer = ctx.socket(zmq::DEALER).unwrap();
        peer.set_linger(0).unwrap();
        peer.set_identity(b"peer").unwrap();
        peer.connect(&last_endpoint(&router).unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while router.send_multipart([&b"peer"[..], b"hello"], 0).is_err() {
            assert!(Instant::now() < deadline, "the peer never connected");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The reader reports its progress every HWM / 2 messages, so the probe is made a pair.
        router.send_multipart([&b"peer"[..], b"hello"], 0).unwrap();
        for _ in 0..2 {
            assert!(peer.poll(zmq::POLLIN, 5_000).unwrap() > 0);
            peer.recv_bytes(0).unwrap();
        }
        // Each round fills the queue, lets the peer read all of it, and refills it at once: before the fix the
        // refill's first send still saw the queue full whenever it came within a millisecond of the last one.
        let frames = [b"peer".to_vec(), b"x".to_vec()];
        for round in 0..200 {
            for i in 0..HWM {
                send_multipart_now(&router, &frames)
                    .unwrap_or_else(|e| panic!("round {round}, reply {i} refused: {e}"));
            }
            for _ in 0..HWM {
                assert!(peer.poll(zmq::POLLIN, 5_000).unwrap() > 0);
                peer.recv_bytes(0).unwrap();
            }
        }
    }

    #[test]
    fn last_endpoint_resolves_the_wildcard_port() {
        let ctx = zmq::Context::new();
        let s = ctx.socket(zmq::ROUTER).unwrap();
        s.set_linger(0).unwrap();
        s.bind("tcp://127.0.0.1:*").unwrap();
        let ep = last_endpoint(&s).unwrap();
        assert!(
            ep.starts_with("tcp://127.0.0.1:") && !ep.ends_with(":*"),
            "{ep}"
        );
    }
}
