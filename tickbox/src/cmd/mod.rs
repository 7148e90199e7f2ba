//! One module per subcommand; each exposes `Args` (clap derive) and `run(args, &config) -> Result<ExitCode>`.

pub mod bench;
pub mod broker;
pub mod call;
pub mod clone_server;
pub mod config;
pub mod coord;
pub mod ctl;
pub mod demo;
pub mod feed;
pub mod freelance_server;
pub mod journal;
pub mod lvc;
pub mod record;
pub mod replay;
pub mod subscribe;
pub mod tap;
pub mod titanic;
pub mod tune;
