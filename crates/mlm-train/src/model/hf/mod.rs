//! Hugging Face interop, for every family of the registry ([`crate::model::family`]):
//! `BertForMaskedLM` and `RobertaForMaskedLM` folders (`config.json` + `model.safetensors`,
//! tokenizer files), read and written with the same logits on both sides. The format layer
//! only: making a run of a folder and a folder of a run is [`crate::run::hf`].
//!
//! One table per family, [`names()`] (built by the family's architecture), pairs every
//! Hugging Face key with the path of the same parameter in our model (Burn's module path, e.g.
//! `layers.0.attention.self_attention.query.weight`), its PyTorch shape, and whether Burn
//! stores it transposed (a PyTorch `Linear` weight is `[out, in]`, Burn's `[in, out]`;
//! LayerNorm `weight`/`bias` are Burn's `gamma`/`beta`). Import and export both read it:
//!
//! ```text
//! config.json ──model_type──▶ family ──its architecture──▶ ModelConfig ──names──▶ every key
//! model.safetensors ──parse; check every key, dtype, shape──▶ host f32 ──▶ ModelForMaskedLm
//! ModelForMaskedLm ──visit──▶ host f32 ──names──▶ model.safetensors (F32, Hugging Face keys)
//! ```

pub mod config;
pub mod names;
pub mod pretrained;
pub mod safetensors;
pub mod tokenizer;

pub use config::{CONFIG_FILE, read_model_config, write_model_config};
pub use names::{HfName, NameTable, names};
pub use pretrained::Pretrained;
pub use safetensors::{WEIGHTS_FILE, load_hf, save_hf};
pub use tokenizer::{save_tokenizer, tokenizer_file};
