//! The benchmarks as asked on the command line, every quantity as it was typed (`100k`, `5s`, `tcp,ipc`):
//! parsed and checked here into the sweeps and configurations the runners take, so a bad value is the same clear
//! error however the bench is started; and the same sweep again under CURVE.

use std::path::PathBuf;
use std::time::Duration;

use tickbox_zmqx::BackPressure;

use crate::load::LoadSpec;
use crate::sweep::LatencySweep;
use crate::{parse_duration, parse_rate, BenchError, LatencyConfig, Shape, Stall, Transport};

/// Why a request cannot run.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// A quantity that does not parse.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// CURVE keys or the gate could not be made.
    #[error(transparent)]
    Auth(#[from] tickbox_auth::AuthError),
    /// A value that parses but cannot be run, named by its flag.
    #[error("{0}")]
    Invalid(String),
}

/// `bench latency` as asked.
#[derive(Debug, Clone)]
pub struct LatencyRequest {
    /// One offered rate (`--rate`), or
    pub rate: Option<String>,
    /// several (`--rates`); neither: 100k.
    pub rates: Vec<String>,
    /// Transports (`tcp`, `ipc`, `inproc`).
    pub transports: Vec<String>,
    /// Measured time per run.
    pub duration: String,
    /// Unmeasured time before it.
    pub warmup: String,
    /// Message size, bytes.
    pub size: usize,
    /// High-water marks.
    pub hwm: i32,
    /// What a full queue does.
    pub back_pressure: BackPressure,
    /// Through an LVC proxy.
    pub via_lvc: bool,
    /// The hand-off the subscriber's one shard uses (resolved).
    pub handoff: tickbox_subscriber::Handoff,
    /// `[workers] idle_spin` of the tickbox subscriber; `None`: its default.
    pub idle_spin: Option<Duration>,
    /// `[workers] shard_runs_asleep` of the tickbox subscriber; `None`: its default.
    pub shard_runs_asleep: Option<bool>,
    /// Stall the worker every this many messages (`--stall-every`) ...
    pub stall_every: Option<u64>,
    /// ... for this long (`--stall`).
    pub stall: Option<String>,
    /// Period of the interval logs (at least 1 ms).
    pub log_interval: String,
    /// Run the raw-libzmq baseline too.
    pub raw_baseline: bool,
    /// Runs of each system per configuration.
    pub repeats: usize,
    /// In one process or as separate processes.
    pub shape: Shape,
    /// The `tickbox` executable the processes shape starts.
    pub executable: Option<PathBuf>,
    /// Background load beside the runs.
    pub background: LoadSpec,
}

impl LatencyRequest {
    /// The sweep asked for, every quantity parsed and checked.
    pub fn sweep(&self) -> Result<LatencySweep, RequestError> {
        let rates = match (&self.rate, self.rates.is_empty()) {
            (Some(r), _) => vec![parse_rate(r)?],
            (None, false) => self
                .rates
                .iter()
                .map(|r| parse_rate(r))
                .collect::<Result<_, _>>()?,
            (None, true) => vec![100_000],
        };
        let transports = (self.transports.iter())
            .map(|t| t.parse::<Transport>())
            .collect::<Result<Vec<_>, _>>()?;
        let stall = match (self.stall_every, &self.stall) {
            (Some(0), _) => return Err(invalid("--stall-every must be positive")),
            (Some(every), Some(pause)) => Some(Stall {
                every,
                pause: parse_duration(pause)?,
            }),
            _ => None,
        };
        let duration = parse_duration(&self.duration)?;
        if duration.is_zero() {
            return Err(invalid("--duration must be positive"));
        }
        let mut base = LatencyConfig {
            shape: self.shape,
            warmup: parse_duration(&self.warmup)?,
            duration,
            size: self.size,
            hwm: self.hwm,
            back_pressure: self.back_pressure,
            stall,
            log_interval: parse_duration(&self.log_interval)?.max(Duration::from_millis(1)),
            via_lvc: self.via_lvc,
            handoff: self.handoff,
            background: self.background,
            ..LatencyConfig::default()
        };
        // Unset: the worker pool's own default, which `LatencyConfig::default` carries.
        tickbox_units::override_with(&mut base.idle_spin, self.idle_spin);
        tickbox_units::override_with(&mut base.shard_runs_asleep, self.shard_runs_asleep);
        Ok(LatencySweep {
            rates,
            transports,
            executable: self.executable.clone(),
            base,
            raw_baseline: self.raw_baseline,
            repeats: self.repeats,
        })
    }
}

