//! Hugging Face interop against transformers' own files (`tests/fixtures/tiny_bert/`, copied
//! from `../shared/reference/tiny_bert/`: a 2-layer `BertForMaskedLM` saved by
//! `save_pretrained`, and its loss and logits in eval mode on two padded sequences):
//! the imported model gives the same loss and logits; export → import gives identical
//! logits; every kind of bad file is a typed error naming the key, and leaves nothing behind.

mod common;

use burn::tensor::{Bool, Int, Tensor, TensorData};
use common::flex_device;
use mlm_core::masked_cross_entropy_with_labels;
use mlm_train::data::SPECIAL_TOKENS;
use mlm_train::model::hf::load_hf;
use mlm_train::resume;
use mlm_train::run::TrainedRun;
use mlm_train::run::hf::{export_run, import_run};
use mlm_train::{ModelForMaskedLm, TrainError};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_bert")
}

fn cases() -> Value {
    let text = std::fs::read_to_string(fixture().join("cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A `[2, 8]` row-major integer field of `cases.json`.
fn ints(value: &Value) -> Vec<i64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()))
        .collect()
}

/// Logits `[batch, seq, vocab]` (flat) of `model` on the cases' inputs.
fn logits(model: &ModelForMaskedLm, cases: &Value) -> Tensor<3> {
    let device = flex_device();
    let shape = [2, 8];
    let int =
        |key: &str| Tensor::<2, Int>::from_data(TensorData::new(ints(&cases[key]), shape), &device);
    // Hugging Face's attention_mask is 1 on real tokens; our padding_mask is true on padding.
    let padding: Vec<bool> = ints(&cases["attention_mask"])
        .iter()
        .map(|&m| m == 0)
        .collect();
    let padding = Tensor::<2, Bool>::from_data(TensorData::new(padding, shape), &device);
    let model = model.as_bert().expect("a BERT");
    model
        .forward(int("input_ids"), int("token_type_ids"), padding)
        .unwrap()
}

fn to_vec(t: Tensor<3>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn transformers_tiny_bert_gives_the_reference_loss_and_logits() {
    let cases = cases();
    let (config, model) = load_hf(&fixture(), &flex_device()).unwrap();
    assert_eq!(
        (
            config.vocab_size(),
            config.hidden_size(),
            config.num_hidden_layers()
        ),
        (64, 32, 2)
    );
    let logits = logits(&model, &cases);
    assert_eq!(logits.dims(), [2, 8, 64]);
    let labels = Tensor::<2, Int>::from_data(
        TensorData::new(ints(&cases["labels"]), [2, 8]),
        &flex_device(),
    );
    let out = masked_cross_entropy_with_labels(logits.clone(), labels).unwrap();
    let loss = out.loss.into_scalar::<f32>();
    let expected_loss = cases["expected"]["loss"].as_f64().unwrap() as f32;
    let expected: Vec<f32> = cases["expected"]["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let diff = max_abs_diff(&to_vec(logits), &expected);
    println!(
        "tiny_bert: loss {loss:.6} vs transformers {expected_loss:.6} (|diff| {:.2e}); \
         max |logit diff| {diff:.2e} over {} logits",
        (loss - expected_loss).abs(),
        expected.len()
    );
    assert_eq!(out.n_graded, 3);
    assert!(
        (loss - expected_loss).abs() <= 1e-4,
        "loss {loss} vs {expected_loss}"
    );
    assert!(diff <= 1e-4, "max |logit diff| {diff}");
}

/// A copy of the fixture with a 64-token `vocab.txt`, so that it imports as a run.
fn fixture_with_vocab(dir: &Path) -> PathBuf {
    let hf = dir.join("hf");
    std::fs::create_dir_all(&hf).unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture().join(file), hf.join(file)).unwrap();
    }
    let words = [
        "the", "of", "and", "to", "a", "in", "that", "is", "was", "he", "for", "it", "with", "as",
        "his", "on", "be", "at", "by", "i", "this", "had", "not", "are", "but", "from", "or",
        "have", "an", "they", "which", "one", "you", "were", "her", "all", "she", "there", "would",
        "their", "we", "him", "been", "has", "when", "who", "will", "more", "no", "if", "out",
        "so", "said", "what", "up", "its", "about", "into", "whale",
    ];
    let vocab: Vec<&str> = SPECIAL_TOKENS.iter().copied().chain(words).collect();
    assert_eq!(vocab.len(), 64);
    std::fs::write(hf.join("vocab.txt"), vocab.join("\n") + "\n").unwrap();
    hf
}

