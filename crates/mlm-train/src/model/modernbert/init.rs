//! A ModernBERT's first weights: transformers' truncated-normal draw from a seed, and the
//! zero structure a checkpoint loads into.

use burn::module::{Initializer, Param};
use burn::nn::{DropoutConfig, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use mlm_core::MlmHeadConfig;
use rand::rngs::StdRng;

use super::config::{AttentionKind, ModernBertConfig};
use super::modules::{
    ModernBertAttention, ModernBertEmbeddings, ModernBertForMaskedLm, ModernBertLayer,
    ModernBertMlp,
};
use crate::seed::{Stream, stream_rng};

impl ModernBertConfig {
    /// A model initialised from `seed` on the host, identically on every backend, by
    /// transformers' `ModernBertPreTrainedModel._init_weights`: each matrix drawn from a
    /// normal truncated at `initializer_cutoff_factor` standard deviations, in module order
    /// from one `StdRng`: token embeddings, `Wqkv` and `Wi` at `initializer_range`, the
    /// output projections `Wo` and the head's dense layer at `initializer_range / √(2 ·
    /// layers)`; biases 0, LayerNorm gains 1. (The tied decoder keeps the embedding's draw.)
    ///
    /// # Panics
    /// If [`validate`](Self::validate) fails.
    pub fn init_seeded(&self, seed: u64, device: &Device) -> ModernBertForMaskedLm {
        let mut model = self.init(device);
        let mut draw = TruncatedNormal {
            rng: stream_rng(seed, Stream::Init, 0),
            cutoff: self.initializer_cutoff_factor,
        };
        let std_in = self.initializer_range;
        let std_out = std_in / (2.0 * self.num_hidden_layers as f64).sqrt();
        let embedding = &mut model.embeddings.tok_embeddings.weight;
        *embedding = draw.redraw(embedding.clone(), std_in);
        for layer in &mut model.layers {
            for (linear, std) in [
                (&mut layer.attn.wqkv, std_in),
                (&mut layer.attn.wo, std_out),
                (&mut layer.mlp.wi, std_in),
                (&mut layer.mlp.wo, std_out),
            ] {
                linear.weight = draw.redraw(linear.weight.clone(), std);
            }
        }
        if let Some(transform) = &mut model.head.transform {
            transform.dense.weight = draw.redraw(transform.dense.weight.clone(), std_out);
        }
        model
    }

    /// The model's structure on `device` with every weight 0 (LayerNorm gains 1): what a
    /// checkpoint or a Hugging Face file is loaded into.
    ///
    /// # Panics
    /// If [`validate`](Self::validate) fails.
    pub fn init(&self, device: &Device) -> ModernBertForMaskedLm {
        if let Err(message) = self.validate() {
            panic!("invalid ModernBertConfig: {message}");
        }
        let (d, v) = (self.hidden_size, self.vocab_size);
        let mut head = MlmHeadConfig::new(d, v)
            .with_layer_norm_eps(self.norm_eps)
            .with_initializer(Initializer::Zeros)
            .init(device);
        if let Some(transform) = &mut head.transform {
            transform.dense = zero_linear(d, d, self.classifier_bias, device);
            transform.layer_norm = self.layer_norm(device);
        }
        ModernBertForMaskedLm {
            embeddings: ModernBertEmbeddings {
                tok_embeddings: EmbeddingConfig::new(v, d)
                    .with_initializer(Initializer::Zeros)
                    .init(device),
                norm: self.layer_norm(device),
                drop: DropoutConfig::new(self.embedding_dropout).init(),
            },
            layers: (0..self.num_hidden_layers)
                .map(|i| self.zero_layer(i, device))
                .collect(),
            final_norm: self.layer_norm(device),
            head,
            norm_eps: self.norm_eps,
            local_attention: self.local_attention,
            global_rope_theta: self.global_rope_theta,
            local_rope_theta: self.local_rope_theta,
            max_position_embeddings: self.max_position_embeddings,
        }
    }

    /// Layer `i` of [`init`](Self::init).
    fn zero_layer(&self, i: usize, device: &Device) -> ModernBertLayer {
        let (d, ff) = (self.hidden_size, self.intermediate_size);
        ModernBertLayer {
            attn_norm: (i > 0).then(|| self.layer_norm(device)),
            attn: ModernBertAttention {
                wqkv: zero_linear(d, 3 * d, self.attention_bias, device),
                wo: zero_linear(d, d, self.attention_bias, device),
                drop: DropoutConfig::new(self.attention_dropout).init(),
                num_attention_heads: self.num_attention_heads,
            },
            mlp_norm: self.layer_norm(device),
            mlp: ModernBertMlp {
                wi: zero_linear(d, 2 * ff, self.mlp_bias, device),
                wo: zero_linear(ff, d, self.mlp_bias, device),
                drop: DropoutConfig::new(self.mlp_dropout).init(),
            },
            local: self.attention_kind(i) == AttentionKind::Local,
            norm_eps: self.norm_eps,
        }
    }

    /// LayerNorm over the model's width, with a bias if `norm_bias`.
    fn layer_norm(&self, device: &Device) -> LayerNorm {
        LayerNormConfig::new(self.hidden_size)
            .with_epsilon(self.norm_eps)
            .with_bias(self.norm_bias)
            .init(device)
    }

    /// `model` with this configuration's dropout probabilities: a continued run trains with
    /// its own dropout, not its checkpoint's.
    pub fn with_dropout(&self, mut model: ModernBertForMaskedLm) -> ModernBertForMaskedLm {
        model.embeddings.drop = DropoutConfig::new(self.embedding_dropout).init();
        for layer in &mut model.layers {
            layer.attn.drop = DropoutConfig::new(self.attention_dropout).init();
            layer.mlp.drop = DropoutConfig::new(self.mlp_dropout).init();
        }
        model
    }
}

/// A `[d_in → d_out]` layer of zeros, with a zero bias if `bias`.
fn zero_linear(d_in: usize, d_out: usize, bias: bool, device: &Device) -> Linear {
    Linear {
        bias: bias.then(|| Initializer::Zeros.init([d_out], device)),
        ..LinearConfig::new(d_in, d_out)
            .with_bias(false)
            .with_initializer(Initializer::Zeros)
            .init(device)
    }
}

/// Draws of N(0, std²) truncated at `cutoff` standard deviations (redrawn until inside).
struct TruncatedNormal {
    rng: StdRng,
    cutoff: f64,
}

impl TruncatedNormal {
    /// `param` with fresh values of standard deviation `std` (before truncation).
    fn redraw(&mut self, param: Param<Tensor<2>>, std: f64) -> Param<Tensor<2>> {
        let limit = (self.cutoff * std) as f32;
        param.map(|tensor| {
            let mut sampler = Distribution::Normal(0.0, std).sampler::<_, f32>(&mut self.rng);
            let values: Vec<f32> = (0..tensor.shape().num_elements())
                .map(|_| {
                    loop {
                        let x = sampler.sample();
                        if x.abs() <= limit {
                            break x;
                        }
                    }
                })
                .collect();
            let fresh =
                Tensor::from_data(TensorData::new(values, tensor.shape()), &tensor.device());
            if tensor.is_require_grad() {
                fresh.require_grad()
            } else {
                fresh
            }
        })
    }
}
