//! Using a trained run: fill in `[MASK]`s, and measure held-out loss.

use std::path::Path;

use burn::tensor::Device;
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Int, Tensor, TensorData};

use crate::config::TrainConfig;
use crate::data::{self, SubwordTokenizer};
use crate::error::TrainError;
use crate::eval::{EvalMetrics, UnigramScorer, evaluate};
use crate::model::{MaskedLm, ModelForMaskedLm};
use crate::run::checkpoint;
use crate::run::dir::RunDir;

/// The candidates for one `[MASK]`.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskPrediction {
    /// Position of the `[MASK]` among the text's tokens (`[CLS]` is 0).
    pub position: usize,
    /// The `top_k` tokens with their probabilities, most probable first.
    pub candidates: Vec<(String, f64)>,
}

/// A trained run loaded for inference: configuration, tokenizer and newest checkpoint.
pub struct TrainedRun {
    /// The run's configuration.
    pub config: TrainConfig,
    /// The run's tokenizer.
    pub tokenizer: SubwordTokenizer,
    /// The model of the newest complete checkpoint.
    pub model: ModelForMaskedLm,
    dir: RunDir,
}

impl TrainedRun {
    /// Loads the run in `run_dir`.
    ///
    /// # Errors
    /// [`TrainError::Json`], [`TrainError::Tokenizer`] or [`TrainError::Checkpoint`]
    /// naming the missing or broken file.
    pub fn load(run_dir: &Path, device: &Device) -> Result<Self, TrainError> {
        let dir = RunDir(run_dir.to_path_buf());
        let config = dir.load_config()?;
        let tokenizer = SubwordTokenizer::from_file(&dir.tokenizer())?;
        let model = checkpoint::load_model(&checkpoint::latest(run_dir)?, &config.model, device)?;
        Ok(Self {
            config,
            tokenizer,
            model,
            dir,
        })
    }

    /// The word-frequency baseline of the run's training tokens: its data folder's counts,
    /// or `None` for a run that has no data folder (an imported one).
    ///
    /// # Errors
    /// [`TrainError::DataFolder`] for a data folder whose counts are broken
    /// ([`data::DataFolder::read_unigram_counts`]).
    pub fn unigram_scorer(&self) -> Result<Option<UnigramScorer>, TrainError> {
        let folder = self.dir.data_path(&self.config);
        if !folder.join("manifest.json").is_file() {
            return Ok(None);
        }
        let counts = data::DataFolder::read_unigram_counts(&folder)?;
        Ok(Some(UnigramScorer::fit(
            &counts,
            &self.tokenizer.special_ids,
        )))
    }

    /// The `top_k` most probable tokens for each `[MASK]` in `text`, encoded whole
    /// ([`SubwordTokenizer::encode_prompt`]: never cut, a RoBERTa `<mask>` standing for a
    /// word). A text longer than the run's `max_seq_len` but within the model's positions
    /// (a run from a checkpoint) is read, with a warning on stderr naming both lengths.
    ///
    /// # Errors
    /// [`TrainError::InvalidInput`] if `text` has no `[MASK]`, or is longer than the
    /// model's positions (naming both lengths, [`check_prompt_length`]).
    pub fn fill_mask(
        &self,
        text: &str,
        top_k: usize,
        device: &Device,
    ) -> Result<Vec<MaskPrediction>, TrainError> {
        let t = &self.tokenizer;
        let ids = t.wrap(&t.encode_prompt(text)?);
        let positions = self.config.model.max_sequence_len();
        let note = check_prompt_length(
            ids.len(),
            positions,
            self.config.max_seq_len,
            t.special_tokens,
        )?;
        if let Some(note) = note {
            eprintln!("warning: {note}");
        }
        let masks: Vec<usize> = (0..ids.len()).filter(|&i| ids[i] == t.mask_id).collect();
        if masks.is_empty() {
            let mask = t.special_tokens[4];
            return Err(TrainError::InvalidInput(format!("no {mask} in {text:?}")));
        }
        let seq = ids.len();
        let input: Vec<i64> = ids.iter().map(|&id| i64::from(id)).collect();
        let input_ids = Tensor::<2, Int>::from_data(TensorData::new(input, [1, seq]), device);
        let padding =
            Tensor::<2, Bool>::from_data(TensorData::new(vec![false; seq], [1, seq]), device);
        let logits = self.model.all_logits(input_ids, padding)?;
        let probs: Vec<f32> = softmax(logits, 2)
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .unwrap_or_default();
        let vocab = t.vocab_size();
        Ok(masks
            .into_iter()
            .map(|position| {
                let row = &probs[position * vocab..(position + 1) * vocab];
                let mut order: Vec<usize> = (0..vocab).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
                MaskPrediction {
                    position,
                    candidates: order[..top_k.min(vocab)]
                        .iter()
                        .map(|&id| (t.token(id as u32), f64::from(row[id])))
                        .collect(),
                }
            })
            .collect())
    }

