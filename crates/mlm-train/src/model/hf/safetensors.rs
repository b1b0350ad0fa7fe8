//! `model.safetensors`: the weights, checked whole before a model is built, and written with
//! Hugging Face's keys.
//!
//! Nothing is half-loaded: the whole file is parsed and checked into host memory before a
//! model is built. The decoder is tied to the word embeddings and not written (as
//! transformers writes a tied checkpoint); a file may hold the tied copies
//! (`cls.predictions.decoder.{weight,bias}`, RoBERTa's `lm_head.decoder.{weight,bias}`), but
//! they must then equal what they are tied to, bit for bit. The pooler, the next-sentence head
//! of `BertForPreTraining` and the position and segment id buffers are skipped
//! ([`ignored_prefixes`]).

use std::collections::HashMap;
use std::path::Path;

use burn::module::{ModuleMapper, ModuleVisitor, Param};
use burn::tensor::Device;
use burn::tensor::{Tensor, TensorData};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

use super::config::{CONFIG_FILE, read_model_config, write_model_config};
use super::names::{HfName, ignored_prefixes, names, tied_copies};
use crate::data::SubwordTokenizer;
use crate::error::TrainError;
use crate::files::{io, write_atomic};
use crate::model::{ModelConfig, ModelFamily, ModelForMaskedLm};

/// The weights file of a Hugging Face folder.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// `[rows, cols]` row-major → `[cols, rows]` row-major.
fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| values[r * cols + c]))
        .collect()
}

/// Walks a model's float parameters by module path: collects them (visitor) or replaces
/// them (mapper) in a map keyed by path.
#[derive(Default)]
struct ByPath {
    path: Vec<String>,
    tensors: HashMap<String, TensorData>,
}

impl ByPath {
    fn key(&self) -> String {
        self.path.join(".")
    }
}

impl ModuleVisitor for ByPath {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.tensors.insert(self.key(), param.val().into_data());
    }
}

impl ModuleMapper for ByPath {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let key = self.key();
        let data = self
            .tensors
            .remove(&key)
            .unwrap_or_else(|| panic!("the name table has no entry for parameter {key}"));
        param.map(|old| {
            Tensor::from_data(data, &old.device()).set_require_grad(old.is_require_grad())
        })
    }
}

/// Why `key` is missing where `file` holds it without its first component (`roberta.` …):
/// the base model (`XLMRobertaModel`, `BertModel`) was saved, not its masked LM.
fn base_model_hint(file: &SafeTensors, key: &str) -> String {
    match key.split_once('.') {
        Some((_, short)) if file.tensor(short).is_ok() => format!(
            " (the file has it as {short}: a base model saved without its masked-LM head; \
             save the *ForMaskedLM model with save_pretrained)"
        ),
        _ => String::new(),
    }
}

/// The tensor `key` of `file` as f32 values, checked to be F32 of `shape`.
fn read_f32(
    path: &Path,
    file: &SafeTensors,
    key: &str,
    shape: &[usize],
) -> Result<Vec<f32>, TrainError> {
    let view = file.tensor(key).map_err(|_| TrainError::HfTensorMissing {
        path: path.to_path_buf(),
        key: key.into(),
        hint: base_model_hint(file, key),
    })?;
    if view.dtype() != Dtype::F32 {
        return Err(TrainError::HfDtype {
            path: path.to_path_buf(),
            key: key.into(),
            dtype: view.dtype().to_string(),
        });
    }
    if view.shape() != shape {
        return Err(TrainError::HfTensorShape {
            path: path.to_path_buf(),
            key: key.into(),
            expected: shape.to_vec(),
            found: view.shape().to_vec(),
        });
    }
    Ok(view
        .data()
        .chunks_exact(4)
        .map(|bytes| f32::from_le_bytes(bytes.try_into().expect("chunks of 4 bytes")))
        .collect())
}

/// Reads and checks the whole weights file against `names`: every key present, F32, of
/// its shape; tied copies equal to what they are tied to; no key this model has no place
/// for. Returns each parameter in Burn's layout, keyed by its Burn path.
fn read_weights(
    path: &Path,
    names: &[HfName],
    family: ModelFamily,
) -> Result<HashMap<String, TensorData>, TrainError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| TrainError::HfFormat {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut values = HashMap::new();
    for name in names {
        values.insert(
            name.hf_key.as_str(),
            read_f32(path, &file, &name.hf_key, &name.shape)?,
        );
    }
    let (ignored, tied) = (ignored_prefixes(family), tied_copies(family));
    let mut keys = file.names();
    keys.sort_unstable();
    for key in keys {
        if values.contains_key(key) || ignored.iter().any(|p| key.starts_with(p.as_str())) {
            continue;
        }
        let unexpected = |reason: String| TrainError::HfTensorUnexpected {
            path: path.to_path_buf(),
            key: key.into(),
            reason,
        };
        let Some((_, tied_to)) = tied.iter().find(|(copy, _)| copy == key) else {
            return Err(unexpected(format!(
                "not a parameter of a {} masked LM of this config.json's sizes",
                family.model_type()
            )));
        };
        let original = &values[tied_to.as_str()];
        let shape = &names
            .iter()
            .find(|name| name.hf_key == **tied_to)
            .expect("tied keys are in the table")
            .shape;
        let copy = read_f32(path, &file, key, shape)?;
        if copy != *original {
            let max_diff = copy
                .iter()
                .zip(original)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            return Err(unexpected(format!(
                "differs from {tied_to} (max |diff| {max_diff:e}); only a decoder tied to the \
                 word embeddings is supported"
            )));
        }
    }
    Ok(names
        .iter()
        .map(|name| {
            let hf = values.remove(name.hf_key.as_str()).expect("read above");
            let ours = if name.transposed {
                transpose(&hf, name.shape[0], name.shape[1])
            } else {
                hf
            };
            (
                name.burn_path.clone(),
                TensorData::new(ours, name.burn_shape()),
            )
        })
        .collect())
}

