//! The reference cross-entropy cases on wgpu and flex (with autodiff) equal PyTorch's within
//! 1e-4; flex's fused attention kernel equals the composed ops in f64 within 2e-6, context
//! and gradients, and so do its LayerNorm and linear kernels. CI has no GPU: `.ci/run` installs
//! `mesa-vulkan-drivers`, whose lavapipe is a real Vulkan device on the CPU, so this runs
//! real wgpu kernels. CUDA joins with `--features cuda` where a device is present.

mod common;

use burn::tensor::{DType, Device, Tensor, TensorData};
use common::{assert_close, assert_every_cross_entropy_case_matches_pytorch};
use mlm_core::attention::{PADDING_BIAS, multi_head_attention, multi_head_attention_qkv_packed};
use mlm_core::{
    LogitsMode, MaskedCrossEntropy, MaskedCrossEntropyConfig, MaskedTargets, MaskingConfig,
    MlmHeadConfig,
};
use mlm_train::BertConfig;
use mlm_train::backend::BackendKind;
use mlm_train::data::make_batch;
use mlm_train::train::step::forward_loss;

/// The training device of `kind` (with autodiff).
fn device(kind: BackendKind) -> Device {
    kind.device().expect("a backend compiled into the tests")
}

#[test]
fn wgpu_matches_pytorch_on_every_reference_case() {
    assert_every_cross_entropy_case_matches_pytorch("wgpu", &device(BackendKind::Wgpu), 1e-4, 1e-4);
}

#[test]
fn flex_matches_pytorch_on_every_reference_case() {
    assert_every_cross_entropy_case_matches_pytorch("flex", &device(BackendKind::Flex), 1e-4, 1e-4);
}

/// Attention and LayerNorm inputs `[3, 19, 12]` (19 keys, rows of 12: not multiples of the
/// kernels' 16 lanes) as `dtype`: deterministic values in [-2, 2) without an RNG, the same on every backend.
const INPUT_DIMS: [usize; 3] = [3, 19, 12];

fn pseudo_random(salt: usize, dtype: DType, device: &Device) -> Tensor<3> {
    let v: Vec<f64> = (0..INPUT_DIMS.iter().product())
        .map(|i| ((i * 7919 + salt * 104_729) % 1000) as f64 / 250.0 - 2.0)
        .collect();
    Tensor::from_data(TensorData::new(v, INPUT_DIMS), (device, dtype))
}

/// The key bias `[batch, seq]` of the attention cases: the last 4 keys of sequence 1 and every
/// key but the first of sequence 2 padded.
fn padding_bias(batch: usize, seq: usize) -> Vec<f64> {
    let padded = |b: usize, s: usize| (b == 1 && s >= seq - 4) || (b == 2 && s > 0);
    (0..batch * seq)
        .map(|i| match padded(i / seq, i % seq) {
            true => PADDING_BIAS,
            false => 0.0,
        })
        .collect()
}

/// `(context, ∂q, ∂k, ∂v)` of 3-head attention over [`pseudo_random`] inputs in `dtype`, the
/// last 4 keys of sequence 1 and every key but the first of sequence 2 padded; the
/// gradients are of `Σ context ⊙ w` for a fixed `w`.
fn attention_case(dtype: DType, device: &Device) -> [Vec<f64>; 4] {
    let [batch, seq, _] = INPUT_DIMS;
    let [q, k, v] = [1, 2, 3].map(|salt| pseudo_random(salt, dtype, device).require_grad());
    let bias = Tensor::from_data(
        TensorData::new(padding_bias(batch, seq), [batch, seq]),
        (device, dtype),
    );
    let context = multi_head_attention(q.clone(), k.clone(), v.clone(), bias, 3);
    let grads = (context.clone() * pseudo_random(4, dtype, device))
        .sum()
        .backward();
    let flat = |t: Tensor<3>| t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap();
    [
        flat(context.inner()),
        flat(q.grad(&grads).unwrap()),
        flat(k.grad(&grads).unwrap()),
        flat(v.grad(&grads).unwrap()),
    ]
}