impl LatencySweep {
    /// The same sweep with every socket of tickbox and of raw libzmq under CURVE (fresh keys), and the gate that
    /// admits them in `ctx`. Only the in-process shape over tcp or ipc can: libzmq applies no mechanism to inproc.
    pub fn under_curve(
        self,
        ctx: &zmq::Context,
    ) -> Result<(tickbox_auth::Gate, LatencySweep), RequestError> {
        if self.base.shape != Shape::InProcess {
            return Err(invalid(
                "--security curve runs the in-process shape (--shape in-process)",
            ));
        }
        if self.transports.contains(&Transport::Inproc) {
            return Err(invalid(
                "--security curve needs tcp or ipc: libzmq applies no mechanism to inproc",
            ));
        }
        let (gate, security) = fresh_curve(ctx)?;
        let sweep = LatencySweep {
            base: LatencyConfig {
                security,
                ..self.base
            },
            ..self
        };
        Ok((gate, sweep))
    }
}

impl crate::sweep::ThroughputSweep {
    /// The same sweep under CURVE (fresh keys), and the gate that admits it in `ctx`.
    pub fn under_curve(
        &self,
        ctx: &zmq::Context,
    ) -> Result<(tickbox_auth::Gate, Self), RequestError> {
        let (gate, security) = fresh_curve(ctx)?;
        let mut sweep = self.clone();
        sweep.base.security = security;
        Ok((gate, sweep))
    }
}

impl crate::replay::ReplayBenchConfig {
    /// The same bench under CURVE (fresh keys), and the gate that admits it in `ctx`.
    pub fn under_curve(
        &self,
        ctx: &zmq::Context,
    ) -> Result<(tickbox_auth::Gate, Self), RequestError> {
        let (gate, security) = fresh_curve(ctx)?;
        Ok((
            gate,
            Self {
                security,
                ..self.clone()
            },
        ))
    }
}

/// Fresh CURVE keys for every socket of a run, and the gate that admits them in `ctx`.
fn fresh_curve(
    ctx: &zmq::Context,
) -> Result<(tickbox_auth::Gate, tickbox_auth::Security), RequestError> {
    let security = tickbox_auth::Security::ephemeral_curve()?;
    Ok((security.gate(ctx)?, security))
}

/// `bench compress` of `records` synthetic records and of `journals` (each named by its file name), `repeat`
/// times, at zstd `level`.
pub fn compress_request(
    records: u64,
    journals: &[PathBuf],
    repeat: usize,
    level: i32,
) -> crate::compress::CompressBenchConfig {
    let name = |p: &PathBuf| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    crate::compress::CompressBenchConfig {
        records,
        journals: journals.iter().map(|p| (name(p), p.clone())).collect(),
        repeat,
        options: tickbox_journal::CompressOptions {
            level,
            ..Default::default()
        },
        ..crate::compress::CompressBenchConfig::default()
    }
}

/// What `bench compress` measures, said before its table.
pub fn compress_heading(level: i32) -> String {
    format!(
        "each journal copied plain and compressed (zstd level {level}, 1 MiB frames); ratio = record bytes ÷ \
         compressed du; reads through the journal Reader with checksums, plain and compressed alternating; seek = \
         seek_time to the last tenth of the capture times and read the record there"
    )
}

/// The configuration of a raw-libzmq process (`bench raw-pub`, `bench raw-sub`), as its parent passed it.
#[allow(clippy::too_many_arguments)] // the flags of one hidden command, handed over once
pub fn raw_process_config(
    rate: &str,
    warmup: &str,
    duration: &str,
    size: usize,
    hwm: i32,
    blocks: bool,
    drain: &str,
) -> Result<LatencyConfig, BenchError> {
    Ok(LatencyConfig {
        rate: parse_rate(rate)?,
        warmup: parse_duration(warmup)?,
        duration: parse_duration(duration)?,
        size,
        hwm,
        back_pressure: BackPressure::from_blocks(blocks),
        drain: parse_duration(drain)?,
        ..LatencyConfig::default()
    })
}

