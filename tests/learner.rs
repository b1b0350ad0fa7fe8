//! mlm-core inside burn-train: `MlmBatcher` feeds a `DataLoader` with the same masks whichever
//! worker builds a batch; a few `Learner` epochs lower the loss; and the loss, accuracy and
//! perplexity burn-train logs equal `masked_cross_entropy`'s global values on the same batches,
//! and are those the example's progress lines show.

#[path = "../examples/support/progress_lines.rs"]
mod progress_lines;

use std::path::Path;
use std::sync::{Arc, Mutex};

use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig};
use burn::optim::AdamWConfig;
use burn::tensor::{Device, Int, Tensor};
use burn_train::metric::{AccuracyMetric, LossMetric, PerplexityMetric};
use burn_train::{InferenceStep, Learner, SupervisedTraining, TrainOutput, TrainStep};
use mlm_core::learner::{MlmBatch, MlmBatcher, MlmOutput};
use mlm_core::{MaskedCrossEntropy, MaskingConfig, MlmHead, MlmHeadConfig};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const VOCAB: usize = 64;
const PAD: u32 = 0;
const SPECIALS: [u32; 4] = [1, 2, 3, 4]; // [CLS], [SEP], [MASK], [UNK]
const MASK: u32 = 3;
const BATCH: usize = 16;

/// The smallest model that learns something: token embeddings and a tied MLM head (it can
/// learn the unigram law and to copy kept tokens, which is enough for the loss to fall).
#[derive(Module, Debug)]
struct TinyMlm {
    embedding: Embedding,
    head: MlmHead,
}

impl TinyMlm {
    fn new(device: &Device) -> Self {
        Self {
            embedding: EmbeddingConfig::new(VOCAB, 16).init(device),
            head: MlmHeadConfig::new(16, VOCAB)
                .with_tie_word_embeddings(true)
                .init(device),
        }
    }

    fn forward(&self, batch: MlmBatch) -> MlmOutput {
        let hidden = self.embedding.forward(batch.input_ids);
        let tied = Some(self.embedding.weight.val());
        let logits = self
            .head
            .forward_targets(hidden, &batch.targets, tied)
            .expect("the head fits the embedding");
        let loss = MaskedCrossEntropy::default()
            .forward_targets(logits.clone(), &batch.targets)
            .expect("the logits fit the targets");
        MlmOutput::new(logits, &batch.targets, &loss)
    }
}

impl TrainStep for TinyMlm {
    type Input = MlmBatch;
    type Output = MlmOutput;

