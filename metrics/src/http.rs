//! The `/metrics` endpoint: `std::net`, a fixed handler pool, every resource bounded, and a small client for it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::registry::Registry;

use crate::scrape::registry;
use crate::{MetricsError, Scrape, Source};

/// Handler threads: scrapes served at once. Prometheus scrapes one at a time; two lets a person's `curl` or
/// `tickbox top` in beside it.
pub const HANDLERS: usize = 2;
/// Accepted connections waiting for a handler; past it a connection is answered `503` at once and counted.
pub const QUEUE: usize = 16;
/// The most of a request head read; a longer one is answered `431`.
pub const REQUEST_HEAD_MAX: usize = 8 * 1024;
/// How long a handler waits on a silent or slow client (reading its request, writing the answer).
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// The content type of the OpenMetrics text format, served to a client that asks for it (Prometheus does).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, served otherwise (`curl`, `promtool check metrics`).
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the endpoint has answered, by outcome (exposed as `tickbox_metrics_*` beside the component's metrics).
#[derive(Debug, Default)]
pub struct ServerCounts {
    scrapes: AtomicU64,
    not_found: AtomicU64,
    bad_requests: AtomicU64,
    refused_busy: AtomicU64,
    client_errors: AtomicU64,
    accept_errors: AtomicU64,
}

impl ServerCounts {
    /// `GET /metrics` answered.
    pub fn scrapes(&self) -> u64 {
        self.scrapes.load(Ordering::Relaxed)
    }
    /// Connections answered `503` because every handler was busy and the queue full.
    pub fn refused_busy(&self) -> u64 {
        self.refused_busy.load(Ordering::Relaxed)
    }
    /// Requests for another path (`404`).
    pub fn not_found(&self) -> u64 {
        self.not_found.load(Ordering::Relaxed)
    }

    fn collect(&self, out: &mut Scrape) {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.counter(
            "tickbox_metrics_scrapes",
            "GET /metrics requests answered by this endpoint.",
            &[],
            c(&self.scrapes),
        );
        let refused = "Connections or requests the metrics endpoint refused, by reason: busy (every handler busy and \
             the queue full: answered 503 at once), not_found (a path other than /metrics: 404), bad_request \
             (not HTTP, too long, not GET), client (the client was silent or went away), accept (accept failed, \
             e.g. out of file descriptors).";
        for (reason, value) in [
            ("busy", &self.refused_busy),
            ("not_found", &self.not_found),
            ("bad_request", &self.bad_requests),
            ("client", &self.client_errors),
            ("accept", &self.accept_errors),
        ] {
            out.counter(
                "tickbox_metrics_refused",
                refused,
                &[(crate::label::REASON, reason.to_owned())],
                c(value),
            );
        }
    }
}

struct Shared {
    stop: AtomicBool,
    registry: Registry,
    counts: Arc<ServerCounts>,
}

/// A running `/metrics` endpoint; dropping it stops its threads (within one accept and the handlers' timeout).
pub struct Endpoint {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    handlers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Endpoint {
    /// Binds `bind` ([`crate::resolve_bind`]) and serves `sources` at `/metrics`, every sample labelled
    /// `role`. A taken address is [`MetricsError::Bind`], before any thread starts.
    pub fn start(
        bind: &str,
        role: &'static str,
        sources: Vec<Arc<dyn Source>>,
    ) -> Result<Endpoint, MetricsError> {
        let addr = crate::resolve_bind(bind)?;
        let listener = TcpListener::bind(addr).map_err(|source| {
            let hint = match source.kind() {
                std::io::ErrorKind::AddrInUse => {
                    " (another process serves there: choose another port, or 0 for a free one)"
                }
                std::io::ErrorKind::PermissionDenied => " (ports below 1024 need privilege)",
                std::io::ErrorKind::AddrNotAvailable => {
                    " (no interface of this host has that address)"
                }
                _ => "",
            };
            MetricsError::Bind { addr, source, hint }
        })?;
        let addr = listener.local_addr().map_err(MetricsError::Thread)?;
        let counts = Arc::new(ServerCounts::default());
        let mut all = sources;
        let own = Arc::clone(&counts);
        all.push(Arc::new(move |out: &mut Scrape| own.collect(out)));
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            registry: registry(role, all),
            counts,
        });
        let (tx, rx) = sync_channel::<TcpStream>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let mut handlers = Vec::with_capacity(HANDLERS);
        for i in 0..HANDLERS {
            let (shared, rx) = (Arc::clone(&shared), Arc::clone(&rx));
            handlers.push(
                std::thread::Builder::new()
                    .name(format!("tickbox-metrics-{i}"))
                    .spawn(move || handle_loop(&shared, &rx))
                    .map_err(MetricsError::Thread)?,
            );
        }
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("tickbox-metrics".into())
                .spawn(move || accept_loop(&listener, &shared, tx))
                .map_err(MetricsError::Thread)?
        };
        tracing::debug!(%addr, "metrics endpoint listening");
        Ok(Endpoint {
            addr,
            shared,
            acceptor: Some(acceptor),
            handlers,
        })
    }

    /// The bound address (the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/metrics`.
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    /// What the endpoint has answered so far.
    pub fn counts(&self) -> &ServerCounts {
        &self.shared.counts
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // The acceptor blocks in accept(): one connection of our own wakes it to see the flag.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_millis(200));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // The acceptor's sender is gone with it: each handler finishes its connection and sees the channel close.
        for handler in self.handlers.drain(..) {
            let _ = handler.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Shared, tx: SyncSender<TcpStream>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        match stream {
            Ok(stream) => match tx.try_send(stream) {
                Ok(()) => {}
                Err(TrySendError::Full(stream)) => {
                    shared.counts.refused_busy.fetch_add(1, Ordering::Relaxed);
                    // Said without waiting: a non-blocking write of a few bytes into a fresh socket's buffer.
                    let _ = stream.set_nonblocking(true);
                    let _ = (&stream).write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                    );
                }
                Err(TrySendError::Disconnected(_)) => return,
            },
            Err(err) => {
                shared.counts.accept_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("metrics endpoint: accept failed: {err}");
                // Out of descriptors is not fixed by trying again at once.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn handle_loop(shared: &Shared, rx: &Mutex<Receiver<TcpStream>>) {
    loop {
        let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(stream) = next else { return };
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        handle(shared, stream);
    }
}

/// The request line's method and path, from a request head (`None`: not HTTP).
fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line_end = head.iter().position(|&b| b == b'\r' || b == b'\n')?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return None;
    }
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

/// Whether the request's `Accept` header names the OpenMetrics text format.
fn accepts_openmetrics(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).lines().any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("accept")
                && value.contains("application/openmetrics-text")
        })
    })
}

