//! `tickbox tune`: see the host (`show`), check it (`check`), plan the pinning (`plan`), and sweep the bench
//! pipeline to the best configuration (`sweep`). Parsing and wiring only: the work is in `tickbox-tuning`,
//! `tickbox-bench` and `tickbox_zmqx::context`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use tickbox_bench::sweep::{GridSweep, GridSweepOutcome, PointRun};
use tickbox_bench::{parse_duration, parse_rate, Transport};
use tickbox_tuning::sweep::{self, DispatchMode, Grid, Pinning, PlanBasis};
use tickbox_tuning::{topology, CheckInput, PlanRequest, Severity};

use crate::cli::tune::{Args, CheckArgs, PlanArgs, ShowArgs, SweepArgs, TuneCommand};
use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::{errln, out};

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    match args.command {
        TuneCommand::Show(a) => show(a),
        TuneCommand::Check(a) => check(a, config),
        TuneCommand::Plan(a) => plan(a),
        TuneCommand::Sweep(a) => sweep_cmd(*a),
    }
}

fn read_topology(root: &Path) -> anyhow::Result<topology::Topology> {
    topology::read(root).with_context(|| format!("reading the host under {}", root.display()))
}

fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let t = read_topology(&args.root.root)?;
    if args.json {
        crate::out::json_pretty(&t)?;
    } else {
        out!("{}", t.render_tables());
    }
    Ok(ExitCode::SUCCESS)
}

/// Every endpoint the config's data-plane sections bind, named by where it is set.
fn bound_endpoints(config: &TickboxConfig) -> Vec<(String, String)> {
    let mut binds: Vec<(String, String)> = config
        .feed
        .shards
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.connect)
        .map(|(i, s)| (format!("feed.shards[{i}]"), s.endpoint.clone()))
        .collect();
    let lvc = &config.lvc;
    binds.push(("lvc.bind".into(), lvc.bind.clone()));
    binds.extend(
        lvc.upstream_bind
            .iter()
            .map(|e| ("lvc.upstream_bind".to_string(), e.clone())),
    );
    binds.extend(lvc.tap.iter().map(|e| ("lvc.tap".to_string(), e.clone())));
    binds.extend(
        lvc.snapshot
            .iter()
            .map(|e| ("lvc.snapshot".to_string(), e.clone())),
    );
    binds.extend(
        config
            .recorder
            .serve
            .iter()
            .map(|e| ("recorder.serve (history service)".to_string(), e.clone())),
    );
    binds
}

/// Who may connect under CURVE, as `[security]` says it.
fn admission(config: &TickboxConfig) -> tickbox_tuning::Admission {
    let security = &config.security;
    let mut any_roles: Vec<String> = security
        .roles
        .iter()
        .filter(|(_, r)| r.allow == Some(tickbox_auth::Allow::Any))
        .map(|(role, _)| role.clone())
        .collect();
    if security.allow == Some(tickbox_auth::Allow::Any) {
        any_roles.push("*".into());
    }
    tickbox_tuning::Admission {
        curve: security.mechanism() == tickbox_auth::MechanismName::Curve,
        default_allow: security.allow.is_some(),
        any_roles,
    }
}

fn check(args: CheckArgs, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    let t = read_topology(&args.root.root)?;
    let input = CheckInput {
        hot: tickbox_tuning::hot_threads(
            config
                .subscriber
                .shards
                .iter()
                .map(|s| (s.core, s.nic.as_deref())),
            &config.context.io_thread_cpus,
            &config.workers.cores,
        ),
        rcvbuf: args.rcvbuf.or(config.context.sockets.max_rcvbuf()),
        sndbuf: args.sndbuf.or(config.context.sockets.max_sndbuf()),
    };
    let mut findings = tickbox_tuning::check(&t, &input);
    findings.extend(tickbox_tuning::check_exposure(
        &bound_endpoints(config),
        config.security.mechanism() == tickbox_auth::MechanismName::Curve,
        !config.security.allow_ips.is_empty(),
    ));
    findings.extend(tickbox_tuning::check_admission(&admission(config)));
    findings.extend(tickbox_tuning::check_metrics_exposure(
        &config.metrics.bind,
        tickbox_metrics::is_loopback(&config.metrics.bind),
    ));
    if args.json {
        crate::out::json_pretty(&serde_json::json!({ "findings": findings }))?;
    } else {
        out!("{}", tickbox_tuning::render_findings(&findings));
    }
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    if args.strict && warnings > 0 {
        errln!("tune check --strict: {warnings} warning(s) stand");
        return Ok(ExitCode::from(exit_code::ERROR));
    }
    Ok(ExitCode::SUCCESS)
}

