//! The chunked decoder and loss ([`LogitsMode::Chunked`]) equal the whole logits' path to
//! 1e-5: loss, correct count and every gradient (hidden states, the tied embedding that
//! both the encoder and the decoder use, the bias, the transform), with and without label
//! smoothing, at every chunk size; zero masked rows give 0 and zero gradients; `Auto`
//! switches once the logits would hold more than one chunk ([`CHUNK_LOGITS`]).

use burn::tensor::{Device, Tensor, TensorData};
use mlm_core::{
    CHUNK_LOGITS, LogitsMode, MaskedCrossEntropyConfig, MaskedTargets, MlmError, MlmHeadConfig,
    Reduction,
};

mod common;
use common::{device, scalar, values};

const BATCH: usize = 3;
const SEQ: usize = 5;
const D_MODEL: usize = 12;
const VOCAB: usize = 37;

/// Deterministic values in `[-scale, scale)`, without an RNG: the same in every run.
fn fixed<const D: usize>(shape: [usize; D], salt: usize, scale: f64, device: &Device) -> Tensor<D> {
    let n = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| (((i * 7919 + salt * 104_729) % 1000) as f64 / 500.0 - 1.0) * scale)
        .collect();
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// What a head + loss run gives: loss, correct count, and the gradients of the hidden
/// states, the embedding, the bias and the transform's dense weight, flattened.
struct Run {
    loss: f64,
    n_correct: i64,
    gradients: [Vec<f32>; 4],
}

/// The head (tied when `tied`) on fixed weights and hidden states, graded at `positions`.
fn run(logits: LogitsMode, label_smoothing: f64, tied: bool, positions: &[i64]) -> Run {
    let device = device();
    let config = MlmHeadConfig::new(D_MODEL, VOCAB).with_tie_word_embeddings(tied);
    let mut head = config.init(&device);
    // The same parameters in every run, and a bias that is not zero.
    head.bias = head
        .bias
        .map(|_| fixed([VOCAB], 1, 0.3, &device).require_grad());
    if let Some(decoder) = head.decoder.take() {
        head.decoder =
            Some(decoder.map(|_| fixed([VOCAB, D_MODEL], 2, 0.5, &device).require_grad()));
    }
    let transform = head.transform.as_mut().unwrap();
    transform.dense.weight = transform
        .dense
        .weight
        .clone()
        .map(|_| fixed([D_MODEL, D_MODEL], 3, 0.3, &device).require_grad());
    let embedding = fixed([VOCAB, D_MODEL], 4, 0.5, &device).require_grad();
    let hidden = fixed([BATCH, SEQ, D_MODEL], 5, 1.0, &device).require_grad();
    let true_tokens: Vec<i64> = positions.iter().map(|p| p * 7 % VOCAB as i64).collect();
    let targets =
        MaskedTargets::new(positions, &true_tokens, [BATCH, SEQ], VOCAB, &device).unwrap();
    let loss = MaskedCrossEntropyConfig::new()
        .with_label_smoothing(label_smoothing)
        .with_logits(logits)
        .init()
        .unwrap();
    // The embedding also feeds the "encoder", so the tied weight's gradient has two uses.
    let encoded = hidden.clone() + embedding.clone().narrow(0, 0, SEQ).unsqueeze_dim(0);
    let out = head
        .forward_loss(encoded, &targets, tied.then(|| embedding.clone()), &loss)
        .unwrap();
    let grads = out.loss.backward();
    let flat = |g: Option<Vec<f32>>| g.expect("a gradient");
    let dense = head.transform.as_ref().unwrap().dense.weight.val();
    Run {
        loss: scalar(out.loss.clone().inner()),
        n_correct: out.n_correct.into_scalar::<i64>(),
        gradients: [
            flat(hidden.grad(&grads).map(values)),
            flat(embedding.grad(&grads).map(values)),
            flat(head.bias.val().grad(&grads).map(values)),
            flat(dense.grad(&grads).map(values)),
        ],
    }
}

fn assert_same(what: &str, got: &Run, want: &Run) {
    assert!(
        (got.loss - want.loss).abs() <= 1e-5 * want.loss.abs().max(1e-3),
        "{what}: loss {} vs {}",
        got.loss,
        want.loss
    );
    assert_eq!(got.n_correct, want.n_correct, "{what}: correct count");
    for (name, (got, want)) in ["hidden", "embedding", "bias", "dense"]
        .iter()
        .zip(got.gradients.iter().zip(&want.gradients))
    {
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(scale > 0.0, "{what}: the {name} gradient is all zero");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-5 * scale, "{what}: ∂{name} {g} vs {w}");
        }
    }
}

const POSITIONS: [i64; 7] = [0, 3, 4, 8, 9, 13, 14];

#[test]
fn every_chunk_size_gives_the_whole_logits_loss_and_gradients() {
    for (tied, smoothing) in [(true, 0.0), (true, 0.1), (false, 0.0)] {
        let whole = run(LogitsMode::Whole, smoothing, tied, &POSITIONS);
        for rows in [1, 3, 7, 64] {
            let what = format!("tied {tied}, ε {smoothing}, {rows} rows a chunk");
            let chunked = run(LogitsMode::Chunked { rows }, smoothing, tied, &POSITIONS);
            assert_same(&what, &chunked, &whole);
        }
    }
}

#[test]
fn zero_masked_rows_give_zero_loss_and_zero_gradients_when_chunked() {
    let out = run(LogitsMode::Chunked { rows: 2 }, 0.0, true, &[]);
    assert_eq!(out.loss, 0.0);
    for gradient in &out.gradients {
        assert!(gradient.iter().all(|g| *g == 0.0));
    }
}

#[test]
fn auto_chunks_from_the_stated_logits_size_and_zero_rows_is_refused() {
    // XLM-R's vocabulary: 154 graded rows (8 × 128 at 15 %) whole, 614 chunked.
    let rows = Some(CHUNK_LOGITS / 250_002);
    assert_eq!(LogitsMode::Auto.chunk_rows(154, 250_002), None);
    assert_eq!(LogitsMode::Auto.chunk_rows(614, 250_002), rows);
    assert_eq!(LogitsMode::Auto.chunk_rows(268, 250_002), None);
    assert_eq!(LogitsMode::Auto.chunk_rows(269, 250_002), rows);
    // The main job's 8 192 tokens and BERT's 30 522 stay whole at 614 graded rows.
    assert_eq!(LogitsMode::Auto.chunk_rows(614, 8192), None);
    assert_eq!(LogitsMode::Auto.chunk_rows(614, 30_522), None);
    assert_eq!(LogitsMode::Whole.chunk_rows(4096, 250_002), None);
    let zero = MaskedCrossEntropyConfig::new().with_logits(LogitsMode::Chunked { rows: 0 });
    assert!(matches!(zero.init(), Err(MlmError::ZeroChunkRows)));
    let sum = MaskedCrossEntropyConfig::new()
        .with_reduction(Reduction::Sum)
        .with_logits(LogitsMode::Chunked { rows: 2 });
    assert!(sum.init().is_ok());
}
