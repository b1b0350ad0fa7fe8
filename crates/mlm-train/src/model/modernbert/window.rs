//! The sliding window of ModernBERT's local layers: a token attends to the keys at most
//! `local_attention / 2` positions away (transformers' bidirectional sliding window), computed
//! over blocks of queries so that a local layer does a fraction of a global one's work.

use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor, TensorData};
use mlm_core::attention::PADDING_BIAS;

/// `[1, 1, seq, seq]`: 0 where key and query are at most `half_window` positions apart,
/// [`PADDING_BIAS`] elsewhere (transformers' bidirectional sliding window, `|q − k| ≤
/// local_attention / 2`).
pub fn window_bias(seq: usize, half_window: usize, device: &Device) -> Tensor<4> {
    let values: Vec<f32> = (0..seq * seq)
        .map(|i| {
            let (query, key) = (i / seq, i % seq);
            if query.abs_diff(key) <= half_window {
                0.0
            } else {
                PADDING_BIAS as f32
            }
        })
        .collect();
    Tensor::from_data(TensorData::new(values, [1, 1, seq, seq]), device)
}

/// A local layer's mask, made once a forward pass for all its local layers.
pub enum Window {
    /// Queries in blocks of `half` (where the sequence holds 4 half-windows or more, so that
    /// the blocks pay), with their bias from [`block_bias`]: `[batch, 1, blocks, half, 3 ·
    /// half]`.
    Blocks {
        /// The half window, `local_attention / 2`.
        half: usize,
        /// The bias of each block's queries against its window of keys.
        bias: Tensor<5>,
    },
    /// Full attention with the window as a bias, `[batch, 1, seq, seq]`: the padding of
    /// `key_bias` plus [`window_bias`].
    Full(Tensor<4>),
}

impl Window {
    /// The mask of keys at most `half` positions from their query, padding keys
    /// (`key_bias [batch, seq]`: 0, or [`PADDING_BIAS`]) hidden.
    pub fn new(key_bias: Tensor<2>, half: usize) -> Self {
        let [batch, seq] = key_bias.dims();
        if seq >= 4 * half {
            let bias = block_bias(key_bias, half);
            return Self::Blocks { half, bias };
        }
        let window = window_bias(seq, half, &key_bias.device());
        Self::Full(key_bias.reshape([batch, 1, 1, seq]) + window)
    }
}

/// Sliding-window attention by blocks: the queries in blocks of `half` (the half window),
/// each against the `3 · half` keys around its block, so the work is `3 · half / seq` of
/// full attention's. Same result as full attention with [`window_bias`] added.
///
/// # Shapes
/// - `query`, `key`, `value`: `[batch, heads, seq, d_head]` (rotated)
/// - `bias`: [`block_bias`] of the padding, `[batch, 1, blocks, half, 3 · half]`
/// - output: probabilities' context `[batch, heads, seq, d_head]`
pub fn banded(
    [query, key, value]: [Tensor<4>; 3],
    bias: Tensor<5>,
    half: usize,
    dropout: &burn::nn::Dropout,
) -> Tensor<4> {
    let [batch, heads, seq, d_head] = query.dims();
    let (blocks, padded) = block_layout(seq, half);
    let device = query.device();
    let pad = |x: Tensor<4>| {
        let after = padded - half - seq;
        let zeros = |n| Tensor::zeros([batch, heads, n, d_head], &device);
        Tensor::cat(vec![zeros(half), x, zeros(after)], 2)
    };
    let windows = |x: Tensor<4>| -> Tensor<5> { pad(x).unfold(2, 3 * half, half) };
    let query = Tensor::cat(
        vec![
            query,
            Tensor::zeros([batch, heads, blocks * half - seq, d_head], &device),
        ],
        2,
    )
    .reshape([batch, heads, blocks, half, d_head]);
    let scores = query.matmul(windows(key)) / (d_head as f64).sqrt();
    let probs = dropout.forward(softmax(scores + bias, 4));
    let context = probs.matmul(windows(value).swap_dims(3, 4));
    context
        .reshape([batch, heads, blocks * half, d_head])
        .narrow(2, 0, seq)
}

/// The blocks of `half` queries that cover `seq`, and the length of the keys padded by a
/// block before and after (and to whole blocks), so that block `i`'s window is rows `i ·
/// half .. (i + 3) · half` of the padded keys.
fn block_layout(seq: usize, half: usize) -> (usize, usize) {
    let blocks = seq.div_ceil(half);
    (blocks, (blocks + 2) * half)
}

