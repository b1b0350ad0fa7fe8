//! burn-flex's kernels and their autodiff operations: the fused cross-entropy, GELU and
//! multi-head attention.

use std::any::Any;

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Int, Shape, Tensor, TensorData, TensorPrimitive};
use burn_flex::{Flex, FlexTensor};
use rayon::prelude::*;

use super::CrossEntropySum;
use super::{attention, cpu};

type Inputs<B> = (Tensor<B, 2>, Tensor<B, 1, Int>);

/// The fused path when `B` is `Flex` or `Autodiff<Flex>` and the logits are `f32`;
/// the inputs back otherwise. (`Any` tells the types apart at no cost, so callers stay
/// generic over `B: Backend`.)
pub(super) fn try_fused<B: Backend>(
    logits: Tensor<B, 2>,
    targets: Tensor<B, 1, Int>,
    eps: f64,
) -> Result<CrossEntropySum<B>, Inputs<B>> {
    if logits.dtype() != DType::F32 {
        return Err((logits, targets));
    }
    let inputs: Box<dyn Any> = Box::new((logits, targets));
    let inputs = match inputs.downcast::<Inputs<Autodiff<Flex>>>() {
        Ok(inputs) => return Ok(cast(tracked(inputs.0, inputs.1, eps))),
        Err(other) => other,
    };
    match inputs.downcast::<Inputs<Flex>>() {
        Ok(inputs) => {
            let (loss_sum, _, n_correct) = kernel(inputs.0, inputs.1, eps, false);
            Ok(cast(CrossEntropySum {
                loss_sum,
                n_correct,
            }))
        }
        Err(other) => Err(*other.downcast::<Inputs<B>>().expect("B's own inputs")),
    }
}

/// GELU when `B` is `Flex` or `Autodiff<Flex>` and `x` is `f32`: the CPU kernel, and under
/// autodiff one operation whose backward is `grad · GELU'(x)`; `x` back otherwise.
pub(crate) fn flex_gelu<B: Backend, const D: usize>(
    x: Tensor<B, D>,
) -> Result<Tensor<B, D>, Tensor<B, D>> {
    if x.dtype() != DType::F32 {
        return Err(x);
    }
    let x: Box<dyn Any> = Box::new(x);
    let y: Box<dyn Any> = match x.downcast::<Tensor<Autodiff<Flex>, D>>() {
        Ok(x) => Box::new(tracked_gelu(*x)),
        Err(x) => match x.downcast::<Tensor<Flex, D>>() {
            Ok(x) => Box::new(gelu(*x)),
            Err(x) => return Err(*x.downcast::<Tensor<B, D>>().expect("B's own tensor")),
        },
    };
    Ok(*y.downcast::<Tensor<B, D>>().expect("the same type"))
}

/// GELU of `x`'s values, with one autodiff operation that keeps `x` for backward.
fn tracked_gelu<const D: usize>(x: Tensor<Autodiff<Flex>, D>) -> Tensor<Autodiff<Flex>, D> {
    let values = x.clone().inner();
    let y = record(GeluBackward, [x.into_primitive().tensor()], |tracked| {
        let y = gelu(values.clone()).into_primitive().tensor();
        (y, tracked.then(|| values.into_primitive().tensor()))
    });
    Tensor::from_primitive(TensorPrimitive::Float(y))
}

/// Records `op` as the one autodiff operation from `inputs` to the output `run(tracked)`
/// computes; `run` also returns the state `op`'s backward keeps, needed only when `tracked`
/// (an input's graph wants a gradient).
fn record<const N: usize, O: Backward<Flex, N>>(
    op: O,
    inputs: [FloatTensor<Autodiff<Flex>>; N],
    run: impl FnOnce(bool) -> (FloatTensor<Flex>, Option<O::State>),
) -> FloatTensor<Autodiff<Flex>> {
    let prepared = op.prepare::<NoCheckpointing>(inputs.map(|input| input.node));
    match prepared.compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let (output, state) = run(true);
            prep.finish(state.expect("a tracked operation's state"), output)
        }
        OpsKind::UnTracked(prep) => prep.finish(run(false).0),
    }
}

