//! `tickbox call`: send one request to a Majordomo service and print the reply frames, one per line (UTF-8 as
//! text, anything else as `0x…` hex). Several `--broker` endpoints form a fail-over list (Binary Star pair).

use std::io::Write;
use std::process::ExitCode;

use tickbox_majordomo::reply_text::{frame_text, is_unauthorised, is_unknown_service};
use tickbox_majordomo::{Client, ClientConfig, MdpError};

use crate::cli::call::Args;
use crate::config::TickboxConfig;
use crate::exit_code;
use crate::out::{errln, outln};

pub(crate) fn run(args: Args, config: &TickboxConfig) -> anyhow::Result<ExitCode> {
    crate::flags::check_connect_all("--broker", &args.broker)?;
    let ctx = zmq::Context::new();
    let cfg = ClientConfig {
        timeout: args.timeout,
        attempts: args.attempts,
    };
    let mut client =
        Client::with_failover(&ctx, &args.broker, cfg).with_security(config.auth.clone());
    let body: Vec<Vec<u8>> = if args.body.is_empty() {
        vec![Vec::new()]
    } else {
        args.body.iter().map(|b| b.as_bytes().to_vec()).collect()
    };
    // Asked first, so a service nobody serves (a typo, a command started without --broker) is one quick answer
    // instead of every attempt's timeout: the broker queues a request for an unknown service until it expires.
    if !args.service.starts_with("mmi.") {
        match client.request("mmi.service", &[args.service.as_bytes().to_vec()]) {
            Ok(reply) if is_unknown_service(&reply) => {
                outln!("404");
                errln!(
                    "error: no worker has registered {} with the broker (MMI 404); see `tickbox call --help` for \
                     the status services and which command serves each",
                    args.service
                );
                return Ok(ExitCode::from(exit_code::ERROR));
            }
            // 200 (served), a grant refusal or anything else: the request itself says what happens.
            Ok(_) => {}
            Err(e @ MdpError::Timeout { .. }) => {
                errln!("error: {e}");
                return Ok(ExitCode::from(exit_code::TIMEOUT));
            }
            Err(e) => return Err(e.into()),
        }
    }
    match client.request(&args.service, &body) {
        Ok(reply) => {
            let mut out = crate::out::stdout();
            for frame in &reply {
                writeln!(out, "{}", frame_text(frame))?;
            }
            if is_unauthorised(&reply) {
                return Ok(ExitCode::from(exit_code::REFUSED));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ MdpError::Timeout { .. }) => {
            errln!("error: {e}");
            // A CURVE refusal reaches a client as silence (libzmq closes the connection and never retries):
            // name the key the broker's log will name, so the two can be matched.
            if let Some(key) = config.auth.public_key() {
                errln!(
                    "hint: under CURVE a refused handshake looks like no reply: if the broker's log says it refused \
                     public key {key}, this key is not in its allow directory; check server_key too"
                );
            }
            Ok(ExitCode::from(exit_code::TIMEOUT))
        }
        Err(e) => Err(e.into()),
    }
}
