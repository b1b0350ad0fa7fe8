//! burn-flex's kernels and their autodiff operations: the fused cross-entropy, GELU,
//! LayerNorm, multi-head attention and the linear layer.
//!
//! Burn 0.22 dispatches every tensor at run time. [`route`] reads a tensor's device and
//! dtype (no data): `Flex`, `Autodiff<Flex, C>` with the tensor's own checkpointing strategy
//! `C`, or another backend. The kernels then take the backend's own primitives through Burn's
//! extension route (`Tensor::try_into_primitive`, `Tensor::from_primitive`).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, NodeGuard, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{
    Autodiff, DispatchDevice, DispatchKindConversion, DispatchTensor, Flex, TensorMetadata,
};
use burn::tensor::{DType, GradientCheckpointingStrategy, Int, Shape, Tensor, TensorData};
use rayon::prelude::*;
use std::mem::MaybeUninit;

use super::CrossEntropySum;
use super::{attention, chunked, cpu, linear};

/// Where a fused operation runs, read from its first input's device and every input's dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Route {
    /// `Flex`, every input `f32`: the kernel, no autodiff.
    Plain,
    /// `Autodiff<Flex, C>`, every input `f32`: the kernel as one autodiff operation, `C` the
    /// tensor's gradient-checkpointing strategy.
    Tracked(GradientCheckpointingStrategy),
    /// Any other backend or dtype: the composed tensor ops.
    Other,
}

/// The [`Route`] of an operation on `first` whose inputs have `dtypes`.
pub(crate) fn route<const D: usize>(first: &Tensor<D>, dtypes: &[DType]) -> Route {
    if dtypes.iter().any(|&dtype| dtype != DType::F32) {
        return Route::Other;
    }
    match first.device().as_dispatch() {
        DispatchDevice::Flex(_) => Route::Plain,
        DispatchDevice::Autodiff(device) if matches!(**device, DispatchDevice::Flex(_)) => {
            Route::Tracked(device.gradient_checkpointing_strategy())
        }
        #[allow(unreachable_patterns)]
        _ => Route::Other,
    }
}

/// Whether an operation on `first` whose inputs have `dtypes` runs a flex kernel: the caller
/// then hands the inputs to the `flex_*` function, and otherwise runs the composed ops.
pub(crate) fn on_flex<const D: usize>(first: &Tensor<D>, dtypes: &[DType]) -> bool {
    route(first, dtypes) != Route::Other
}

/// `$body` with the type `$c` the checkpointing strategy that `$strategy` names.
macro_rules! with_strategy {
    ($strategy:expr, |$c:ident| $body:expr) => {
        match $strategy {
            GradientCheckpointingStrategy::Disabled => {
                type $c = NoCheckpointing;
                $body
            }
            GradientCheckpointingStrategy::Balanced => {
                type $c = BalancedCheckpointing;
                $body
            }
        }
    };
}

/// A tensor on `Flex` (an `Int` tensor on flex's autodiff device too) as its primitive.
fn plain<const D: usize, K>(x: Tensor<D, K>) -> FlexTensor
where
    K: burn::tensor::BackendPrimitive<Flex, Primitive = FlexTensor>
        + burn::tensor::kind::Basic
        + burn::tensor::kind::Autodiff,
{
    x.inner()
        .try_into_primitive::<Flex>()
        .expect("a tensor routed to flex")
}

/// A float tensor on `Autodiff<Flex, C>` as its values and its autodiff node.
fn tracked_parts<C: CheckpointStrategy, const D: usize>(x: Tensor<D>) -> (FlexTensor, NodeGuard)
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    x.try_into_primitive::<Autodiff<Flex, C>>()
        .expect("a tensor routed to flex's autodiff")
        .into_parts()
}

/// Records `op` as the one autodiff operation from the `inputs`' nodes to the output
/// `run(tracked)` computes; `run` also returns the state `op`'s backward keeps, needed only
/// when `tracked` (an input's graph wants a gradient).
fn record<C: CheckpointStrategy, const N: usize, O: Backward<Flex, N>>(
    op: O,
    inputs: [NodeGuard; N],
    run: impl FnOnce(bool) -> (FlexTensor, Option<O::State>),
) -> FloatTensor<Autodiff<Flex, C>> {
    match op.prepare::<C>(inputs).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let (output, state) = run(true);
            prep.finish(state.expect("a tracked operation's state"), output)
        }
        OpsKind::UnTracked(prep) => prep.finish(run(false).0),
    }
}

/// A float tensor of `Autodiff<Flex, C>` from its primitive.
fn from_tracked<C: CheckpointStrategy, const D: usize>(
    y: FloatTensor<Autodiff<Flex, C>>,
) -> Tensor<D>
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    Tensor::from_primitive::<Autodiff<Flex, C>>(y)
}

