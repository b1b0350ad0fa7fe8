//! Hugging Face interop: `BertForMaskedLM` folders (`config.json` + `model.safetensors`) in
//! and out, with the same logits on both sides.
//!
//! One table, [`names`], pairs every Hugging Face key with the path of the same parameter
//! in [`BertForMaskedLm`] (Burn's module path, e.g. `layers.0.attention.self_attention.query.weight`),
//! its PyTorch shape, and whether Burn stores it transposed (a PyTorch `Linear` weight is
//! `[out, in]`, Burn's `[in, out]`; LayerNorm `weight`/`bias` are Burn's `gamma`/`beta`).
//! Import and export both read it:
//!
//! ```text
//! config.json ──HfBertConfig──▶ BertConfig ──names──▶ every key with its shape
//! model.safetensors ──parse; check every key, dtype, shape──▶ host f32 ──▶ BertForMaskedLm
//! BertForMaskedLm ──visit──▶ host f32 ──names──▶ model.safetensors (F32, Hugging Face keys)
//! ```
//!
//! Nothing is half-loaded: the whole file is parsed and checked into host memory before a
//! model is built. The decoder is tied to `bert.embeddings.word_embeddings.weight` and not
//! written (as transformers writes a tied checkpoint); a file may hold the tied copies
//! `cls.predictions.decoder.{weight,bias}`, but they must then equal what they are tied to,
//! bit for bit. `bert.pooler.*`, `cls.seq_relationship.*` (from `BertForPreTraining`) and the
//! `bert.embeddings.position_ids` buffer are skipped.

use std::collections::HashMap;
use std::path::Path;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::Device;
use burn::tensor::{Tensor, TensorData};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::config::TrainConfig;
use crate::data::{SPECIAL_TOKENS, WordPieceTokenizer};
use crate::error::{TrainError, io, read_json, write_atomic, write_json};
use crate::model::{BertConfig, BertForMaskedLm};
use crate::predict::TrainedRun;
use crate::run_dir::write_imported;

/// The model configuration file of a Hugging Face folder.
pub const CONFIG_FILE: &str = "config.json";
/// The weights file of a Hugging Face folder.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// Keys (prefixes) of a Hugging Face BERT checkpoint that a masked-LM model does not use.
const IGNORED_PREFIXES: [&str; 3] = [
    "bert.pooler.",
    "cls.seq_relationship.",
    "bert.embeddings.position_ids",
];

/// Tied copies transformers may store, each with the key it is tied to.
const TIED_COPIES: [(&str, &str); 2] = [
    (
        "cls.predictions.decoder.weight",
        "bert.embeddings.word_embeddings.weight",
    ),
    ("cls.predictions.decoder.bias", "cls.predictions.bias"),
];

/// Hugging Face's `BertConfig` as `config.json` holds it: the fields `BertForMaskedLM`
/// reads, with transformers' defaults for absent ones; other fields are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HfBertConfig {
    /// Must be `"bert"`.
    pub model_type: String,
    /// The model classes the checkpoint is for; export writes `["BertForMaskedLM"]`.
    pub architectures: Vec<String>,
    /// Number of tokens in the vocabulary.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Number of attention heads.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Feed-forward activation; only `"gelu"` (the exact, erf form) is supported.
    pub hidden_act: String,
    /// Dropout after embeddings, attention output and feed-forward.
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention probabilities.
    pub attention_probs_dropout_prob: f64,
    /// Length of the position table.
    pub max_position_embeddings: usize,
    /// Number of segment ids.
    pub type_vocab_size: usize,
    /// Standard deviation of the initialisation.
    pub initializer_range: f64,
    /// Epsilon of every LayerNorm.
    pub layer_norm_eps: f64,
    /// Only `"absolute"` (a learned position table) is supported.
    pub position_embedding_type: String,
    /// Must be `true`: the decoder is the word-embedding matrix.
    pub tie_word_embeddings: bool,
    /// Id of the padding token.
    pub pad_token_id: Option<u32>,
    /// Must be `false`: a decoder attends causally, this encoder does not.
    pub is_decoder: bool,
}

