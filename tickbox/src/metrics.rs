//! `--metrics ADDR` of the long-running commands: one flag, one call that starts the endpoint with the sources
//! the command's libraries hand over (`tickbox_metrics` serves them; each library reads its own counters).

use std::sync::Arc;

use anyhow::Context as _;
use tickbox_metrics::{Endpoint, Scrape, Source};

use crate::config::TickboxConfig;
use crate::out::errln;

/// The `--metrics` flag, flattened into every long-running command.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct MetricsArgs {
    /// Serve Prometheus/OpenMetrics text at http://ADDR/metrics: PORT (loopback), HOST:PORT or [IPv6]:PORT; port 0
    /// takes a free one. The address is printed on stderr (`metrics endpoint http://…/metrics`). Every counter of
    /// the summary and its --json is there, read when scraped. Overrides `[metrics] bind`. A taken address exits 11.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics: Option<String>,
}

impl MetricsArgs {
    /// Starts the endpoint when `--metrics` or `[metrics] bind` asks for one, serving `sources` and the process's
    /// own facts under `role`; `None` when neither does. Keep the value alive for as long as it should serve.
    pub(crate) fn start(
        &self,
        config: &TickboxConfig,
        role: &'static str,
        sources: Vec<Arc<dyn Source>>,
    ) -> anyhow::Result<Option<Endpoint>> {
        let bind = match &self.metrics {
            Some(bind) => bind.clone(),
            None if !config.metrics.bind.is_empty() => config.metrics.bind.clone(),
            None => return Ok(None),
        };
        let mut all = sources;
        all.push(Arc::new(process_facts));
        all.push(Arc::new(tickbox_auth::metrics::AuthMetrics(
            config.auth.clone(),
        )));
        let endpoint = Endpoint::start(&bind, role, all).context("--metrics / [metrics] bind")?;
        if !endpoint.local_addr().ip().is_loopback() {
            tracing::warn!(
                addr = %endpoint.local_addr(),
                "the metrics endpoint is reachable from the network and has no authentication; bind loopback and \
                 scrape through a proxy, or fence it off (`tune check` says so too)"
            );
        }
        errln!("metrics endpoint {}", endpoint.url());
        Ok(Some(endpoint))
    }
}

/// The version and start time of this process, on every endpoint.
fn process_facts(out: &mut Scrape) {
    out.info(
        "tickbox_build",
        "The tickbox build serving these metrics.",
        &[("version", env!("CARGO_PKG_VERSION").to_owned())],
    );
    out.gauge_seconds(
        "tickbox_process_start_time",
        "When this process started, seconds since the Unix epoch.",
        &[],
        *START,
    );
}

static START: std::sync::LazyLock<f64> = std::sync::LazyLock::new(|| {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
});

/// Called at the start of `main`, so the start time is the process's, not the first scrape's.
pub(crate) fn mark_start() {
    std::sync::LazyLock::force(&START);
}