/// The backward of a fused operation with `N` inputs: `d_inputs` turns the saved state and
/// the (contiguous) incoming gradient into each input's gradient, which is registered for
/// the inputs whose graph wants one.
fn backward_with<S, const N: usize>(
    ops: Ops<S, N>,
    grads: &mut Gradients,
    d_inputs: impl FnOnce(S, FlexTensor) -> [FlexTensor; N],
) {
    let incoming = grads.consume::<Flex>(&ops.node).to_contiguous();
    for (parent, grad) in ops.parents.into_iter().zip(d_inputs(ops.state, incoming)) {
        if let Some(node) = parent {
            grads.register::<Flex>(node.id, grad);
        }
    }
}

/// The values of a contiguous `f32` tensor.
fn values(t: &FlexTensor) -> &[f32] {
    t.as_slice().expect("a contiguous f32 tensor")
}

/// A contiguous `f32` tensor of `shape`.
fn flex_tensor(values: Vec<f32>, shape: impl Into<Shape>) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape))
}

/// `t`'s values, contiguous, in a buffer `t` alone holds and fills exactly (so that
/// `storage_mut` neither copies nor shows more): `t` itself where it already is one.
fn owned(t: FlexTensor) -> FlexTensor {
    let t = if t.is_contiguous() {
        t
    } else {
        t.to_contiguous()
    };
    let exact = t.layout().start_offset() == 0 && t.bytes().len() == 4 * t.shape().num_elements();
    if t.is_unique() && exact {
        return t;
    }
    let shape = t.shape().clone();
    flex_tensor(values(&t).to_vec(), shape)
}

/// Elements per parallel task of the elementwise kernels.
const CHUNK: usize = 16 * 1024;

/// GELU of an `f32` tensor on `Flex` or `Autodiff<Flex, C>` ([`on_flex`]), of `x + bias`
/// when a bias `[d]` (`x`'s last dimension) is given: the CPU kernel, and under autodiff one
/// operation whose backward is `grad · GELU'(x + bias)` (and its sum over rows, the bias's).
pub(crate) fn flex_gelu<const D: usize>(x: Tensor<D>, bias: Option<Tensor<1>>) -> Tensor<D> {
    match route(&x, &[x.dtype()]) {
        Route::Plain => {
            let bias = bias.map(|b| plain(b).to_contiguous());
            let y = gelu(plain(x), bias.as_ref().map(values), false).0;
            Tensor::from_primitive::<Flex>(y)
        }
        Route::Tracked(strategy) => with_strategy!(strategy, |C| tracked_gelu::<C, D>(x, bias)),
        Route::Other => unreachable!("flex_gelu off flex: the caller checks on_flex"),
    }
}

/// GELU of `x + bias`, with one autodiff operation over `x` (and the bias) that keeps
/// `GELU'(x + bias)` for backward, and neither `x` nor `x + bias`.
fn tracked_gelu<C: CheckpointStrategy, const D: usize>(
    x: Tensor<D>,
    bias: Option<Tensor<1>>,
) -> Tensor<D>
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    let (x, node) = tracked_parts::<C, D>(x);
    let run = |bias: Option<FlexTensor>| {
        move |tracked: bool| {
            let (y, slope) = gelu(x, bias.as_ref().map(values), tracked);
            let d_bias = bias.map(|b| b.shape()[0]);
            (y, slope.map(|slope| GeluState { slope, d_bias }))
        }
    };
    let y = match bias.map(tracked_parts::<C, 1>) {
        Some((b, nb)) => record::<C, 2, _>(GeluBackward, [node, nb], run(Some(b.to_contiguous()))),
        None => record::<C, 1, _>(GeluBackward, [node], run(None)),
    };
    from_tracked::<C, D>(y)
}

/// What GELU's backward needs: the derivative `GELU'(u)` at its pre-activation
/// `u = x (+ bias)`, and the bias's length if there is one.
#[derive(Clone, Debug)]
struct GeluState {
    slope: FlexTensor,
    d_bias: Option<usize>,
}

/// GELU's backward: `∂x = grad · GELU'(u)`, written over the incoming gradient, and the
/// bias's `Σ_rows ∂x`, summed row after row (as the linear layer's `∂b`).
#[derive(Debug)]
struct GeluBackward;

impl<const N: usize> Backward<Flex, N> for GeluBackward {
    type State = GeluState;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        backward_with(ops, grads, |GeluState { slope, d_bias }, grad| {
            // The incoming gradient is rarely shared: scaled in place, no buffer is made.
            let mut grad = owned(grad);
            grad.storage_mut::<f32>()
                .par_chunks_mut(CHUNK)
                .zip(values(&slope).par_chunks(CHUNK))
                .for_each(|(grad, slope)| cpu::gelu_backward(grad, slope));
            let d_bias = d_bias.map(|d| row_sums(&grad, d));
            let d_inputs: Vec<_> = std::iter::once(grad).chain(d_bias).collect();
            d_inputs
                .try_into()
                .expect("an input and, with a bias, the bias")
        });
    }
}