    fn step(&self, batch: MlmBatch) -> TrainOutput<MlmOutput> {
        let output = self.forward(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for TinyMlm {
    type Input = MlmBatch;
    type Output = MlmOutput;

    fn step(&self, batch: MlmBatch) -> MlmOutput {
        self.forward(batch)
    }
}

/// `count` sequences `[CLS] w… [SEP]` of 6 to 24 words drawn from a Zipf-like law over the
/// non-special ids, so that the unigram entropy lies well below `ln VOCAB`.
fn sequences(count: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let words: Vec<u32> = (5..VOCAB as u32).collect();
    let weights: Vec<f64> = (1..=words.len()).map(|rank| 1.0 / rank as f64).collect();
    let total: f64 = weights.iter().sum();
    (0..count)
        .map(|_| {
            let len = rng.random_range(6..=24);
            let body = (0..len).map(|_| {
                let mut u = rng.random::<f64>() * total;
                let pick = weights.iter().position(|w| {
                    u -= w;
                    u <= 0.0
                });
                words[pick.unwrap_or(words.len() - 1)]
            });
            std::iter::once(1)
                .chain(body)
                .chain(std::iter::once(2))
                .collect()
        })
        .collect()
}

fn batcher() -> MlmBatcher {
    let masker = MaskingConfig::new(VOCAB, MASK, PAD, SPECIALS.to_vec())
        .with_seed(7)
        .init()
        .expect("a valid masking configuration");
    MlmBatcher::new(masker)
}

fn loader(
    data: Vec<Vec<u32>>,
    workers: usize,
    shuffle: Option<u64>,
) -> Arc<dyn DataLoader<MlmBatch>> {
    let builder = DataLoaderBuilder::new(batcher())
        .batch_size(BATCH)
        .num_workers(workers)
        .set_device(Device::flex());
    let builder = match shuffle {
        Some(seed) => builder.shuffle(seed),
        None => builder,
    };
    builder.build(InMemDataset::new(data))
}

/// Every batch of a loader as host vectors (input ids, masked positions, targets), sorted:
/// the set of batches, whatever order the workers delivered them in.
fn host_batches(loader: &Arc<dyn DataLoader<MlmBatch>>) -> Vec<Vec<Vec<i64>>> {
    let ints = |t: Tensor<1, Int>| {
        t.into_data()
            .convert::<i64>()
            .try_into_vec::<i64>()
            .unwrap()
    };
    let mut batches: Vec<_> = loader
        .iter()
        .map(|b| {
            let b = b.expect("a batch");
            vec![
                ints(b.input_ids.flatten(0, 1)),
                ints(b.targets.positions().clone()),
                ints(b.targets.targets().clone()),
            ]
        })
        .collect();
    batches.sort();
    batches
}

#[test]
fn masks_do_not_depend_on_the_worker_that_builds_a_batch() {
    let data = sequences(8 * BATCH, 1);
    let one = host_batches(&loader(data.clone(), 0, None));
    let three = host_batches(&loader(data.clone(), 3, None));
    assert_eq!(one.len(), 8);
    assert_eq!(one, three, "masks changed with the number of workers");
    // Each batch is masked, at roughly the 15 % rate, and not all alike.
    let masked: usize = one.iter().map(|b| b[1].len()).sum();
    let tokens: usize = data.iter().map(Vec::len).sum();
    let rate = masked as f64 / tokens as f64;
    assert!((0.08..0.25).contains(&rate), "masked share {rate}");
    assert_ne!(one[0][1], one[1][1]);
}

/// `Σ value·count / Σ count` and the count over the lines `value,count` of a burn-train
/// metric log, and the value of its closing line `value,final` (the split's global value).
fn logged(dir: &Path, split: &str, epoch: usize, metric: &str) -> (f64, usize, f64) {
    let path = dir.join(format!("{split}/epoch-{epoch}/{metric}.log"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let (mut sum, mut count, mut last) = (0.0, 0, f64::NAN);
    for line in text.lines() {
        let (value, n) = line.split_once(',').expect("value,count");
        let value: f64 = value.parse().unwrap();
        if n == "final" {
            last = value;
            continue;
        }
        let n: usize = n.parse().unwrap();
        if n > 0 {
            sum += value * n as f64;
            count += n;
        }
    }
    (sum / count as f64, count, last)
}

/// A writer into memory that the test keeps a handle on while the renderer writes.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn learner_epochs_lower_the_loss_and_its_metrics_are_the_global_ones() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex();
    let train = loader(sequences(16 * BATCH, 2), 2, Some(3));
    let valid = loader(sequences(4 * BATCH, 4), 0, None);
    let lines = Shared::default();
    let training = SupervisedTraining::new(dir.path(), train, valid.clone())
        .metrics((
            LossMetric::new(),
            AccuracyMetric::new(),
            PerplexityMetric::new(),
        ))
        .with_application_logger(None)
        .renderer(Box::new(progress_lines::ProgressLines::new(lines.clone())))
        .num_epochs(3);
    // Built on the autodiff device: burn-train 0.22 forks the model onto `autodiff(its
    // device)`, but parameters made on a plain device carry no require-grad flag, and would
    // stay untracked there.
    let model = TinyMlm::new(&device.clone().autodiff());
    let optimizer = AdamWConfig::new().init();
    let result = training.launch(Learner::new(model, optimizer, 3e-2));
    assert!(result.error.is_none(), "{:?}", result.error);
    let model = result.model.valid();

    // The loss falls, on the training batches and on the held-out ones.
    let train_loss = |epoch| logged(dir.path(), "train", epoch, "Loss").0;
    let valid_loss = |epoch| logged(dir.path(), "valid", epoch, "Loss").0;
    assert!(
        train_loss(3) < train_loss(1) - 0.2,
        "{} {}",
        train_loss(1),
        train_loss(3)
    );
    assert!(
        valid_loss(3) < valid_loss(1) - 0.1,
        "{} {}",
        valid_loss(1),
        valid_loss(3)
    );

    // The last validation, recomputed with masked_cross_entropy on the same batches.
    let (mut loss_sum, mut n_masked, mut n_correct) = (0.0, 0, 0);
    for batch in valid.iter() {
        let batch = batch.expect("a batch");
        let logits = model
            .head
            .forward_targets(
                model.embedding.forward(batch.input_ids),
                &batch.targets,
                Some(model.embedding.weight.val()),
            )
            .unwrap();
        let loss = MaskedCrossEntropy::default()
            .forward_targets(logits, &batch.targets)
            .unwrap();
        loss_sum += loss.loss_sum.into_scalar::<f64>();
        n_masked += loss.n_graded;
        n_correct += loss.n_correct.into_scalar::<i64>() as usize;
    }
    let mean = loss_sum / n_masked as f64;
    let (loss, loss_count, _) = logged(dir.path(), "valid", 3, "Loss");
    let (accuracy, _, _) = logged(dir.path(), "valid", 3, "Accuracy");
    let (_, _, perplexity) = logged(dir.path(), "valid", 3, "Perplexity");
    assert_eq!(
        loss_count, n_masked,
        "LossMetric weighs batches by masked positions"
    );
    assert!((loss - mean).abs() < 1e-5 * mean, "{loss} vs {mean}");
    let expected_accuracy = 100.0 * n_correct as f64 / n_masked as f64;
    assert!(
        (accuracy - expected_accuracy).abs() < 1e-9,
        "{accuracy} vs {expected_accuracy}"
    );
    assert!(
        (perplexity - mean.exp()).abs() < 1e-5 * mean.exp(),
        "{perplexity}"
    );

    // The progress lines: at most one per tenth of each split (16 training and 4 validation
    // batches an epoch), each with the epoch's running values; the last is the validation's.
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.len() >= 3 * 4 && lines.len() <= 3 * (10 + 4),
        "{text}"
    );
    assert!(lines.iter().all(|line| line.contains(" Loss ")), "{text}");
    let last = *lines.last().unwrap();
    assert_eq!(
        last,
        format!(
            "valid  epoch 3/3  {n}/{n} items  Loss {loss:.2}  Accuracy {accuracy:.2} %  \
             Perplexity {perplexity:.2}",
            n = 4 * BATCH
        ),
        "{text}"
    );
}
