//! Simulated time for sans-IO engines, in the style of quinn-proto's test `Pair`: [`Sim`] holds N nodes (each an
//! engine, or a few engines wired as one process wires them), a clock that jumps straight to the earliest thing
//! due (a message arriving, or a node's `poll_timeout`), and the queues between the nodes, each with its latency
//! and its loss. A failover that takes seconds of protocol time runs in milliseconds, and every instant in it is
//! exact, so a test can state when a takeover happens rather than wait for it.
//!
//! A node is anything that implements [`Node`]: it says when it next wants [`Node::handle_timeout`], takes the
//! messages other nodes send it, and sends its own through an [`Outbox`]. A test scripts the rest: it runs the
//! simulation to an instant ([`Sim::run_until`], or [`Sim::step`] to look after every event), acts as a user
//! there ([`Sim::act`], [`Sim::send`]), takes a node down or back up ([`Sim::kill`], [`Sim::restart`]) and reads
//! any node's state ([`Sim::node`]).
//!
//! Deterministic: no clock is read and the losses come from a seeded generator ([`Sim::seed`]), so a run repeats
//! exactly.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::any::Any;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

/// One participant of a simulation (see the module documentation). `M` is what the nodes send each other.
pub trait Node<M>: Any {
    /// The earliest instant this node wants [`Node::handle_timeout`], if any.
    fn poll_timeout(&self) -> Option<Instant>;
    /// The clock has reached the instant [`Node::poll_timeout`] asked for (or passed it).
    fn handle_timeout(&mut self, now: Instant, out: &mut Outbox<M>);
    /// `msg`, sent by node `from`, arrives.
    fn handle_message(&mut self, now: Instant, from: usize, msg: M, out: &mut Outbox<M>);
}

/// What a node sends while it handles something: each message goes into the queue towards its addressee.
#[derive(Debug)]
pub struct Outbox<M> {
    sent: Vec<(usize, M)>,
}

impl<M> Outbox<M> {
    /// Sends `msg` to node `to`.
    pub fn send(&mut self, to: usize, msg: M) {
        self.sent.push((to, msg));
    }
}

/// How the queue from one node to another carries messages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Every message arrives this long after it was sent (so the queue keeps its order).
    pub latency: Duration,
    /// The share of messages lost on the way, 0.0 to 1.0.
    pub loss: f64,
}

impl Link {
    /// No delay and no loss: what an in-process or loopback hop looks like against protocol timers.
    pub const PERFECT: Link = Link {
        latency: Duration::ZERO,
        loss: 0.0,
    };
}

/// What became of the messages sent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Handed to their addressee.
    pub delivered: u64,
    /// Lost on their link (its `loss`).
    pub lost: u64,
    /// Sent to a node that was down when they arrived.
    pub to_down_node: u64,
}

/// A message on its way.
#[derive(Debug)]
struct InFlight<M> {
    at: Instant,
    /// Sending order: messages due at the same instant arrive in it.
    order: u64,
    from: usize,
    to: usize,
    msg: M,
}

impl<M> PartialEq for InFlight<M> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl<M> Eq for InFlight<M> {}

impl<M> PartialOrd for InFlight<M> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<M> Ord for InFlight<M> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// How many things may happen at one instant before the simulation calls it a livelock (nodes answering each
/// other with no delay, forever).
const MAX_EVENTS_PER_INSTANT: usize = 1_000_000;

/// N nodes on one simulated clock (see the module documentation).
pub struct Sim<M> {
    start: Instant,
    now: Instant,
    /// `None`: down.
    nodes: Vec<Option<Box<dyn Node<M>>>>,
    /// The instant each node last had `handle_timeout`: a deadline it leaves at or before that instant waits
    /// for the clock to move on, so a node that does not move its deadline cannot stall the clock.
    woken_at: Vec<Option<Instant>>,
    links: HashMap<(usize, usize), Link>,
    default_link: Link,
    queue: BinaryHeap<Reverse<InFlight<M>>>,
    sent: u64,
    rng: u64,
    stats: SimStats,
}

