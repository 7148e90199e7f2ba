//! Exit codes of runs that several commands share (a subscriber's fatal event), and journal time arguments.
//! Wiring only: the judgements live in the libraries.

use std::path::Path;
use std::process::ExitCode;

use crate::exit_code;
use crate::out::errln;

/// Maps a subscriber run's outcome to the exit code, printing the machine-readable line for a fatal event.
pub(crate) fn finish<W>(report: &tickbox_subscriber::Report<W>) -> ExitCode {
    match &report.fatal {
        // Not the snail: the subscriber could not join history and live without a gap, and says why.
        Some(tickbox_subscriber::Fatal::CatchUp(failed)) => {
            errln!("error: catch-up: {}", failed.reason);
            ExitCode::from(exit_code::ERROR)
        }
        Some(fatal) => {
            errln!("SNAIL {}", fatal.to_json());
            ExitCode::from(exit_code::SNAIL)
        }
        None => ExitCode::from(exit_code::OK),
    }
}

/// The capture time of a journal's first record, which a `+DURATION` time argument counts from.
pub(crate) fn first_capture_ns(path: &Path) -> anyhow::Result<u64> {
    tickbox_recorder::first_capture_ns(path)?.ok_or_else(|| {
        anyhow::anyhow!(
            "{} is empty: a +DURATION time needs a first record",
            path.display()
        )
    })
}
