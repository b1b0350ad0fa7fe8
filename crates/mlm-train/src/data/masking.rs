//! How a training batch selects what to predict: single tokens or spans of whole words (at
//! the rates of mlm-core's [`mlm_core::MaskRates`]).

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// What a training batch selects for prediction (`--masking`, `"masking"` in `config.json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Masking {
    /// Each non-special token with probability `mlm_probability`, then 80/10/10 per token
    /// (BERT, Devlin et al. 2019, §3.1).
    #[default]
    Token,
    /// Spans of whole words, lengths ~ Geo(0.2) truncated at 10 words, until
    /// `mlm_probability` of the tokens are selected, then 80/10/10 per span (SpanBERT, Joshi
    /// et al. 2020, §3.1).
    Span,
}

impl std::fmt::Display for Masking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Token => "token",
            Self::Span => "span",
        })
    }
}
