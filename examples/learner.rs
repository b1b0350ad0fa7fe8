//! Your own encoder, trained with burn-train's `Learner`, with mlm-core's head, loss and
//! masking: `MlmBatcher` feeds the `DataLoader`, `MlmOutput` feeds the metrics.
//!
//! Run: `cargo run --release --example learner -- [STEPS_PER_EPOCH] [EPOCHS] [DIR]`
//! (defaults: 200 steps × 2 epochs of 32 × 64 tokens into `runs/learner-example`, about two
//! minutes on a 2-core CPU). In a terminal burn-train draws its dashboard (loss, MLM accuracy
//! over the masked positions, perplexity); elsewhere (a log, a pipe) a line at each tenth of
//! a split gives the same running values (`support/progress_lines.rs`), and both end with a
//! summary table. Per-batch metric values go to `DIR/{train,valid}/epoch-N/*.log`,
//! checkpoints (burnpack files) to `DIR/checkpoint/`.

#[path = "support/progress_lines.rs"]
mod progress_lines;

use std::io::IsTerminal;
use std::path::PathBuf;

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::grad_clipping::GradientClippingConfig;
use burn::module::{Initializer, Module};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig};
use burn::optim::AdamWConfig;
use burn::tensor::Device;
use burn::tensor::{Int, Tensor};
use burn_train::metric::{AccuracyMetric, LossMetric, PerplexityMetric};
use burn_train::{InferenceStep, Learner, SupervisedTraining, TrainOutput, TrainStep};
use mlm_core::MaskRates;
use mlm_core::learner::{MlmBatch, MlmBatcher, MlmOutput};
use mlm_core::{MaskedCrossEntropy, MlmHead, MlmHeadConfig};
use mlm_train::data::Masking;
use mlm_train::data::{
    DEFAULT_CORPUS, DataFolder, PrepareOptions, TokenSplit, default_packages, fetch_corpus,
    prepare_folder,
};

const SEQ_LEN: usize = 64;
const BATCH: usize = 32;
const D_MODEL: usize = 128;
const SEED: u64 = 42;

/// A small BERT-like encoder of the user's own making: token and position embeddings,
/// burn-nn's `TransformerEncoder` (post-norm, as BERT), and mlm-core's head tied to the
/// token embeddings.
#[derive(Module, Debug)]
struct MyEncoderForMlm {
    tokens: Embedding,
    positions: Embedding,
    norm: LayerNorm,
    encoder: TransformerEncoder,
    head: MlmHead,
}

impl MyEncoderForMlm {
    fn new(vocab_size: usize, device: &Device) -> Self {
        Self {
            tokens: bert_embedding(vocab_size, device),
            positions: bert_embedding(SEQ_LEN, device),
            norm: LayerNormConfig::new(D_MODEL).init(device),
            encoder: TransformerEncoderConfig::new(D_MODEL, 4 * D_MODEL, 2, 2)
                .with_dropout(0.0)
                .init(device),
            head: MlmHeadConfig::new(D_MODEL, vocab_size)
                .with_tie_word_embeddings(true)
                .init(device),
        }
    }

    /// Hidden states `[batch, seq, d_model]` → logits of the masked rows → masked loss.
    fn forward(&self, batch: MlmBatch) -> MlmOutput {
        let [batch_size, seq] = batch.input_ids.dims();
        let device = batch.input_ids.device();
        let position_ids = Tensor::<1, Int>::arange(0..seq as i64, &device)
            .unsqueeze::<2>()
            .repeat_dim(0, batch_size);
        let embedded = self.tokens.forward(batch.input_ids) + self.positions.forward(position_ids);
        let hidden = self.encoder.forward(
            TransformerEncoderInput::new(self.norm.forward(embedded)).mask_pad(batch.padding_mask),
        );
        let logits = self
            .head
            .forward_targets(hidden, &batch.targets, Some(self.tokens.weight.val()))
            .expect("the head is tied to the token embeddings");
        let loss = MaskedCrossEntropy::default()
            .forward_targets(logits.clone(), &batch.targets)
            .expect("the logits fit the targets");
        MlmOutput::new(logits, &batch.targets, &loss)
    }
}

