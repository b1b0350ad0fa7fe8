//! A Hugging Face masked-LM folder of a registry family to start from (`train --init-from`,
//! `import-hf`): its configuration, tokenizer and weights, each checked against the others
//! before a run is written.

use std::path::{Path, PathBuf};

use burn::tensor::Device;

use super::config::{CONFIG_FILE, read_model_config};
use super::safetensors::load_hf;
use super::tokenizer::tokenizer_file;
use crate::data::SubwordTokenizer;
use crate::error::TrainError;
use crate::model::{ModelConfig, ModelForMaskedLm};

/// A pretrained checkpoint folder whose `config.json` and tokenizer agree: continued
/// pretraining (Gururangan et al. 2020, "Don't Stop Pretraining", §3) starts from it, as
/// `run_mlm.py --model_name_or_path` does.
#[derive(Clone)]
pub struct Pretrained {
    /// The folder.
    pub dir: PathBuf,
    /// Its model, as our configuration.
    pub config: ModelConfig,
    /// Its tokenizer file: `tokenizer.json`, else `vocab.txt`.
    pub tokenizer_file: PathBuf,
    /// That tokenizer.
    pub tokenizer: SubwordTokenizer,
}

impl Pretrained {
    /// Reads and checks `dir`'s `config.json` and tokenizer (not yet the weights:
    /// [`load_model`](Self::load_model)). A folder without `config.json` or
    /// `model.safetensors` is refused naming what it is instead: an mlm-train run, PyTorch
    /// weights.
    ///
    /// # Errors
    /// [`TrainError::HfConfig`] for a folder with no `config.json`, an unsupported
    /// architecture ([`read_model_config`]), or a tokenizer whose vocabulary size is not
    /// the embedding's rows; [`TrainError::Tokenizer`] for a missing tokenizer, one that is
    /// neither WordPiece nor byte-level BPE or not of the model's family (WordPiece for BERT,
    /// byte-level BPE for RoBERTa), or one without its special tokens (`[MASK]`, `<mask>`).
    pub fn read(dir: &Path) -> Result<Self, TrainError> {
        let path = dir.join(CONFIG_FILE);
        if !path.is_file() || !dir.join(super::safetensors::WEIGHTS_FILE).is_file() {
            return Err(not_a_checkpoint(dir));
        }
        let config = read_model_config(&path)?;
        let tokenizer_file = tokenizer_file(dir)?;
        let tokenizer = SubwordTokenizer::from_file(&tokenizer_file)?;
        let kinds = config.family().spec().tokenizers;
        if !kinds.contains(&tokenizer.kind) {
            let names: Vec<&str> = kinds.iter().map(|kind| kind.name()).collect();
            return Err(TrainError::Tokenizer {
                path: tokenizer_file,
                reason: format!(
                    "is {}, but a {} model reads {} ids",
                    tokenizer.kind.name(),
                    config.family().model_type(),
                    names.join(" or ")
                ),
            });
        }
        if tokenizer.vocab_size() != config.vocab_size() {
            return Err(TrainError::HfConfig {
                path,
                reason: format!(
                    "vocab_size = {}, but the tokenizer {} has {} tokens: a checkpoint's \
                     config.json, embedding and tokenizer must agree",
                    config.vocab_size(),
                    tokenizer_file.display(),
                    tokenizer.vocab_size()
                ),
            });
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            tokenizer_file,
            tokenizer,
        })
    }

    /// The weights of `model.safetensors`, every tensor checked before the model is built.
    ///
    /// # Errors
    /// Those of [`load_hf`]; [`TrainError::HfConfig`] if `config.json` changed since
    /// [`read`](Self::read).
    pub fn load_model(&self, device: &Device) -> Result<ModelForMaskedLm, TrainError> {
        let (config, model) = load_hf(&self.dir, device)?;
        if config != self.config {
            return Err(TrainError::HfConfig {
                path: self.dir.join(CONFIG_FILE),
                reason: "changed while it was read".into(),
            });
        }
        Ok(model)
    }

    /// Checks that `model` (a run's configuration) is this checkpoint's architecture, its
    /// dropout aside (a run may set its own).
    ///
    /// # Errors
    /// [`TrainError::HfConfig`] naming both configurations' differing sizes.
    pub fn check_architecture(&self, model: &ModelConfig) -> Result<(), TrainError> {
        let theirs = self.config.with_dropouts_of(model);
        if *model == theirs {
            return Ok(());
        }
        Err(TrainError::HfConfig {
            path: self.dir.join(CONFIG_FILE),
            reason: format!(
                "the run's model is not this checkpoint's (run: {model:?}; checkpoint: \
                 {theirs:?}): with init_from, take the model from the checkpoint \
                 (TrainConfig::continue_from)"
            ),
        })
    }
}

/// Why `dir`, which lacks `config.json` or `model.safetensors`, is no checkpoint to start
/// from, and the way out.
fn not_a_checkpoint(dir: &Path) -> TrainError {
    let shown = dir.display();
    let (path, reason) = if dir.is_file() {
        let reason = "is a file, not a Hugging Face model folder: give the folder that holds \
                      config.json, model.safetensors and the tokenizer";
        (dir.to_path_buf(), reason.to_string())
    } else if dir.join("checkpoints").is_dir() {
        let reason = format!(
            "is an mlm-train run folder, not a Hugging Face model folder: continue it with \
             `mlm-train train --resume {shown}`, or export it with `mlm-train export-hf --run \
             {shown} OUT` and start from OUT"
        );
        (dir.to_path_buf(), reason)
    } else if !dir.join(CONFIG_FILE).is_file() {
        let reason = "no such file: not a Hugging Face model folder (config.json and \
                      model.safetensors, as `save_pretrained` writes them)";
        (dir.join(CONFIG_FILE), reason.to_string())
    } else {
        let bin = match dir.join("pytorch_model.bin").is_file() {
            true => " (only PyTorch's pytorch_model.bin)",
            false => "",
        };
        let reason = format!(
            "holds config.json but no model.safetensors{bin}: save the model with \
             `save_pretrained(DIR, safe_serialization=True)`"
        );
        (dir.to_path_buf(), reason)
    };
    TrainError::HfConfig { path, reason }
}
