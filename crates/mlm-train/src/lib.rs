//! # mlm-train
//!
//! Tiny-BERT masked-language-model pretraining built on `mlm-core` (in progress: the
//! training run lands with its own issue).