/// An embedding table initialised as BERT's (normal, std 0.02): burn's default N(0, 1)
/// would make the tied decoder's first logits ~√d_model times too large.
fn bert_embedding(n_embedding: usize, device: &Device) -> Embedding {
    EmbeddingConfig::new(n_embedding, D_MODEL)
        .with_initializer(Initializer::Normal {
            mean: 0.0,
            std: 0.02,
        })
        .init(device)
}

impl TrainStep for MyEncoderForMlm {
    type Input = MlmBatch;
    type Output = MlmOutput;

    fn step(&self, batch: MlmBatch) -> TrainOutput<MlmOutput> {
        let output = self.forward(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for MyEncoderForMlm {
    type Input = MlmBatch;
    type Output = MlmOutput;

    fn step(&self, batch: MlmBatch) -> MlmOutput {
        self.forward(batch)
    }
}

/// `len` of `sequences` (all of them if there are fewer), evenly spaced over the corpus.
fn subset(sequences: &TokenSplit, len: usize) -> InMemDataset<Vec<u32>> {
    let step = (sequences.len() / len.max(1)).max(1);
    let indices = (0..sequences.len()).step_by(step).take(len);
    InMemDataset::new(indices.map(|i| sequences.sequence(i)).collect())
}

/// A positive count from the command line, or `default` when it is absent.
fn count(arg: Option<String>, default: usize) -> Result<usize, String> {
    let usage = "usage: learner [STEPS_PER_EPOCH >= 1] [EPOCHS >= 1] [DIR]";
    match arg.map(|text| text.parse::<usize>().map_err(|_| text)) {
        None => Ok(default),
        Some(Ok(n)) if n > 0 => Ok(n),
        Some(Ok(_)) => Err(format!("a count of 0 trains nothing; {usage}")),
        Some(Err(text)) => Err(format!("'{text}' is not a count; {usage}")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (steps_per_epoch, epochs) = (count(args.next(), 200)?, count(args.next(), 2)?);
    let dir = PathBuf::from(args.next().unwrap_or("runs/learner-example".into()));

    // The corpus and a WordPiece vocabulary trained on it, from mlm-train's data pipeline:
    // a data folder, prepared once.
    let corpus = PathBuf::from(DEFAULT_CORPUS);
    fetch_corpus(&corpus, &default_packages())?;
    let data_dir = dir.join("data");
    if !data_dir.exists() {
        prepare_folder(&corpus, &data_dir, &PrepareOptions::new(8192, SEQ_LEN, 50))?;
    }
    let data = DataFolder::open(&data_dir)?;
    let masker = data
        .tokenizer
        .masker(MaskRates::BERT, Masking::Token, SEED)?;
    let batcher = MlmBatcher::new(masker);

    let device = Device::flex();
    device.seed(SEED);
    let train = DataLoaderBuilder::new(batcher.clone())
        .batch_size(BATCH)
        .shuffle(SEED)
        .num_workers(2)
        .set_device(device.clone())
        .build(subset(&data.train, steps_per_epoch * BATCH));
    let valid = DataLoaderBuilder::new(batcher)
        .batch_size(BATCH)
        .set_device(device.clone())
        .build(subset(&data.held_out, 16 * BATCH));

    // Built on the autodiff device: burn-train forks the model onto `autodiff(its device)`,
    // and parameters made on a plain device would stay untracked there.
    let model = MyEncoderForMlm::new(data.tokenizer.vocab_size(), &device.clone().autodiff());
    let optimizer = AdamWConfig::new()
        .with_weight_decay(0.01)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
        .init();
    let mut training = SupervisedTraining::new(&dir, train, valid)
        .metrics((
            LossMetric::new(),
            AccuracyMetric::new(),
            PerplexityMetric::new(),
        ))
        .with_default_checkpointers()
        .num_epochs(epochs)
        .summary();
    if !std::io::stdout().is_terminal() {
        // burn-train's own renderer here prints a debug line for every batch.
        let lines = progress_lines::ProgressLines::new(std::io::stdout());
        training = training.renderer(Box::new(lines));
    }
    let result = training.launch(Learner::new(model, optimizer, 1e-3));
    if let Some(error) = &result.error {
        return Err(format!("training failed: {error}").into());
    }
    println!(
        "trained {} parameters; checkpoints in {}",
        result.model.num_params(),
        dir.join("checkpoint").display()
    );
    Ok(())
}
