//! ModernBERT's architecture (Warner et al. 2024), which computes the `modernbert` family of
//! the registry ([`super::family`]): its sizes ([`config`]), first weights ([`init`]),
//! rotary positions and sliding window ([`rotary`]), modules top to bottom ([`modules`]),
//! and the Hugging Face names of its checkpoints ([`names`], [`hf_config`]).

pub mod config;
pub mod hf_config;
pub mod init;
pub mod modules;
pub mod names;
pub mod rotary;
pub mod window;

pub use config::{AttentionKind, ModernBertConfig};
pub use hf_config::HfModernBertConfig;
pub use modules::{
    ModernBertAttention, ModernBertEmbeddings, ModernBertForMaskedLm, ModernBertLayer,
    ModernBertMlp,
};