/// `Σ_rows` of a contiguous `f32` tensor's rows of `d` values, `[d]`, one row after another:
/// the gradient of a bias added to each row (the linear layer's `∂b`, and the epilogues').
fn row_sums(t: &FlexTensor, d: usize) -> FlexTensor {
    let mut sums = vec![0f32; d];
    cpu::add_rows(&mut sums, values(t));
    flex_tensor(sums, [d])
}

/// GELU of a `Flex` tensor `x`, or of `x + bias` with a bias `[d]` added to each row of `x`
/// as the kernel reads it, in parallel chunks of whole rows; returns the output and, when
/// `keep_slope` (for the backward), the derivative `GELU'(x + bias)`.
fn gelu(x: FlexTensor, bias: Option<&[f32]>, keep_slope: bool) -> (FlexTensor, Option<FlexTensor>) {
    let x = x.to_contiguous();
    let shape = x.layout().shape().clone();
    let len = shape.num_elements();
    let bias = bias.unwrap_or(&[]);
    let row = bias.len().max(1);
    let chunk = (CHUNK / row).max(1) * row;
    let (mut y, mut slope) = (Vec::new(), keep_slope.then(Vec::new));
    let ys = spare(&mut y, len).par_chunks_mut(chunk);
    // Each task's slope, or none: one list, so that one loop serves both.
    let slopes: Vec<_> = match &mut slope {
        Some(slope) => spare(slope, len).chunks_mut(chunk).map(Some).collect(),
        None => (0..len.div_ceil(chunk)).map(|_| None).collect(),
    };
    values(&x)
        .par_chunks(chunk)
        .zip(ys.zip(slopes))
        .for_each(|(x, (y, slope))| cpu::gelu(x, bias, y, slope));
    // SAFETY: the GELU kernel wrote every value of both.
    unsafe {
        y.set_len(len);
        slope.iter_mut().for_each(|slope| slope.set_len(len));
    }
    let slope = slope.map(|slope| flex_tensor(slope, shape.clone()));
    (flex_tensor(y, shape), slope)
}

/// `len` values of room at the end of the empty `v`, for a kernel that writes all of them
/// (then `set_len(len)`): fresh memory is never zeroed first.
fn spare(v: &mut Vec<f32>, len: usize) -> &mut [MaybeUninit<f32>] {
    v.reserve(len);
    &mut v.spare_capacity_mut()[..len]
}

/// The fused cross-entropy of `f32` logits on `Flex` or `Autodiff<Flex, C>` ([`on_flex`]).
pub(super) fn fused(logits: Tensor<2>, targets: Tensor<1, Int>, eps: f64) -> CrossEntropySum {
    match route(&logits, &[logits.dtype()]) {
        Route::Plain => {
            let device = logits.device();
            let (loss_sum, _, n_correct) = kernel(&plain(logits), plain(targets), eps, false);
            CrossEntropySum {
                loss_sum: Tensor::from_primitive::<Flex>(loss_sum),
                n_correct: count(n_correct, &device),
            }
        }
        Route::Tracked(strategy) => {
            with_strategy!(strategy, |C| tracked::<C>(logits, targets, eps))
        }
        Route::Other => unreachable!("the fused loss off flex: the caller checks on_flex"),
    }
}

/// The correct count as an `Int` tensor `[1]` of `device`.
fn count(n_correct: usize, device: &burn::tensor::Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::new(vec![n_correct as i64], [1]), device)
}

/// Runs the kernel on the logits' values and records one autodiff operation whose
/// backward is `saved gradient × incoming gradient`.
fn tracked<C: CheckpointStrategy>(
    logits: Tensor<2>,
    targets: Tensor<1, Int>,
    eps: f64,
) -> CrossEntropySum
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    let device = logits.device();
    let (values, node) = tracked_parts::<C, 2>(logits);
    let targets = plain(targets);
    let mut n_correct = 0;
    let loss_sum = record::<C, 1, _>(SavedGradients, [node], |tracked| {
        let (loss_sum, gradient, correct) = kernel(&values, targets, eps, tracked);
        n_correct = correct;
        (loss_sum, gradient.map(|g| [g]))
    });
    CrossEntropySum {
        loss_sum: from_tracked::<C, 1>(loss_sum),
        n_correct: count(n_correct, &device),
    }
}

/// Backward of an operation whose forward made the gradients of its output `[1]` (a summed
/// loss) with respect to its `N` inputs: its state. The fused loss, `∂ loss_sum / ∂ logits`
/// `[n, vocab]`; the chunked decoder and loss, those of the hidden rows, weight and bias.
#[derive(Debug)]
struct SavedGradients;