/// [`attention_case`] with query, key and value packed into one `[3, 19, 36]` tensor
/// ([`multi_head_attention_qkv_packed`]); `(context, ∂q, ∂k, ∂v)` with the gradients cut
/// from the packed one.
fn packed_attention_case(dtype: DType, device: &Device) -> [Vec<f64>; 4] {
    let [batch, seq, d_model] = INPUT_DIMS;
    let qkv = [1, 2, 3].map(|salt| pseudo_random(salt, dtype, device));
    let qkv = Tensor::cat(qkv.to_vec(), 2).require_grad();
    let bias = Tensor::<2>::from_data(
        TensorData::new(padding_bias(batch, seq), [batch, seq]),
        (device, dtype),
    );
    let context = multi_head_attention_qkv_packed(qkv.clone(), None, bias, 3);
    let grads = (context.clone() * pseudo_random(4, dtype, device))
        .sum()
        .backward();
    let flat = |t: Tensor<3>| t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap();
    let d_qkv = qkv.grad(&grads).unwrap();
    let [dq, dk, dv] = [0, 1, 2].map(|i| flat(d_qkv.clone().narrow(2, i * d_model, d_model)));
    [flat(context.inner()), dq, dk, dv]
}

/// The packed path equals the three tensors' to 1e-6 in `f32` on flex (its kernel reads the
/// packed rows in place and writes one gradient), and in `f64` (the composed ops cut the
/// packed tensor).
#[test]
fn packed_query_key_value_give_the_same_attention() {
    let flex = device(BackendKind::Flex);
    for dtype in [DType::F32, DType::F64] {
        let want = attention_case(dtype, &flex);
        let got = packed_attention_case(dtype, &flex);
        assert_all_close("packed attention", ["context", "∂q", "∂k", "∂v"], got, want);
    }
}

/// Flex's fused attention in `f32` within 1e-6 of the composed ops in `f64` (on flex: its
/// kernels take `f32` only),
/// context and gradients. (The composed ops in `f32` are 4e-5 off here: softmax's backward
/// through burn's exp/sum/div loses more to cancellation than the kernel's one formula.)
#[test]
fn flex_attention_kernel_matches_the_composed_ops_in_f64() {
    let flex = device(BackendKind::Flex);
    let want = attention_case(DType::F64, &flex);
    let got = attention_case(DType::F32, &flex);
    let to_f32 = |x: &Vec<f64>| x.iter().map(|&x| x as f32).collect::<Vec<_>>();
    for (name, (got, want)) in ["context", "∂q", "∂k", "∂v"]
        .iter()
        .zip(got.iter().zip(&want))
    {
        assert_close(
            &format!("attention {name}"),
            &to_f32(got),
            &to_f32(want),
            1e-6,
            2e-6,
        );
    }
    // The untracked path (inference on plain Flex) against the composed ops on Flex.
    let plain_flex = Device::flex();
    let [q, k, v] = [1, 2, 3].map(|salt| pseudo_random(salt, DType::F32, &plain_flex));
    let bias = Tensor::<2>::zeros([3, 19], &plain_flex);
    let plain = multi_head_attention(q.clone(), k.clone(), v.clone(), bias.clone(), 3);
    let composed = mlm_core::attention::composed(q, k, v, bias, 3);
    assert_close(
        "attention on plain Flex",
        &plain.into_data().try_to_vec::<f32>().unwrap(),
        &composed.into_data().try_to_vec::<f32>().unwrap(),
        1e-5,
        1e-5,
    );
}

/// Each of `got` within 1e-6 relative, 2e-6 absolute of `want`, in `f32`.
fn assert_all_close(what: &str, names: [&str; 4], got: [Vec<f64>; 4], want: [Vec<f64>; 4]) {
    let to_f32 = |x: &Vec<f64>| x.iter().map(|&x| x as f32).collect::<Vec<_>>();
    for (name, (got, want)) in names.iter().zip(got.iter().zip(&want)) {
        assert_close(
            &format!("{what} {name}"),
            &to_f32(got),
            &to_f32(want),
            1e-6,
            2e-6,
        );
    }
}

