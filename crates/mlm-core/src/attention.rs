//! Multi-head scaled dot-product self-attention over projected queries, keys and values: the
//! encoder's attention in one operation (Vaswani et al. 2017, §3.2.1–3.2.2), for the encoder
//! that feeds the MLM head.
//!
//! ```text
//! q, k, v [batch, seq, d_model] ──split heads──▶ S = q kᵀ / √d_head + key_bias
//!   ──softmax over keys──▶ P ──P v──▶ ──merge heads──▶ context [batch, seq, d_model]
//! ```
//!
//! [`composed`] is the contract in plain tensor ops (autodiff derives the gradient); on
//! burn-flex (`flex` feature, `f32`) [`multi_head_attention`] runs one kernel per
//! (sequence, head) that reads the heads in place, with one autodiff operation whose
//! backward reuses the saved probabilities: no head split/merge copies, no score tensors
//! between ops.

use burn::tensor::Tensor;
use burn::tensor::activation::softmax;

/// The additive bias that hides a padding key: `exp(-1e9 − max)` is 0 in `f32`.
pub const PADDING_BIAS: f64 = -1e9;

/// Self-attention context of `heads` heads.
///
/// # Shapes
/// - `query`, `key`, `value`: `[batch, seq, d_model]`, heads side by side along `d_model`
///   (head `h` owns features `h·d_head .. (h+1)·d_head`, as Hugging Face's BERT splits them)
/// - `key_bias`: `[batch, seq]`, added to every query's score for that key (0, or
///   [`PADDING_BIAS`] at padding)
/// - output: `[batch, seq, d_model]`, each head's `softmax(q kᵀ / √d_head + bias) v`
///
/// No dropout on the probabilities: a model that needs it composes the ops itself.
///
/// # Panics
/// If `d_model` is not a multiple of `heads`, or the shapes disagree.
pub fn multi_head_attention(
    query: Tensor<3>,
    key: Tensor<3>,
    value: Tensor<3>,
    key_bias: Tensor<2>,
    heads: usize,
) -> Tensor<3> {
    let [batch, seq, d_model] = query.dims();
    assert!(
        heads > 0 && d_model % heads == 0,
        "multi_head_attention: d_model {d_model} is not a positive multiple of {heads} heads"
    );
    let expect = |what: &str, got: &[usize], want: &[usize]| {
        assert!(
            got == want,
            "multi_head_attention: {what} is {got:?}, expected {want:?} (query is {:?})",
            [batch, seq, d_model]
        );
    };
    expect("key", &key.dims(), &[batch, seq, d_model]);
    expect("value", &value.dims(), &[batch, seq, d_model]);
    expect("key_bias", &key_bias.dims(), &[batch, seq]);
    #[cfg(feature = "flex")]
    if crate::fused::on_flex(
        &query,
        &[query.dtype(), key.dtype(), value.dtype(), key_bias.dtype()],
    ) {
        return crate::fused::flex_attention([query, key, value], None, key_bias, heads);
    }
    composed(query, key, value, key_bias, heads)
}

