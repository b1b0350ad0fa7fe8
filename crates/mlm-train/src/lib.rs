//! # mlm-train
//!
//! Pretrains a tiny BERT on real English text with `mlm-core`'s head, loss and masking,
//! on the CPU (`flex`, `ndarray`) or a GPU (`wgpu`, `cuda`):
//!
//! ```text
//! corpus ──clean──▶ sentences ──WordPiece──▶ ids ──pack──▶ [CLS] … [SEP] sequences
//!   ──Masker (fresh per batch)──▶ batch ──BERT──▶ hidden ──MlmHead (masked rows)──▶ logits
//!   ──masked cross-entropy──▶ loss ──AdamW, warm-up + linear decay, clip 1.0──▶ checkpoints
//! ```
//!
//! [`model::hf`] reads and writes Hugging Face `BertForMaskedLM` folders (`config.json`,
//! `model.safetensors`, tokenizer files), so a run exports to transformers and a
//! transformers checkpoint imports as a run ([`run::hf`]). [`eval::grammar`] scores a model on minimal pairs
//! (Zorro, BLiMP) by pseudo-log-likelihood: does it prefer the grammatical sentence?

// The modules, lowest first: each uses only modules declared before it, so that the
// dependencies point one way (docs/ARCHITECTURE.md; scripts/check-architecture.sh checks
// it). Blank lines keep rustfmt from sorting across the order.

// The ground: durations, seeds and what a launcher says, then errors, then files and the
// backend by name.
pub mod duration;
pub mod launcher;
pub mod seed;

pub mod error;

pub mod backend;
pub mod files;
// The pipeline's data, then the model that reads it.
pub mod data;

pub mod model;
// A run's settings, then evaluation of a model.
pub mod config;

pub mod eval;
// A run on disk, training it, and the command line.
pub mod run;

pub mod train;
// The backend benchmark, on the trainer's step; then the command line over all of it.
pub mod bench;

pub mod cli;

pub use config::TrainConfig;
pub use error::{ConfigError, TrainError};
pub use model::{BertConfig, BertForMaskedLm, ModelConfig, ModelForMaskedLm};
pub use run::RunDir;
pub use train::{Trainer, resume, resume_with, train, train_with};