/// `(y, ∂x, ∂γ, ∂β)` of LayerNorm with BERT's ε 1e-12 over the rows of [`pseudo_random`]
/// inputs in `dtype`, γ and β fixed ramps; the gradients are of `Σ y ⊙ w` for a fixed `w`.
fn layer_norm_case(dtype: DType, device: &Device) -> [Vec<f64>; 4] {
    let d = INPUT_DIMS[2];
    let ramp = |from: f64, step: f64| -> Tensor<1> {
        let v: Vec<f64> = (0..d).map(|i| from + step * i as f64).collect();
        Tensor::from_data(TensorData::new(v, [d]), (device, dtype)).require_grad()
    };
    let (x, gamma, beta) = (
        pseudo_random(5, dtype, device).require_grad(),
        ramp(0.5, 0.1),
        ramp(-0.3, 0.05),
    );
    let y = mlm_core::layer_norm(x.clone(), gamma.clone(), beta.clone(), 1e-12);
    let grads = (y.clone() * pseudo_random(6, dtype, device))
        .sum()
        .backward();
    let flat = |t: TensorData| t.convert::<f64>().try_to_vec::<f64>().unwrap();
    [
        flat(y.inner().into_data()),
        flat(x.grad(&grads).unwrap().into_data()),
        flat(gamma.grad(&grads).unwrap().into_data()),
        flat(beta.grad(&grads).unwrap().into_data()),
    ]
}

/// Flex's fused LayerNorm in `f32` within 1e-6 of the composed ops in `f64` (on flex):
/// output and the gradients of input, γ and β.
#[test]
fn flex_layer_norm_kernel_matches_the_composed_ops_in_f64() {
    let flex = device(BackendKind::Flex);
    let want = layer_norm_case(DType::F64, &flex);
    let got = layer_norm_case(DType::F32, &flex);
    assert_all_close("LayerNorm", ["y", "∂x", "∂γ", "∂β"], got, want);
}

/// `(y, ∂x, ∂W, ∂b)` of [`mlm_core::linear()`] from `x` `[3, 19, 12]` ([`pseudo_random`]) to 7
/// features (W `[12, 7]`, b `[7]` fixed ramps; without `bias`, `∂b` empty) in `dtype`; the
/// gradients are of `Σ y ⊙ w` for a fixed `w`.
fn linear_case(dtype: DType, bias: bool, device: &Device) -> [Vec<f64>; 4] {
    let [batch, seq, d_in] = INPUT_DIMS;
    let ramp = |n: usize, step: f64, shape: Vec<usize>| {
        let v: Vec<f64> = (0..n).map(|i| (i % 11) as f64 * step - 0.4).collect();
        Tensor::<2>::from_data(TensorData::new(v, shape), (device, dtype)).require_grad()
    };
    let x = pseudo_random(7, dtype, device).require_grad();
    let weight = ramp(d_in * 7, 0.07, vec![d_in, 7]);
    let b = ramp(7, 0.1, vec![1, 7])
        .reshape([7])
        .detach()
        .require_grad();
    let y = mlm_core::linear(x.clone(), weight.clone(), bias.then(|| b.clone()));
    let w: Vec<f64> = (0..batch * seq * 7)
        .map(|i| (i % 13) as f64 / 6.0 - 1.0)
        .collect();
    let w = Tensor::<3>::from_data(TensorData::new(w, [batch, seq, 7]), (device, dtype));
    let grads = (y.clone() * w).sum().backward();
    let flat = |t: TensorData| t.convert::<f64>().try_to_vec::<f64>().unwrap();
    [
        flat(y.inner().into_data()),
        flat(x.grad(&grads).unwrap().into_data()),
        flat(weight.grad(&grads).unwrap().into_data()),
        b.grad(&grads).map_or(vec![], |g| flat(g.into_data())),
    ]
}