impl<const N: usize> Backward<Flex, N> for SavedGradients {
    type State = [FlexTensor; N];

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        backward_with(ops, grads, |gradients, incoming| {
            let scale = values(&incoming)[0];
            gradients.map(|mut gradient| {
                // In place: the saved gradient is this operation's alone (a shared one would
                // be copied first), and a fresh [n, vocab] buffer would cost a tenth of the
                // step at BERT-base shapes in page faults and memory traffic.
                gradient
                    .storage_mut::<f32>()
                    .par_chunks_mut(CHUNK)
                    .for_each(|chunk| chunk.iter_mut().for_each(|g| *g *= scale));
                gradient
            })
        });
    }
}

/// The chunked decoder and cross-entropy ([`chunked::sweep`]) of `f32` tensors on `Flex` or
/// `Autodiff<Flex, C>` ([`on_flex`]): `hidden` `[n, d]`, `weight` `[vocab, d]`, `bias`
/// `[vocab]`, `targets` `[n]`, `chunk_rows ≥ 1`; under autodiff one operation over the three
/// floats, whose backward scales the gradients the sweep made.
pub(crate) fn flex_chunked(
    (hidden, weight, bias): (Tensor<2>, Tensor<2>, Tensor<1>),
    targets: Tensor<1, Int>,
    eps: f64,
    chunk_rows: usize,
) -> CrossEntropySum {
    let device = hidden.device();
    let targets = host_i64(plain(targets));
    let sweep = |inputs: &[FlexTensor; 3], wants_gradients| {
        let inputs = inputs.each_ref().map(values);
        chunked::sweep(inputs, &targets, eps as f32, chunk_rows, wants_gradients)
    };
    let (loss_sum, n_correct) = match route(&hidden, &[]) {
        Route::Plain => {
            let inputs = [plain(hidden), plain(weight), plain(bias)].map(|x| x.to_contiguous());
            let result = sweep(&inputs, false);
            let loss_sum = flex_tensor(vec![result.loss_sum as f32], [1]);
            (Tensor::from_primitive::<Flex>(loss_sum), result.n_correct)
        }
        Route::Tracked(strategy) => with_strategy!(strategy, |C| {
            let (h, h_node) = tracked_parts::<C, 2>(hidden);
            let (w, w_node) = tracked_parts::<C, 2>(weight);
            let (b, b_node) = tracked_parts::<C, 1>(bias);
            let inputs = [h, w, b].map(|x| x.to_contiguous());
            let shapes = inputs.each_ref().map(|x| x.shape());
            let mut n_correct = 0;
            let loss_sum = record::<C, 3, _>(SavedGradients, [h_node, w_node, b_node], |tracked| {
                let result = sweep(&inputs, tracked);
                n_correct = result.n_correct;
                let gradients = result.gradients.map(|gradients| {
                    let mut shapes = shapes.clone().into_iter();
                    gradients.map(|g| flex_tensor(g, shapes.next().expect("three shapes")))
                });
                (flex_tensor(vec![result.loss_sum as f32], [1]), gradients)
            });
            (from_tracked::<C, 1>(loss_sum), n_correct)
        }),
        Route::Other => unreachable!("flex_chunked off flex: the caller checks on_flex"),
    };
    CrossEntropySum {
        loss_sum,
        n_correct: count(n_correct, &device),
    }
}

/// An `Int` tensor's values as `i64`.
fn host_i64(x: FlexTensor) -> Vec<i64> {
    x.into_data()
        .convert::<i64>()
        .try_into_vec::<i64>()
        .expect("an Int tensor converts to i64")
}

/// `(loss_sum [1], gradient [n, vocab] when asked, n_correct)` of `f32` logits, rows in
/// parallel, summed in row order.
fn kernel(
    logits: &FlexTensor,
    targets: FlexTensor,
    eps: f64,
    wants_gradient: bool,
) -> (FlexTensor, Option<FlexTensor>, usize) {
    let [n, vocab] = logits.shape().dims::<2>();
    let targets = host_i64(targets);
    let logits = logits.to_contiguous();
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
    let gradient = gradient.map(|g| flex_tensor(g, [n, vocab]));
    (flex_tensor(vec![loss_sum as f32], [1]), gradient, n_correct)
}

