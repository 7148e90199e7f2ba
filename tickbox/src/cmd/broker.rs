//! `tickbox broker`: a Majordomo broker (7/MDP 0.1 and 18/MDP 0.2 on one ROUTER, 8/MMI), alone or as one half
//! of a Binary Star pair.

use std::process::ExitCode;

use anyhow::Context;
use tickbox_bstar::{BstarConfig, BstarEndpoints, Role};
use tickbox_majordomo::summary::{default_state_bind, BrokerSummary};
use tickbox_majordomo::{run_broker, run_broker_pair, PairOptions};

use crate::cli::broker::Args;
use crate::config::TickboxConfig;
use crate::out::{errln, out, outln};

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_bind("--bind", &args.bind)?;
    if let Some(peer) = &args.peer {
        crate::flags::check_connect("--peer", peer)?;
    }
    if let Some(state_bind) = &args.state_bind {
        crate::flags::check_bind("--state-bind", state_bind)?;
    }
    let mut cfg = config.broker.clone();
    if let Some(d) = args.heartbeat {
        cfg.heartbeat_interval = d;
    }
    let (live, broker_metrics) = tickbox_majordomo::metrics::broker_metrics();
    cfg.live = live;
    let _metrics =
        args.metrics
            .start(config, "broker", vec![std::sync::Arc::new(broker_metrics)])?;
    let stop = crate::shutdown::flag();
    let ctx = zmq::Context::new();
    // Before any bind, and kept until the sockets are closed: the only way to make the broker's ROUTER.
    let gate = config.auth.gate(&ctx).context("starting the ZAP handler")?;
    let (tx, rx) = std::sync::mpsc::channel();
    // Print the bound endpoint as soon as it is known, so scripts and tests can use `:*` ports.
    let json = args.json;
    let printer = std::thread::spawn(move || {
        if let Ok(ep) = rx.recv() {
            // With --json, stdout carries only the summary object.
            if json {
                errln!("broker listening on {ep}");
            } else {
                outln!("broker listening on {ep}");
            }
        }
    });
    let role = match (args.primary, args.backup) {
        (true, _) => Some(Role::Primary),
        (_, true) => Some(Role::Backup),
        _ => None,
    };
    let mut pair_state = None;
    let stats = match role {
        None => run_broker(&gate, &args.bind, cfg, &stop, Some(tx)).context("broker")?,
        Some(role) => {
            let state_bind = args
                .state_bind
                .unwrap_or_else(|| default_state_bind(role).to_owned());
            let pair = PairOptions {
                role,
                state: BstarEndpoints {
                    state_bind,
                    state_peer: args.peer.clone().unwrap_or_default(),
                },
                bstar: BstarConfig {
                    heartbeat: args.bstar_heartbeat,
                    ..Default::default()
                },
            };
            let (stats, state) = run_broker_pair(&gate, &args.bind, cfg, &pair, &stop, Some(tx))
                .context("broker pair")?;
            pair_state = Some(format!("{state:?}"));
            stats
        }
    };
    let _ = printer.join();
    let summary = BrokerSummary {
        stats,
        binary_star_state: pair_state,
        auth: config.auth.summary(),
    };
    if args.json {
        crate::out::json(&summary)?;
    } else {
        out!("{}", summary.text());
    }
    Ok(ExitCode::SUCCESS)
}
