//! The reference cross-entropy cases on `Autodiff<Wgpu>` and `Autodiff<Flex>` equal the
//! `Autodiff<NdArray>` results within 1e-4. CI has no GPU: `.ci/run` installs
//! `mesa-vulkan-drivers`, whose lavapipe is a real Vulkan device on the CPU, so this runs
//! real wgpu kernels. CUDA joins with `--features cuda` where a device is present.

mod common;

use burn::backend::{Autodiff, Flex, NdArray, Wgpu};
use burn::tensor::backend::AutodiffBackend;
use common::{assert_close, fixture, run_cross_entropy_case};
use mlm_core::{MaskedCrossEntropy, MaskingConfig};
use mlm_train::BertConfig;
use mlm_train::data::make_batch;
use mlm_train::gradients::forward_loss;

/// Every case of `cross_entropy.json` on `B`: mean, sum and gradient within 1e-4 of ndarray.
fn matches_ndarray_on_every_reference_case<B: AutodiffBackend>(backend: &str) {
    let reference = fixture("cross_entropy.json");
    let device = Default::default();
    for case in reference["cases"].as_array().unwrap() {
        let name = format!("{backend} {}", case["name"].as_str().unwrap());
        let cpu = run_cross_entropy_case::<Autodiff<NdArray>>(case, &Default::default()).unwrap();
        let other = run_cross_entropy_case::<B>(case, &device).unwrap();
        assert_eq!(other.n_graded, cpu.n_graded, "{name}: n_graded");
        assert_close(
            &format!("{name} mean"),
            &[other.mean],
            &[cpu.mean],
            1e-4,
            1e-4,
        );
        assert_close(&format!("{name} sum"), &[other.sum], &[cpu.sum], 1e-4, 1e-4);
        assert_close(&format!("{name} grad"), &other.grad, &cpu.grad, 1e-4, 1e-4);
    }
}

#[test]
fn wgpu_matches_ndarray_on_every_reference_case() {
    matches_ndarray_on_every_reference_case::<Autodiff<Wgpu>>("wgpu");
}

#[test]
fn flex_matches_ndarray_on_every_reference_case() {
    matches_ndarray_on_every_reference_case::<Autodiff<Flex>>("flex");
}

/// The first training step's loss of a BERT initialised from seed 42, on one fixed masked
/// batch of two sequences of different lengths, on `B`.
fn first_loss<B: AutodiffBackend>(device: &B::Device) -> f32 {
    let config = BertConfig::new(300)
        .with_hidden_size(32)
        .with_num_attention_heads(2)
        .with_intermediate_size(64)
        .with_max_position_embeddings(32);
    let model = config.init_seeded::<B>(42, device);
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
    let mut masker = MaskingConfig::new(300, 4, vec![0, 1, 2, 3, 4])
        .with_mlm_probability(0.3)
        .init()
        .unwrap();
    let batch = make_batch::<B>(&chunk, &mut masker, 0, device).unwrap();
    let out = forward_loss(&model, batch, &MaskedCrossEntropy::default()).unwrap();
    out.loss
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .unwrap()[0]
}

/// The first training step's loss of a BERT initialised from the same seed, on the same
/// masked batch, agrees between wgpu, flex and ndarray within 1e-3 (issue 3). It failed by
/// 2.4e-3 while burn's `Linear` drew its biases from each backend's own generator.
#[test]
fn first_step_loss_agrees_between_backends() {
    let cpu = first_loss::<Autodiff<NdArray>>(&Default::default());
    let gpu = first_loss::<Autodiff<Wgpu>>(&Default::default());
    let flex = first_loss::<Autodiff<Flex>>(&Default::default());
    assert!(
        cpu > 5.0 && cpu < 6.5,
        "an untrained model is near ln 300 = 5.70: {cpu}"
    );
    assert!((cpu - gpu).abs() < 1e-3, "ndarray {cpu} vs wgpu {gpu}");
    assert!((cpu - flex).abs() < 1e-4, "ndarray {cpu} vs flex {flex}");
}

/// CUDA (`cargo test --features cuda --test backend_parity` on an NVIDIA machine): the
/// reference cases and the first step's loss within 1e-4 of ndarray. Without a device it
/// says why and passes, as on CI.
#[cfg(feature = "cuda")]
#[test]
fn cuda_matches_ndarray_where_a_device_is_present() {
    let device = match mlm_train::backend::cuda_device() {
        Ok(device) => device,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    type B = Autodiff<burn::backend::Cuda>;
    matches_ndarray_on_every_reference_case::<B>("cuda");
    let cpu = first_loss::<Autodiff<NdArray>>(&Default::default());
    let gpu = first_loss::<B>(&device);
    assert!((cpu - gpu).abs() < 1e-4, "ndarray {cpu} vs cuda {gpu}");
}