/// Multi-head attention of `f32` inputs on `Flex` or `Autodiff<Flex, C>` ([`on_flex`]):
/// the [`attention`] kernel, under autodiff one operation over its inputs (the key bias is a
/// constant: it gets no gradient). The inputs are query, key and value as three tensors
/// `[batch, seq, d_model]` (`N` = 3), or packed side by side in one `[batch, seq, 3·d_model]`
/// (`N` = 1), whose gradient is then one tensor too; a packed input may come with the
/// projection's bias `[3·d_model]` (`qkv_bias`), added as the kernel reads each head.
pub(crate) fn flex_attention<const N: usize>(
    inputs: [Tensor<3>; N],
    qkv_bias: Option<Tensor<1>>,
    key_bias: Tensor<2>,
    heads: usize,
) -> Tensor<3> {
    match route(&inputs[0], &[]) {
        Route::Plain => {
            let inputs = inputs.map(plain).to_vec();
            let qkv_bias = qkv_bias.map(plain);
            let (context, _) = flex_attention_forward(inputs, qkv_bias, plain(key_bias), heads);
            Tensor::from_primitive::<Flex>(context)
        }
        Route::Tracked(strategy) => with_strategy!(strategy, |C| {
            tracked_attention::<C, N>(inputs, qkv_bias, key_bias, heads)
        }),
        Route::Other => unreachable!("flex_attention off flex: the caller checks on_flex"),
    }
}

/// What attention's backward needs: its inputs (three, or one packed, biased if a bias was
/// given), the probabilities `[batch, heads, seq, seq]`, the shape, and the packed input's
/// bias length if there was one.
#[derive(Clone, Debug)]
struct AttentionState {
    inputs: Vec<FlexTensor>,
    probs: FlexTensor,
    dims: attention::Dims,
    qkv_bias: Option<usize>,
}

/// Query, key and value as the kernel reads them, from `inputs`: three tensors, or one
/// packed (`3·d_model` a token).
fn qkv_views(inputs: &[FlexTensor], d_model: usize) -> [&[f32]; 3] {
    match *inputs.iter().map(values).collect::<Vec<_>>() {
        [q, k, v] => [q, k, v],
        [packed] => [0, 1, 2].map(|i| &packed[i * d_model..]),
        _ => unreachable!("attention takes three tensors or one packed"),
    }
}

/// The first elements of query, key and value (or of their gradients) from `starts`: three
/// buffers' own, or one packed buffer's (`3·d_model` a token) three column blocks.
fn qkv_pointers(starts: &[*mut f32], d_model: usize) -> [*mut f32; 3] {
    match *starts {
        [q, k, v] => [q, k, v],
        // SAFETY (of the arithmetic): the packed buffer holds 3·d_model a token.
        [packed] => [0, 1, 2].map(|i| unsafe { packed.add(i * d_model) }),
        _ => unreachable!("attention takes three tensors or one packed"),
    }
}

/// The context `[batch, seq, d_model]` of `Flex` tensors, and the state for backward. A
/// packed input with a bias is owned ([`owned`]) and the bias added to it in place.
fn flex_attention_forward(
    inputs: Vec<FlexTensor>,
    qkv_bias: Option<FlexTensor>,
    key_bias: FlexTensor,
    heads: usize,
) -> (FlexTensor, AttentionState) {
    let [batch, seq, width] = inputs[0].shape().dims::<3>();
    let d_model = width * inputs.len() / 3;
    let dims = attention::Dims {
        batch,
        seq,
        heads,
        d_model,
        qkv_stride: width,
    };
    let qkv_bias = qkv_bias.map(|b| b.to_contiguous());
    let mut inputs: Vec<_> = match qkv_bias {
        Some(_) => inputs.into_iter().map(owned).collect(),
        None => inputs.into_iter().map(|x| x.to_contiguous()).collect(),
    };
    let key_bias = key_bias.to_contiguous();
    // The buffers are this call's alone to write when biased (owned), and never written
    // otherwise.
    let starts: Vec<*mut f32> = match qkv_bias {
        Some(_) => vec![inputs[0].storage_mut::<f32>().as_mut_ptr()],
        None => inputs
            .iter()
            .map(|x| values(x).as_ptr().cast_mut())
            .collect(),
    };
    let starts = qkv_pointers(&starts, d_model);
    let bias = qkv_bias.as_ref().map_or(&[][..], values);
    // SAFETY: each start holds its `[batch, seq, d_model]` at the stride, and nothing else
    // touches the inputs during the call.
    let (context, probs) = unsafe { attention::forward(starts, bias, values(&key_bias), dims) };
    let state = AttentionState {
        inputs,
        probs: flex_tensor(probs, [batch, heads, seq, seq]),
        dims,
        qkv_bias: qkv_bias.map(|b| b.shape()[0]),
    };
    (flex_tensor(context, [batch, seq, d_model]), state)
}

