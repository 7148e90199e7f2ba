//! The asker's side of the history service (`subscribe --catch-up`): a DEALER that sends one request, reads
//! batches without waiting, grants a credit for each batch it has consumed, and reports how the history ended.
//! The owner polls it between its own work (a subscriber shard between live bursts), so it never blocks.

use std::time::{Duration, Instant};

use serde::Serialize;
use tickbox_auth::Security;

use tickbox_wire::history::{AskerMessage, HistoryRequest, Refusal, ServiceMessage, SessionEnd};

/// Why the asker's side of a history failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryClientError {
    /// A socket call failed.
    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// The history service's endpoint could not be connected to.
    #[error("{endpoint}: {source}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// libzmq's error.
        #[source]
        source: zmq::Error,
    },
    /// `[security]` could not be applied to the socket.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
}

/// How a history ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum HistoryOutcome {
    /// Complete up to the journal's head: each session's last sequence sent.
    Complete {
        /// Per publisher session, the last sequence sent.
        sessions: Vec<SessionEnd>,
    },
    /// The service refused.
    Refused {
        /// Why.
        refusal: Refusal,
    },
    /// Nothing arrived for the timeout.
    TimedOut,
}

/// One history request in flight (see the module docs).
pub struct HistoryClient {
    socket: zmq::Socket,
    timeout: Duration,
    last_heard: Instant,
    outcome: Option<HistoryOutcome>,
    batches: u64,
    records: u64,
    undecodable: u64,
}

impl HistoryClient {
    /// Connects to the service at `endpoint` (secured as role `recorder.history`) and sends `request`, whose
    /// credit is the window: how many batches may be on their way at once. Nothing heard for `timeout` ends the
    /// history as timed out.
    pub fn start(
        ctx: &zmq::Context,
        security: &Security,
        endpoint: &str,
        request: HistoryRequest,
        timeout: Duration,
    ) -> Result<HistoryClient, HistoryClientError> {
        let socket = ctx.socket(zmq::DEALER)?;
        socket.set_linger(0)?;
        // Credit bounds what the service sends; the queue only has to hold one window.
        let window = request.credit.max(1);
        socket.set_rcvhwm(i32::try_from(window.saturating_add(4)).unwrap_or(i32::MAX))?;
        security.client(&socket, "recorder.history")?;
        socket
            .connect(endpoint)
            .map_err(|source| HistoryClientError::Endpoint {
                endpoint: endpoint.to_owned(),
                source,
            })?;
        let request = HistoryRequest {
            credit: window,
            ..request
        };
        // A DEALER queues the request until the connection is up; a fresh pipe never blocks one message.
        socket.send(AskerMessage::Request(request).encode(), zmq::DONTWAIT)?;
        Ok(HistoryClient {
            socket,
            timeout,
            last_heard: Instant::now(),
            outcome: None,
            batches: 0,
            records: 0,
            undecodable: 0,
        })
    }

    /// The socket, to poll beside others.
    pub fn socket(&self) -> &zmq::Socket {
        &self.socket
    }

    /// Batches received so far.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// Records received so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Messages from the service that did not decode (counted and skipped).
    pub fn undecodable(&self) -> u64 {
        self.undecodable
    }

    /// Reads at most `max_batches` batches without waiting, handing each to `on_batch` as the message it came in
    /// (a `BATCH` that decodes: the owner may rewrite its records in place and pass it on with no copy), and
    /// grants a credit for each. Returns the outcome once the history is over; `on_batch` returning false stops
    /// reading (the owner must stop) and cancels the history.
    pub fn poll(
        &mut self,
        max_batches: usize,
        mut on_batch: impl FnMut(zmq::Message) -> bool,
    ) -> Result<Option<HistoryOutcome>, HistoryClientError> {
        if self.outcome.is_some() {
            return Ok(self.outcome.clone());
        }
        let mut message = zmq::Message::new();
        for _ in 0..max_batches {
            match self.socket.recv(&mut message, zmq::DONTWAIT) {
                Ok(()) => {}
                Err(zmq::Error::EAGAIN) | Err(zmq::Error::EINTR) => break,
                Err(e) => return Err(e.into()),
            }
            self.last_heard = Instant::now();
            match ServiceMessage::decode(&message) {
                Ok(ServiceMessage::Batch(batch)) => {
                    self.batches += 1;
                    self.records += batch.len() as u64;
                    // A fresh message is only a descriptor: the next receive allocates, as it would anyway.
                    let batch = std::mem::replace(&mut message, zmq::Message::new());
                    if !on_batch(batch) {
                        self.cancel();
                        return Ok(None);
                    }
                    self.socket
                        .send(AskerMessage::Credit(1).encode(), zmq::DONTWAIT)?;
                }
                Ok(ServiceMessage::End(sessions)) => {
                    self.outcome = Some(HistoryOutcome::Complete { sessions });
                    break;
                }
                Ok(ServiceMessage::Refused(refusal)) => {
                    self.outcome = Some(HistoryOutcome::Refused { refusal });
                    break;
                }
                Err(error) => {
                    self.undecodable += 1;
                    tracing::warn!(%error, "history: a message from the service did not decode");
                }
            }
        }
        if self.outcome.is_none() && self.last_heard.elapsed() >= self.timeout {
            self.cancel();
            self.outcome = Some(HistoryOutcome::TimedOut);
        }
        Ok(self.outcome.clone())
    }

    /// Tells the service to stop (best effort: the service abandons a silent asker anyway).
    pub fn cancel(&mut self) {
        let _ = self
            .socket
            .send(AskerMessage::Cancel.encode(), zmq::DONTWAIT);
    }
}