/// The backward of a fused operation with `N` inputs: `d_inputs` turns the saved state and
/// the (contiguous) incoming gradient into each input's gradient `(values, shape)`, which is
/// registered for the inputs whose graph wants one.
fn backward_with<S, const N: usize>(
    ops: Ops<S, N>,
    grads: &mut Gradients,
    d_inputs: impl FnOnce(S, FlexTensor) -> [(Vec<f32>, Shape); N],
) {
    let incoming = grads.consume::<Flex>(&ops.node).to_contiguous();
    for (parent, (grad, shape)) in ops.parents.into_iter().zip(d_inputs(ops.state, incoming)) {
        if let Some(node) = parent {
            grads.register::<Flex>(node.id, FlexTensor::from_data(TensorData::new(grad, shape)));
        }
    }
}

/// GELU's backward: its state is the input `x`.
#[derive(Debug)]
struct GeluBackward;

impl Backward<Flex, 1> for GeluBackward {
    type State = FloatTensor<Flex>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let x = ops.state.to_contiguous();
        unary::<Flex, _>(ops.parents, ops.node, grads, |grad| {
            let shape = x.layout().shape().clone();
            let grad = grad.to_contiguous();
            let (x, grad) = (values(&x), values(&grad));
            let mut out = vec![0f32; x.len()];
            out.par_chunks_mut(CHUNK)
                .zip(x.par_chunks(CHUNK).zip(grad.par_chunks(CHUNK)))
                .for_each(|(out, (x, grad))| cpu::gelu_backward(x, grad, out));
            FlexTensor::from_data(TensorData::new(out, shape))
        });
    }
}

/// Elements per parallel task of the elementwise kernels.
const CHUNK: usize = 16 * 1024;

/// GELU of a `Flex` tensor, in parallel chunks.
fn gelu<const D: usize>(x: Tensor<Flex, D>) -> Tensor<Flex, D> {
    let (shape, device) = (x.shape(), x.device());
    let x = x.into_primitive().tensor().to_contiguous();
    let x = values(&x);
    let mut y = vec![0f32; x.len()];
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| cpu::gelu(x, y));
    Tensor::from_data(TensorData::new(y, shape), &device)
}

/// The values of a contiguous `f32` tensor.
fn values(t: &FlexTensor) -> &[f32] {
    t.as_slice().expect("a contiguous f32 tensor")
}

/// `CrossEntropySum<C>` as `CrossEntropySum<B>` where `C` is `B`.
fn cast<C: Backend, B: Backend>(sum: CrossEntropySum<C>) -> CrossEntropySum<B> {
    let parts: Box<dyn Any> = Box::new((sum.loss_sum, sum.n_correct));
    let (loss_sum, n_correct) = *parts
        .downcast::<(Tensor<B, 1>, Tensor<B, 1, Int>)>()
        .expect("C is B");
    CrossEntropySum {
        loss_sum,
        n_correct,
    }
}

/// Runs the kernel on the logits' values and records one autodiff operation whose
/// backward is `saved gradient × incoming gradient`.
fn tracked(
    logits: Tensor<Autodiff<Flex>, 2>,
    targets: Tensor<Autodiff<Flex>, 1, Int>,
    eps: f64,
) -> CrossEntropySum<Autodiff<Flex>> {
    let values = logits.clone().inner();
    let targets = targets.inner();
    let mut n_correct = None;
    let loss_sum = record(
        SavedGradient,
        [logits.into_primitive().tensor()],
        |tracked| {
            let (loss_sum, gradient, correct) = kernel(values, targets, eps, tracked);
            n_correct = Some(correct);
            let gradient = gradient.map(|g| g.into_primitive().tensor());
            (loss_sum.into_primitive().tensor(), gradient)
        },
    );
    let n_correct = n_correct.expect("the kernel ran");
    CrossEntropySum {
        loss_sum: Tensor::from_primitive(TensorPrimitive::Float(loss_sum)),
        n_correct: Tensor::from_inner(n_correct),
    }
}

/// Backward of the fused loss: its state is `∂ loss_sum / ∂ logits`, `[n, vocab]`.
#[derive(Debug)]
struct SavedGradient;

impl Backward<Flex, 1> for SavedGradient {
    type State = FloatTensor<Flex>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let gradient = ops.state;
        unary::<Flex, _>(ops.parents, ops.node, grads, |incoming| {
            let incoming = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(incoming));
            let gradient = Tensor::<Flex, 2>::from_primitive(TensorPrimitive::Float(gradient));
            (gradient * incoming.unsqueeze::<2>())
                .into_primitive()
                .tensor()
        });
    }
}