/// Attention over autodiff tensors: one operation from its `N` inputs (and the packed
/// input's bias).
fn tracked_attention<C: CheckpointStrategy, const N: usize>(
    inputs: [Tensor<3>; N],
    qkv_bias: Option<Tensor<1>>,
    key_bias: Tensor<2>,
    heads: usize,
) -> Tensor<3>
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    let mut values = Vec::with_capacity(N);
    let nodes = inputs.map(|x| {
        let (x, node) = tracked_parts::<C, 3>(x);
        values.push(x);
        node
    });
    let key_bias = plain(key_bias);
    let run = |qkv_bias| {
        move |tracked: bool| {
            let (context, state) = flex_attention_forward(values, qkv_bias, key_bias, heads);
            (context, tracked.then_some(state))
        }
    };
    let context = match (qkv_bias.map(tracked_parts::<C, 1>), nodes) {
        (None, nodes) => record::<C, N, _>(AttentionBackward, nodes, run(None)),
        (Some((b, nb)), nodes) => {
            let [packed] = Vec::from(nodes)
                .try_into()
                .expect("a bias comes with a packed input");
            record::<C, 2, _>(AttentionBackward, [packed, nb], run(Some(b)))
        }
    };
    from_tracked::<C, 3>(context)
}

/// Attention's backward: the four products and the softmax's backward of
/// [`attention::backward`], from the saved inputs and probabilities; the bias's gradient is
/// the packed gradient summed over the rows.
#[derive(Debug)]
struct AttentionBackward;

impl<const N: usize> Backward<Flex, N> for AttentionBackward {
    type State = AttentionState;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        backward_with(ops, grads, |state, d_context| {
            let mut d_inputs = attention_backward(&state, d_context);
            if let Some(d) = state.qkv_bias {
                d_inputs.push(row_sums(&d_inputs[0], d));
            }
            d_inputs
                .try_into()
                .expect("a gradient per input, and the bias's")
        });
    }
}

/// The gradients of attention's inputs ([`attention::backward`]), each shaped as its input,
/// from the saved state and the incoming gradient of the context.
fn attention_backward(state: &AttentionState, d_context: FlexTensor) -> Vec<FlexTensor> {
    let shape = state.inputs[0].layout().shape().clone();
    let len = shape.num_elements();
    let mut grads: Vec<Vec<f32>> = state
        .inputs
        .iter()
        .map(|_| Vec::with_capacity(len))
        .collect();
    let d_model = state.dims.d_model;
    let outputs: Vec<*mut f32> = grads.iter_mut().map(|g| g.as_mut_ptr()).collect();
    let outputs = qkv_pointers(&outputs, d_model);
    let qkv = qkv_views(&state.inputs, d_model);
    // SAFETY: `grads` hold room for `[batch, seq, d_model]` at the stride `dims` states,
    // nothing else touches them during the call, and it writes every value before `set_len`.
    unsafe {
        let (probs, d_context) = (values(&state.probs), values(&d_context));
        attention::backward(qkv, probs, d_context, state.dims, outputs);
        grads.iter_mut().for_each(|grad| grad.set_len(len));
    }
    grads
        .into_iter()
        .map(|grad| flex_tensor(grad, shape.clone()))
        .collect()
}

/// `(x, gamma, beta)` of [`crate::layer_norm`].
pub(crate) type NormInputs<const D: usize> = (Tensor<D>, Tensor<1>, Tensor<1>);

/// What [`crate::bias_residual_layer_norm`] adds to `x` before the LayerNorm: a bias `[d]`
/// over its rows, and a residual of `x`'s shape.
pub(crate) type NormAddends<const D: usize> = (Tensor<1>, Tensor<D>);

/// Rows per parallel task of the LayerNorm kernels: a fixed number, so that the partial sums
/// of `∂γ` and `∂β` (added in task order) do not depend on the threads.
const NORM_ROWS: usize = 64;

/// LayerNorm of `f32` inputs on `Flex` or `Autodiff<Flex, C>` ([`on_flex`]), of
/// `x + bias + residual` when `addends` are given: the row kernels of [`cpu::layer_norm`],
/// under autodiff one operation over `x`, `γ`, `β` (and the bias and the residual).
pub(crate) fn flex_layer_norm<const D: usize>(
    (x, gamma, beta): NormInputs<D>,
    addends: Option<NormAddends<D>>,
    eps: f64,
) -> Tensor<D> {
    match route(&x, &[]) {
        Route::Plain => {
            let inputs = [plain(x), plain(gamma), plain(beta)];
            let addends = addends.map(|(b, r)| [plain(b), plain(r)]);
            Tensor::from_primitive::<Flex>(flex_layer_norm_forward(inputs, addends, eps).0)
        }
        Route::Tracked(strategy) => with_strategy!(strategy, |C| {
            tracked_layer_norm::<C, D>((x, gamma, beta), addends, eps)
        }),
        Route::Other => unreachable!("flex_layer_norm off flex: the caller checks on_flex"),
    }
}

/// What LayerNorm's backward needs: `x̂`, each row's `1/√(σ² + ε)`, and `γ`.
#[derive(Clone, Debug)]
struct NormState {
    x_hat: FlexTensor,
    r: Vec<f32>,
    gamma: FlexTensor,
}