impl<M: 'static> Sim<M> {
    /// A simulation of `nodes` (node `i` is `nodes[i]`) whose clock starts at `start`, every link perfect.
    pub fn new(start: Instant, nodes: Vec<Box<dyn Node<M>>>) -> Self {
        let n = nodes.len();
        Sim {
            start,
            now: start,
            nodes: nodes.into_iter().map(Some).collect(),
            woken_at: vec![None; n],
            links: HashMap::new(),
            default_link: Link::PERFECT,
            queue: BinaryHeap::new(),
            sent: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
            stats: SimStats::default(),
        }
    }

    /// The generator behind the losses starts from `seed` (any value; the same seed loses the same messages).
    pub fn seed(mut self, seed: u64) -> Self {
        self.rng = seed | 1;
        self
    }

    /// Every link that [`Sim::link`] does not set carries messages this way.
    pub fn default_link(mut self, link: Link) -> Self {
        self.default_link = link;
        self
    }

    /// Messages from `from` to `to` go this way from now on (messages already on their way keep theirs).
    pub fn link(&mut self, from: usize, to: usize, link: Link) {
        self.links.insert((from, to), link);
    }

    /// The simulated time now.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// What became of the messages sent so far.
    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// Whether node `i` is up.
    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].is_some()
    }

    /// Node `i`, which must be up and of type `T`.
    #[track_caller]
    pub fn node<T: Node<M>>(&self, i: usize) -> &T {
        let node: &dyn Any = self.nodes[i]
            .as_deref()
            .unwrap_or_else(|| panic!("node {i} is down"));
        node.downcast_ref()
            .unwrap_or_else(|| panic!("node {i} is not a {}", std::any::type_name::<T>()))
    }

    /// Node `i`, which must be up and of type `T`, to change by hand (what it sends is not asked for: see
    /// [`Sim::act`]).
    #[track_caller]
    pub fn node_mut<T: Node<M>>(&mut self, i: usize) -> &mut T {
        let node: &mut dyn Any = self.nodes[i]
            .as_deref_mut()
            .unwrap_or_else(|| panic!("node {i} is down"));
        node.downcast_mut()
            .unwrap_or_else(|| panic!("node {i} is not a {}", std::any::type_name::<T>()))
    }

    /// Acts on node `i` (of type `T`, up) now, as its user would: what it sends goes out as from that node.
    #[track_caller]
    pub fn act<T: Node<M>, R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut T, Instant, &mut Outbox<M>) -> R,
    ) -> R {
        let now = self.now;
        let mut out = Outbox { sent: Vec::new() };
        let result = f(self.node_mut::<T>(i), now, &mut out);
        self.post(i, out);
        result
    }

    /// Sends `msg` from node `from` to node `to` now, as if `from` had sent it.
    pub fn send(&mut self, from: usize, to: usize, msg: M) {
        self.post(
            from,
            Outbox {
                sent: vec![(to, msg)],
            },
        );
    }

    /// Takes node `i` down: it gets no more timeouts, and messages that reach it while it is down are lost.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i] = None;
        self.woken_at[i] = None;
    }

    /// Puts `node` up as node `i` (a restart: a fresh engine in place of the old one).
    pub fn restart(&mut self, i: usize, node: Box<dyn Node<M>>) {
        self.nodes[i] = Some(node);
        self.woken_at[i] = None;
    }

    /// When anything happens next: the earliest message due or node deadline; `None` if nothing ever will.
    pub fn next_event(&self) -> Option<Instant> {
        let message = self.queue.peek().map(|m| m.0.at);
        let timer = (0..self.nodes.len()).filter_map(|i| self.deadline(i)).min();
        match (message, timer) {
            (Some(m), Some(t)) => Some(m.min(t)),
            (m, t) => m.or(t),
        }
    }

    /// Node `i`'s deadline as the clock sees it: one it left at or before the instant it was last woken waits
    /// until the clock moves past that instant.
    fn deadline(&self, i: usize) -> Option<Instant> {
        let due = self.nodes[i].as_ref()?.poll_timeout()?;
        match self.woken_at[i] {
            Some(woken) if due <= woken => None,
            _ => Some(due.max(self.now)),
        }
    }

    /// Moves the clock to the next event, if one is due by `limit`, and runs everything due then: the messages
    /// that arrive (in sending order), then the timers of the nodes whose deadline has come, until nothing more is
    /// due at that instant. Returns that instant; `None` (the clock then stands at `limit`) when nothing is due
    /// by `limit`.
    pub fn step(&mut self, limit: Instant) -> Option<Instant> {
        let at = match self.next_event() {
            Some(at) if at <= limit => at.max(self.now),
            _ => {
                self.now = self.now.max(limit);
                return None;
            }
        };
        if at > self.now {
            self.now = at;
            self.woken_at.iter_mut().for_each(|w| *w = None);
        }
        let mut events = 0;
        loop {
            events += 1;
            assert!(
                events < MAX_EVENTS_PER_INSTANT,
                "livelock: over {MAX_EVENTS_PER_INSTANT} events at {:?}",
                self.elapsed()
            );
            if self.queue.peek().is_some_and(|m| m.0.at <= self.now) {
                let Some(Reverse(m)) = self.queue.pop() else {
                    break;
                };
                self.deliver(m);
                continue;
            }
            let Some(i) = (0..self.nodes.len()).find(|&i| self.deadline(i) == Some(self.now))
            else {
                break;
            };
            self.woken_at[i] = Some(self.now);
            let mut out = Outbox { sent: Vec::new() };
            if let Some(node) = self.nodes[i].as_mut() {
                node.handle_timeout(self.now, &mut out);
            }
            self.post(i, out);
        }
        Some(self.now)
    }

    /// Runs every event due by `until`, then leaves the clock at `until`.
    pub fn run_until(&mut self, until: Instant) {
        while self.step(until).is_some() {}
    }

    /// Runs the simulation on for `d` (see [`Sim::run_until`]).
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    fn deliver(&mut self, m: InFlight<M>) {
        let Some(node) = self.nodes[m.to].as_mut() else {
            self.stats.to_down_node += 1;
            return;
        };
        self.stats.delivered += 1;
        let mut out = Outbox { sent: Vec::new() };
        node.handle_message(self.now, m.from, m.msg, &mut out);
        self.post(m.to, out);
    }

    /// Puts what node `from` sent on the links towards the addressees.
    fn post(&mut self, from: usize, out: Outbox<M>) {
        for (to, msg) in out.sent {
            assert!(
                to < self.nodes.len(),
                "node {from} sent to node {to}, which does not exist"
            );
            let link = self
                .links
                .get(&(from, to))
                .copied()
                .unwrap_or(self.default_link);
            if link.loss > 0.0 && self.next_unit() < link.loss {
                self.stats.lost += 1;
                continue;
            }
            self.sent += 1;
            self.queue.push(Reverse(InFlight {
                at: self.now + link.latency,
                order: self.sent,
                from,
                to,
                msg,
            }));
        }
    }

    /// The next number of the loss generator (xorshift64*), uniform in [0, 1).
    fn next_unit(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
// Each test reads the clock once, for an instant to start from; the simulation never reads it.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    /// Pings its peer every `every` and answers every ping; remembers when each answer came back.
    struct Pinger {
        peer: usize,
        every: Duration,
        next: Instant,
        pongs: Vec<Instant>,
        pings_answered: u64,
    }

    #[derive(Debug)]
    enum Ball {
        Ping,
        Pong,
    }

    impl Pinger {
        fn boxed(peer: usize, every: Duration, start: Instant) -> Box<dyn Node<Ball>> {
            Box::new(Pinger {
                peer,
                every,
                next: start + every,
                pongs: Vec::new(),
                pings_answered: 0,
            })
        }
    }

    impl Node<Ball> for Pinger {
        fn poll_timeout(&self) -> Option<Instant> {
            Some(self.next)
        }
        fn handle_timeout(&mut self, now: Instant, out: &mut Outbox<Ball>) {
            self.next = now + self.every;
            out.send(self.peer, Ball::Ping);
        }
        fn handle_message(&mut self, now: Instant, from: usize, msg: Ball, out: &mut Outbox<Ball>) {
            match msg {
                Ball::Ping => {
                    self.pings_answered += 1;
                    out.send(from, Ball::Pong);
                }
                Ball::Pong => self.pongs.push(now),
            }
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_clock_jumps_to_each_deadline_and_a_link_delays_by_its_latency() {
        let t0 = Instant::now();
        let mut sim = Sim::new(
            t0,
            vec![
                Pinger::boxed(1, ms(100), t0),
                Pinger::boxed(0, ms(1_000), t0),
            ],
        );
        sim.link(
            0,
            1,
            Link {
                latency: ms(3),
                loss: 0.0,
            },
        );
        sim.link(
            1,
            0,
            Link {
                latency: ms(4),
                loss: 0.0,
            },
        );
        let mut instants = Vec::new();
        while let Some(at) = sim.step(t0 + ms(250)) {
            instants.push(at - t0);
        }
        // Pings at 100 and 200 ms, each reaching node 1 3 ms later and answered 4 ms after that.
        assert_eq!(
            instants,
            [ms(100), ms(103), ms(107), ms(200), ms(203), ms(207)]
        );
        assert_eq!(sim.node::<Pinger>(0).pongs, [t0 + ms(107), t0 + ms(207)]);
        assert_eq!(sim.now(), t0 + ms(250), "the clock stands at the limit");
        assert_eq!(sim.stats().delivered, 4);
    }

    #[test]
    fn a_lossy_link_loses_about_its_share_and_the_same_seed_loses_the_same() {
        let run = |seed: u64| {
            let t0 = Instant::now();
            let mut sim = Sim::new(
                t0,
                vec![
                    Pinger::boxed(1, ms(1), t0),
                    Pinger::boxed(0, Duration::from_secs(3600), t0),
                ],
            )
            .seed(seed);
            sim.link(
                0,
                1,
                Link {
                    latency: ms(0),
                    loss: 0.25,
                },
            );
            sim.run_until(t0 + Duration::from_secs(10));
            let answered = sim.node::<Pinger>(1).pings_answered;
            let pongs: Vec<Duration> = sim
                .node::<Pinger>(0)
                .pongs
                .iter()
                .map(|p| *p - t0)
                .collect();
            (answered, sim.stats().lost, pongs)
        };
        let (answered, lost, pongs) = run(7);
        assert_eq!(
            answered + lost,
            10_000,
            "every ping either arrived or was lost"
        );
        assert!(
            (2_200..2_800).contains(&lost),
            "lost {lost} of 10,000 at 25%"
        );
        assert_eq!(
            run(7),
            (answered, lost, pongs.clone()),
            "the same seed, the same run"
        );
        assert_ne!(run(8).2, pongs, "another seed loses other pings");
    }

    #[test]
    fn a_node_that_is_down_misses_its_messages_and_a_restart_brings_a_fresh_one() {
        let t0 = Instant::now();
        let mut sim = Sim::new(
            t0,
            vec![
                Pinger::boxed(1, ms(10), t0),
                Pinger::boxed(0, Duration::from_secs(3600), t0),
            ],
        );
        sim.run_until(t0 + ms(55));
        assert_eq!(sim.node::<Pinger>(0).pongs.len(), 5);
        sim.kill(1);
        assert!(!sim.is_up(1));
        sim.run_until(t0 + ms(100));
        assert_eq!(
            sim.stats().to_down_node,
            5,
            "pings at 60..=100 ms found nobody"
        );
        sim.restart(1, Pinger::boxed(0, Duration::from_secs(3600), sim.now()));
        sim.run_until(t0 + ms(130));
        assert_eq!(sim.node::<Pinger>(0).pongs.len(), 8);
        assert_eq!(
            sim.node::<Pinger>(1).pings_answered,
            3,
            "the fresh node counts from zero"
        );
        // A message sent by hand, and an action on a node, at the current instant.
        sim.send(1, 0, Ball::Pong);
        sim.act(0, |_: &mut Pinger, _, out| out.send(1, Ball::Ping));
        sim.run_until(sim.now());
        assert_eq!(sim.node::<Pinger>(0).pongs.len(), 10);
    }

    /// A node whose deadline stays in the past after it was woken.
    struct Stuck(Instant);

    impl Node<Ball> for Stuck {
        fn poll_timeout(&self) -> Option<Instant> {
            Some(self.0)
        }
        fn handle_timeout(&mut self, _: Instant, _: &mut Outbox<Ball>) {}
        fn handle_message(&mut self, _: Instant, _: usize, _: Ball, _: &mut Outbox<Ball>) {}
    }

    #[test]
    fn a_deadline_that_never_moves_does_not_stall_the_clock() {
        let t0 = Instant::now();
        let stuck: Box<dyn Node<Ball>> = Box::new(Stuck(t0 - ms(1)));
        let mut sim = Sim::new(t0, vec![stuck, Pinger::boxed(0, ms(10), t0)]);
        sim.run_until(t0 + ms(35));
        assert_eq!(sim.now(), t0 + ms(35));
        assert_eq!(sim.stats().delivered, 3);
    }
}
