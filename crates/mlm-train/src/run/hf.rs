//! A run as a Hugging Face folder and back: `export-hf` and `import-hf`.

use std::path::Path;

use burn::tensor::Device;

use super::dir::{RunDir, write_imported};
use super::trained::TrainedRun;
use crate::config::{Settings, TrainConfig};
use crate::error::TrainError;
use crate::model::hf::{Pretrained, save_hf, save_tokenizer};

/// Exports the newest checkpoint of the run in `run_dir` as a Hugging Face folder `out`
/// that `BertForMaskedLM.from_pretrained` and `AutoTokenizer.from_pretrained` load:
/// [`save_hf`]'s files and the tokenizer (`tokenizer.json`, `vocab.txt`,
/// `tokenizer_config.json`, `special_tokens_map.json`).
///
/// # Errors
/// Those of [`TrainedRun::load`] and [`save_hf`]; [`TrainError::Tokenizer`] if the
/// vocabulary cannot be written as a `vocab.txt`; [`TrainError::InvalidInput`] if `out` already
/// holds a `model.safetensors` (an earlier export is never overwritten) or is a run folder
/// (the run itself, or another).
pub fn export_run(run_dir: &Path, out: &Path, device: &Device) -> Result<(), TrainError> {
    if out.join("model.safetensors").exists() {
        return Err(TrainError::InvalidInput(format!(
            "{} already holds a model.safetensors: choose another folder, or remove it first",
            out.display()
        )));
    }
    if RunDir(out.to_path_buf()).config().exists() || out.join("checkpoints").exists() {
        return Err(TrainError::InvalidInput(format!(
            "{} is an mlm-train run folder: exporting into it would overwrite the run's \
             config.json and tokenizer.json; give a new folder",
            out.display()
        )));
    }
    let run = TrainedRun::load(run_dir, device)?;
    save_hf(&run.model, &run.config.model, &run.tokenizer, out)?;
    save_tokenizer(&run.tokenizer, run.config.model.max_sequence_len(), out)
}

/// Imports the Hugging Face `BertForMaskedLM` folder `hf_dir` as a new run directory
/// `run_dir` that `predict`, `eval` and `export-hf` read: `config.json` (a [`TrainConfig`]
/// with the model's sizes, `corpus` for `eval`'s held-out split), `tokenizer.json`, and the
/// checkpoint `checkpoints/step-00000000/` (model and state; no optimizer state). Training
/// from the same folder is `train --init-from`, which reads it through the same
/// [`Pretrained`]. Returns the run's configuration.
///
/// # Errors
/// Those of [`Pretrained::read`] and [`Pretrained::load_model`]; [`TrainError::Config`] if
/// `run_dir` already holds a run. Nothing is written unless everything was read and checked.
pub fn import_run(
    hf_dir: &Path,
    run_dir: &Path,
    corpus: &Path,
    device: &Device,
) -> Result<TrainConfig, TrainError> {
    let pretrained = Pretrained::read(hf_dir)?;
    let model = pretrained.load_model(device)?;
    let settings = Settings::imported(&pretrained, corpus)?;
    write_imported(run_dir, &settings, &pretrained.tokenizer, &model)?;
    Ok(TrainConfig::clone(&settings))
}