/// LayerNorm of `Flex` tensors `[x, γ, β]` (of `x + bias + residual` with the `addends`
/// `[bias, residual]`, summed in that order), rows in parallel, and the state for backward.
fn flex_layer_norm_forward(
    inputs: [FlexTensor; 3],
    addends: Option<[FlexTensor; 2]>,
    eps: f64,
) -> (FlexTensor, NormState) {
    let [x, gamma, beta] = inputs.map(|t| t.to_contiguous());
    let addends = addends.map(|a| a.map(|t| t.to_contiguous()));
    let shape = x.layout().shape().clone();
    let d = gamma.shape()[0];
    let (xs, g, b) = (values(&x), values(&gamma), values(&beta));
    let (bias, residual) = match &addends {
        Some([bias, residual]) => (values(bias), values(residual)),
        None => (&[][..], &[][..]),
    };
    let (mut y, mut x_hat) = (Vec::new(), Vec::new());
    let mut r = vec![0f32; xs.len() / d.max(1)];
    let task = NORM_ROWS * d;
    spare(&mut y, xs.len())
        .par_chunks_mut(task)
        .zip(spare(&mut x_hat, xs.len()).par_chunks_mut(task))
        .zip(xs.par_chunks(task).zip(r.par_chunks_mut(NORM_ROWS)))
        .enumerate()
        .for_each(|(task, ((y, x_hat), (x, r)))| {
            // `x + bias + residual` of one row at a time, in cache.
            let mut sum = vec![0f32; if addends.is_some() { d } else { 0 }];
            let rows = y.chunks_mut(d).zip(x_hat.chunks_mut(d)).zip(x.chunks(d));
            for (j, (((y, x_hat), x), r)) in rows.zip(r).enumerate() {
                let x = if sum.is_empty() {
                    x
                } else {
                    let start = (task * NORM_ROWS + j) * d;
                    cpu::sum(&mut sum, x, bias, &residual[start..start + d]);
                    &sum
                };
                *r = cpu::layer_norm(x, g, b, eps as f32, y, x_hat);
            }
        });
    // SAFETY: the LayerNorm kernel wrote every row of both.
    unsafe {
        y.set_len(xs.len());
        x_hat.set_len(xs.len());
    }
    let x_hat = flex_tensor(x_hat, shape.clone());
    (flex_tensor(y, shape), NormState { x_hat, r, gamma })
}

/// LayerNorm over autodiff tensors: one operation from `x`, `γ` and `β` (and the bias and
/// the residual, when `addends`).
fn tracked_layer_norm<C: CheckpointStrategy, const D: usize>(
    (x, gamma, beta): NormInputs<D>,
    addends: Option<NormAddends<D>>,
    eps: f64,
) -> Tensor<D>
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    let (x, nx) = tracked_parts::<C, D>(x);
    let (gamma, ng) = tracked_parts::<C, 1>(gamma);
    let (beta, nb) = tracked_parts::<C, 1>(beta);
    let run = |addends| {
        move |tracked: bool| {
            let (y, state) = flex_layer_norm_forward([x, gamma, beta], addends, eps);
            (y, tracked.then_some(state))
        }
    };
    let y = match addends {
        Some((bias, residual)) => {
            let (bias, n_bias) = tracked_parts::<C, 1>(bias);
            let (residual, n_residual) = tracked_parts::<C, D>(residual);
            let nodes = [nx, ng, nb, n_bias, n_residual];
            record::<C, 5, _>(NormBackward, nodes, run(Some([bias, residual])))
        }
        None => record::<C, 3, _>(NormBackward, [nx, ng, nb], run(None)),
    };
    from_tracked::<C, D>(y)
}

/// LayerNorm's backward: `∂x` row by row, `∂γ` and `∂β` summed over the rows; with a bias
/// and a residual added to `x`, the residual's gradient is `∂x` and the bias's `Σ_rows ∂x`.
#[derive(Debug)]
struct NormBackward;

impl<const N: usize> Backward<Flex, N> for NormBackward {
    type State = NormState;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        backward_with(ops, grads, |state, dy| {
            let [dx, d_gamma, d_beta] = layer_norm_backward(state, dy);
            let d = d_gamma.shape()[0];
            let mut d_inputs = vec![dx.clone(), d_gamma, d_beta];
            if N == 5 {
                d_inputs.extend([row_sums(&dx, d), dx]);
            }
            d_inputs
                .try_into()
                .expect("x, γ, β and, when added, the bias and the residual")
        });
    }
}