impl Default for HfBertConfig {
    /// transformers' `BertConfig()` defaults (bert-base).
    fn default() -> Self {
        Self {
            model_type: "bert".into(),
            architectures: Vec::new(),
            vocab_size: 30522,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu".into(),
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            initializer_range: 0.02,
            layer_norm_eps: 1e-12,
            position_embedding_type: "absolute".into(),
            tie_word_embeddings: true,
            pad_token_id: Some(0),
            is_decoder: false,
        }
    }
}

impl HfBertConfig {
    /// The `config.json` transformers needs to load a model of `config` as `BertForMaskedLM`.
    pub fn from_bert(config: &BertConfig, pad_token_id: u32) -> Self {
        Self {
            architectures: vec!["BertForMaskedLM".into()],
            vocab_size: config.vocab_size,
            hidden_size: config.hidden_size,
            num_hidden_layers: config.num_hidden_layers,
            num_attention_heads: config.num_attention_heads,
            intermediate_size: config.intermediate_size,
            hidden_dropout_prob: config.hidden_dropout_prob,
            attention_probs_dropout_prob: config.attention_probs_dropout_prob,
            max_position_embeddings: config.max_position_embeddings,
            type_vocab_size: config.type_vocab_size,
            initializer_range: config.initializer_range,
            layer_norm_eps: config.layer_norm_eps,
            pad_token_id: Some(pad_token_id),
            ..Self::default()
        }
    }

