//! `train`: a new run or a resume, alone or as one rank of an MPI job, and what it prints
//! when it ends.

use std::path::Path;
use std::time::Duration;

use crate::cli::args::TrainArgs;
use crate::cli::output::{exit_status, fetch_and_report, loss_by_input};
use crate::data::{DEFAULT_CORPUS, Masking, default_packages};
use crate::duration::human_duration;
use crate::error::TrainError;
use crate::run::RunDir;
use crate::run::report::Summary;
use crate::train::distributed::ProcessGroup;
use crate::train::session::RunContext;
use crate::train::stop::{self, StopSignal};
use crate::train::{resume_with, train_with};

/// `train`: a new run or a resume, alone or as one rank of a data-parallel run that an MPI
/// launcher started. A rank reports its own result before it leaves the job
/// ([`ProcessGroup::finish`]).
///
/// With `--minimal-pairs`, rank 0 scores the finished model after every rank has left the
/// job, so that no rank waits on it; a run stopped early is not scored.
pub(crate) fn train_command(args: &TrainArgs) -> Result<u8, TrainError> {
    // Read first: a bad suite fails before any training.
    let suite = args.pairs.read()?;
    let group = ProcessGroup::from_launcher(Duration::from_secs(args.collective_timeout))?;
    let rank = group.as_ref().map_or(0, |group| group.rank);
    let result = train_as(args, group.as_ref());
    let status = match group {
        None => result?,
        Some(group) => {
            // A run's end (a stop by signal included) and a spent budget are the same on
            // every rank.
            let alike = matches!(result, Ok(_) | Err(TrainError::BudgetSpent { .. }));
            let status = exit_status(result);
            group.finish(alike, status);
            status
        }
    };
    if let (0, 0, Some(suite)) = (status, rank, suite) {
        let run = args.resume.as_ref().unwrap_or(&args.run);
        let score = suite.score(run, args.backend)?;
        let (accuracy, paradigms) = (score.accuracy, score.paradigms.len());
        let unigram = score
            .unigram_accuracy
            .map_or("n/a".into(), |a| format!("{:.1} %", 100.0 * a));
        let summary = Summary::add_minimal_pairs(run, score)?;
        println!(
            "minimal pairs: {:.1} % over {paradigms} paradigms (word-frequency baseline {unigram}, \
             chance 50 %), beside the held-out loss of {:.4} nats; added to {}",
            100.0 * accuracy,
            summary.final_valid_loss,
            RunDir(run.clone()).summary().display()
        );
    }
    Ok(status)
}

/// [`train_command`] as `group`'s rank, or as a process of its own.
fn train_as(args: &TrainArgs, group: Option<&ProcessGroup>) -> Result<u8, TrainError> {
    stop::install_handlers()?;
    let rank = group.map_or(0, |group| group.rank);
    let summary = {
        let device = args.backend.device()?;
        let run = args.resume.as_ref().unwrap_or(&args.run);
        let context = RunContext::new(run, &device, args.backend.name()).with_group(group);
        match &args.resume {
            Some(_) => resume_with(args.max_steps, args.time_budget, &context),
            None => {
                let mut config = args.config()?;
                config.world_size = group.map_or(1, |group| group.world_size);
                // Rank 0 alone fetches: ranks on one machine would share the staging folder.
                if config.data.is_none() && config.corpus == Path::new(DEFAULT_CORPUS) && rank == 0
                {
                    fetch_and_report(&config.corpus, &default_packages())?;
                }
                train_with(config, &context)
            }
        }
    }?;
    let run = args.resume.as_ref().unwrap_or(&args.run);
    print_result(&summary, run, rank);
    Ok(stop_status(&summary, run))
}

/// What a finished (or stopped) run prints: the held-out result against its baselines.
fn print_result(summary: &Summary, run: &Path, rank: usize) {
    let gain = summary.gain_over_unigram;
    println!(
        "held-out loss {:.4} nats (unigram baseline {:.4}: {:.2} nats {}), accuracy {:.1} % \
         (most-frequent-token baseline {:.1} %), perplexity {:.1}; {:.0} tokens/s, {:.0} s",
        summary.final_valid_loss,
        summary.unigram_entropy,
        gain.abs(),
        if gain >= 0.0 { "below" } else { "above" },
        100.0 * summary.valid_accuracy,
        100.0 * summary.most_frequent_token_accuracy,
        summary.valid_perplexity,
        summary.tokens_per_second,
        summary.wall_time_seconds
    );
    println!(
        "held-out {}",
        loss_by_input(
            summary.valid_mask_loss,
            summary.valid_random_loss,
            summary.valid_unchanged_loss
        )
    );
    if summary.masking == Masking::Span {
        println!("trained on span masking (SpanBERT); held out on token masking");
    }
    if let Some(budget) = summary.time_budget_seconds {
        println!(
            "trained by the clock: {} steps in {} of a {} time budget{}",
            summary.steps,
            human_duration(summary.wall_time_seconds),
            human_duration(budget),
            if summary.stopped_by.is_some() {
                ""
            } else {
                " (the final evaluation and checkpoint after it)"
            }
        );
    }
    if let Some(traffic) = &summary.all_reduce {
        println!(
            "{} ranks: {:.2} MiB all-reduced per step and rank, {:.1} ms per all-reduce on \
             average (waiting for the slowest rank included)",
            summary.world_size,
            traffic.bytes_per_step as f64 / (1 << 20) as f64,
            1e3 * traffic.seconds_per_step
        );
    }
    match rank {
        0 => println!("run saved in {}", run.display()),
        _ => println!("rank {rank} done; rank 0 saved the run"),
    }
}

/// Success, or 128 + the number of the signal that stopped the run early (after its
/// checkpoint), with a line saying how to continue.
fn stop_status(summary: &Summary, run: &Path) -> u8 {
    // On every rank of a data-parallel run, whichever rank got the signal.
    let Some(signal) = summary
        .stopped_by
        .as_deref()
        .and_then(StopSignal::from_name)
    else {
        return 0;
    };
    let of = match summary.time_budget_seconds {
        Some(budget) => format!(
            "({} of its {} time budget)",
            human_duration(summary.wall_time_seconds),
            human_duration(budget)
        ),
        None => format!("of {}", summary.max_steps),
    };
    let launcher = match summary.world_size {
        1 => String::new(),
        n => format!("mpirun -np {n} "),
    };
    eprintln!(
        "stopped by {} at step {} {of}, checkpoint saved: continue with `{launcher}mlm-train \
         train --resume {}`",
        signal.name(),
        summary.steps,
        run.display()
    );
    signal.exit_status()
}