/// `[∂x, ∂γ, ∂β]` from the saved state and the incoming gradient `dy`: rows in parallel
/// tasks of [`NORM_ROWS`], `∂γ` and `∂β` summed per task and then in task order.
fn layer_norm_backward(state: NormState, dy: FlexTensor) -> [FlexTensor; 3] {
    let NormState { x_hat, r, gamma } = state;
    let (dys, x_hat_v, g) = (values(&dy), values(&x_hat), values(&gamma));
    let d = g.len();
    let mut dx = Vec::new();
    let task = NORM_ROWS * d;
    let partial: Vec<(Vec<f32>, Vec<f32>)> = spare(&mut dx, dys.len())
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
    // SAFETY: the backward kernel wrote every row of `dx`.
    unsafe { dx.set_len(dys.len()) };
    let (mut d_gamma, mut d_beta) = (vec![0f32; d], vec![0f32; d]);
    for (pg, pb) in &partial {
        cpu::add_assign(&mut d_gamma, pg);
        cpu::add_assign(&mut d_beta, pb);
    }
    let shape = x_hat.layout().shape().clone();
    [
        flex_tensor(dx, shape),
        flex_tensor(d_gamma, [d]),
        flex_tensor(d_beta, [d]),
    ]
}

/// `x W + b` of `f32` tensors on `Flex` or `Autodiff<Flex, C>` ([`on_flex`]): the
/// [`linear`] kernels, under autodiff one operation over `x`, `W` and `b`.
pub(crate) fn flex_linear<const D: usize>(
    x: Tensor<D>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) -> Tensor<D> {
    match route(&x, &[]) {
        Route::Plain => {
            let (y, _) = linear_forward(plain(x), plain(weight), bias.map(plain));
            Tensor::from_primitive::<Flex>(y)
        }
        Route::Tracked(strategy) => {
            with_strategy!(strategy, |C| tracked_linear::<C, D>(x, weight, bias))
        }
        Route::Other => unreachable!("flex_linear off flex: the caller checks on_flex"),
    }
}

/// What the linear layer's backward needs: its input and weight (both contiguous).
#[derive(Clone, Debug)]
struct LinearState {
    x: FlexTensor,
    weight: FlexTensor,
    shape: linear::Shape,
}

/// `x [..., d_in] · W [d_in, d_out] (+ b [d_out])`, `[..., d_out]`, and the state for backward.
fn linear_forward(
    x: FlexTensor,
    weight: FlexTensor,
    bias: Option<FlexTensor>,
) -> (FlexTensor, LinearState) {
    let [d_in, d_out] = weight.shape().dims::<2>();
    let mut dims = x.shape().to_vec();
    let shape = linear::Shape {
        rows: x.shape().num_elements() / d_in.max(1),
        d_in,
        d_out,
    };
    let (x, weight) = (x.to_contiguous(), weight.to_contiguous());
    let bias = bias.map(|b| b.to_contiguous());
    let y = linear::forward(
        values(&x),
        values(&weight),
        bias.as_ref().map(values),
        shape,
    );
    *dims.last_mut().expect("x has a feature dimension") = d_out;
    (flex_tensor(y, dims), LinearState { x, weight, shape })
}

/// The linear layer over autodiff tensors: one operation from `x`, `W` and, if any, `b`.
fn tracked_linear<C: CheckpointStrategy, const D: usize>(
    x: Tensor<D>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) -> Tensor<D>
where
    DispatchTensor: DispatchKindConversion<Autodiff<Flex, C>>,
{
    let ((x, nx), (w, nw)) = (tracked_parts::<C, D>(x), tracked_parts::<C, 2>(weight));
    let run = |b| {
        move |tracked: bool| {
            let (y, state) = linear_forward(x, w, b);
            (y, tracked.then_some(state))
        }
    };
    let y = match bias.map(tracked_parts::<C, 1>) {
        Some((b, nb)) => record::<C, 3, _>(LinearBackward, [nx, nw, nb], run(Some(b))),
        None => record::<C, 2, _>(LinearBackward, [nx, nw], run(None)),
    };
    from_tracked::<C, D>(y)
}

/// The linear layer's backward: `∂x = ∂y Wᵀ`, `∂W = xᵀ ∂y`, `∂b = Σ_rows ∂y`, each made only
/// for an input whose graph wants it.
#[derive(Debug)]
struct LinearBackward;

impl<const N: usize> Backward<Flex, N> for LinearBackward {
    type State = LinearState;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let dy = grads.consume::<Flex>(&ops.node).to_contiguous();
        let LinearState { x, weight, shape } = ops.state;
        let (x_v, w_v, dy_v) = (values(&x), values(&weight), values(&dy));
        for (input, parent) in ops.parents.into_iter().enumerate() {
            let Some(node) = parent else { continue };
            let grad = match input {
                0 => flex_tensor(linear::input_grad(dy_v, w_v, shape), x.shape().clone()),
                1 => flex_tensor(
                    linear::weight_grad(x_v, dy_v, shape),
                    weight.shape().clone(),
                ),
                _ => row_sums(&dy, shape.d_out),
            };
            grads.register::<Flex>(node.id, grad);
        }
    }
}
