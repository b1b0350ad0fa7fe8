//! A BERT's sizes, with Hugging Face's `BertConfig` names, and their checks.

use burn::config::Config;

use crate::error::ConfigError;
use crate::model::family::ModelFamily;

/// Sizes of a BERT, with Hugging Face's `BertConfig` names; saved as JSON in a run directory.
#[derive(Config, Debug, PartialEq)]
pub struct BertConfig {
    /// Number of tokens in the vocabulary.
    pub vocab_size: usize,
    /// Width of the hidden states, `d_model`.
    #[config(default = 128)]
    pub hidden_size: usize,
    /// Number of encoder layers.
    #[config(default = 2)]
    pub num_hidden_layers: usize,
    /// Number of attention heads; must divide `hidden_size`.
    #[config(default = 2)]
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    #[config(default = 512)]
    pub intermediate_size: usize,
    /// Length of the position table: the longest sequence the model accepts.
    #[config(default = 128)]
    pub max_position_embeddings: usize,
    /// Number of segment (token type) ids.
    #[config(default = 2)]
    pub type_vocab_size: usize,
    /// Epsilon of every LayerNorm.
    #[config(default = 1e-12)]
    pub layer_norm_eps: f64,
    /// Dropout after embeddings, attention output and feed-forward.
    #[config(default = 0.0)]
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention probabilities.
    #[config(default = 0.0)]
    pub attention_probs_dropout_prob: f64,
    /// Standard deviation of the normal initialisation of weights and embeddings (BERT: 0.02).
    #[config(default = 0.02)]
    pub initializer_range: f64,
    /// Start the learned position table from sinusoids (Vaswani et al. 2017, §3.5) scaled to
    /// standard deviation `initializer_range`, instead of BERT's normal draw. The table is
    /// still trained, and the model is still a Hugging Face BERT; but attention to a
    /// neighbouring position is a fixed rotation of sinusoids rather than something to learn
    /// from random rows. It lowered the tiny model's held-out loss by 0.08 nats after 400
    /// steps (docs/USAGE.md, "What the main job learns").
    #[config(default = false)]
    pub sinusoidal_positions: bool,
    /// Start the first encoder layer as a reader of the neighbouring tokens, so that a masked
    /// position sees its context from the first step rather than after the long plateau in
    /// which a randomly initialised BERT learns where its neighbours are:
    /// - the position table is [`evenly_spread_positions`]: sinusoids whose frequencies are
    ///   spread evenly over (0, π), so that its rows are nearly orthogonal and a shift by δ
    ///   positions is a fixed rotation of them;
    /// - the query and key of head `h` are that rotation (see [`neighbour_query_key`]), so
    ///   that head 0 attends to the previous token, head 1 to the next, head 2 to the one
    ///   before that, and so on;
    /// - the value and attention output projections are identities, so that the token a
    ///   head reads reaches the residual stream unchanged.
    ///
    /// Every weight is still trained and the model is still a Hugging Face BERT: only the
    /// initial values differ. After 400 steps of the tiny model the held-out loss at `[MASK]`
    /// inputs was 5.52 nats with it and 6.58 (the unigram level: no context used) without;
    /// the main job (then 1 200 steps) ended 2.06 nats below the unigram baseline with it and
    /// 0.69 without (docs/USAGE.md, "What the main job learns"). It sets its own position table, so
    /// it cannot be combined with `sinusoidal_positions`.
    ///
    /// [`evenly_spread_positions`]: super::evenly_spread_positions
    /// [`neighbour_query_key`]: super::neighbour_query_key
    #[config(default = false)]
    pub local_attention_init: bool,
    /// The Hugging Face family this model is a checkpoint of: its parameter names, its
    /// `config.json` and its tokenizer's kind.
    #[config(default = "ModelFamily::Bert")]
    pub family: ModelFamily,
    /// Row of the position table that a sequence's first token reads: 0 for BERT; RoBERTa's
    /// `padding_idx + 1` (transformers' `create_position_ids_from_input_ids`: RoBERTa counts
    /// positions from `pad_token_id + 1`, so its 514 rows hold sequences of 512). A sequence
    /// may be up to `max_position_embeddings - position_offset` tokens long.
    #[config(default = 0)]
    pub position_offset: usize,
}

impl BertConfig {
    /// Checks that the sizes make a model: a table of predicates, one per field, the first
    /// that fails reported.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the field and its value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ]
        .map(|(field, value)| ConfigError::check(field, value, value > 0, "must be positive"));
        // p = 1 drops every activation: the scaled survivors are 0 / 0 = NaN.
        let dropout = [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            (
                "attention_probs_dropout_prob",
                self.attention_probs_dropout_prob,
            ),
        ]
        .map(|(field, p)| {
            let reason = "is not a dropout probability in [0, 1)";
            ConfigError::check(field, p, (0.0..1.0).contains(&p), reason)
        });
        let heads = self.num_attention_heads.max(1);
        let rules = [
            ConfigError::check(
                "sinusoidal_positions",
                self.sinusoidal_positions,
                !(self.sinusoidal_positions && self.local_attention_init),
                "and local_attention_init both set the initial position table: choose one \
                 (--local-attention-init false turns the second off)",
            ),
            ConfigError::check(
                "hidden_size",
                self.hidden_size,
                self.hidden_size.is_multiple_of(heads),
                format!("is not divisible by num_attention_heads ({heads})"),
            ),
            ConfigError::check(
                "position_offset",
                self.position_offset,
                self.position_offset < self.max_position_embeddings,
                format!(
                    "leaves no row of the {} positions",
                    self.max_position_embeddings
                ),
            ),
        ];
        // The first row that fails, in the table's order.
        positive.into_iter().chain(dropout).chain(rules).collect()
    }

    /// The longest sequence the position table holds: `max_position_embeddings −
    /// position_offset` (512 for bert-base and roberta-base alike).
    pub fn max_sequence_len(&self) -> usize {
        self.max_position_embeddings
            .saturating_sub(self.position_offset)
    }

    /// Number of trainable parameters (the tied decoder counted once).
    pub fn num_parameters(&self) -> usize {
        let (d, ff, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let embeddings = (v + self.max_position_embeddings + self.type_vocab_size) * d + 2 * d;
        let layer = 4 * (d * d + d) + 2 * d + (d * ff + ff) + (ff * d + d) + 2 * d;
        let head = d * d + d + 2 * d + v;
        embeddings + self.num_hidden_layers * layer + head
    }
}
