//! BERT for masked-language modelling, top to bottom: embeddings → encoder layers →
//! the tied `mlm-core` head on the masked rows only.
//!
//! Post-LN Transformer encoder as in BERT (Devlin et al. 2019, §3; Vaswani et al. 2017).
//! Field names follow Hugging Face's `BertForMaskedLM` checkpoint keys one to one
//! (`self_attention` for `attention.self`, `layer_norm` for `LayerNorm`), so that
//! import and export are a table of names.

use burn::config::Config;
use burn::module::{Initializer, Module, ModuleMapper, Param};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear,
    LinearConfig,
};
use burn::tensor::Device;
use burn::tensor::{Bool, Distribution, Int, Tensor, TensorData};
use mlm_core::attention::{self, PADDING_BIAS};
use mlm_core::{
    MaskedLanguageModel, MaskedTargets, MlmError, MlmHead, MlmHeadConfig, gelu,
    multi_head_attention,
};

use crate::data::DeviceBatch;
use crate::error::ConfigError;
use crate::seed::{Stream, stream_rng};
use rand::rngs::StdRng;

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

/// The Hugging Face model families this BERT computes exactly (`model_type` in
/// `config.json`): the same post-LN encoder and tied MLM head, under other names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelFamily {
    /// `BertForMaskedLM` (Devlin et al. 2019): WordPiece, positions from 0.
    #[default]
    Bert,
    /// `RobertaForMaskedLM` (Liu et al. 2019): byte-level BPE, positions from
    /// `padding_idx + 1`, one segment, `lm_head.*` names.
    Roberta,
}

