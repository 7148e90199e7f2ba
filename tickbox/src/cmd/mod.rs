//! One module per subcommand; each exposes `Args` (clap derive) and `run(args, &config) -> Result<ExitCode>`.

pub(crate) mod bench;
pub(crate) mod broker;
pub(crate) mod call;
pub(crate) mod clone_server;
pub(crate) mod config;
pub(crate) mod coord;
pub(crate) mod ctl;
pub(crate) mod demo;
pub(crate) mod docs;
pub(crate) mod export;
pub(crate) mod feed;
pub(crate) mod freelance_server;
pub(crate) mod import;
pub(crate) mod journal;
pub(crate) mod keygen;
pub(crate) mod lvc;
pub(crate) mod queue;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod replay_local;
pub(crate) mod subscribe;
pub(crate) mod tap;
pub(crate) mod titanic;
pub(crate) mod top;
pub(crate) mod tune;