/// `(loss_sum [1], gradient [n, vocab] when asked, n_correct [1])` of `f32` logits, rows
/// in parallel, summed in row order.
fn kernel(
    logits: Tensor<Flex, 2>,
    targets: Tensor<Flex, 1, Int>,
    eps: f64,
    wants_gradient: bool,
) -> (
    Tensor<Flex, 1>,
    Option<Tensor<Flex, 2>>,
    Tensor<Flex, 1, Int>,
) {
    let [n, vocab] = logits.dims();
    let device = logits.device();
    let targets = targets
        .into_data()
        .convert::<i64>()
        .into_vec::<i64>()
        .expect("an Int tensor converts to i64");
    let logits = logits.into_primitive().tensor().to_contiguous();
    let z = values(&logits);
    let eps = eps as f32;
    let per_row = |(z, &t): (&[f32], &i64), g: Option<&mut [f32]>| {
        let (nll, correct) = cpu::cross_entropy_row(z, t as usize, eps, g);
        (f64::from(nll), usize::from(correct))
    };
    let rows = z.par_chunks(vocab).zip(targets.par_iter());
    // Rows in parallel, but summed in row order: the same loss on every run, whatever the
    // threads did.
    let (per_rows, gradient): (Vec<(f64, usize)>, _) = if wants_gradient {
        let mut g = vec![0f32; n * vocab];
        let per_rows = rows
            .zip(g.par_chunks_mut(vocab))
            .map(|(r, g)| per_row(r, Some(g)))
            .collect();
        (per_rows, Some(g))
    } else {
        (rows.map(|r| per_row(r, None)).collect(), None)
    };
    let loss_sum: f64 = per_rows.iter().map(|r| r.0).sum();
    let n_correct: usize = per_rows.iter().map(|r| r.1).sum();
    let gradient =
        gradient.map(|g| Tensor::from_data(TensorData::new(g, Shape::new([n, vocab])), &device));
    (
        Tensor::from_data(TensorData::new(vec![loss_sum as f32], [1]), &device),
        gradient,
        Tensor::from_data(TensorData::new(vec![n_correct as i64], [1]), &device),
    )
}

/// `(query, key, value, key_bias)` of [`crate::attention::multi_head_attention`].
type AttentionInputs<B> = (Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 3>, Tensor<B, 2>);

/// Multi-head attention when `B` is `Flex` or `Autodiff<Flex>` and the inputs are `f32`:
/// the [`attention`] kernel, under autodiff one operation over query, key and value (the key
/// bias is a constant: it gets no gradient); the inputs back otherwise.
pub(crate) fn flex_attention<B: Backend>(
    query: Tensor<B, 3>,
    key: Tensor<B, 3>,
    value: Tensor<B, 3>,
    key_bias: Tensor<B, 2>,
    heads: usize,
) -> Result<Tensor<B, 3>, AttentionInputs<B>> {
    let dtypes = [query.dtype(), key.dtype(), value.dtype(), key_bias.dtype()];
    if dtypes.iter().any(|&d| d != DType::F32) {
        return Err((query, key, value, key_bias));
    }
    let inputs: Box<dyn Any> = Box::new((query, key, value, key_bias));
    let context: Box<dyn Any> = match inputs.downcast::<AttentionInputs<Autodiff<Flex>>>() {
        Ok(inputs) => Box::new(tracked_attention(*inputs, heads)),
        Err(inputs) => match inputs.downcast::<AttentionInputs<Flex>>() {
            Ok(inputs) => Box::new(flex_attention_forward(*inputs, heads).0),
            Err(inputs) => {
                return Err(*inputs
                    .downcast::<AttentionInputs<B>>()
                    .expect("B's own inputs"));
            }
        },
    };
    Ok(*context.downcast::<Tensor<B, 3>>().expect("the same type"))
}

/// What attention's backward needs: its inputs and probabilities `[batch, heads, seq, seq]`.
#[derive(Clone, Debug)]
struct AttentionState {
    qkv: [FlexTensor; 3],
    probs: FlexTensor,
    dims: attention::Dims,
}

