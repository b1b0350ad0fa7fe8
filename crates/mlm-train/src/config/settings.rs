//! The one resolve step: a run's settings made final with what they depend on (the
//! checkpoint it continues, the tokenizer it is given, its data folder), or reopened from its
//! `config.json` to continue it. Nothing changes a setting after it.

use std::ops::Deref;
use std::path::{Path, PathBuf};

use super::TrainConfig;
use crate::data::{DataFolder, Manifest, Masking, SubwordTokenizer, folder::vocab_sha256};
use crate::duration::human_duration;
use crate::error::{ConfigError, TrainError};
use crate::files::io;
use crate::model::hf::Pretrained;

/// A run's settings, final and checked: paths absolute, the data folder's settings adopted,
/// the model's vocabulary and positions set. Read as a [`TrainConfig`] (`Deref`); made only
/// by [`Settings::resolve`] (a new run), [`Settings::reopen`] (a resume) and
/// [`Settings::imported`] (an imported checkpoint), so nothing changes it after them. It is
/// what a run saves as `config.json`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(transparent)]
pub struct Settings(TrainConfig);

impl Deref for Settings {
    type Target = TrainConfig;

    fn deref(&self) -> &TrainConfig {
        &self.0
    }
}

/// What a new run's settings depend on, read before they are resolved.
pub struct Sources<'a> {
    /// The checkpoint `init_from` names, read ([`Pretrained::read`]).
    pub checkpoint: Option<&'a Pretrained>,
    /// The tokenizer `tokenizer` names, read (under `init_from`, the checkpoint's).
    pub tokenizer: Option<&'a SubwordTokenizer>,
    /// The run's data folder, mapped: `data`, or the one prepared from `corpus`.
    pub data: &'a DataFolder,
}

impl Settings {
    /// Resolves a new run's `config` against its `sources`: checks it against the checkpoint
    /// ([`TrainConfig::check_start`]) and a folder of `data` against the given tokenizer;
    /// takes the folder's `line_by_line`, `held_out_every` and `text_field`; makes `corpus`
    /// (or `data`), `tokenizer` and `init_from` absolute, so that the run resumes and
    /// evaluates from any directory; and sets `model.vocab_size` to the folder's tokenizer and
    /// `model.max_position_embeddings` to `max_seq_len` (a continued run keeps its
    /// checkpoint's sizes). Idempotent on its own result's settings.
    ///
    /// # Errors
    /// Those of [`TrainConfig::check_start`] and [`TrainConfig::validate`];
    /// [`TrainError::DataFolder`] for a folder made with another tokenizer or cut at another
    /// `max_seq_len`, saying how to prepare it again; [`TrainError::CorpusNotFound`] or
    /// [`TrainError::Io`] for a path that does not exist.
    pub fn resolve(mut config: TrainConfig, sources: &Sources) -> Result<Self, TrainError> {
        config.check_start(sources.checkpoint, sources.tokenizer)?;
        let data = sources.data;
        // A folder of `--data` is only read: it must be the given tokenizer's.
        if let (Some(_), Some(tokenizer), Some(file)) =
            (&config.data, sources.tokenizer, &config.tokenizer)
        {
            let whose = match sources.checkpoint {
                Some(_) => "the --init-from checkpoint's tokenizer",
                None => "--tokenizer",
            };
            check_same_vocab(data, tokenizer, whose, file)?;
        }
        adopt_data(&mut config, &data.path, &data.manifest)?;
        match config.data {
            Some(_) => config.data = Some(absolute(&data.path)?),
            None => {
                config.corpus = std::fs::canonicalize(&config.corpus)
                    .map_err(|_| TrainError::CorpusNotFound(config.corpus.clone()))?
            }
        }
        config.tokenizer = config.tokenizer.as_deref().map(absolute).transpose()?;
        match sources.checkpoint {
            Some(checkpoint) => config.init_from = Some(absolute(&checkpoint.dir)?),
            None => {
                config.model = config.model.clone().with_positions(config.max_seq_len);
                *config.model.vocab_size_mut() = data.tokenizer.vocab_size();
            }
        }
        config.validate()?;
        Ok(Self(config))
    }

