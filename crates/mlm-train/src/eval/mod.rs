//! Evaluation of a model: the masked-LM loss on held-out text ([`held_out`]) and grammar by
//! minimal pairs ([`grammar`]) beside the word-frequency baseline ([`unigram`]).

pub mod grammar;
pub mod held_out;
pub mod unigram;

pub use grammar::{MinimalPairsScore, ParadigmScore, Scoring, ScoringOptions, score_minimal_pairs};
pub use held_out::{EvalMetrics, evaluate};
pub use unigram::UnigramScorer;