/// Flex's linear kernel in `f32` within 1e-6 of Burn's `linear` in `f64` (on flex), with and
/// without a bias: output and the gradients of input, weight and bias; on plain Flex
/// (inference) within 1e-6 of Burn's `linear` in `f32`.
#[test]
fn flex_linear_kernel_matches_burns_linear_in_f64() {
    let flex = device(BackendKind::Flex);
    for bias in [true, false] {
        let want = linear_case(DType::F64, bias, &flex);
        let got = linear_case(DType::F32, bias, &flex);
        assert_all_close("linear", ["y", "∂x", "∂W", "∂b"], got, want);
    }
    let plain_flex = Device::flex();
    let x = pseudo_random(8, DType::F32, &plain_flex);
    let weight = pseudo_random(9, DType::F32, &plain_flex)
        .reshape([57, 12])
        .narrow(0, 0, 12);
    let bias = pseudo_random(10, DType::F32, &plain_flex)
        .reshape([684])
        .narrow(0, 0, 12);
    let ours = mlm_core::linear(x.clone(), weight.clone(), Some(bias.clone()));
    let burns = burn::tensor::module::linear(x, weight, Some(bias));
    assert_close(
        "linear on plain Flex",
        &ours.into_data().try_to_vec::<f32>().unwrap(),
        &burns.into_data().try_to_vec::<f32>().unwrap(),
        1e-6,
        1e-6,
    );
}

/// Under gradient checkpointing (`Autodiff<Flex, BalancedCheckpointing>`) the fused attention,
/// LayerNorm and linear kernels run too: their outputs and gradients equal those without
/// checkpointing bit for bit (the composed ops in `f32` differ from the kernels by up to
/// 4e-5, so a fallback would show).
#[test]
fn the_fused_kernels_run_under_gradient_checkpointing() {
    let plain = device(BackendKind::Flex);
    let checkpointed = plain.clone().gradient_checkpointing();
    assert_eq!(
        attention_case(DType::F32, &checkpointed),
        attention_case(DType::F32, &plain)
    );
    assert_eq!(
        layer_norm_case(DType::F32, &checkpointed),
        layer_norm_case(DType::F32, &plain)
    );
    assert_eq!(
        linear_case(DType::F32, true, &checkpointed),
        linear_case(DType::F32, true, &plain)
    );
}

/// The first training step's loss of a BERT initialised from seed 42, on one fixed masked
/// batch of two sequences of different lengths, on `device`.
fn first_loss(device: &Device) -> f32 {
    let config = BertConfig::new(300)
        .with_hidden_size(32)
        .with_num_attention_heads(2)
        .with_intermediate_size(64)
        .with_max_position_embeddings(32);
    let model = config.init_seeded(42, device);
    // Two sequences of different lengths: [CLS]=2 … [SEP]=3, padding 0, [MASK]=4.
    let sequences: Vec<Vec<u32>> = vec![
        std::iter::once(2)
            .chain((0..20).map(|i| 5 + (i * 37) % 290))
            .chain([3])
            .collect(),
        std::iter::once(2)
            .chain((0..11).map(|i| 5 + (i * 53) % 290))
            .chain([3])
            .collect(),
    ];
    let chunk: Vec<&[u32]> = sequences.iter().map(Vec::as_slice).collect();
    let mut masker = MaskingConfig::new(300, 4, 0, vec![1, 2, 3])
        .with_mlm_probability(0.3)
        .init()
        .unwrap();
    let batch = make_batch(&chunk, &mut masker, 0, device).unwrap();
    let out = forward_loss(&model, batch, &MaskedCrossEntropy::default()).unwrap();
    out.loss
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()[0]
}

/// The first training step's loss of a BERT initialised from the same seed, on the same
/// masked batch, agrees between wgpu and flex within 1e-3 (issue 3), and with ndarray within
/// 1e-4 where the `ndarray` feature builds it. It failed by 2.4e-3 while burn's `Linear`
/// drew its biases from each backend's own generator.
#[test]
fn first_step_loss_agrees_between_backends() {
    let flex = first_loss(&device(BackendKind::Flex));
    let gpu = first_loss(&device(BackendKind::Wgpu));
    assert!(
        flex > 5.0 && flex < 6.5,
        "an untrained model is near ln 300 = 5.70: {flex}"
    );
    assert!((flex - gpu).abs() < 1e-3, "flex {flex} vs wgpu {gpu}");
    #[cfg(feature = "ndarray")]
    {
        let composed = first_loss(&device(BackendKind::Ndarray));
        assert!(
            (flex - composed).abs() < 1e-4,
            "flex {flex} vs ndarray {composed}"
        );
    }
}

