//! The BERT MLM head against PyTorch/transformers (`tests/fixtures/mlm_head.json`):
//! logits, loss, and the gradients of the hidden states, the tied embedding, the output
//! bias and the dense weight, through both the dense path (`forward` + labels) and the
//! sparse path (`forward_masked`), on flex with autodiff (the fused GELU and cross-entropy
//! kernels) and, with the `ndarray` feature, on ndarray with autodiff (plain tensor ops).
//! PyTorch stores a Linear weight `[out, in]`, Burn `[in, out]`.

mod common;

use burn::tensor::Device;

use burn::module::Param;
use burn::tensor::{Int, Tensor, TensorData};
use common::{assert_close, dims, fixture, floats, ints, tensor, to_vec};
use mlm_core::{MlmHead, MlmHeadConfig, masked_cross_entropy_with_labels};
use mlm_train::backend::BackendKind;
use serde_json::Value;

/// The reference head with its parameters loaded, and the tied embedding.
fn reference_head(reference: &Value, device: &Device) -> (MlmHead, Param<Tensor<2>>) {
    let d_model = reference["d_model"].as_u64().unwrap() as usize;
    let vocab = reference["vocab_size"].as_u64().unwrap() as usize;
    let params = &reference["params"];
    let param = |key: &str| floats(&params[key]);
    let mut head = MlmHeadConfig::new(d_model, vocab).init(device);
    let transform = head.transform.as_mut().unwrap();
    // PyTorch [out, in] → Burn [in, out].
    let dense_weight = param("transform.dense.weight [out,in] (PyTorch layout; y = x W^T + b)");
    transform.dense.weight =
        Param::from_tensor(tensor::<2>(dense_weight, [d_model, d_model], device).transpose());
    transform.dense.bias = Some(Param::from_tensor(tensor(
        param("transform.dense.bias"),
        [d_model],
        device,
    )));
    transform.layer_norm.gamma = Param::from_tensor(tensor(
        param("transform.LayerNorm.weight"),
        [d_model],
        device,
    ));
    transform.layer_norm.beta = Some(Param::from_tensor(tensor(
        param("transform.LayerNorm.bias"),
        [d_model],
        device,
    )));
    head.bias = Param::from_tensor(tensor(param("bias [vocab]"), [vocab], device));
    let embedding = Param::from_tensor(tensor(
        param("tied_embedding.weight [vocab,d_model]"),
        [vocab, d_model],
        device,
    ));
    (head, embedding)
}

fn labels(reference: &Value, shape: [usize; 2], device: &Device) -> Tensor<2, Int> {
    Tensor::from_data(TensorData::new(ints(&reference["labels"]), shape), device)
}

/// `actual` against PyTorch's gradient `expected`: within 1e-5 relative, or within 1e-6 of
/// the gradient's largest entry where an entry is a sum that cancels (a dense-weight entry of
/// 0.07 adds terms of up to 3.9 in f32; there PyTorch's own value is 5.7e-7 from the f64
/// result, and an AVX2 machine's flex kernels 1.7e-6, 4e-7 of the scale).
fn assert_gradient_close(what: &str, actual: &[f32], expected: &[f32]) {
    let scale = expected.iter().fold(0f32, |m, e| m.max(e.abs()));
    assert_close(what, actual, expected, 1e-5, 1e-6 * scale.max(1.0));
}

/// Checks every gradient the fixture holds, from a backward pass of the mean loss.
fn assert_reference_gradients(
    reference: &Value,
    loss: Tensor<1>,
    hidden: &Tensor<3>,
    head: &MlmHead,
    embedding: &Param<Tensor<2>>,
) {
    let expected = |key: &str| floats(&reference["expected"][key]);
    let grads = loss.backward();
    let grad = |t: Option<Tensor<2>>| to_vec(t.expect("gradient"));
    let grad_hidden = to_vec(hidden.grad(&grads).unwrap());
    assert_gradient_close("grad hidden", &grad_hidden, &expected("grad_hidden"));
    let grad_embedding = grad(embedding.val().grad(&grads));
    assert_gradient_close(
        "grad tied embedding",
        &grad_embedding,
        &expected("grad_tied_embedding"),
    );
    let grad_bias = to_vec(head.bias.val().grad(&grads).unwrap());
    assert_gradient_close("grad bias", &grad_bias, &expected("grad_bias"));
    // PyTorch's dense-weight gradient is [out, in]; ours is [in, out].
    let dense = &head.transform.as_ref().unwrap().dense;
    let grad_dense = grad(dense.weight.val().grad(&grads).map(|g| g.transpose()));
    assert_gradient_close(
        "grad dense weight",
        &grad_dense,
        &expected("grad_transform.dense.weight"),
    );
}