    /// Reopens the settings `config` of the run in `path`, saved at a step `done` after
    /// `elapsed_seconds` of training, to continue it: a run by step count to `max_steps` (its
    /// own if `None`), a run by the clock to `time_budget_seconds` of training in all (its
    /// own budget if `None`); a run keeps its kind. The learning rate then follows the new
    /// end from where the run is, as it follows a new `max_steps` from the step reached.
    ///
    /// # Errors
    /// [`TrainError::BudgetSpent`] for a run by the clock with no time left;
    /// [`ConfigError`] for a run by step count at its `max_steps`, for a setting of the
    /// other kind of run, or one that [`TrainConfig::validate`] refuses.
    pub fn reopen(
        mut config: TrainConfig,
        path: &Path,
        (done, elapsed_seconds): (usize, f64),
        max_steps: Option<usize>,
        time_budget_seconds: Option<f64>,
    ) -> Result<Self, TrainError> {
        let refuse = |reason: String| Err(TrainError::Config(ConfigError::path(path, reason)));
        match (config.time_budget_seconds, max_steps, time_budget_seconds) {
            (None, _, Some(_)) => {
                return refuse(format!(
                    "trains by step count (to max_steps {}); --time-budget is for a run \
                     started with one (pass --max-steps to extend this one)",
                    config.max_steps
                ));
            }
            (Some(budget), Some(_), _) => {
                return refuse(format!(
                    "trains by the clock (a time budget of {}); --max-steps does not end it \
                     (pass a larger --time-budget to extend it)",
                    human_duration(budget)
                ));
            }
            (Some(_), None, Some(budget)) => config.time_budget_seconds = Some(budget),
            (_, max_steps, _) => config.max_steps = max_steps.unwrap_or(config.max_steps),
        }
        config.validate()?;
        match config.time_budget_seconds {
            Some(budget) if elapsed_seconds >= budget => Err(TrainError::BudgetSpent {
                dir: path.to_path_buf(),
                budget_seconds: budget,
                elapsed_seconds,
            }),
            None if done >= config.max_steps => {
                let reason = format!(
                    "is already at step {done} of max_steps {}: pass a larger --max-steps to \
                     continue",
                    config.max_steps
                );
                Err(ConfigError::path(path, reason).into())
            }
            _ => Ok(Self(config)),
        }
    }

    /// The settings of a run imported from `checkpoint` (`import-hf`), for `predict`, `eval`
    /// and `export-hf`: the checkpoint's model and vocabulary, sequences as long as its
    /// positions allow (at most the default), and `corpus` (absolute where it exists) for
    /// `eval`'s held-out split.
    ///
    /// # Errors
    /// Those of [`TrainConfig::validate`].
    pub fn imported(checkpoint: &Pretrained, corpus: &Path) -> Result<Self, TrainError> {
        let corpus = std::fs::canonicalize(corpus).unwrap_or_else(|_| corpus.to_path_buf());
        let mut config = TrainConfig::new(corpus)
            .with_vocab_size(checkpoint.config.vocab_size())
            .with_model(checkpoint.config.clone());
        config.max_seq_len = config.max_seq_len.min(config.model.max_sequence_len());
        config.validate()?;
        Ok(Self(config))
    }
}

impl TrainConfig {
    /// Checks a new run's settings against what it starts from, before anything is
    /// written: under `init_from`, the `checkpoint`'s positions hold `max_seq_len`, the model
    /// is its architecture (dropout aside) and `tokenizer` its vocabulary
    /// ([`TrainConfig::continue_from`] makes them so).
    ///
    /// # Errors
    /// [`ConfigError::Value`] for a `max_seq_len` above the checkpoint's positions;
    /// [`TrainError::HfConfig`] for another model or tokenizer than the checkpoint's;
    /// [`TrainError::Tokenizer`] for span masking over a tokenizer without word starts
    /// ([`SubwordTokenizer::word_continuations`]).
    pub fn check_start(
        &self,
        checkpoint: Option<&Pretrained>,
        tokenizer: Option<&SubwordTokenizer>,
    ) -> Result<(), TrainError> {
        if self.masking == Masking::Span
            && let Some(tokenizer) = checkpoint.map(|c| &c.tokenizer).or(tokenizer)
        {
            // Span masking needs word starts: a Unigram vocabulary without `▁` has none.
            tokenizer.word_continuations()?;
        }
        let Some(checkpoint) = checkpoint else {
            return Ok(());
        };
        check_positions(self.max_seq_len, checkpoint)?;
        checkpoint.check_architecture(&self.model)?;
        let same = match tokenizer {
            Some(tokenizer) => tokenizer.vocab()? == checkpoint.tokenizer.vocab()?,
            None => false,
        };
        if same {
            return Ok(());
        }
        Err(TrainError::HfConfig {
            path: checkpoint.tokenizer_file.clone(),
            reason: "is not the run's tokenizer: with init_from, the run takes the \
                     checkpoint's (TrainConfig::continue_from)"
                .into(),
        })
    }
}

/// Refuses a `max_seq_len` longer than `checkpoint`'s position table holds.
pub(super) fn check_positions(
    max_seq_len: usize,
    checkpoint: &Pretrained,
) -> Result<(), ConfigError> {
    let model = &checkpoint.config;
    let longest = model.max_sequence_len();
    let offset = match model.position_offset() {
        0 => String::new(),
        n => format!(" less the {n} rows before RoBERTa's first position"),
    };
    ConfigError::check(
        "max_seq_len",
        max_seq_len,
        max_seq_len <= longest,
        format!(
            "is above the {longest} positions of {} (max_position_embeddings = {}{offset})",
            checkpoint.dir.display(),
            model.max_position_embeddings()
        ),
    )
}