/// CUDA (`cargo test --features cuda --test backend_parity` on an NVIDIA machine): the
/// reference cases within 1e-4 of PyTorch and the first step's loss within 1e-4 of flex.
/// Without a device it says why and passes, as on CI.
#[cfg(feature = "cuda")]
#[test]
fn cuda_matches_flex_where_a_device_is_present() {
    let device = match BackendKind::Cuda.device() {
        Ok(device) => device,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    assert_every_cross_entropy_case_matches_pytorch("cuda", &device, 1e-4, 1e-4);
    let cpu = first_loss(&self::device(BackendKind::Flex));
    let gpu = first_loss(&device);
    assert!((cpu - gpu).abs() < 1e-4, "flex {cpu} vs cuda {gpu}");
}

/// Loss and the gradients of hidden states, tied embedding and bias of a tied head without
/// transform graded at
/// 9 of 2 × 8 rows (vocabulary 53), the logits as `logits` says, on `device`.
fn chunked_head_case(logits: LogitsMode, device: &Device) -> [Vec<f64>; 4] {
    let (d_model, vocab) = (12, 53);
    // No transform: its weights would be drawn at random, and it runs before the chunking.
    let head = MlmHeadConfig::new(d_model, vocab)
        .with_transform(false)
        .init(device);
    let hidden = pseudo_random(6, DType::F32, device)
        .narrow(0, 0, 2)
        .narrow(1, 0, 8)
        .require_grad();
    let values: Vec<f64> = (0..vocab * d_model)
        .map(|i| ((i * 7919) % 1000) as f64 / 1000.0 - 0.5)
        .collect();
    let embedding =
        Tensor::<2>::from_data(TensorData::new(values, [vocab, d_model]), device).require_grad();
    let positions = [0, 2, 3, 5, 7, 8, 11, 14, 15];
    let true_tokens: Vec<i64> = positions.iter().map(|p| p * 5 % vocab as i64).collect();
    let targets = MaskedTargets::new(&positions, &true_tokens, [2, 8], vocab, device).unwrap();
    let loss_fn = MaskedCrossEntropyConfig::new()
        .with_logits(logits)
        .with_label_smoothing(0.1)
        .init()
        .unwrap();
    let out = head
        .forward_loss(hidden.clone(), &targets, Some(embedding.clone()), &loss_fn)
        .unwrap();
    let grads = out.loss.backward();
    let flat = |t: Tensor<1>| t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap();
    [
        flat(out.loss.inner()),
        flat(hidden.grad(&grads).unwrap().flatten(0, 2)),
        flat(embedding.grad(&grads).unwrap().flatten(0, 1)),
        flat(head.bias.val().grad(&grads).unwrap()),
    ]
}

/// The chunked head and loss built from Burn's tensor ops (every backend without a kernel of
/// its own: here wgpu, on lavapipe in CI) equal the whole logits' path on the same device,
/// and flex's fused sweep, within 1e-5 of each tensor's largest entry.
#[test]
fn the_chunked_head_and_loss_match_the_whole_logits_on_wgpu_and_flex() {
    let names = ["loss", "∂hidden", "∂embedding", "∂bias"];
    let (wgpu, flex) = (device(BackendKind::Wgpu), device(BackendKind::Flex));
    let whole = chunked_head_case(LogitsMode::Whole, &wgpu);
    for rows in [1, 4, 9] {
        let chunked = LogitsMode::Chunked { rows };
        for (backend, device) in [("wgpu", &wgpu), ("flex", &flex)] {
            let got = chunked_head_case(chunked, device);
            for (name, (got, want)) in names.iter().zip(got.iter().zip(&whole)) {
                let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
                assert!(scale > 0.0, "{name} is all zero");
                for (g, w) in got.iter().zip(want) {
                    assert!(
                        (g - w).abs() <= 1e-5 * scale,
                        "{backend}, {rows} rows a chunk: {name} {g} against {w}"
                    );
                }
            }
        }
    }
}