    /// Held-out loss, accuracy and perplexity: on the run's own held-out split (its data
    /// folder's, which is prepared first for a run that has none: one made before data
    /// folders existed, or an imported one), or on every document of `corpus` when given.
    ///
    /// # Errors
    /// Corpus and data-folder errors naming the file; masker errors.
    pub fn evaluate(
        &self,
        corpus: Option<&Path>,
        device: &Device,
    ) -> Result<EvalMetrics, TrainError> {
        let sequences = match corpus {
            Some(path) => data::pack(
                &data::read_corpus(path, &self.config.text_field)?,
                &self.tokenizer,
                self.config.max_seq_len,
            )?,
            None => {
                let config = &self.config;
                self.dir
                    .prepare_data(config, Some(self.tokenizer.clone()), false)?;
                let data = data::DataFolder::open(&self.dir.data_path(config))?;
                data.held_out.first(config.max_eval_sequences)
            }
        };
        evaluate(
            &self.model,
            &sequences,
            &self.tokenizer,
            &self.config,
            device,
        )
    }
}

/// Checks a prompt of `tokens` tokens (its start and end tokens included) against the
/// model's `positions` and the run's `max_seq_len`, which a run from a checkpoint may set
/// below its positions. Returns a warning, naming both lengths, for a prompt between the two.
///
/// # Errors
/// [`TrainError::InvalidInput`] naming both lengths for a prompt beyond `positions`.
pub fn check_prompt_length(
    tokens: usize,
    positions: usize,
    max_seq_len: usize,
    special_tokens: [&str; 5],
) -> Result<Option<String>, TrainError> {
    let [_, _, start, end, mask] = special_tokens;
    if tokens > positions {
        return Err(TrainError::InvalidInput(format!(
            "the text is {tokens} tokens with its {start} and {end}, longer than the model's \
             {positions} positions: shorten it to the sentences around its {mask}"
        )));
    }
    Ok((tokens > max_seq_len).then(|| {
        format!(
            "the text is {tokens} tokens with its {start} and {end}, longer than the \
             sequences of up to {max_seq_len} this run trained on (max_seq_len); the model's \
             {positions} positions hold it, those past {max_seq_len} as the checkpoint \
             learned them"
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{ROBERTA_SPECIAL_TOKENS, SPECIAL_TOKENS};

    #[test]
    fn a_prompt_beyond_the_positions_is_refused_naming_both_lengths() {
        let error = check_prompt_length(700, 512, 128, ROBERTA_SPECIAL_TOKENS)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "the text is 700 tokens with its <s> and </s>, longer than the model's 512 \
             positions: shorten it to the sentences around its <mask>"
        );
        let note = check_prompt_length(200, 512, 128, SPECIAL_TOKENS)
            .unwrap()
            .unwrap();
        assert!(
            note.starts_with(
                "the text is 200 tokens with its [CLS] and [SEP], longer than \
                              the sequences of up to 128 this run trained on"
            ),
            "{note}"
        );
        assert_eq!(
            check_prompt_length(128, 128, 128, SPECIAL_TOKENS).unwrap(),
            None
        );
    }
}