#[test]
fn import_then_export_then_import_gives_identical_logits() {
    let device = flex_device();
    let tmp = tempfile::tempdir().unwrap();
    let hf = fixture_with_vocab(tmp.path());
    let run = tmp.path().join("run");
    let corpus = common::corpus();
    let config = import_run(&hf, &run, &corpus, &device).unwrap();
    assert_eq!(config.max_seq_len, 16);

    // An imported run has no optimizer state: a resume is refused and changes nothing.
    let saved = std::fs::read(run.join("config.json")).unwrap();
    match resume(&run, Some(100), &device, "flex") {
        Err(TrainError::InvalidInput(m)) => assert!(m.contains("cannot be resumed"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(run.join("config.json")).unwrap(), saved);

    // The imported run is a run: predict and eval read it.
    let trained = TrainedRun::load(&run, &device).unwrap();
    let predictions = trained
        .fill_mask("the whale [MASK] the sea", 3, &device)
        .unwrap();
    assert_eq!(predictions[0].position, 3);
    let eval = trained.evaluate(Some(&corpus), &device).unwrap();
    assert!(eval.n_masked > 0 && eval.loss.is_finite(), "{eval:?}");

    let out = tmp.path().join("exported");
    export_run(&run, &out, &device).unwrap();
    // A second export into the same folder is refused rather than overwriting the first.
    match export_run(&run, &out, &device) {
        Err(TrainError::InvalidInput(m)) => {
            assert!(m.contains("already holds a model.safetensors"))
        }
        other => panic!("{other:?}"),
    }
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "vocab.txt",
        "tokenizer_config.json",
        "special_tokens_map.json",
    ] {
        assert!(out.join(file).is_file(), "{file} not written");
    }
    let hf_config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(hf_config["model_type"], "bert");
    assert_eq!(hf_config["architectures"][0], "BertForMaskedLM");
    assert_eq!(hf_config["hidden_size"], 32);
    assert_eq!(
        std::fs::read_to_string(out.join("vocab.txt")).unwrap(),
        std::fs::read_to_string(hf.join("vocab.txt")).unwrap()
    );
    // Every tensor transformers wrote comes back bit for bit under its own key.
    let original = std::fs::read(hf.join("model.safetensors")).unwrap();
    let exported = std::fs::read(out.join("model.safetensors")).unwrap();
    let (original, exported) = (
        SafeTensors::deserialize(&original).unwrap(),
        SafeTensors::deserialize(&exported).unwrap(),
    );
    assert_eq!(exported.len(), original.len());
    for (key, view) in original.tensors() {
        assert_eq!(exported.tensor(&key).unwrap(), view, "{key}");
    }

    let cases = cases();
    let (_, reimported) = load_hf(&out, &device).unwrap();
    let before = to_vec(logits(&trained.model, &cases));
    let after = to_vec(logits(&reimported, &cases));
    let diff = max_abs_diff(&before, &after);
    println!(
        "round trip: max |logit diff| {diff:e} over {} logits",
        before.len()
    );
    assert_eq!(before, after);
}

/// One tensor of a safetensors file, owned.
struct Owned {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn read_tensors(path: &Path) -> HashMap<String, Owned> {
    let bytes = std::fs::read(path).unwrap();
    SafeTensors::deserialize(&bytes)
        .unwrap()
        .tensors()
        .into_iter()
        .map(|(key, view)| {
            let owned = Owned {
                dtype: view.dtype(),
                shape: view.shape().to_vec(),
                bytes: view.data().to_vec(),
            };
            (key, owned)
        })
        .collect()
}

fn write_tensors(path: &Path, tensors: &HashMap<String, Owned>) {
    let views = tensors.iter().map(|(key, t)| {
        (
            key.clone(),
            TensorView::new(t.dtype, t.shape.clone(), &t.bytes).unwrap(),
        )
    });
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// Reads the tensors of `hf`'s weights file, lets `edit` change them, and writes them back.
fn edit_tensors(hf: &Path, edit: impl FnOnce(&mut HashMap<String, Owned>)) {
    let weights = hf.join("model.safetensors");
    let mut tensors = read_tensors(&weights);
    edit(&mut tensors);
    write_tensors(&weights, &tensors);
}

/// Imports a fixture copy spoilt by `spoil`; checks that the import fails and writes no
/// run directory, and returns the error.
fn import_spoilt(spoil: impl FnOnce(&Path)) -> TrainError {
    let tmp = tempfile::tempdir().unwrap();
    let hf = fixture_with_vocab(tmp.path());
    spoil(&hf);
    let run = tmp.path().join("run");
    let error = import_run(&hf, &run, Path::new("unused"), &flex_device())
        .expect_err("a spoilt folder must not import");
    assert!(
        !run.exists(),
        "a failed import left {} behind",
        run.display()
    );
    println!("{error}");
    error
}

const QUERY: &str = "bert.encoder.layer.1.attention.self.query.weight";

#[test]
fn a_missing_tensor_is_named() {
    let error = import_spoilt(|hf| {
        edit_tensors(hf, |tensors| {
            tensors.remove(QUERY);
        })
    });
    assert!(
        matches!(&error, TrainError::HfTensorMissing { key, .. } if key == QUERY),
        "{error:?}"
    );
}

#[test]
fn a_wrong_shape_names_the_key_and_both_shapes() {
    let error = import_spoilt(|hf| {
        edit_tensors(hf, |tensors| {
            tensors.get_mut(QUERY).unwrap().shape = vec![16, 64]
        })
    });
    let TrainError::HfTensorShape {
        key,
        expected,
        found,
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(
        (key.as_str(), expected.as_slice(), found.as_slice()),
        (QUERY, &[32, 32][..], &[16, 64][..])
    );
    assert!(error.to_string().contains("[16, 64]") && error.to_string().contains("[32, 32]"));
}

#[test]
fn a_wrong_dtype_names_the_key_and_the_dtype() {
    let error = import_spoilt(|hf| {
        edit_tensors(hf, |tensors| {
            let t = tensors.get_mut(QUERY).unwrap();
            t.dtype = Dtype::F64;
            t.bytes = vec![0; 32 * 32 * 8];
        })
    });
    assert!(
        matches!(&error, TrainError::HfDtype { key, dtype, .. } if key == QUERY && dtype == "F64"),
        "{error:?}"
    );
}

#[test]
fn a_truncated_file_is_a_format_error() {
    let error = import_spoilt(|hf| {
        let weights = hf.join("model.safetensors");
        let bytes = std::fs::read(&weights).unwrap();
        std::fs::write(&weights, &bytes[..bytes.len() - 100]).unwrap();
    });
    assert!(matches!(error, TrainError::HfFormat { .. }), "{error:?}");
}

#[test]
fn a_file_that_is_not_safetensors_is_a_format_error() {
    let error = import_spoilt(|hf| {
        std::fs::write(
            hf.join("model.safetensors"),
            "this is not a safetensors file at all\n",
        )
        .unwrap();
    });
    assert!(matches!(error, TrainError::HfFormat { .. }), "{error:?}");
}

fn edit_config(hf: &Path, field: &str, value: Value) {
    let path = hf.join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config[field] = value;
    std::fs::write(&path, config.to_string()).unwrap();
}

#[test]
fn a_config_that_disagrees_with_the_tensors_names_the_first_key() {
    // config.json says hidden 16, the tensors are 32 wide.
    let error = import_spoilt(|hf| edit_config(hf, "hidden_size", 16.into()));
    let TrainError::HfTensorShape {
        key,
        expected,
        found,
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(key, "bert.embeddings.word_embeddings.weight");
    assert_eq!(
        (expected.as_slice(), found.as_slice()),
        (&[64, 16][..], &[64, 32][..])
    );
}

#[test]
fn a_layer_beyond_the_config_is_unexpected() {
    let error = import_spoilt(|hf| edit_config(hf, "num_hidden_layers", 1.into()));
    assert!(
        matches!(&error, TrainError::HfTensorUnexpected { key, .. } if key.starts_with("bert.encoder.layer.1.")),
        "{error:?}"
    );
}

#[test]
fn an_unsupported_activation_is_a_config_error() {
    let error = import_spoilt(|hf| edit_config(hf, "hidden_act", "relu".into()));
    assert!(matches!(error, TrainError::HfConfig { .. }), "{error:?}");
    assert!(error.to_string().contains("hidden_act"));
}

#[test]
fn a_stored_decoder_must_be_the_word_embeddings() {
    let device = flex_device();
    let word = "bert.embeddings.word_embeddings.weight";
    let decoder = "cls.predictions.decoder.weight";
    // Stored and equal (as older checkpoints hold it): accepted, same logits.
    let tmp = tempfile::tempdir().unwrap();
    let hf = fixture_with_vocab(tmp.path());
    edit_tensors(&hf, |tensors| {
        let copy = Owned {
            dtype: Dtype::F32,
            shape: tensors[word].shape.clone(),
            bytes: tensors[word].bytes.clone(),
        };
        tensors.insert(decoder.into(), copy);
        let pooler = Owned {
            dtype: Dtype::F32,
            shape: vec![32],
            bytes: f32_bytes([0.5; 32]),
        };
        tensors.insert("bert.pooler.dense.bias".into(), pooler);
    });
    let (_, with_copy) = load_hf(&hf, &device).unwrap();
    let (_, reference) = load_hf(&fixture(), &device).unwrap();
    let cases = cases();
    assert_eq!(
        to_vec(logits(&with_copy, &cases)),
        to_vec(logits(&reference, &cases))
    );

    // Stored and different: an untied decoder, rejected.
    let error = import_spoilt(|hf| {
        edit_tensors(hf, |tensors| {
            let mut untied = tensors[word].bytes.clone();
            untied[..4].copy_from_slice(&1.0f32.to_le_bytes());
            let untied = Owned {
                dtype: Dtype::F32,
                shape: vec![64, 32],
                bytes: untied,
            };
            tensors.insert(decoder.into(), untied);
        })
    });
    assert!(
        matches!(&error, TrainError::HfTensorUnexpected { key, .. } if key == decoder),
        "{error:?}"
    );
}

/// `tests/fixtures/v0_1_export/`: a micro run trained and exported by burn-mlm 0.1 (the
/// Burn 0.21 line; the folder's README says how), with what 0.1 computed on it in
/// `expected.json`. It is the way across from 0.1 (`export-hf` there, `import-hf` here):
/// imported by this build, it must give 0.1's held-out loss and fill-mask probabilities.
#[test]
fn an_export_made_by_0_1_imports_and_gives_0_1s_loss_and_predictions() {
    let corpus = common::corpus();
    let export = corpus.with_file_name("v0_1_export");
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("expected.json")).unwrap())
            .unwrap();
    let close = |actual: f64, expected: &Value| {
        let expected = expected.as_f64().unwrap();
        assert!(
            (actual - expected).abs() <= 1e-5 * expected.abs().max(1.0),
            "{actual} vs 0.1's {expected}"
        );
    };
    let device = flex_device();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    import_run(&export, &run, &corpus, &device).unwrap();
    let trained = TrainedRun::load(&run, &device).unwrap();

    let eval = trained.evaluate(None, &device).unwrap();
    assert_eq!(eval.n_masked as u64, expected["n_masked"].as_u64().unwrap());
    close(eval.loss, &expected["loss"]);
    let text = expected["fill_mask"]["text"].as_str().unwrap();
    let predictions = trained.fill_mask(text, 3, &device).unwrap();
    let candidates = expected["fill_mask"]["candidates"].as_array().unwrap();
    assert_eq!(predictions[0].candidates.len(), candidates.len());
    for ((token, p), want) in predictions[0].candidates.iter().zip(candidates) {
        assert_eq!(token, want[0].as_str().unwrap());
        close(*p, &want[1]);
    }
}