impl ModelFamily {
    /// `model_type` in a Hugging Face `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Bert => "bert",
            Self::Roberta => "roberta",
        }
    }
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

    /// A model initialised from `seed` on the host, identically on every backend (BERT's
    /// initialisation, Devlin et al. 2019 via Hugging Face `_init_weights`): every matrix and
    /// embedding ~ N(0, `initializer_range`) drawn in module order from one `StdRng`, biases
    /// 0, LayerNorm gains 1; then the structured starts of `sinusoidal_positions` and
    /// `local_attention_init` ([`with_initial_values`](Self::with_initial_values)).
    ///
    /// # Panics
    /// If [`validate`](Self::validate) fails.
    pub fn init_seeded(&self, seed: u64, device: &Device) -> BertForMaskedLm {
        struct HostNormal {
            rng: StdRng,
            std: f64,
        }
        impl ModuleMapper for HostNormal {
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                if D != 2 {
                    return param;
                }
                param.map(|tensor| {
                    let data = TensorData::random::<f32, _, _>(
                        tensor.shape(),
                        Distribution::Normal(0.0, self.std),
                        &mut self.rng,
                    );
                    let fresh = Tensor::from_data(data, &tensor.device());
                    if tensor.is_require_grad() {
                        fresh.require_grad()
                    } else {
                        fresh
                    }
                })
            }
        }
        let model = self.init(device).map(&mut HostNormal {
            rng: stream_rng(seed, Stream::Init, 0),
            std: self.initializer_range,
        });
        self.with_initial_values(model)
    }

    /// The model's structure on `device` with every weight 0 (LayerNorm gains 1): what a
    /// checkpoint or a Hugging Face file is loaded into. Training starts from
    /// [`init_seeded`](Self::init_seeded).
    ///
    /// # Panics
    /// If [`validate`](Self::validate) fails.
    pub fn init(&self, device: &Device) -> BertForMaskedLm {
        if let Err(message) = self.validate() {
            panic!("invalid BertConfig: {message}");
        }
        let d = self.hidden_size;
        BertForMaskedLm {
            embeddings: BertEmbeddings {
                word_embeddings: self.zero_embedding(self.vocab_size, device),
                position_embeddings: self.zero_embedding(self.max_position_embeddings, device),
                token_type_embeddings: self.zero_embedding(self.type_vocab_size, device),
                layer_norm: self.layer_norm(device),
                layer_norm_eps: self.layer_norm_eps,
                position_offset: self.position_offset,
                dropout: DropoutConfig::new(self.hidden_dropout_prob).init(),
            },
            layers: (0..self.num_hidden_layers)
                .map(|_| self.zero_layer(device))
                .collect(),
            head: MlmHeadConfig::new(d, self.vocab_size)
                .with_layer_norm_eps(self.layer_norm_eps)
                .with_initializer(Initializer::Zeros)
                .init(device),
        }
    }

    /// One encoder layer of [`init`](Self::init): attention, then the feed-forward.
    fn zero_layer(&self, device: &Device) -> BertLayer {
        let (d, ff) = (self.hidden_size, self.intermediate_size);
        BertLayer {
            attention: BertAttention {
                self_attention: BertSelfAttention {
                    query: zero_linear(d, d, device),
                    key: zero_linear(d, d, device),
                    value: zero_linear(d, d, device),
                    dropout: DropoutConfig::new(self.attention_probs_dropout_prob).init(),
                    num_attention_heads: self.num_attention_heads,
                },
                output: self.zero_residual(d, device),
            },
            intermediate: zero_linear(d, ff, device),
            output: self.zero_residual(ff, device),
        }
    }

    /// A dense layer from `d_in` back to the model's width, added to its input and
    /// normalised.
    fn zero_residual(&self, d_in: usize, device: &Device) -> BertResidual {
        BertResidual {
            dense: zero_linear(d_in, self.hidden_size, device),
            layer_norm: self.layer_norm(device),
            layer_norm_eps: self.layer_norm_eps,
            dropout: DropoutConfig::new(self.hidden_dropout_prob).init(),
        }
    }

    /// LayerNorm over the model's width (gain 1, bias 0).
    fn layer_norm(&self, device: &Device) -> LayerNorm {
        LayerNormConfig::new(self.hidden_size)
            .with_epsilon(self.layer_norm_eps)
            .init(device)
    }

    /// A table of `n` embeddings of the model's width, all 0.
    fn zero_embedding(&self, n: usize, device: &Device) -> Embedding {
        EmbeddingConfig::new(n, self.hidden_size)
            .with_initializer(Initializer::Zeros)
            .init(device)
    }

    /// `model` with the initial values that [`sinusoidal_positions`] and
    /// [`local_attention_init`] ask for (unchanged if neither is set); for initialisers that
    /// redraw every weight.
    ///
    /// [`sinusoidal_positions`]: Self::sinusoidal_positions
    /// [`local_attention_init`]: Self::local_attention_init
    pub fn with_initial_values(&self, mut model: BertForMaskedLm) -> BertForMaskedLm {
        let (n, d, std) = (
            self.max_position_embeddings,
            self.hidden_size,
            self.initializer_range,
        );
        let device = model.embeddings.position_embeddings.weight.device();
        let matrix = |data: TensorData| Param::from_tensor(Tensor::from_data(data, &device));
        let table = if self.local_attention_init {
            Some(evenly_spread_positions(n, d, std))
        } else if self.sinusoidal_positions {
            Some(sinusoidal_positions(n, d, std))
        } else {
            None
        };
        if let Some(table) = table {
            model.embeddings.position_embeddings.weight = matrix(table);
        }
        if let (true, Some(layer)) = (self.local_attention_init, model.layers.first_mut()) {
            let (query, key) = neighbour_query_key(d, self.num_attention_heads);
            let attention = &mut layer.attention;
            attention.self_attention.query.weight = matrix(query);
            attention.self_attention.key.weight = matrix(key);
            attention.self_attention.value.weight = matrix(identity(d));
            attention.output.dense.weight = matrix(identity(d));
        }
        model
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

/// A dense layer `d_in → d_out` with weight and bias 0 (burn's `Linear` would draw the bias
/// from the initializer too).
fn zero_linear(d_in: usize, d_out: usize, device: &Device) -> Linear {
    Linear {
        bias: Some(Initializer::Zeros.init([d_out], device)),
        ..LinearConfig::new(d_in, d_out)
            .with_initializer(Initializer::Zeros)
            .init(device)
    }
}

/// The `[positions, d_model]` table `P[p, 2i] = s·sin(p / 10000^(2i/d))`,
/// `P[p, 2i+1] = s·cos(p / 10000^(2i/d))` (Vaswani et al. 2017, §3.5), with `s = std·√2` so
/// that its entries have standard deviation `std`, like a normal draw.
pub fn sinusoidal_positions(positions: usize, d_model: usize, std: f64) -> TensorData {
    sinusoids(positions, d_model, std, |i| {
        10_000f64.powf(-((2 * i) as f64) / d_model as f64)
    })
}

/// The `[positions, d_model]` table `P[p, 2i] = s·sin(p·ω_i)`, `P[p, 2i+1] = s·cos(p·ω_i)`
/// with `ω_i = π (i + ½) / (d/2)`: frequencies spread evenly over (0, π) rather than
/// geometrically as in [`sinusoidal_positions`], and `s = std·√2`. Row `p` dotted with row
/// `q` is `s² Σ_i cos((p − q) ω_i)`, `s² d/2` at `p = q` and near 0 elsewhere, so that a head
/// can single out one offset (a geometric spread leaves neighbouring rows nearly parallel).
pub fn evenly_spread_positions(positions: usize, d_model: usize, std: f64) -> TensorData {
    sinusoids(positions, d_model, std, |i| even_frequency(i, d_model))
}

fn even_frequency(i: usize, d_model: usize) -> f64 {
    std::f64::consts::PI * (i as f64 + 0.5) / (d_model / 2).max(1) as f64
}

/// `P[p, 2i] = s·sin(p·ω_i)`, `P[p, 2i+1] = s·cos(p·ω_i)`, `s = std·√2`.
fn sinusoids(
    positions: usize,
    d_model: usize,
    std: f64,
    frequency: impl Fn(usize) -> f64,
) -> TensorData {
    let scale = std * std::f64::consts::SQRT_2;
    let frequency = &frequency;
    let table: Vec<f32> = (0..positions)
        .flat_map(|p| {
            (0..d_model).map(move |i| {
                let angle = p as f64 * frequency(i / 2);
                let wave = if i % 2 == 0 { angle.sin() } else { angle.cos() };
                (scale * wave) as f32
            })
        })
        .collect();
    TensorData::new(table, [positions, d_model])
}

/// Query and key weights, `[d_model, d_model]` each (burn's `[d_in, d_out]`), under which
/// head `h` attends to the token at offset `δ_h = −1, +1, −2, +2, …` over hidden states
/// `LayerNorm(token + position)` whose position part is [`evenly_spread_positions`].
///
/// Head `h` owns output columns `h·d_head..(h+1)·d_head`, one pair of them per sinusoid pair
/// `i` it reads (pairs `h, h+2, h+4, …` modulo `d/2`). Its query copies the pair and its key
/// rotates it by `−ω_i δ_h`, so the score of query `p` and key `q` is
/// `c² Σ_i cos((q − p − δ_h) ω_i) / √d_head` on the position parts: largest at `q = p + δ_h`.
/// `c = 2.5` puts about 85 % of each head's attention on its offset at initialisation over
/// random tokens in the tiny model (d_model 128, 2 heads; the token and segment parts of the
/// hidden states add noise around the position scores). Smaller (1.5) or larger (3.5)
/// values trained worse in 400-step runs.
pub fn neighbour_query_key(d_model: usize, heads: usize) -> (TensorData, TensorData) {
    const C: f64 = 2.5;
    let d_head = d_model / heads;
    let (mut query, mut key) = (vec![0f32; d_model * d_model], vec![0f32; d_model * d_model]);
    for h in 0..heads {
        let hop = (h / 2 + 1) as f64;
        let offset = if h % 2 == 0 { -hop } else { hop };
        for j in 0..d_head / 2 {
            let pair = (2 * j + h) % (d_model / 2);
            let (sin, cos) = (even_frequency(pair, d_model) * offset).sin_cos();
            let (row_sin, row_cos) = (2 * pair, 2 * pair + 1);
            let (col_a, col_b) = (h * d_head + 2 * j, h * d_head + 2 * j + 1);
            let at = |row: usize, col: usize| row * d_model + col;
            query[at(row_sin, col_a)] = C as f32;
            query[at(row_cos, col_b)] = C as f32;
            // (sin a, cos a) ↦ (sin(a − θ), cos(a − θ)), θ = ω δ.
            key[at(row_sin, col_a)] = (C * cos) as f32;
            key[at(row_cos, col_a)] = (-C * sin) as f32;
            key[at(row_sin, col_b)] = (C * sin) as f32;
            key[at(row_cos, col_b)] = (C * cos) as f32;
        }
    }
    let shape = [d_model, d_model];
    (TensorData::new(query, shape), TensorData::new(key, shape))
}

/// The `[d, d]` identity.
fn identity(d: usize) -> TensorData {
    let mut m = vec![0f32; d * d];
    m.iter_mut().step_by(d + 1).for_each(|x| *x = 1.0);
    TensorData::new(m, [d, d])
}

/// Token + position + segment embeddings, then LayerNorm and dropout.
#[derive(Module, Debug)]
pub struct BertEmbeddings {
    /// `[vocab, d_model]`; also the tied decoder of the MLM head.
    pub word_embeddings: Embedding,
    /// `[max_position_embeddings, d_model]`, learned absolute positions.
    pub position_embeddings: Embedding,
    /// `[type_vocab_size, d_model]`, segment A/B.
    pub token_type_embeddings: Embedding,
    /// LayerNorm over the sum.
    pub layer_norm: LayerNorm,
    /// Its ε ([`BertConfig::layer_norm_eps`]; burn's `LayerNorm` keeps its own private).
    pub layer_norm_eps: f64,
    /// The position row of a sequence's first token ([`BertConfig::position_offset`]).
    pub position_offset: usize,
    /// Dropout after the LayerNorm.
    pub dropout: Dropout,
}

impl BertEmbeddings {
    /// `input_ids`, `token_type_ids`: `[batch, seq]` → `[batch, seq, d_model]`.
    pub fn forward(&self, input_ids: Tensor<2, Int>, token_type_ids: Tensor<2, Int>) -> Tensor<3> {
        let [batch, seq] = input_ids.dims();
        let first = self.position_offset as i64;
        let position_ids = Tensor::arange(first..first + seq as i64, &input_ids.device())
            .unsqueeze::<2>()
            .repeat_dim(0, batch);
        let sum = self.word_embeddings.forward(input_ids)
            + self.position_embeddings.forward(position_ids)
            + self.token_type_embeddings.forward(token_type_ids);
        self.dropout
            .forward(norm(&self.layer_norm, self.layer_norm_eps, sum))
    }
}

/// `layer_norm` (with its `epsilon`) over the last dimension of `x`, as one
/// [`mlm_core::layer_norm`] (a fused kernel on flex).
fn norm(layer_norm: &LayerNorm, epsilon: f64, x: Tensor<3>) -> Tensor<3> {
    let beta = layer_norm
        .beta
        .as_ref()
        .expect("BERT's LayerNorms have a bias");
    mlm_core::layer_norm(x, layer_norm.gamma.val(), beta.val(), epsilon)
}

/// `linear` applied to every token of `x [batch, seq, d_in]` → `[batch, seq, d_out]`, as one
/// `[batch·seq, d_in] × [d_in, d_out]` product: burn's 3-D `linear` broadcasts the weight into
/// one small product per sequence, and its weight gradient into a `[batch, d_in, d_out]` sum.
fn per_token(linear: &Linear, x: Tensor<3>) -> Tensor<3> {
    let [batch, seq, d_in] = x.dims();
    let y = linear.forward(x.reshape([batch * seq, d_in]));
    let d_out = y.dims()[1];
    y.reshape([batch, seq, d_out])
}

/// Multi-head scaled dot-product self-attention (`attention.self` in Hugging Face's names).
#[derive(Module, Debug)]
pub struct BertSelfAttention {
    /// Query projection `[d_model, d_model]`.
    pub query: Linear,
    /// Key projection `[d_model, d_model]`.
    pub key: Linear,
    /// Value projection `[d_model, d_model]`.
    pub value: Linear,
    /// Dropout on the attention probabilities.
    pub dropout: Dropout,
    /// Number of heads.
    pub num_attention_heads: usize,
}

impl BertSelfAttention {
    /// `hidden [batch, seq, d_model]`, `key_bias [batch, seq]` (0, or
    /// [`PADDING_BIAS`] at padding keys) → context `[batch, seq, d_model]`. Without dropout
    /// on the probabilities, one [`multi_head_attention`] (a fused kernel on flex).
    pub fn forward(&self, hidden: Tensor<3>, key_bias: Tensor<2>) -> Tensor<3> {
        let heads = self.num_attention_heads;
        let [query, key, value] =
            [&self.query, &self.key, &self.value].map(|linear| per_token(linear, hidden.clone()));
        if self.dropout.prob == 0.0 {
            return multi_head_attention(query, key, value, key_bias, heads);
        }
        let probs = attention::probabilities(query, key, key_bias, heads);
        attention::context(self.dropout.forward(probs), value)
    }

    /// Attention probabilities `[batch, heads, query, key]` (rows sum to 1), before dropout;
    /// arguments as in [`forward`](Self::forward).
    pub fn probabilities(&self, hidden: Tensor<3>, key_bias: Tensor<2>) -> Tensor<4> {
        let query = per_token(&self.query, hidden.clone());
        let key = per_token(&self.key, hidden);
        attention::probabilities(query, key, key_bias, self.num_attention_heads)
    }
}

/// Dense → dropout → residual add → LayerNorm (`attention.output` and `output` in HF's names).
#[derive(Module, Debug)]
pub struct BertResidual {
    /// Projection back to `d_model`.
    pub dense: Linear,
    /// Post-LN LayerNorm over the residual sum.
    pub layer_norm: LayerNorm,
    /// Its ε ([`BertConfig::layer_norm_eps`]; burn's `LayerNorm` keeps its own private).
    pub layer_norm_eps: f64,
    /// Dropout before the residual add.
    pub dropout: Dropout,
}

impl BertResidual {
    /// `LayerNorm(residual + dropout(dense(hidden)))`, `[batch, seq, _]` → `[batch, seq, d_model]`.
    pub fn forward(&self, hidden: Tensor<3>, residual: Tensor<3>) -> Tensor<3> {
        let sum = residual + self.dropout.forward(per_token(&self.dense, hidden));
        norm(&self.layer_norm, self.layer_norm_eps, sum)
    }
}

/// Self-attention with its output block.
#[derive(Module, Debug)]
pub struct BertAttention {
    /// `attention.self`.
    pub self_attention: BertSelfAttention,
    /// `attention.output`.
    pub output: BertResidual,
}

/// One post-LN encoder layer: attention block, then the GELU feed-forward block.
#[derive(Module, Debug)]
pub struct BertLayer {
    /// Attention block.
    pub attention: BertAttention,
    /// Feed-forward expansion `[d_model, intermediate_size]`, followed by GELU (erf).
    pub intermediate: Linear,
    /// Feed-forward projection back, residual and LayerNorm.
    pub output: BertResidual,
}

impl BertLayer {
    /// `[batch, seq, d_model]` → `[batch, seq, d_model]`.
    pub fn forward(&self, hidden: Tensor<3>, key_bias: Tensor<2>) -> Tensor<3> {
        let context = self
            .attention
            .self_attention
            .forward(hidden.clone(), key_bias);
        let attended = self.attention.output.forward(context, hidden);
        let expanded = gelu(per_token(&self.intermediate, attended.clone()));
        self.output.forward(expanded, attended)
    }
}

/// BERT with its masked-language-model head tied to the token embedding.
#[derive(Module, Debug)]
pub struct BertForMaskedLm {
    /// `bert.embeddings`.
    pub embeddings: BertEmbeddings,
    /// `bert.encoder.layer`.
    pub layers: Vec<BertLayer>,
    /// `cls.predictions`: transform and output bias; the decoder is `word_embeddings`.
    pub head: MlmHead,
}

impl BertForMaskedLm {
    /// Hidden states of the last layer.
    ///
    /// # Shapes
    /// - input_ids, token_type_ids: `[batch, seq]`, `seq <= max_position_embeddings`
    /// - padding_mask: `[batch, seq]`, `true` at padding (keys never attended to)
    /// - output: `[batch, seq, d_model]`
    pub fn encode(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
    ) -> Tensor<3> {
        // Additive bias: a padding key gets -1e9 before the softmax, i.e. probability 0.
        let key_bias = padding_mask.float().mul_scalar(PADDING_BIAS);
        let mut hidden = self.embeddings.forward(input_ids, token_type_ids);
        for layer in &self.layers {
            hidden = layer.forward(hidden, key_bias.clone());
        }
        hidden
    }

    /// Logits at the masked positions only (sparse prediction).
    ///
    /// # Shapes
    /// - input_ids, token_type_ids, padding_mask: as in [`encode`](Self::encode)
    /// - targets: `n_masked` flat positions `b * seq + s`, checked on the host (nothing is
    ///   read back from the device)
    /// - output: `[n_masked, vocab]`
    ///
    /// # Errors
    /// [`MlmError::ShapeMismatch`] if `targets` were checked for another batch shape or
    /// vocabulary.
    pub fn forward_masked(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
        targets: &MaskedTargets,
    ) -> Result<Tensor<2>, MlmError> {
        let hidden = self.encode(input_ids, token_type_ids, padding_mask);
        self.head.forward_targets(
            hidden,
            targets,
            Some(self.embeddings.word_embeddings.weight.val()),
        )
    }

    /// Logits at the masked positions of `batch` ([`forward_masked`](Self::forward_masked)),
    /// `[n_masked, vocab]`.
    ///
    /// # Errors
    /// As [`forward_masked`](Self::forward_masked).
    pub fn forward_batch(&self, batch: DeviceBatch) -> Result<Tensor<2>, MlmError> {
        self.forward_masked(
            batch.input_ids,
            batch.token_type_ids,
            batch.padding_mask,
            &batch.targets,
        )
    }

    /// Logits at every position, `[batch, seq, vocab]` (fill-mask and Hugging Face parity).
    ///
    /// # Errors
    /// None in practice: the head's shapes are fixed by construction.
    pub fn forward(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
    ) -> Result<Tensor<3>, MlmError> {
        let hidden = self.encode(input_ids, token_type_ids, padding_mask);
        self.head
            .forward(hidden, Some(self.embeddings.word_embeddings.weight.val()))
    }
}

/// Pseudo-log-likelihood scoring ([`mlm_core::PseudoLogLikelihood`]): one segment, sizes
/// read off the embedding tables.
impl MaskedLanguageModel for BertForMaskedLm {
    fn masked_logits(
        &self,
        input_ids: Tensor<2, Int>,
        padding_mask: Tensor<2, Bool>,
        targets: &MaskedTargets,
    ) -> Result<Tensor<2>, MlmError> {
        let token_type_ids = input_ids.zeros_like();
        self.forward_masked(input_ids, token_type_ids, padding_mask, targets)
    }

    fn vocab_size(&self) -> usize {
        self.embeddings.word_embeddings.weight.dims()[0]
    }

    fn max_seq_len(&self) -> usize {
        self.embeddings.position_embeddings.weight.dims()[0]
    }
}