/// The context `[batch, seq, d_model]` of `Flex` tensors, and the state for backward.
fn flex_attention_forward(
    (query, key, value, key_bias): AttentionInputs<Flex>,
    heads: usize,
) -> (Tensor<Flex, 3>, AttentionState) {
    let [batch, seq, d_model] = query.dims();
    let dims = attention::Dims {
        batch,
        seq,
        heads,
        d_model,
    };
    let device = query.device();
    let qkv = [query, key, value].map(|x| x.into_primitive().tensor().to_contiguous());
    let key_bias = key_bias.into_primitive().tensor().to_contiguous();
    let [q, k, v] = qkv.each_ref().map(values);
    let (context, probs) = attention::forward(q, k, v, values(&key_bias), dims);
    let context = Tensor::from_data(TensorData::new(context, [batch, seq, d_model]), &device);
    let probs = FlexTensor::from_data(TensorData::new(probs, [batch, heads, seq, seq]));
    (context, AttentionState { qkv, probs, dims })
}

/// Attention over autodiff tensors: one operation from query, key and value.
fn tracked_attention(
    (query, key, value, key_bias): AttentionInputs<Autodiff<Flex>>,
    heads: usize,
) -> Tensor<Autodiff<Flex>, 3> {
    let inner = (
        query.clone().inner(),
        key.clone().inner(),
        value.clone().inner(),
        key_bias.inner(),
    );
    let inputs = [query, key, value].map(|x| x.into_primitive().tensor());
    let context = record(AttentionBackward, inputs, |tracked| {
        let (context, state) = flex_attention_forward(inner, heads);
        (context.into_primitive().tensor(), tracked.then_some(state))
    });
    Tensor::from_primitive(TensorPrimitive::Float(context))
}

/// Attention's backward: the four products and the softmax's backward of
/// [`attention::backward`], from the saved inputs and probabilities.
#[derive(Debug)]
struct AttentionBackward;

impl Backward<Flex, 3> for AttentionBackward {
    type State = AttentionState;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        backward_with(ops, grads, attention_backward);
    }
}

/// `[∂q, ∂k, ∂v]` ([`attention::backward`]) from the saved state and the incoming
/// gradient of the context.
fn attention_backward(state: AttentionState, d_context: FlexTensor) -> [(Vec<f32>, Shape); 3] {
    let AttentionState { qkv, probs, dims } = state;
    let shape = qkv[0].layout().shape().clone();
    let [q, k, v] = qkv.each_ref().map(values);
    let d_qkv = attention::backward(q, k, v, values(&probs), values(&d_context), dims);
    d_qkv.map(|grad| (grad, shape.clone()))
}

/// `(x, gamma, beta)` of [`crate::layer_norm`].
type NormInputs<B, const D: usize> = (Tensor<B, D>, Tensor<B, 1>, Tensor<B, 1>);

/// Rows per parallel task of the LayerNorm kernels: a fixed number, so that the partial sums
/// of `∂γ` and `∂β` (added in task order) do not depend on the threads.
const NORM_ROWS: usize = 64;

/// LayerNorm when `B` is `Flex` or `Autodiff<Flex>` and the inputs are `f32`: the row
/// kernels of [`cpu::layer_norm`], under autodiff one operation over `x`, `γ` and `β`; the
/// inputs back otherwise.
pub(crate) fn flex_layer_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    eps: f64,
) -> Result<Tensor<B, D>, NormInputs<B, D>> {
    if [x.dtype(), gamma.dtype(), beta.dtype()]
        .iter()
        .any(|&d| d != DType::F32)
    {
        return Err((x, gamma, beta));
    }
    let inputs: Box<dyn Any> = Box::new((x, gamma, beta));
    let y: Box<dyn Any> = match inputs.downcast::<NormInputs<Autodiff<Flex>, D>>() {
        Ok(inputs) => Box::new(tracked_layer_norm(*inputs, eps)),
        Err(inputs) => match inputs.downcast::<NormInputs<Flex, D>>() {
            Ok(inputs) => Box::new(flex_layer_norm_forward(*inputs, eps).0),
            Err(inputs) => {
                return Err(*inputs
                    .downcast::<NormInputs<B, D>>()
                    .expect("B's own inputs"));
            }
        },
    };
    Ok(*y.downcast::<Tensor<B, D>>().expect("the same type"))
}

/// What LayerNorm's backward needs: `x̂`, each row's `1/√(σ² + ε)`, and `γ`.
#[derive(Clone, Debug)]
struct NormState {
    x_hat: FlexTensor,
    r: Vec<f32>,
    gamma: FlexTensor,
}

