//! `config.json` of a Hugging Face folder: its family from `model_type` (the registry,
//! [`crate::model::family`]), then read and written by the family's architecture.

use std::path::Path;

use crate::data::SubwordTokenizer;
use crate::error::TrainError;
use crate::files::read_json;
use crate::model::ModelConfig;
use crate::model::family::Architecture;
use crate::model::family::ModelFamily;

/// The model configuration file of a Hugging Face folder.
pub const CONFIG_FILE: &str = "config.json";

/// Our configuration of the model whose `config.json` is at `path`, read by its family's
/// architecture.
///
/// # Errors
/// [`TrainError::HfConfig`] naming `path` for a `model_type` the registry does not have
/// (naming those it has), or a model the architecture does not compute exactly;
/// [`TrainError::Json`] / [`TrainError::Io`] naming `path`.
pub fn read_model_config(path: &Path) -> Result<ModelConfig, TrainError> {
    let json: serde_json::Value = read_json(path)?;
    // transformers' `PretrainedConfig.model_type`, `BertConfig`'s when absent.
    let model_type = match json.get("model_type") {
        None => ModelFamily::Bert.model_type().to_string(),
        Some(value) => value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string),
    };
    let Some(family) = ModelFamily::from_model_type(&model_type) else {
        return Err(TrainError::HfConfig {
            path: path.to_path_buf(),
            reason: format!(
                "model_type = {model_type:?} is not supported (only {})",
                ModelFamily::supported()
            ),
        });
    };
    family.spec().architecture.read_config(json, path)
}

/// Writes the `config.json` that transformers needs to load a model of `config` as its
/// family's masked LM, with `tokenizer`'s special ids, into the folder `dir`.
///
/// # Errors
/// [`TrainError::Io`] / [`TrainError::Json`] naming the file.
pub fn write_model_config(
    config: &ModelConfig,
    tokenizer: &SubwordTokenizer,
    dir: &Path,
) -> Result<(), TrainError> {
    Architecture::write_config(config, tokenizer, &dir.join(CONFIG_FILE))
}