/// [`multi_head_attention`] of query, key and value packed side by side in one tensor, as
/// one `[d_model, 3·d_model]` projection makes them (flash-attn's `qkvpacked` layout): the
/// kernel on burn-flex reads the three in place, and its backward writes their gradient as
/// one tensor, so the projection's backward is one product, with no gradient sums.
///
/// `qkv_bias`, when given, is the projection's bias, and `qkv` its product without it
/// ([`crate::linear()`] with no bias): the kernel adds it to each head as it reads the head
/// (no bias rows are written under the product), and its gradient is the packed gradient
/// summed over the rows. The values are those of `qkv + qkv_bias` (on flex bit for bit where
/// the projection's inner dimension is at most 512: see [`crate::epilogue`]).
///
/// # Shapes
/// - `qkv`: `[batch, seq, 3·d_model]`, query in features `0..d_model`, key in
///   `d_model..2·d_model`, value in `2·d_model..3·d_model`, heads side by side in each
/// - `qkv_bias`: `[3·d_model]`, in the same order
/// - `key_bias`: `[batch, seq]`, as in [`multi_head_attention`]
/// - output: `[batch, seq, d_model]`
///
/// # Panics
/// If the last dimension of `qkv` is not a multiple of 3, `d_model` not a multiple of
/// `heads`, `qkv_bias` is not as long as that dimension, or `key_bias` is not `[batch, seq]`.
pub fn multi_head_attention_qkv_packed(
    qkv: Tensor<3>,
    qkv_bias: Option<Tensor<1>>,
    key_bias: Tensor<2>,
    heads: usize,
) -> Tensor<3> {
    let [batch, seq, width] = qkv.dims();
    assert!(
        width % 3 == 0 && heads > 0 && (width / 3) % heads == 0,
        "multi_head_attention_qkv_packed: [batch, seq, {width}] is not 3 × d_model with d_model a positive multiple of {heads} heads"
    );
    let bias_dims = key_bias.dims();
    assert!(
        bias_dims == [batch, seq],
        "multi_head_attention_qkv_packed: key_bias is {bias_dims:?}, expected {:?}",
        [batch, seq]
    );
    if let Some(qkv_bias) = &qkv_bias {
        let len = qkv_bias.dims()[0];
        assert!(
            len == width,
            "multi_head_attention_qkv_packed: qkv_bias is [{len}], qkv's last dimension {width}"
        );
    }
    #[cfg(feature = "flex")]
    {
        let qkv_bias_dtype = qkv_bias.as_ref().map_or(qkv.dtype(), |b| b.dtype());
        if crate::fused::on_flex(&qkv, &[qkv.dtype(), qkv_bias_dtype, key_bias.dtype()]) {
            return crate::fused::flex_attention([qkv], qkv_bias, key_bias, heads);
        }
    }
    let qkv = match qkv_bias {
        Some(bias) => qkv + bias.reshape([1, 1, width]),
        None => qkv,
    };
    let d_model = width / 3;
    let [query, key, value] = [0, 1, 2].map(|i| qkv.clone().narrow(2, i * d_model, d_model));
    composed(query, key, value, key_bias, heads)
}

/// [`multi_head_attention`] in plain tensor ops: the reference every backend without a
/// kernel of its own runs.
pub fn composed(
    query: Tensor<3>,
    key: Tensor<3>,
    value: Tensor<3>,
    key_bias: Tensor<2>,
    heads: usize,
) -> Tensor<3> {
    context(probabilities(query, key, key_bias, heads), value)
}

/// `probs [batch, heads, query, key]` applied to `value [batch, seq, d_model]`, heads merged
/// back: `[batch, seq, d_model]`. With [`probabilities`], the two halves of [`composed`], for
/// a model that puts dropout between them.
pub fn context(probs: Tensor<4>, value: Tensor<3>) -> Tensor<3> {
    let [batch, seq, d_model] = value.dims();
    let heads = probs.dims()[1];
    probs
        .matmul(split_heads(value, heads))
        .swap_dims(1, 2)
        .reshape([batch, seq, d_model])
}

/// The attention probabilities `[batch, heads, query, key]` (rows sum to 1) of
/// [`composed`]; arguments as there.
pub fn probabilities(
    query: Tensor<3>,
    key: Tensor<3>,
    key_bias: Tensor<2>,
    heads: usize,
) -> Tensor<4> {
    let [batch, seq, d_model] = query.dims();
    let scores = split_heads(query, heads).matmul(split_heads(key, heads).transpose());
    softmax(
        scores / ((d_model / heads) as f64).sqrt() + key_bias.reshape([batch, 1, 1, seq]),
        3,
    )
}

/// `[batch, seq, d_model]` → `[batch, heads, seq, d_head]` (a view).
fn split_heads(x: Tensor<3>, heads: usize) -> Tensor<4> {
    let [batch, seq, d_model] = x.dims();
    x.reshape([batch, seq, heads, d_model / heads])
        .swap_dims(1, 2)
}
