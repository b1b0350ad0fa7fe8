//! `mlm-core` inside your own Burn model: an embedding and one encoder layer of yours,
//! our tied MLM head, masked loss and 80/10/10 masker, trained for a few AdamW steps.
//!
//! Run: `cargo run -p mlm-core --example custom_model`

use burn::module::{Initializer, Module};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig};
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::{Device, Int, Tensor, TensorData};
use mlm_core::{
    MaskedCrossEntropy, MaskedTargets, MaskingConfig, MlmError, MlmHead, MlmHeadConfig,
};

const VOCAB: usize = 40;
const D_MODEL: usize = 32;
const PAD: u32 = 0;
const MASK: u32 = 1;
const SEQ: usize = 12;

/// The user's model: their embedding and encoder, plus our head tied to their embedding.
#[derive(Module, Debug)]
struct TinyMlm {
    embedding: Embedding,
    position: Embedding,
    encoder: TransformerEncoder,
    head: MlmHead,
}

impl TinyMlm {
    fn new(device: &Device) -> Self {
        let head = MlmHeadConfig::new(D_MODEL, VOCAB);
        Self {
            // BERT's initialisation, N(0, 0.02): the tied logits start near uniform, the
            // loss near ln(VOCAB) (burn-nn's default embedding is N(0, 1)).
            embedding: head.init_tied_embedding(device),
            position: EmbeddingConfig::new(SEQ, D_MODEL)
                .with_initializer(Initializer::Normal {
                    mean: 0.0,
                    std: 0.02,
                })
                .init(device),
            encoder: TransformerEncoderConfig::new(D_MODEL, 64, 2, 1)
                .with_dropout(0.0)
                .init(device),
            head: head.init(device),
        }
    }

    /// ids `[batch, seq]` → logits at the masked positions `[n_masked, vocab]`.
    fn forward(&self, ids: Tensor<2, Int>, targets: &MaskedTargets) -> Result<Tensor<2>, MlmError> {
        let [batch, seq] = ids.dims();
        let padding = ids.clone().equal_elem(PAD as i64);
        let position_ids = Tensor::arange(0..seq as i64, &ids.device())
            .unsqueeze::<2>()
            .repeat_dim(0, batch);
        let embedded = self.embedding.forward(ids) + self.position.forward(position_ids);
        let hidden = self
            .encoder
            .forward(TransformerEncoderInput::new(embedded).mask_pad(padding));
        // Tied: the decoder is the embedding's own parameter, not a copy.
        self.head
            .forward_targets(hidden, targets, Some(self.embedding.weight.val()))
    }
}

/// A toy language: each sentence counts upward from a random start, so a masked token is
/// predictable from its neighbours.
fn corpus(n: usize, len: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            (0..len)
                .map(|j| 2 + ((i * 7 + j) % (VOCAB - 2)) as u32)
                .collect()
        })
        .collect()
}

fn train(device: &Device) -> Result<(), MlmError> {
    let mut model = TinyMlm::new(device);
    let mut optimizer = AdamWConfig::new().with_weight_decay(0.01).init();
    let mut masker = MaskingConfig::new(VOCAB, MASK, PAD, vec![])
        .with_seed(42)
        .init()?;
    let sentences = corpus(64, SEQ);
    let seq = sentences[0].len();
    for step in 1..=150 {
        let batch = masker.mask(&sentences)?;
        let ids: Vec<i64> = batch
            .input_ids
            .iter()
            .flatten()
            .map(|&id| id as i64)
            .collect();
        let ids = Tensor::from_data(TensorData::new(ids, [sentences.len(), seq]), device);
        // The masked positions and their true tokens, checked on the host.
        let targets = batch.targets(seq, VOCAB, device)?;

        let logits = model.forward(ids, &targets)?;
        let out = MaskedCrossEntropy::default().forward_targets(logits, &targets)?;
        if step % 15 == 0 || step == 1 {
            println!(
                "step {step:>3}  loss {:.4}  accuracy {:>5.1} %  ({} masked tokens)",
                out.loss.clone().into_scalar::<f32>(),
                100.0 * out.accuracy(),
                out.n_graded
            );
        }
        let grads = GradientsParams::from_grads(out.backward()?, &model);
        model = optimizer.step(3e-3, model, grads);
    }
    Ok(())
}

fn main() -> Result<(), MlmError> {
    train(&Device::flex().autodiff())
}
