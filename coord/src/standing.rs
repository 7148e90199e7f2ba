//! Leadership with a handover point, for a role that several processes stand for and one performs canonically
//! (`tickbox record --elect`: every recorder records, the leader's journal is the canonical one).
//!
//! A [`Standing`] is a candidacy in an [`Election`] plus a persistent `<dir>/progress` node that only the leader
//! writes: its token, its id and how far it got (caller-defined JSON). The node is persistent because the point
//! of it is to outlive its writer: when a leader is killed, its ephemeral candidate node goes with its session,
//! but its last progress stays for the next leader, which reads it on election and so knows where the old
//! leader's canonical output ended (as of its last report) and where its own begins.
//!
//! Writes are fenced: the node carries the writer's token and is replaced only by a compare-and-set on its
//! version, and never by a token lower than the one stored, so a deposed leader that has not noticed yet cannot
//! overwrite its successor's progress.

use serde_json::{json, Value};
use zookeeper_client as zk;

use crate::election::{Candidate, Election, ElectionEvent};
use crate::hold::LostReason;
use crate::logic;
use crate::{Coord, CoordError, Result};

/// Name of the progress node inside the election directory (not a candidate name, so the election and
/// `tickbox coord state` ignore it).
pub const PROGRESS_NODE: &str = "progress";

/// The leader before this one, as its last progress report left it.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviousLeader {
    /// Its fencing token.
    pub token: u64,
    /// Its id (as given to [`Standing::campaign`]).
    pub id: String,
    /// Its last reported progress (`null` when it never reported).
    pub progress: Value,
}

/// Taking over: this candidate's token and what the previous leader last reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Handover {
    /// The election directory.
    pub election: String,
    /// This leader's fencing token, strictly greater than every earlier leader's.
    pub token: u64,
    /// This leader's id.
    pub id: String,
    /// The previous leader, `None` for the first leader of the election.
    pub previous: Option<PreviousLeader>,
}

impl Handover {
    /// The handover as one JSON object: `{"election", "token", "id", "previous": {"token", "id", "progress"}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "election": self.election,
            "token": self.token,
            "id": self.id,
            "previous": self.previous.as_ref().map(|p| json!({
                "token": p.token,
                "id": p.id,
                "progress": p.progress,
            })),
        })
    }

    /// One log line: `became leader of DIR (token T, id I); previous leader I0 (token T0) last reported P`.
    pub fn line(&self) -> String {
        let prev = match &self.previous {
            Some(p) => format!(
                "previous leader {} (token {}) last reported {}",
                p.id, p.token, p.progress
            ),
            None => "first leader (no previous progress)".to_owned(),
        };
        format!(
            "became leader of {} (token {}, id {}); {prev}",
            self.election, self.token, self.id
        )
    }
}

/// What [`Standing::poll`] reports.
#[derive(Debug, Clone, PartialEq)]
pub enum StandingEvent {
    /// Elected: act as leader from now on; the handover says where the previous leader stopped.
    Elected(Handover),
    /// Connection lost while leading: leadership uncertain until `Resumed` or `Lost`.
    Suspended,
    /// Reconnected within the session, still the leader.
    Resumed,
    /// Out of the election: stop acting as leader. After `Lost(SessionExpired)` the candidacy stands again
    /// on a new session by itself (`Rejoined` follows); any other reason (node deleted, resigned) is for good.
    Lost(LostReason),
    /// Back in the election as a candidate on a new session after the old one expired; `was_leader` is the
    /// token this process led with before, when it was leading. `Elected` follows when its turn comes.
    Rejoined {
        /// The token of the leadership lost with the expired session, if it was leading.
        was_leader: Option<u64>,
        /// How long it was out of the election.
        out_for: std::time::Duration,
    },
}

/// A candidacy that records the leader's progress for its successor.
#[derive(Debug)]
pub struct Standing {
    coord: Coord,
    election: Election,
    candidate: Candidate,
    id: String,
    token: Option<u64>,
    /// Version of the progress node as this leader last read or wrote it (for the compare-and-set).
    version: Option<i32>,
}

impl Standing {
    /// Stands in the election at `dir` as `id` (stored in the candidate node, shown by `tickbox coord state`).
    pub fn campaign(coord: &Coord, dir: &str, id: &str) -> Result<Standing> {
        let election = Election::new(coord, dir)?;
        let candidate = election.campaign(id.as_bytes())?;
        Ok(Standing {
            coord: coord.clone(),
            election,
            candidate,
            id: id.to_owned(),
            token: None,
            version: None,
        })
    }