/// `[batch, 1, blocks, half, 3 · half]`: for query `r` of a block and key `j` of its window,
/// 0 if the key is within `half` positions and a real token (`key_bias [batch, seq]` 0),
/// [`PADDING_BIAS`] otherwise.
pub fn block_bias(key_bias: Tensor<2>, half: usize) -> Tensor<5> {
    let [batch, seq] = key_bias.dims();
    let (blocks, padded) = block_layout(seq, half);
    let device = key_bias.device();
    let outside = PADDING_BIAS as f32;
    let keys = Tensor::cat(
        vec![
            Tensor::full([batch, half], outside, &device),
            key_bias,
            Tensor::full([batch, padded - half - seq], outside, &device),
        ],
        1,
    );
    let keys: Tensor<3> = keys.unfold(1, 3 * half, half);
    // Query r of a block sits at window row r + half.
    let band: Vec<f32> = (0..half * 3 * half)
        .map(|i| {
            let (r, j) = (i / (3 * half), i % (3 * half));
            if (r + half).abs_diff(j) <= half {
                0.0
            } else {
                outside
            }
        })
        .collect();
    let band = Tensor::<5>::from_data(TensorData::new(band, [1, 1, 1, half, 3 * half]), &device);
    keys.reshape([batch, 1, blocks, 1, 3 * half]) + band
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;

    use super::*;

    #[test]
    fn the_window_admits_keys_at_most_half_its_width_away() {
        let bias: Vec<f32> = window_bias(4, 1, &Device::flex())
            .into_data()
            .try_into_vec::<f32>()
            .unwrap();
        let open: Vec<bool> = bias.iter().map(|b| *b == 0.0).collect();
        #[rustfmt::skip]
        let expected = [
            true, true, false, false,
            true, true, true, false,
            false, true, true, true,
            false, false, true, true,
        ];
        assert_eq!(open, expected);
    }

    #[test]
    fn blocks_give_full_attention_under_the_window_values_and_gradients() {
        let device = Device::flex().autodiff();
        let [batch, heads, seq, d_head, half] = [2, 2, 11, 4, 3];
        let draw = || {
            Tensor::<4>::random(
                [batch, heads, seq, d_head],
                Distribution::Normal(0.0, 1.0),
                &device,
            )
            .require_grad()
        };
        let (query, key, value) = (draw(), draw(), draw());
        // The second sequence's last 2 keys are padding (every window keeps a real key).
        let padding: Vec<f32> = (0..batch * seq)
            .map(|i| {
                if i >= seq && i % seq >= seq - 2 {
                    PADDING_BIAS as f32
                } else {
                    0.0
                }
            })
            .collect();
        let key_bias = Tensor::<2>::from_data(TensorData::new(padding, [batch, seq]), &device);
        let no_dropout = burn::nn::DropoutConfig::new(0.0).init();
        let blocked = banded(
            [query.clone(), key.clone(), value.clone()],
            block_bias(key_bias.clone(), half),
            half,
            &no_dropout,
        );
        let bias = key_bias.reshape([batch, 1, 1, seq]) + window_bias(seq, half, &device);
        let scores = query.clone().matmul(key.clone().transpose()) / (d_head as f64).sqrt();
        let full = softmax(scores + bias, 3).matmul(value.clone());
        let values = |t: Tensor<4>| t.into_data().try_into_vec::<f32>().unwrap();
        let max_diff = |a: Vec<f32>, b: Vec<f32>| {
            a.iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max)
        };
        assert!(max_diff(values(blocked.clone()), values(full.clone())) < 1e-5);
        let weights = Tensor::<4>::random(full.dims(), Distribution::Normal(0.0, 1.0), &device);
        let grads_blocked = (blocked * weights.clone()).sum().backward();
        let grads_full = (full * weights).sum().backward();
        for x in [&query, &key, &value] {
            let a = x
                .grad(&grads_blocked)
                .unwrap()
                .into_data()
                .try_into_vec::<f32>()
                .unwrap();
            let b = x
                .grad(&grads_full)
                .unwrap()
                .into_data()
                .try_into_vec::<f32>()
                .unwrap();
            assert!(max_diff(a, b) < 1e-5);
        }
    }
}