fn handle(shared: &Shared, mut stream: TcpStream) {
    let counts = &shared.counts;
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let mut head = [0u8; REQUEST_HEAD_MAX];
    let mut len = 0;
    let complete = loop {
        if head[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            break true;
        }
        if len == head.len() {
            break false;
        }
        match stream.read(&mut head[len..]) {
            Ok(0) | Err(_) => {
                counts.client_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(n) => len += n,
        }
    };
    if !complete {
        counts.bad_requests.fetch_add(1, Ordering::Relaxed);
        respond(
            &mut stream,
            "431 Request Header Fields Too Large",
            "text/plain",
            b"request head too long\n",
        );
        return;
    }
    let (status, content_type, body): (&str, &str, Vec<u8>) = match request_line(&head[..len]) {
        None => {
            counts.bad_requests.fetch_add(1, Ordering::Relaxed);
            (
                "400 Bad Request",
                "text/plain",
                b"not an HTTP/1 request\n".to_vec(),
            )
        }
        Some((method, _)) if method != "GET" => {
            counts.bad_requests.fetch_add(1, Ordering::Relaxed);
            (
                "405 Method Not Allowed",
                "text/plain",
                b"only GET\n".to_vec(),
            )
        }
        Some((_, "/metrics")) => {
            counts.scrapes.fetch_add(1, Ordering::Relaxed);
            let mut text = String::new();
            if accepts_openmetrics(&head[..len]) {
                let _ = prometheus_client::encoding::text::encode(&mut text, &shared.registry);
                ("200 OK", OPENMETRICS, text.into_bytes())
            } else {
                let _ = prometheus_client::encoding::prometheus_text::encode(
                    &mut text,
                    &shared.registry,
                );
                ("200 OK", PROMETHEUS_TEXT, text.into_bytes())
            }
        }
        Some(_) => {
            counts.not_found.fetch_add(1, Ordering::Relaxed);
            (
                "404 Not Found",
                "text/plain",
                b"not found: the metrics are at /metrics\n".to_vec(),
            )
        }
    };
    respond(&mut stream, status, content_type, &body);
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body));
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// `GET path` from `addr` (`HOST:PORT`, or a `http://HOST:PORT/metrics` URL whose path then wins): the status code
/// and the body, at most `max_body` bytes, the whole exchange within `timeout`. For `tickbox top` and tests.
pub fn fetch(
    addr: &str,
    path: &str,
    timeout: Duration,
    max_body: usize,
) -> std::io::Result<(u16, String)> {
    use std::net::ToSocketAddrs;
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    let rest = addr.strip_prefix("http://").unwrap_or(addr);
    let (host, path) = match rest.split_once('/') {
        Some((host, p)) => (host, format!("/{p}")),
        None => (rest, path.to_owned()),
    };
    let target = host
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| invalid(format!("{host}: no address")))?;
    let deadline = std::time::Instant::now() + timeout;
    let mut stream = TcpStream::connect_timeout(&target, timeout)?;
    let left = || {
        deadline
            .saturating_duration_since(std::time::Instant::now())
            .max(Duration::from_millis(1))
    };
    stream.set_write_timeout(Some(left()))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: {OPENMETRICS}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        stream.set_read_timeout(Some(left()))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > max_body + REQUEST_HEAD_MAX {
                    return Err(invalid(format!(
                        "{host}{path}: answer over {max_body} bytes"
                    )));
                }
            }
            Err(err) => return Err(err),
        }
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| invalid(format!("{host}{path}: not an HTTP answer")))?;
    let status_line = String::from_utf8_lossy(&raw[..split]).into_owned();
    let code = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| invalid(format!("{host}{path}: no status code")))?;
    Ok((
        code,
        String::from_utf8_lossy(&raw[split + 4..]).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter_source(out: &mut Scrape) {
        out.counter("tickbox_things", "Things.", &[], 7);
    }

    fn start() -> Endpoint {
        Endpoint::start("127.0.0.1:0", "test", vec![Arc::new(counter_source)]).unwrap()
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn metrics_are_served_and_other_paths_are_404() {
        let ep = start();
        let addr = ep.local_addr().to_string();
        let (code, body) = fetch(&addr, "/metrics", T, 1 << 20).unwrap();
        assert_eq!(code, 200);
        assert!(
            body.contains("tickbox_things_total{role=\"test\"} 7"),
            "{body}"
        );
        assert!(
            body.contains("tickbox_metrics_scrapes_total{role=\"test\"} 1"),
            "{body}"
        );
        assert_eq!(fetch(&addr, "/", T, 1 << 20).unwrap().0, 404);
        assert_eq!(fetch(&addr, "/metrics/x", T, 1 << 20).unwrap().0, 404);
        assert_eq!(
            fetch(&format!("http://{addr}/metrics"), "/", T, 1 << 20)
                .unwrap()
                .0,
            200
        );
        assert_eq!(ep.counts().not_found(), 2);
        // Without an Accept header naming OpenMetrics: the classic text format (no `# EOF`, info as a gauge).
        let mut s = TcpStream::connect(ep.local_addr()).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut classic = String::new();
        s.read_to_string(&mut classic).unwrap();
        assert!(classic.contains("text/plain; version=0.0.4"), "{classic}");
        assert!(
            classic.contains("tickbox_things_total{role=\"test\"} 7") && !classic.contains("# EOF")
        );
        let (_, body) = fetch(&addr, "/metrics", T, 1 << 20).unwrap();
        assert!(
            body.contains("tickbox_metrics_refused_total{role=\"test\",reason=\"not_found\"} 2"),
            "{body}"
        );
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    #[test]
    fn garbage_and_oversized_requests_are_refused_and_counted() {
        let ep = start();
        let mut s = TcpStream::connect(ep.local_addr()).unwrap();
        s.write_all(b"HELLO\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        let mut s = TcpStream::connect(ep.local_addr()).unwrap();
        let _ = s.write_all(&vec![b'a'; REQUEST_HEAD_MAX + 10]);
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        let mut s = TcpStream::connect(ep.local_addr()).unwrap();
        s.write_all(b"POST /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    }

    #[test]
    fn a_flood_of_idle_connections_is_bounded_refused_and_counted_then_served_again() {
        let ep = start();
        // Each handler is held by a client that says nothing; the queue fills; the rest are refused at once.
        let held: Vec<TcpStream> = (0..HANDLERS + QUEUE + 20)
            .map(|_| TcpStream::connect(ep.local_addr()).unwrap())
            .collect();
        let refused = || ep.counts().refused_busy() >= 20;
        assert!(tickbox_wait(Duration::from_secs(5), refused));
        drop(held);
        // Once the silent ones time out or close, scrapes are answered again. The handlers see the closes a moment
        // later: a scrape in between still finds the queue full and is refused (a reset), so ask until answered.
        let mut answer = None;
        let answered = tickbox_wait(Duration::from_secs(10), || {
            answer = fetch(
                &ep.local_addr().to_string(),
                "/metrics",
                Duration::from_secs(2),
                1 << 20,
            )
            .ok();
            answer.is_some()
        });
        assert!(answered, "never answered again");
        assert_eq!(answer.map(|(code, _)| code), Some(200));
    }

    fn tickbox_wait(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_taken_address_is_one_clear_error() {
        let ep = start();
        let err = Endpoint::start(&ep.local_addr().to_string(), "test", Vec::new()).unwrap_err();
        assert!(matches!(err, MetricsError::Bind { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("another process serves there"), "{text}");
    }
}