fn invalid(why: &str) -> RequestError {
    RequestError::Invalid(why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> LatencyRequest {
        LatencyRequest {
            rate: None,
            rates: Vec::new(),
            transports: vec!["tcp".into()],
            duration: "2s".into(),
            warmup: "500ms".into(),
            size: 100,
            hwm: 1000,
            back_pressure: BackPressure::Drop,
            via_lvc: false,
            handoff: tickbox_subscriber::Handoff::Ring,
            idle_spin: None,
            shard_runs_asleep: None,
            stall_every: None,
            stall: None,
            log_interval: "0s".into(),
            raw_baseline: true,
            repeats: 3,
            shape: Shape::InProcess,
            executable: None,
            background: LoadSpec::default(),
        }
    }

    #[test]
    fn a_request_parses_its_quantities_and_defaults_its_rate() {
        let sweep = request().sweep().unwrap();
        assert_eq!(sweep.rates, vec![100_000]);
        assert_eq!(sweep.transports, vec![Transport::Tcp]);
        assert_eq!(sweep.base.duration, Duration::from_secs(2));
        assert_eq!(sweep.base.warmup, Duration::from_millis(500));
        assert_eq!(
            sweep.base.log_interval,
            Duration::from_millis(1),
            "at least 1 ms"
        );
        let sweep = LatencyRequest {
            rates: vec!["10k".into(), "20k".into()],
            stall_every: Some(1000),
            stall: Some("5ms".into()),
            ..request()
        }
        .sweep()
        .unwrap();
        assert_eq!(sweep.rates, vec![10_000, 20_000]);
        assert_eq!(
            sweep.base.stall.map(|s| (s.every, s.pause)),
            Some((1000, Duration::from_millis(5)))
        );
    }

    #[test]
    fn idle_spin_is_the_pools_default_unless_asked() {
        let default = request().sweep().unwrap().base.idle_spin;
        assert_eq!(
            default,
            tickbox_workers::WorkerPoolConfig::default().idle_spin.0
        );
        let asked = LatencyRequest {
            idle_spin: Some(Duration::ZERO),
            ..request()
        };
        assert_eq!(asked.sweep().unwrap().base.idle_spin, Duration::ZERO);
    }

    #[test]
    fn a_request_that_cannot_run_says_which_flag() {
        let err = |r: LatencyRequest| r.sweep().unwrap_err().to_string();
        assert!(err(LatencyRequest {
            rate: Some("lots".into()),
            ..request()
        })
        .contains("invalid rate \"lots\""));
        assert!(err(LatencyRequest {
            transports: vec!["udp".into()],
            ..request()
        })
        .contains("unknown transport"));
        assert_eq!(
            err(LatencyRequest {
                duration: "0s".into(),
                ..request()
            }),
            "--duration must be positive"
        );
        assert_eq!(
            err(LatencyRequest {
                stall_every: Some(0),
                stall: Some("1ms".into()),
                ..request()
            }),
            "--stall-every must be positive"
        );
        let inproc = LatencyRequest {
            transports: vec!["inproc".into()],
            ..request()
        };
        let ctx = zmq::Context::new();
        let refused = inproc.sweep().unwrap().under_curve(&ctx).unwrap_err();
        assert!(
            refused.to_string().contains("no mechanism to inproc"),
            "{refused}"
        );
    }

    #[test]
    fn compressed_journals_are_named_by_their_file_names() {
        let config = compress_request(10, &[PathBuf::from("/data/day1.tbj")], 2, 9);
        assert_eq!(
            config.journals,
            vec![("day1.tbj".to_owned(), PathBuf::from("/data/day1.tbj"))]
        );
        assert_eq!(
            (config.records, config.repeat, config.options.level),
            (10, 2, 9)
        );
        assert!(compress_heading(9)
            .starts_with("each journal copied plain and compressed (zstd level 9,"));
    }
}