fn plan(args: PlanArgs) -> anyhow::Result<ExitCode> {
    crate::flags::check_connect_all("--connect", &args.connect)?;
    let t = read_topology(&args.root.root)?;
    let request = PlanRequest {
        nics: args.nics,
        shards_per_nic: args.shards_per_nic,
        workers_per_nic: args.workers,
        connect: args.connect,
    };
    let plan = tickbox_tuning::plan(&t, &request)?;
    let text = plan.to_toml();
    for c in plan.compromises() {
        tracing::warn!("compromise: {c}");
    }
    match &args.out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?;
            errln!("plan written to {}", path.display());
        }
        None if !args.json => out!("{text}"),
        None => {}
    }
    if args.json {
        crate::out::json_pretty(&plan)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The host and the NIC a `--pin plan` sweep plans for (`tickbox_tuning::basis`).
fn plan_basis(nic: Option<&str>) -> anyhow::Result<Option<PlanBasis>> {
    let topology = read_topology(Path::new("/"))?;
    PlanBasis::choose(topology, nic)
        .map_err(|n| anyhow::anyhow!("--nic {n}: no such interface on this host"))
}

fn sweep_cmd(args: SweepArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.repeats >= 1, "--repeats must be at least 1");
    let transport: Transport = args.transport.parse()?;
    let duration = parse_duration(&args.duration)?;
    let warmup = parse_duration(&args.warmup)?;
    let rate = parse_rate(&args.rate)?;
    let pinning = Pinning::parse_flags(&args.pin).map_err(anyhow::Error::msg)?;
    let objective = sweep::Objective::from_flags(&args.objective, args.no_latency)
        .map_err(anyhow::Error::msg)?;
    let dispatch = DispatchMode::parse_flags(&args.dispatch).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        args.shards
            .iter()
            .chain(&args.workers)
            .chain(&args.batch)
            .chain(&args.io_threads)
            .all(|&n| n >= 1),
        "--shards, --workers, --batch and --io-threads take values of at least 1"
    );
    // Pinned I/O threads go to the highest CPUs first, away from CPU 0 and its housekeeping.
    let mut cpus: Vec<usize> = tickbox_zmqx::context::allowed_cpus()?.into_iter().collect();
    cpus.reverse();
    let plan = if pinning.contains(&Pinning::Plan) {
        plan_basis(args.nic.as_deref())?
    } else {
        None
    };
    let sweep = GridSweep {
        grid: Grid {
            shards: args.shards.clone(),
            workers: args.workers.clone(),
            hwms: args.hwm.clone(),
            batches: args.batch.clone(),
            dispatch,
            io_threads: args.io_threads.clone(),
            pinning,
            cpus,
            plan,
        },
        run: PointRun {
            transport,
            size: args.size,
            warmup,
            duration,
            rate,
            latency: !args.no_latency,
        },
        repeats: args.repeats,
        objective,
        max_points: args.max_points,
    };
    let GridSweepOutcome { results, defaults } = sweep.run()?;
    let best = &results[0];
    let baseline = results.iter().find(|r| r.point == defaults);
    let text = sweep::winner_toml(best, baseline, args.repeats);
    std::fs::write(&args.out, &text).with_context(|| format!("writing {}", args.out.display()))?;
    if args.json {
        crate::out::json_pretty(&sweep::summary_json(
            &results, &defaults, objective, &args.out,
        ))?;
    } else {
        out!("{}", sweep::table(&results, &defaults, objective));
        errln!("winning config written to {}", args.out.display());
    }
    Ok(ExitCode::SUCCESS)
}
