//! Evaluation of a model: the masked-LM loss on held-out text ([`held_out`]) and grammar by
//! minimal pairs ([`grammar`]).

pub mod grammar;
pub mod held_out;

pub use grammar::{MinimalPairsScore, ParadigmScore, score_minimal_pairs};
pub use held_out::{EvalMetrics, evaluate};
