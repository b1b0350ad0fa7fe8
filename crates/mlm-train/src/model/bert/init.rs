//! A BERT's first weights: BERT's seeded normal draw, the zero structure a checkpoint loads
//! into, and the structured starts of the tiny main job (sinusoidal positions, neighbour
//! attention).

use burn::module::{Initializer, Module, ModuleMapper, Param};
use burn::nn::{
    DropoutConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig,
};
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use mlm_core::MlmHeadConfig;
use rand::rngs::StdRng;

use super::config::BertConfig;
use super::modules::{
    BertAttention, BertEmbeddings, BertForMaskedLm, BertLayer, BertResidual, BertSelfAttention,
};
use crate::seed::{Stream, stream_rng};

impl BertConfig {
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

    /// `model` (of this configuration's sizes, e.g. a checkpoint's) with this
    /// configuration's dropout probabilities, after the embeddings, on the attention
    /// probabilities and before each residual add: a continued run trains with its own
    /// dropout, not the one its checkpoint was saved with.
    pub fn with_dropout(&self, mut model: BertForMaskedLm) -> BertForMaskedLm {
        let hidden = || DropoutConfig::new(self.hidden_dropout_prob).init();
        model.embeddings.dropout = hidden();
        for layer in &mut model.layers {
            let attention = &mut layer.attention;
            attention.self_attention.dropout =
                DropoutConfig::new(self.attention_probs_dropout_prob).init();
            attention.output.dropout = hidden();
            layer.output.dropout = hidden();
        }
        model
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
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint saved without dropout, continued with some: every dropout of the model
    /// is the run's, as in a model the run's configuration builds.
    #[test]
    fn a_checkpoints_model_takes_the_runs_dropout() {
        let saved = BertConfig::new(20)
            .with_hidden_size(8)
            .with_num_hidden_layers(2)
            .with_num_attention_heads(2)
            .with_intermediate_size(16)
            .with_max_position_embeddings(8);
        let run = BertConfig {
            hidden_dropout_prob: 0.3,
            attention_probs_dropout_prob: 0.2,
            ..saved.clone()
        };
        let device = Device::flex();
        let probs = |model: &BertForMaskedLm| {
            let layers = model.layers.iter().map(|layer| {
                let attention = &layer.attention;
                [
                    attention.self_attention.dropout.prob,
                    attention.output.dropout.prob,
                    layer.output.dropout.prob,
                ]
            });
            (model.embeddings.dropout.prob, layers.collect::<Vec<_>>())
        };
        let continued = run.with_dropout(saved.init(&device));
        assert_eq!(probs(&continued), probs(&run.init(&device)));
        assert_eq!(probs(&continued), (0.3, vec![[0.2, 0.3, 0.3]; 2]));
    }
}
