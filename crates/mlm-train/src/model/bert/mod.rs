//! BERT's architecture, which computes the `bert` and `roberta` families of the registry
//! ([`super::family`]): its sizes ([`config`]), first weights ([`init`]), modules top to
//! bottom ([`modules`]), and the Hugging Face names of its checkpoints ([`names`],
//! [`hf_config`]).

pub mod config;
pub mod hf_config;
pub mod init;
pub mod modules;
pub mod names;

pub use config::BertConfig;
pub use hf_config::HfBertConfig;
pub use init::{evenly_spread_positions, neighbour_query_key, sinusoidal_positions};
pub use modules::{
    BertAttention, BertEmbeddings, BertForMaskedLm, BertLayer, BertResidual, BertSelfAttention,
};