/// Loads a Hugging Face `BertForMaskedLM` or `RobertaForMaskedLM` folder (`config.json`,
/// `model.safetensors` of F32 tensors) into our model, with its configuration.
///
/// # Errors
/// [`TrainError::Io`] / [`TrainError::Json`] for an unreadable file; [`TrainError::HfConfig`]
/// for an unsupported configuration; [`TrainError::HfFormat`] for a file that is not a
/// complete safetensors file; [`TrainError::HfTensorMissing`], [`TrainError::HfDtype`],
/// [`TrainError::HfTensorShape`] or [`TrainError::HfTensorUnexpected`] naming the key.
/// All checks run before the model is built.
pub fn load_hf(dir: &Path, device: &Device) -> Result<(ModelConfig, ModelForMaskedLm), TrainError> {
    let config = read_model_config(&dir.join(CONFIG_FILE))?;
    let tensors = read_weights(&dir.join(WEIGHTS_FILE), &names(&config), config.family())?;
    let mut assign = ByPath {
        path: Vec::new(),
        tensors,
    };
    let model = config.init(device).map_parameters(&mut assign);
    Ok((config, model))
}

/// Writes `model` as a Hugging Face folder of its family (`BertForMaskedLM`,
/// `RobertaForMaskedLM`): `config.json` with `tokenizer`'s special ids, and
/// `model.safetensors` (F32, Hugging Face keys, the tied decoder not stored).
///
/// # Errors
/// [`TrainError::Io`] / [`TrainError::Json`] naming the file that could not be written.
pub fn save_hf(
    model: &ModelForMaskedLm,
    config: &ModelConfig,
    tokenizer: &SubwordTokenizer,
    dir: &Path,
) -> Result<(), TrainError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut collect = ByPath::default();
    model.visit_parameters(&mut collect);
    let tensors: Vec<(HfName, Vec<u8>)> = names(config)
        .into_iter()
        .map(|name| {
            let data = collect
                .tensors
                .remove(&name.burn_path)
                .unwrap_or_else(|| panic!("the model has no parameter {}", name.burn_path));
            let ours: Vec<f32> = data
                .convert::<f32>()
                .try_into_vec::<f32>()
                .expect("f32 data");
            let hf = if name.transposed {
                transpose(&ours, name.shape[1], name.shape[0])
            } else {
                ours
            };
            let bytes = hf.iter().flat_map(|v| v.to_le_bytes()).collect();
            (name, bytes)
        })
        .collect();
    let path = dir.join(WEIGHTS_FILE);
    let format_error = |e: safetensors::SafeTensorError| TrainError::HfFormat {
        path: path.clone(),
        reason: e.to_string(),
    };
    let views = tensors
        .iter()
        .map(|(name, bytes)| {
            TensorView::new(Dtype::F32, name.shape.clone(), bytes)
                .map(|view| (name.hf_key.as_str(), view))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(format_error)?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let bytes = safetensors::serialize(views, Some(metadata)).map_err(format_error)?;
    write_atomic(&path, &bytes)?;
    write_model_config(config, tokenizer, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ModelConfig {
        crate::model::BertConfig::new(40)
            .with_hidden_size(8)
            .with_num_hidden_layers(2)
            .with_num_attention_heads(2)
            .with_intermediate_size(12)
            .with_max_position_embeddings(10)
            .with_type_vocab_size(3)
            .into()
    }

    #[test]
    fn the_table_names_every_parameter_once_with_its_shape() {
        let config = config();
        let mut collect = ByPath::default();
        config.init(&Device::flex()).visit_parameters(&mut collect);
        let model: HashMap<String, Vec<usize>> = collect
            .tensors
            .into_iter()
            .map(|(path, data)| (path, data.shape().to_vec()))
            .collect();
        let table = names(&config);
        let from_table: HashMap<String, Vec<usize>> = table
            .iter()
            .map(|name| (name.burn_path.clone(), name.burn_shape()))
            .collect();
        assert_eq!(from_table, model);
        assert_eq!(table.len(), model.len(), "a Burn path named twice");
        let count: usize = table
            .iter()
            .map(|n| n.shape.iter().product::<usize>())
            .sum();
        assert_eq!(count, config.num_parameters());
        // 5 embedding tensors, 16 per layer, 5 in the head.
        assert_eq!(table.len(), 5 + 16 * 2 + 5);
        let query = &table[5];
        assert_eq!(
            query.hf_key,
            "bert.encoder.layer.0.attention.self.query.weight"
        );
        assert_eq!(
            query.burn_path,
            "layers.0.attention.self_attention.query.weight"
        );
        assert!(query.transposed);
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        // [[1, 2, 3], [4, 5, 6]] → [[1, 4], [2, 5], [3, 6]]
        let t = transpose(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 3);
        assert_eq!(t, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(transpose(&t, 3, 2), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }
}