    /// Our [`BertConfig`] for this configuration.
    ///
    /// # Errors
    /// [`TrainError::HfConfig`] naming `path` and the field if the model is not a BERT this
    /// crate computes exactly: another `model_type`, `hidden_act` other than `"gelu"`,
    /// `position_embedding_type` other than `"absolute"`, a causal decoder, an untied decoder,
    /// or sizes that [`BertConfig::validate`] rejects.
    pub fn to_bert(&self, path: &Path) -> Result<BertConfig, TrainError> {
        let unsupported = |field: &str, value: &dyn std::fmt::Debug, supported: &str| {
            Err(TrainError::HfConfig {
                path: path.to_path_buf(),
                reason: format!("{field} = {value:?} is not supported (only {supported})"),
            })
        };
        if self.model_type != "bert" {
            return unsupported("model_type", &self.model_type, "\"bert\"");
        }
        if self.hidden_act != "gelu" {
            return unsupported("hidden_act", &self.hidden_act, "\"gelu\", the erf form");
        }
        if self.position_embedding_type != "absolute" {
            return unsupported(
                "position_embedding_type",
                &self.position_embedding_type,
                "\"absolute\"",
            );
        }
        if self.is_decoder {
            return unsupported(
                "is_decoder",
                &self.is_decoder,
                "false: a bidirectional encoder",
            );
        }
        if !self.tie_word_embeddings {
            return unsupported(
                "tie_word_embeddings",
                &self.tie_word_embeddings,
                "true: the decoder is the word-embedding matrix",
            );
        }
        let config = BertConfig::new(self.vocab_size)
            .with_hidden_size(self.hidden_size)
            .with_num_hidden_layers(self.num_hidden_layers)
            .with_num_attention_heads(self.num_attention_heads)
            .with_intermediate_size(self.intermediate_size)
            .with_max_position_embeddings(self.max_position_embeddings)
            .with_type_vocab_size(self.type_vocab_size)
            .with_layer_norm_eps(self.layer_norm_eps)
            .with_hidden_dropout_prob(self.hidden_dropout_prob)
            .with_attention_probs_dropout_prob(self.attention_probs_dropout_prob)
            .with_initializer_range(self.initializer_range);
        config.validate().map_err(|reason| TrainError::HfConfig {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(config)
    }
}

/// One parameter in both namings.
#[derive(Debug, Clone, PartialEq)]
pub struct HfName {
    /// The Hugging Face key, e.g. `bert.encoder.layer.0.attention.self.query.weight`.
    pub hf_key: String,
    /// The path in [`BertForMaskedLm`], e.g. `layers.0.attention.self_attention.query.weight`.
    pub burn_path: String,
    /// The shape in the Hugging Face file (PyTorch layout).
    pub shape: Vec<usize>,
    /// Whether Burn stores the transpose (`Linear` weights: PyTorch `[out, in]`, Burn `[in, out]`).
    pub transposed: bool,
}

impl HfName {
    /// The shape Burn stores.
    pub fn burn_shape(&self) -> Vec<usize> {
        if self.transposed {
            self.shape.iter().rev().copied().collect()
        } else {
            self.shape.clone()
        }
    }
}

/// Builds the table, one block (tensor, `Linear`, `LayerNorm`) at a time.
#[derive(Default)]
struct Table(Vec<HfName>);

impl Table {
    fn tensor(&mut self, hf_key: &str, burn_path: &str, shape: &[usize], transposed: bool) {
        self.0.push(HfName {
            hf_key: hf_key.into(),
            burn_path: burn_path.into(),
            shape: shape.to_vec(),
            transposed,
        });
    }

    /// PyTorch `weight [out, in]` and `bias [out]`.
    fn linear(&mut self, hf: &str, ours: &str, d_in: usize, d_out: usize) {
        self.tensor(
            &format!("{hf}.weight"),
            &format!("{ours}.weight"),
            &[d_out, d_in],
            true,
        );
        self.tensor(
            &format!("{hf}.bias"),
            &format!("{ours}.bias"),
            &[d_out],
            false,
        );
    }

    /// PyTorch `weight`/`bias` are Burn's `gamma`/`beta`.
    fn layer_norm(&mut self, hf: &str, ours: &str, d: usize) {
        self.tensor(
            &format!("{hf}.weight"),
            &format!("{ours}.gamma"),
            &[d],
            false,
        );
        self.tensor(&format!("{hf}.bias"), &format!("{ours}.beta"), &[d], false);
    }
}

/// Every parameter of a [`BertForMaskedLm`] of `config`'s sizes, with its Hugging Face
/// `BertForMaskedLM` key: embeddings, each layer, the head (source: transformers'
/// `modeling_bert.py`; the tied decoder is not a parameter of its own).
pub fn names(config: &BertConfig) -> Vec<HfName> {
    let (v, d, ff) = (
        config.vocab_size,
        config.hidden_size,
        config.intermediate_size,
    );
    let mut t = Table::default();
    for (name, rows) in [
        ("word_embeddings", v),
        ("position_embeddings", config.max_position_embeddings),
        ("token_type_embeddings", config.type_vocab_size),
    ] {
        t.tensor(
            &format!("bert.embeddings.{name}.weight"),
            &format!("embeddings.{name}.weight"),
            &[rows, d],
            false,
        );
    }
    t.layer_norm("bert.embeddings.LayerNorm", "embeddings.layer_norm", d);
    for i in 0..config.num_hidden_layers {
        let hf = format!("bert.encoder.layer.{i}");
        let ours = format!("layers.{i}");
        for projection in ["query", "key", "value"] {
            t.linear(
                &format!("{hf}.attention.self.{projection}"),
                &format!("{ours}.attention.self_attention.{projection}"),
                d,
                d,
            );
        }
        t.linear(
            &format!("{hf}.attention.output.dense"),
            &format!("{ours}.attention.output.dense"),
            d,
            d,
        );
        t.layer_norm(
            &format!("{hf}.attention.output.LayerNorm"),
            &format!("{ours}.attention.output.layer_norm"),
            d,
        );
        t.linear(
            &format!("{hf}.intermediate.dense"),
            &format!("{ours}.intermediate"),
            d,
            ff,
        );
        t.linear(
            &format!("{hf}.output.dense"),
            &format!("{ours}.output.dense"),
            ff,
            d,
        );
        t.layer_norm(
            &format!("{hf}.output.LayerNorm"),
            &format!("{ours}.output.layer_norm"),
            d,
        );
    }
    t.linear(
        "cls.predictions.transform.dense",
        "head.transform.dense",
        d,
        d,
    );
    t.layer_norm(
        "cls.predictions.transform.LayerNorm",
        "head.transform.layer_norm",
        d,
    );
    t.tensor("cls.predictions.bias", "head.bias", &[v], false);
    t.0
}

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
fn read_weights(path: &Path, names: &[HfName]) -> Result<HashMap<String, TensorData>, TrainError> {
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
    let mut keys = file.names();
    keys.sort_unstable();
    for key in keys {
        if values.contains_key(key) || IGNORED_PREFIXES.iter().any(|p| key.starts_with(p)) {
            continue;
        }
        let unexpected = |reason: String| TrainError::HfTensorUnexpected {
            path: path.to_path_buf(),
            key: key.into(),
            reason,
        };
        let Some((_, tied_to)) = TIED_COPIES.iter().find(|(copy, _)| *copy == key) else {
            return Err(unexpected(
                "not a parameter of a BertForMaskedLM of this config.json's sizes".into(),
            ));
        };
        let original = &values[tied_to];
        let shape = &names
            .iter()
            .find(|name| name.hf_key == *tied_to)
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

/// Loads a Hugging Face `BertForMaskedLM` folder (`config.json`, `model.safetensors` of
/// F32 tensors) into our model, with its configuration.
///
/// # Errors
/// [`TrainError::Io`] / [`TrainError::Json`] for an unreadable file; [`TrainError::HfConfig`]
/// for an unsupported configuration; [`TrainError::HfFormat`] for a file that is not a
/// complete safetensors file; [`TrainError::HfTensorMissing`], [`TrainError::HfDtype`],
/// [`TrainError::HfTensorShape`] or [`TrainError::HfTensorUnexpected`] naming the key.
/// All checks run before the model is built.
pub fn load_hf(dir: &Path, device: &Device) -> Result<(BertConfig, BertForMaskedLm), TrainError> {
    let config_path = dir.join(CONFIG_FILE);
    let hf: HfBertConfig = read_json(&config_path)?;
    let config = hf.to_bert(&config_path)?;
    let tensors = read_weights(&dir.join(WEIGHTS_FILE), &names(&config))?;
    let mut assign = ByPath {
        path: Vec::new(),
        tensors,
    };
    let model = config.init(device).map(&mut assign);
    Ok((config, model))
}

/// Writes `model` as a Hugging Face `BertForMaskedLM` folder: `config.json` and
/// `model.safetensors` (F32, Hugging Face keys, the tied decoder not stored).
///
/// # Errors
/// [`TrainError::Io`] / [`TrainError::Json`] naming the file that could not be written.
pub fn save_hf(
    model: &BertForMaskedLm,
    config: &BertConfig,
    pad_token_id: u32,
    dir: &Path,
) -> Result<(), TrainError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut collect = ByPath::default();
    model.visit(&mut collect);
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
    write_json(
        &dir.join(CONFIG_FILE),
        &HfBertConfig::from_bert(config, pad_token_id),
    )
}

/// Writes the tokenizer as transformers reads it: `tokenizer.json` (fast tokenizer),
/// `vocab.txt` (one token per line, in id order), `tokenizer_config.json` and
/// `special_tokens_map.json`.
fn save_tokenizer(
    tokenizer: &WordPieceTokenizer,
    model_max_length: usize,
    dir: &Path,
) -> Result<(), TrainError> {
    tokenizer.save(&dir.join("tokenizer.json"))?;
    let mut vocab = tokenizer.vocab()?.join("\n");
    vocab.push('\n');
    write_atomic(&dir.join("vocab.txt"), vocab.as_bytes())?;
    let [pad, unk, cls, sep, mask] = SPECIAL_TOKENS;
    let mut specials = json!({
        "pad_token": pad, "unk_token": unk, "cls_token": cls, "sep_token": sep, "mask_token": mask,
    });
    write_json(&dir.join("special_tokens_map.json"), &specials)?;
    specials["tokenizer_class"] = json!("BertTokenizer");
    specials["do_lower_case"] = json!(true);
    specials["model_max_length"] = json!(model_max_length);
    write_json(&dir.join("tokenizer_config.json"), &specials)
}

/// Exports the newest checkpoint of the run in `run_dir` as a Hugging Face folder `out`
/// that `BertForMaskedLM.from_pretrained` and `AutoTokenizer.from_pretrained` load:
/// [`save_hf`]'s files and the tokenizer (`tokenizer.json`, `vocab.txt`,
/// `tokenizer_config.json`, `special_tokens_map.json`).
///
/// # Errors
/// Those of [`TrainedRun::load`] and [`save_hf`]; [`TrainError::Tokenizer`] if the
/// vocabulary cannot be written as a `vocab.txt`; [`TrainError::InvalidInput`] if `out` already
/// holds a `model.safetensors` (an earlier export is never overwritten).
pub fn export_run(run_dir: &Path, out: &Path, device: &Device) -> Result<(), TrainError> {
    if out.join("model.safetensors").exists() {
        return Err(TrainError::InvalidInput(format!(
            "{} already holds a model.safetensors: choose another folder, or remove it first",
            out.display()
        )));
    }
    let run = TrainedRun::load(run_dir, device)?;
    save_hf(&run.model, &run.config.model, run.tokenizer.pad_id, out)?;
    save_tokenizer(
        &run.tokenizer,
        run.config.model.max_position_embeddings,
        out,
    )
}

/// The tokenizer of a Hugging Face folder: its `tokenizer.json`, else its `vocab.txt`.
///
/// # Errors
/// [`TrainError::Tokenizer`] if the folder has neither, or the file cannot be used.
pub fn load_tokenizer(dir: &Path) -> Result<WordPieceTokenizer, TrainError> {
    ["tokenizer.json", "vocab.txt"]
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| TrainError::Tokenizer {
            path: dir.to_path_buf(),
            reason: "holds neither tokenizer.json nor vocab.txt; a run needs its tokenizer".into(),
        })
        .and_then(|path| WordPieceTokenizer::from_file(&path))
}

/// Imports the Hugging Face `BertForMaskedLM` folder `hf_dir` as a new run directory
/// `run_dir` that `predict` and `eval` read: `config.json` (a [`TrainConfig`] with the
/// model's sizes, `corpus` for `eval`'s held-out split), `tokenizer.json`, and the
/// checkpoint `checkpoints/step-00000000/` (model and state; no optimizer state, so it
/// cannot be resumed). Returns the run's configuration.
///
/// # Errors
/// Those of [`load_hf`] and [`load_tokenizer`]; [`TrainError::HfConfig`] if the tokenizer's
/// vocabulary is not the model's; [`TrainError::Config`] if `run_dir` already holds a run.
/// Nothing is written unless everything was read and checked.
pub fn import_run(
    hf_dir: &Path,
    run_dir: &Path,
    corpus: &Path,
    device: &Device,
) -> Result<TrainConfig, TrainError> {
    let (model_config, model) = load_hf(hf_dir, device)?;
    let tokenizer = load_tokenizer(hf_dir)?;
    if tokenizer.vocab_size() != model_config.vocab_size {
        return Err(TrainError::HfConfig {
            path: hf_dir.join(CONFIG_FILE),
            reason: format!(
                "vocab_size = {}, but the tokenizer has {} tokens",
                model_config.vocab_size,
                tokenizer.vocab_size()
            ),
        });
    }
    // An absolute corpus path when it exists, so that `eval` works from any directory.
    let corpus = std::fs::canonicalize(corpus).unwrap_or_else(|_| corpus.to_path_buf());
    let mut config = TrainConfig::new(corpus)
        .with_vocab_size(model_config.vocab_size)
        .with_model(model_config);
    config.max_seq_len = config.max_seq_len.min(config.model.max_position_embeddings);
    config.validate()?;
    write_imported(run_dir, &config, &tokenizer, &model)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BertConfig {
        BertConfig::new(40)
            .with_hidden_size(8)
            .with_num_hidden_layers(2)
            .with_num_attention_heads(2)
            .with_intermediate_size(12)
            .with_max_position_embeddings(10)
            .with_type_vocab_size(3)
    }

    #[test]
    fn the_table_names_every_parameter_once_with_its_shape() {
        let config = config();
        let mut collect = ByPath::default();
        config.init(&Device::flex()).visit(&mut collect);
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

    #[test]
    fn unsupported_configurations_name_the_field() {
        let path = Path::new("config.json");
        for (field, value) in [
            ("hidden_act", json!("relu")),
            ("position_embedding_type", json!("relative_key")),
            ("model_type", json!("roberta")),
            ("tie_word_embeddings", json!(false)),
            ("is_decoder", json!(true)),
            ("num_attention_heads", json!(5)),
        ] {
            let mut raw = serde_json::to_value(HfBertConfig::default()).unwrap();
            raw[field] = value;
            let hf: HfBertConfig = serde_json::from_value(raw).unwrap();
            let error = hf.to_bert(path).unwrap_err().to_string();
            assert!(
                error.contains(field) && error.contains("config.json"),
                "{error}"
            );
        }
        let defaults = HfBertConfig::default().to_bert(path).unwrap();
        assert_eq!((defaults.hidden_size, defaults.vocab_size), (768, 30522));
    }
}