    /// The next leadership change, without blocking (`None`: nothing new). On election it reads the previous
    /// leader's progress for the [`Handover`].
    pub fn poll(&mut self) -> Result<Option<StandingEvent>> {
        match self.candidate.events().try_recv() {
            Ok(ev) => self.on_event(ev).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// [`Standing::poll`] that waits up to `timeout` for a change.
    pub fn wait(&mut self, timeout: std::time::Duration) -> Result<Option<StandingEvent>> {
        match self.candidate.events().recv_timeout(timeout) {
            Ok(ev) => self.on_event(ev).map(Some),
            Err(_) => Ok(None),
        }
    }

    fn on_event(&mut self, ev: ElectionEvent) -> Result<StandingEvent> {
        Ok(match ev {
            ElectionEvent::Elected { token } => {
                self.token = Some(token);
                let previous = self.read_previous()?;
                StandingEvent::Elected(Handover {
                    election: self.election.dir().to_owned(),
                    token,
                    id: self.id.clone(),
                    previous,
                })
            }
            ElectionEvent::Suspended => StandingEvent::Suspended,
            ElectionEvent::Resumed => StandingEvent::Resumed,
            ElectionEvent::Lost(r) => {
                self.token = None;
                StandingEvent::Lost(r)
            }
            ElectionEvent::Rejoined {
                was_leader,
                out_for,
            } => {
                // A new leadership starts from a fresh read of the progress node.
                self.version = None;
                StandingEvent::Rejoined {
                    was_leader,
                    out_for,
                }
            }
        })
    }

    /// The election directory.
    pub fn election(&self) -> &str {
        self.election.dir()
    }

    /// This candidate's token while it leads (connected or suspended), else `None`.
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// True while leading with a connected session: the moment to act as leader.
    pub fn is_leader(&self) -> bool {
        self.token.is_some() && self.candidate.is_leader()
    }

    /// Records this leader's progress for its successor. `Ok(false)` when it may not: not leading (or
    /// suspended), or a leader with a greater token has written since (this one is deposed).
    pub fn report(&mut self, progress: &Value) -> Result<bool> {
        let Some(token) = self.token else {
            return Ok(false);
        };
        if !self.candidate.is_leader() {
            return Ok(false);
        }
        let data = json!({"token": token, "id": self.id, "progress": progress}).to_string();
        let path = self.progress_path();
        let client = self.coord.client();
        // Two rounds: a stale version (another writer, or our own first write) is re-read once.
        for _ in 0..2 {
            let Some(version) = self.version else {
                let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                match self
                    .coord
                    .block_on(client.create(&path, data.as_bytes(), &opts))
                {
                    Ok((stat, _)) => {
                        self.version = Some(stat.version);
                        return Ok(true);
                    }
                    Err(zk::Error::NodeExists) => {
                        self.refresh_version(token)?;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            match self
                .coord
                .block_on(client.set_data(&path, data.as_bytes(), Some(version)))
            {
                Ok(stat) => {
                    self.version = Some(stat.version);
                    return Ok(true);
                }
                Err(zk::Error::BadVersion | zk::Error::NoNode) => {
                    if !self.refresh_version(token)? {
                        return Ok(false);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }

    /// Leaves the election (its node is deleted; the progress node stays for the next leader).
    pub fn resign(self) -> Result<()> {
        self.candidate.resign()
    }

    fn progress_path(&self) -> String {
        logic::join(self.election.dir(), PROGRESS_NODE)
    }

    /// Re-reads the progress node's version; `Ok(false)` when a greater token owns it (deposed).
    fn refresh_version(&mut self, token: u64) -> Result<bool> {
        match self.coord.get(&self.progress_path())? {
            None => {
                self.version = None;
                Ok(true)
            }
            Some((data, stat)) => {
                let (stored, _, _) = parse_progress(&self.progress_path(), &data)?;
                if stored > token {
                    return Ok(false);
                }
                self.version = Some(stat.version);
                Ok(true)
            }
        }
    }

    fn read_previous(&mut self) -> Result<Option<PreviousLeader>> {
        let path = self.progress_path();
        match self.coord.get(&path)? {
            None => {
                self.version = None;
                Ok(None)
            }
            Some((data, stat)) => {
                self.version = Some(stat.version);
                let (token, id, progress) = parse_progress(&path, &data)?;
                Ok(Some(PreviousLeader {
                    token,
                    id,
                    progress,
                }))
            }
        }
    }
}

/// The progress node's `(token, id, progress)`.
fn parse_progress(path: &str, data: &[u8]) -> Result<(u64, String, Value)> {
    let bad = |reason| CoordError::BadData {
        path: path.to_owned(),
        reason,
    };
    let v: Value = serde_json::from_slice(data).map_err(|_| bad("progress is not JSON"))?;
    let token = v["token"]
        .as_u64()
        .ok_or_else(|| bad("progress lacks a token"))?;
    let id = v["id"].as_str().unwrap_or_default().to_owned();
    Ok((token, id, v["progress"].clone()))
}

/// The last progress written at the election `dir` (token, id, progress), for inspection.
pub fn last_progress(coord: &Coord, dir: &str) -> Result<Option<(u64, String, Value)>> {
    let path = logic::join(dir, PROGRESS_NODE);
    match coord.get(&path)? {
        None => Ok(None),
        Some((data, _)) => parse_progress(&path, &data).map(Some),
    }
}

/// The handovers of a role's output kept beside it: one JSON object per line in `<output>.leadership.jsonl`
/// (for a journal: beside the ring file or archive directory), appended when this process becomes leader, so
/// whoever reads the output knows from which point it is canonical and where the previous leader's ended.
#[derive(Debug, Clone)]
pub struct HandoverLog {
    path: std::path::PathBuf,
}

impl HandoverLog {
    /// The log beside `output`.
    pub fn beside(output: &std::path::Path) -> HandoverLog {
        let mut name = output.as_os_str().to_owned();
        name.push(".leadership.jsonl");
        HandoverLog { path: name.into() }
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Appends one entry (one line, flushed and synced: it is written once per leadership, and it must survive
    /// this process being killed right after).
    pub fn append(&self, entry: &Value) -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        writeln!(f, "{entry}")?;
        f.sync_data()
    }

    /// Every entry, oldest first (none when the log does not exist; a line that is not JSON is an error).
    pub fn read(&self) -> std::io::Result<Vec<Value>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(std::io::Error::other))
            .collect()
    }
}
