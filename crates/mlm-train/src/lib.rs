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
//! [`hf`] reads and writes Hugging Face `BertForMaskedLM` folders (`config.json`,
//! `model.safetensors`, tokenizer files), so a run exports to transformers and a
//! transformers checkpoint imports as a run. [`grammar`] scores a model on minimal pairs
//! (Zorro, BLiMP) by pseudo-log-likelihood: does it prefer the grammatical sentence?

pub mod backend;
pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod data;
pub mod distributed;
pub mod error;
pub mod eval;
pub mod gradients;
pub mod grammar;
pub mod hf;
pub mod memory;
pub mod model;
pub mod predict;
pub mod progress;
pub mod report;
pub mod run_dir;
pub mod seed;
pub mod stop;
pub mod train;
pub mod trainer;

pub use config::TrainConfig;
pub use error::TrainError;
pub use model::{BertConfig, BertForMaskedLm};
pub use run_dir::RunDir;
pub use train::{resume, resume_with, train, train_with};
pub use trainer::Trainer;