/// Takes the settings that `manifest`'s data folder (at `data`) fixes (`line_by_line`,
/// `held_out_every`, `text_field`), and checks `max_seq_len` against it.
///
/// # Errors
/// [`TrainError::DataFolder`] for a `max_seq_len` other than the folder's: its sequences
/// were cut at its own, and the position table has `max_seq_len` rows.
fn adopt_data(
    config: &mut TrainConfig,
    data: &Path,
    manifest: &Manifest,
) -> Result<(), TrainError> {
    if config.max_seq_len != manifest.max_seq_len {
        // A checkpoint's positions may not hold the folder's sequences.
        let positions = config.model.max_sequence_len();
        let advice = match config.init_from.is_some() && manifest.max_seq_len > positions {
            true => format!("the checkpoint holds sequences of up to {positions}: "),
            false => "leave --max-seq-len out, or ".to_string(),
        };
        return Err(TrainError::DataFolder {
            path: data.to_path_buf(),
            reason: format!(
                "built for max_seq_len {}, the run asks for {}: {}prepare the corpus again \
                 with --max-seq-len {}",
                manifest.max_seq_len, config.max_seq_len, advice, config.max_seq_len
            ),
        });
    }
    config.line_by_line = manifest.line_by_line;
    config.held_out_every = manifest.held_out_every;
    config.text_field.clone_from(&manifest.text_field);
    Ok(())
}

/// Refuses a data folder whose ids come from another vocabulary than `tokenizer` (named by
/// `whose`, read from `file`), saying how to prepare it with that tokenizer.
///
/// # Errors
/// [`TrainError::DataFolder`] naming both vocabularies' hashes and sizes.
pub fn check_same_vocab(
    data: &DataFolder,
    tokenizer: &SubwordTokenizer,
    whose: &str,
    file: &Path,
) -> Result<(), TrainError> {
    let (theirs, ours) = (&data.manifest.tokenizer_sha256, vocab_sha256(tokenizer)?);
    if *theirs == ours {
        return Ok(());
    }
    Err(TrainError::DataFolder {
        path: data.path.clone(),
        reason: format!(
            "made with another tokenizer than {whose} (vocabulary sha256 {} against {}, \
             {} against {} tokens): prepare it again with that tokenizer: `mlm-train prepare \
             --corpus YOUR_TEXT --tokenizer {} --out DIR`",
            &theirs[..12],
            &ours[..12],
            data.manifest.vocab_size,
            tokenizer.vocab_size(),
            file.display()
        ),
    })
}

/// `path`, absolute and without links.
fn absolute(path: &Path) -> Result<PathBuf, TrainError> {
    std::fs::canonicalize(path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_clock(budget: f64) -> TrainConfig {
        let config = TrainConfig::new("corpus".into()).with_max_steps(2000);
        config.with_time_budget_seconds(Some(budget))
    }

    fn message(result: Result<Settings, TrainError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn a_run_by_the_clock_resumes_with_its_budget_or_a_new_total() {
        let path = Path::new("run");
        let config = Settings::reopen(by_clock(300.0), path, (40, 120.0), None, None).unwrap();
        assert_eq!(config.time_budget_seconds, Some(300.0));
        let config = Settings::reopen(by_clock(300.0), path, (40, 120.0), None, Some(600.0));
        let config = config.unwrap();
        assert_eq!(config.time_budget_seconds, Some(600.0));
        assert_eq!(
            config.max_steps, 2000,
            "max_steps, the warm-up share, is kept"
        );
    }

    #[test]
    fn a_run_by_the_clock_with_its_budget_spent_has_nothing_left_to_train() {
        let path = Path::new("run");
        for (budget, new) in [(300.0, None), (300.0, Some(200.0)), (100.0, Some(300.5))] {
            match Settings::reopen(by_clock(budget), path, (900, 300.5), None, new) {
                Err(e @ TrainError::BudgetSpent { .. }) => {
                    let text = e.to_string();
                    assert!(text.contains("nothing left to train"), "{text}");
                    assert!(text.contains("larger --time-budget"), "{text}");
                }
                other => panic!("{budget} {new:?}: {other:?}"),
            }
        }
        Settings::reopen(by_clock(300.0), path, (900, 300.5), None, Some(301.0)).unwrap();
    }

    #[test]
    fn a_run_keeps_its_kind_when_resumed() {
        let path = Path::new("run");
        let at = (40, 100.0);
        let text = message(Settings::reopen(
            by_clock(300.0),
            path,
            at,
            Some(2000),
            None,
        ));
        assert!(
            text.contains("trains by the clock (a time budget of 5m)"),
            "{text}"
        );
        let by_steps = || TrainConfig::new("corpus".into()).with_max_steps(2000);
        let text = message(Settings::reopen(by_steps(), path, at, None, Some(600.0)));
        assert!(
            text.contains("trains by step count (to max_steps 2000)"),
            "{text}"
        );
        let resumed = Settings::reopen(by_steps(), path, at, Some(2500), None).unwrap();
        assert_eq!(
            (resumed.max_steps, resumed.time_budget_seconds),
            (2500, None)
        );
        let text = message(Settings::reopen(by_steps(), path, (2000, 1.0), None, None));
        assert!(
            text.contains("is already at step 2000 of max_steps 2000"),
            "{text}"
        );
    }
}