/// LayerNorm of `Flex` tensors, rows in parallel, and the state for backward.
fn flex_layer_norm_forward<const D: usize>(
    (x, gamma, beta): NormInputs<Flex, D>,
    eps: f64,
) -> (Tensor<Flex, D>, NormState) {
    let (shape, device) = (x.shape(), x.device());
    let d = gamma.dims()[0];
    let [x, gamma, beta] = [
        x.into_primitive().tensor(),
        gamma.into_primitive().tensor(),
        beta.into_primitive().tensor(),
    ]
    .map(|t| t.to_contiguous());
    let (xs, g, b) = (values(&x), values(&gamma), values(&beta));
    let (mut y, mut x_hat) = (vec![0f32; xs.len()], vec![0f32; xs.len()]);
    let mut r = vec![0f32; xs.len() / d.max(1)];
    let task = NORM_ROWS * d;
    y.par_chunks_mut(task)
        .zip(x_hat.par_chunks_mut(task))
        .zip(xs.par_chunks(task).zip(r.par_chunks_mut(NORM_ROWS)))
        .for_each(|((y, x_hat), (x, r))| {
            let rows = y.chunks_mut(d).zip(x_hat.chunks_mut(d)).zip(x.chunks(d));
            for (((y, x_hat), x), r) in rows.zip(r) {
                *r = cpu::layer_norm(x, g, b, eps as f32, y, x_hat);
            }
        });
    let x_hat = FlexTensor::from_data(TensorData::new(x_hat, shape.clone()));
    let y = Tensor::from_data(TensorData::new(y, shape), &device);
    (y, NormState { x_hat, r, gamma })
}

/// LayerNorm over autodiff tensors: one operation from `x`, `γ` and `β`.
fn tracked_layer_norm<const D: usize>(
    (x, gamma, beta): NormInputs<Autodiff<Flex>, D>,
    eps: f64,
) -> Tensor<Autodiff<Flex>, D> {
    let inner = (
        x.clone().inner(),
        gamma.clone().inner(),
        beta.clone().inner(),
    );
    let inputs = [
        x.into_primitive().tensor(),
        gamma.into_primitive().tensor(),
        beta.into_primitive().tensor(),
    ];
    let y = record(NormBackward, inputs, |tracked| {
        let (y, state) = flex_layer_norm_forward(inner, eps);
        (y.into_primitive().tensor(), tracked.then_some(state))
    });
    Tensor::from_primitive(TensorPrimitive::Float(y))
}

/// LayerNorm's backward: `∂x` row by row, `∂γ` and `∂β` summed over the rows.
#[derive(Debug)]
struct NormBackward;

impl Backward<Flex, 3> for NormBackward {
    type State = NormState;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        backward_with(ops, grads, layer_norm_backward);
    }
}

/// `[∂x, ∂γ, ∂β]` from the saved state and the incoming gradient `dy`: rows in parallel
/// tasks of [`NORM_ROWS`], `∂γ` and `∂β` summed per task and then in task order.
fn layer_norm_backward(state: NormState, dy: FlexTensor) -> [(Vec<f32>, Shape); 3] {
    let NormState { x_hat, r, gamma } = state;
    let (dys, x_hat_v, g) = (values(&dy), values(&x_hat), values(&gamma));
    let d = g.len();
    let mut dx = vec![0f32; dys.len()];
    let task = NORM_ROWS * d;
    let partial: Vec<(Vec<f32>, Vec<f32>)> = dx
        .par_chunks_mut(task)
        .zip(dys.par_chunks(task).zip(x_hat_v.par_chunks(task)))
        .zip(r.par_chunks(NORM_ROWS))
        .map(|((dx, (dy, x_hat)), r)| {
            let (mut d_gamma, mut d_beta) = (vec![0f32; d], vec![0f32; d]);
            let rows = dx.chunks_mut(d).zip(dy.chunks(d).zip(x_hat.chunks(d)));
            for ((dx, (dy, x_hat)), &r) in rows.zip(r) {
                cpu::layer_norm_backward(dy, x_hat, r, g, dx, &mut d_gamma, &mut d_beta);
            }
            (d_gamma, d_beta)
        })
        .collect();
    let (mut d_gamma, mut d_beta) = (vec![0f32; d], vec![0f32; d]);
    for (pg, pb) in &partial {
        d_gamma.iter_mut().zip(pg).for_each(|(a, b)| *a += b);
        d_beta.iter_mut().zip(pb).for_each(|(a, b)| *a += b);
    }
    let shape = x_hat.layout().shape().clone();
    [
        (dx, shape),
        (d_gamma, Shape::new([d])),
        (d_beta, Shape::new([d])),
    ]
}