/// The composed ops on wgpu (on CI Mesa's lavapipe, Vulkan on the CPU).
fn wgpu_device() -> Device {
    BackendKind::Wgpu
        .device()
        .expect("wgpu is compiled into the tests")
}

#[test]
fn dense_path_matches_transformers_head_on_wgpu() {
    dense_path_matches(&wgpu_device());
}

#[test]
fn sparse_path_gives_the_same_loss_and_gradients_on_wgpu() {
    sparse_path_matches(&wgpu_device());
}

#[cfg(feature = "ndarray")]
#[test]
fn dense_path_matches_transformers_head() {
    dense_path_matches(&common::composed_device());
}

#[test]
fn dense_path_matches_transformers_head_with_the_fused_flex_kernels() {
    dense_path_matches(&Device::flex().autodiff());
}

#[cfg(feature = "ndarray")]
#[test]
fn sparse_path_gives_the_same_loss_and_gradients() {
    sparse_path_matches(&common::composed_device());
}

#[test]
fn sparse_path_gives_the_same_loss_and_gradients_with_the_fused_flex_kernels() {
    sparse_path_matches(&Device::flex().autodiff());
}

fn dense_path_matches(device: &Device) {
    let reference = fixture("mlm_head.json");
    let (head, embedding) = reference_head(&reference, device);
    let shape: [usize; 3] = dims(&reference["hidden_shape"]);
    let hidden = tensor::<3>(floats(&reference["hidden"]), shape, device).require_grad();

    let logits = head.forward(hidden.clone(), Some(embedding.val())).unwrap();
    let expected = &reference["expected"];
    assert_eq!(
        logits.dims().to_vec(),
        ints(&expected["logits_shape"])
            .iter()
            .map(|&d| d as usize)
            .collect::<Vec<_>>()
    );
    assert_close(
        "logits",
        &to_vec(logits.clone()),
        &floats(&expected["logits"]),
        1e-5,
        1e-6,
    );

    let out =
        masked_cross_entropy_with_labels(logits, labels(&reference, [shape[0], shape[1]], device))
            .unwrap();
    let expected_loss = expected["loss_mean"].as_f64().unwrap() as f32;
    assert_close(
        "loss",
        &to_vec(out.loss.clone()),
        &[expected_loss],
        1e-5,
        1e-6,
    );
    assert_eq!(out.n_graded, 4);
    assert_reference_gradients(&reference, out.loss, &hidden, &head, &embedding);
}

fn sparse_path_matches(device: &Device) {
    let reference = fixture("mlm_head.json");
    let (head, embedding) = reference_head(&reference, device);
    let shape: [usize; 3] = dims(&reference["hidden_shape"]);
    let hidden = tensor::<3>(floats(&reference["hidden"]), shape, device).require_grad();
    let labels = ints(&reference["labels"]);
    let (positions, targets): (Vec<i64>, Vec<i64>) = labels
        .iter()
        .enumerate()
        .filter(|&(_, &label)| label != -100)
        .map(|(position, &label)| (position as i64, label))
        .unzip();
    let n = positions.len();
    let positions = Tensor::<1, Int>::from_data(TensorData::new(positions, [n]), device);
    let targets = Tensor::<1, Int>::from_data(TensorData::new(targets, [n]), device);

    let logits = head
        .forward_masked(hidden.clone(), positions, Some(embedding.val()))
        .unwrap();
    assert_eq!(logits.dims(), [4, 50]);
    let out = masked_cross_entropy_with_labels(logits, targets).unwrap();
    let expected_loss = reference["expected"]["loss_mean"].as_f64().unwrap() as f32;
    assert_close(
        "sparse loss",
        &to_vec(out.loss.clone()),
        &[expected_loss],
        1e-5,
        1e-6,
    );
    assert_reference_gradients(&reference, out.loss, &hidden, &head, &embedding);
}
