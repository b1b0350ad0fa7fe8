//! # burn-mlm
//!
//! BERT-style masked-language-model pretraining on Burn. This crate re-exports the two
//! workspace crates:
//!
//! - [`core`] (`mlm-core`): the MLM head, the masked cross-entropy and the 80/10/10
//!   masking; runs on any Burn device, with kernels of its own on flex;
//! - [`train`] (`mlm-train`): the tiny-BERT pretraining run built on them.

pub use mlm_core as core;
pub use mlm_train as train;

// The README's Rust program lives in crates/mlm-core/README.md, mlm-core's front page, where
// it is a doctest of the crate it uses.
