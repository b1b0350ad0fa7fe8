//! The model: a BERT encoder with mlm-core's head ([`bert`]), and its Hugging Face format
//! ([`hf`]).

pub mod bert;
pub mod hf;

pub use bert::{
    BertAttention, BertConfig, BertEmbeddings, BertForMaskedLm, BertLayer, BertResidual,
    BertSelfAttention, ModelFamily, evenly_spread_positions, neighbour_query_key,
    sinusoidal_positions,
};
