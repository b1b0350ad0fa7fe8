//! Continued pretraining, step-exact to transformers: `tests/fixtures/continued/bert/`,
//! `roberta/` and `xlm_roberta/` are a tiny `BertForMaskedLM`, `RobertaForMaskedLM` and
//! `XLMRobertaForMaskedLM` (SentencePiece Unigram) that `make_reference.py` trained three
//! AdamW steps in PyTorch on fixed masked batches (`bert.json`, `roberta.json`,
//! `xlm_roberta.json`); the gradients at step 1 also through the chunked head and loss. Loaded through `train --init-from`'s code path ([`Pretrained`],
//! [`TrainConfig::continue_from`], [`Trainer::from_model`]), our trainer takes the same steps:
//! the same losses, gradient norms and learning rates, the same gradients at step 1 and the
//! same weights after steps 1 and 3. Then the command itself: train, resume, export, and the
//! refusals.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use common::flex_device;
use mlm_core::{IGNORE_INDEX, LogitsMode, MaskedBatch, MaskedCrossEntropyConfig};
use mlm_train::data::to_device;
use mlm_train::model::hf::{Pretrained, save_hf};
use mlm_train::train::step::forward_loss;
use mlm_train::{ModelForMaskedLm, TrainConfig, Trainer};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/continued")
}

/// `make_reference.py`'s record for `family` (`bert`, `roberta`).
fn reference(family: &str) -> Value {
    let text = std::fs::read_to_string(fixture().join(format!("{family}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Step `step`'s batch (`reference.json`'s unpadded rows) as the masker would give it.
fn batch(reference: &Value, step: usize, rows: std::ops::Range<usize>) -> MaskedBatch {
    let field = |name: &str| -> Vec<Vec<i64>> {
        reference["steps"][step][name].as_array().unwrap()[rows.clone()]
            .iter()
            .map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_i64().unwrap())
                    .collect()
            })
            .collect()
    };
    let (input_ids, labels) = (field("input_ids"), field("labels"));
    let mut masked_positions = Vec::new();
    for (s, row) in labels.iter().enumerate() {
        masked_positions.extend(
            (0..row.len())
                .filter(|&p| row[p] != IGNORE_INDEX)
                .map(|p| (s, p)),
        );
    }
    MaskedBatch {
        input_ids: input_ids
            .iter()
            .map(|row| row.iter().map(|&id| id as u32).collect())
            .collect(),
        labels,
        spans: masked_positions
            .iter()
            .map(|&(s, p)| (s, p..p + 1))
            .collect(),
        masked_positions,
    }
}

/// `model`'s parameters by Hugging Face key in PyTorch layout, through `export-hf`'s writer.
fn by_hf_key(model: &ModelForMaskedLm, pretrained: &Pretrained) -> HashMap<String, Vec<f32>> {
    let dir = tempfile::tempdir().unwrap();
    save_hf(model, &pretrained.config, &pretrained.tokenizer, dir.path()).unwrap();
    let bytes = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(key, view)| {
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            (key, values)
        })
        .collect()
}

/// Every tensor of ours within `1e-4` of the largest entry of `expected`'s (by key).
fn assert_close(ours: &HashMap<String, Vec<f32>>, expected: &Value, what: &str) {
    let expected = expected.as_object().unwrap();
    assert_eq!(expected.len(), ours.len(), "{what}: the parameters");
    for (key, values) in expected {
        let theirs: Vec<f64> = values
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let ours = &ours[key];
        assert_eq!(ours.len(), theirs.len(), "{what} {key}");
        let scale = theirs.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let diff = ours
            .iter()
            .zip(&theirs)
            .fold(0.0f64, |m, (a, b)| m.max((f64::from(*a) - b).abs()));
        // The attention key's bias gets a gradient of 0 in exact arithmetic (softmax ignores
        // a constant added to a query's scores), so both sides hold rounding noise of ~1e-9.
        assert!(
            diff <= 1e-4 * scale + 1e-8,
            "{what} {key}: max |diff| {diff:e} against largest entry {scale:e}"
        );
    }
}

/// The model whose parameters are `grads` (zeros where a parameter got none).
fn gradients_as_model(model: &ModelForMaskedLm, grads: GradientsParams) -> ModelForMaskedLm {
    struct Grads(GradientsParams);
    impl ModuleMapper for Grads {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let grad = self.0.remove::<D>(param.id);
            param.map(|value| grad.unwrap_or_else(|| value.zeros_like()))
        }
    }
    model.clone().map(&mut Grads(grads))
}

#[test]
fn three_steps_from_a_bert_checkpoint_match_pytorch() {
    three_steps_match_pytorch("bert");
}

#[test]
fn three_steps_from_a_roberta_checkpoint_match_pytorch() {
    three_steps_match_pytorch("roberta");
}

#[test]
fn three_steps_from_an_xlm_roberta_checkpoint_match_pytorch() {
    three_steps_match_pytorch("xlm_roberta");
}

#[test]
fn three_steps_from_a_modernbert_checkpoint_match_pytorch() {
    three_steps_match_pytorch("modernbert");
}

/// The fixture `family` through `--init-from`'s code path, step by step against PyTorch.
fn three_steps_match_pytorch(family: &str) {
    let (reference, device) = (reference(family), flex_device());
    let pretrained = Pretrained::read(&fixture().join(family)).unwrap();
    let mut config = TrainConfig::new(PathBuf::new())
        .with_learning_rate(5e-3)
        .with_warmup_steps(2)
        .with_max_steps(4)
        .with_weight_decay(0.1)
        .with_max_grad_norm(1.0)
        .with_parallel_shards(2);
    config.max_seq_len = 12;
    config.continue_from(&pretrained).unwrap();
    let model = pretrained.load_model(&device).unwrap();

    // Step 1's gradient of the mean loss, every parameter, the logits whole and chunked.
    let whole = batch(&reference, 0, 0..4);
    let n_masked = whole.masked_positions.len() as f64;
    let (pad, vocab_size) = (pretrained.tokenizer.pad_id, pretrained.config.vocab_size());
    for logits in [LogitsMode::Whole, LogitsMode::Chunked { rows: 3 }] {
        let on_device = to_device(&whole, pad, vocab_size, &device).unwrap();
        let loss_fn = MaskedCrossEntropyConfig::new()
            .with_logits(logits)
            .init()
            .unwrap();
        let out = forward_loss(&model, on_device, &loss_fn).unwrap();
        let grads = GradientsParams::from_grads((out.loss_sum / n_masked).backward(), &model);
        let grads = by_hf_key(&gradients_as_model(&model, grads), &pretrained);
        let what = format!("gradient at step 1, logits {logits:?}");
        assert_close(&grads, &reference["gradients_step_1"], &what);
    }

    // Three steps of the trainer, each batch in two shards on their own threads.
    let mut trainer = Trainer::from_model(&config, model, &pretrained.tokenizer, &device).unwrap();
    for step in 0..3 {
        let shards = vec![batch(&reference, step, 0..2), batch(&reference, step, 2..4)];
        let out = trainer.step_masked(shards).unwrap();
        let expected = &reference["steps"][step];
        let lr = expected["learning_rate"].as_f64().unwrap();
        assert!(
            (out.learning_rate - lr).abs() <= 1e-12,
            "step {}: lr {}",
            step + 1,
            out.learning_rate
        );
        let metrics = trainer.take_metrics().unwrap();
        for (what, ours) in [
            ("loss", metrics[0].loss),
            ("grad_norm", metrics[0].grad_norm),
        ] {
            let theirs = expected[what].as_f64().unwrap();
            assert!(
                (ours - theirs).abs() <= 1e-5 * theirs.abs(),
                "step {}: {what} {ours} against PyTorch's {theirs}",
                step + 1
            );
        }
        if step == 0 || step == 2 {
            let weights = by_hf_key(trainer.model(), &pretrained);
            let key = format!("weights_step_{}", step + 1);
            assert_close(&weights, &reference[&key], &key);
        }
    }
}

const BIN: &str = env!("CARGO_BIN_EXE_mlm-train");

/// A corpus in the fixture's 45-token vocabulary: 120 documents of four sentences.
fn corpus_in_vocabulary(dir: &Path) -> PathBuf {
    let words: Vec<&str> = std::fs::read_to_string(fixture().join("bert/vocab.txt"))
        .unwrap()
        .lines()
        .skip(5)
        .filter(|w| !w.starts_with("##"))
        .map(|w| Box::leak(w.to_string().into_boxed_str()) as &str)
        .collect();
    let corpus = dir.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    for d in 0..120 {
        let sentence = |s: usize| {
            let n = 5 + (d + s) % 4;
            let picked: Vec<&str> = (0..n)
                .map(|j| words[(d * 7 + s * 11 + j * 3) % words.len()])
                .collect();
            format!("{}.", picked.join(" "))
        };
        let text: Vec<String> = (0..4).map(sentence).collect();
        std::fs::write(corpus.join(format!("doc-{d:03}.txt")), text.join(" ")).unwrap();
    }
    corpus
}

/// `mlm-train train --init-from HF --corpus CORPUS --run RUN` with a 4-step schedule on
/// sequences of 16 tokens, then `extra`.
fn train_from(hf: &Path, corpus: &Path, run: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .args(["train", "--init-from"])
        .arg(hf)
        .arg("--corpus")
        .arg(corpus)
        .arg("--run")
        .arg(run)
        .args([
            "--max-steps",
            "4",
            "--warmup-steps",
            "1",
            "--batch-size",
            "8",
        ])
        .args(["--eval-every", "2", "--checkpoint-every", "2"])
        .args(match extra.contains(&"--max-seq-len") {
            true => extra.to_vec(),
            false => [&["--max-seq-len", "16"], extra].concat(),
        })
        .output()
        .unwrap()
}

fn succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn train_init_from_bert_continues_resumes_and_exports_a_bert() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus_in_vocabulary(tmp.path());
    continue_resume_export(tmp.path(), "bert", &corpus, &[]);
}

#[test]
fn train_init_from_roberta_with_span_masking_continues_resumes_and_exports_a_roberta() {
    let export = Export {
        class: "RobertaForMaskedLM",
        tokenizer_class: "RobertaTokenizer",
        start_end: (0, 2),
        mask: "<mask>",
    };
    continue_with_span_masking_and_export("roberta", &export);
}

#[test]
fn train_init_from_xlm_roberta_with_span_masking_continues_resumes_and_exports_an_xlm_roberta() {
    let export = Export {
        class: "XLMRobertaForMaskedLM",
        tokenizer_class: "XLMRobertaTokenizer",
        start_end: (0, 2),
        mask: "<mask>",
    };
    continue_with_span_masking_and_export("xlm_roberta", &export);
}

#[test]
fn train_init_from_modernbert_with_span_masking_continues_resumes_and_exports_a_modernbert() {
    // Byte-level BPE with BERT's specials, appended after the pieces.
    let export = Export {
        class: "ModernBertForMaskedLM",
        tokenizer_class: "PreTrainedTokenizerFast",
        start_end: (296, 297),
        mask: "[MASK]",
    };
    continue_with_span_masking_and_export("modernbert", &export);
}

/// What an export of a fixture family names: its class, tokenizer class, start and end
/// token ids, and mask token.
struct Export {
    class: &'static str,
    tokenizer_class: &'static str,
    start_end: (u64, u64),
    mask: &'static str,
}

/// [`continue_resume_export`] of the fixture `family` on `paragraphs.txt` with span masking
/// (its tokenizer's word starts, `Ġ` or `▁`): the export names what `export` says.
fn continue_with_span_masking_and_export(family: &str, export: &Export) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let text = std::fs::read_to_string(fixture().join("paragraphs.txt")).unwrap();
    let paragraphs: Vec<&str> = text.split("\n\n").collect();
    for d in 0..120 {
        let document = paragraphs[d % paragraphs.len()];
        std::fs::write(corpus.join(format!("doc-{d:03}.txt")), document).unwrap();
    }
    let hf = continue_resume_export(tmp.path(), family, &corpus, &["--masking", "span"]);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], export.class);
    let (start, end) = export.start_end;
    assert_eq!(
        (
            config["bos_token_id"].as_u64(),
            config["eos_token_id"].as_u64()
        ),
        (Some(start), Some(end))
    );
    let tokenizer: Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(tokenizer["tokenizer_class"], export.tokenizer_class);
    assert_eq!(tokenizer["mask_token"], export.mask);
}

/// `train --init-from` the fixture `family` on `corpus` (4 steps, then `extra`), `--resume`
/// to 6 and `export-hf`: the run keeps the checkpoint's model and logs its held-out loss at
/// step 0; the export is the same family with every tensor trained. Returns the export.
fn continue_resume_export(tmp: &Path, family: &str, corpus: &Path, extra: &[&str]) -> PathBuf {
    let (checkpoint, run) = (fixture().join(family), tmp.join("run"));
    succeeded(&train_from(&checkpoint, corpus, &run, extra));

    let config: TrainConfig = mlm_train::RunDir(run.clone()).load_config().unwrap();
    let pretrained = Pretrained::read(&checkpoint).unwrap();
    assert_eq!(
        config.model, pretrained.config,
        "the checkpoint's model, its positions kept"
    );
    assert_eq!(
        config.init_from,
        Some(std::fs::canonicalize(&checkpoint).unwrap())
    );
    let metrics = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    assert!(
        metrics.lines().nth(1).unwrap().starts_with("0,valid,"),
        "{metrics}"
    );

    // A resume continues the optimizer state it saved; the export is the same family.
    let resumed = std::process::Command::new(BIN)
        .args(["train", "--resume"])
        .arg(&run)
        .args(["--max-steps", "6"])
        .output()
        .unwrap();
    succeeded(&resumed);
    let hf = tmp.join("hf");
    let export = std::process::Command::new(BIN)
        .args(["export-hf", "--run"])
        .arg(&run)
        .arg(&hf)
        .output()
        .unwrap();
    succeeded(&export);
    // export-hf never writes into a run folder (the run's own config.json would go), and a
    // Hugging Face folder given as a run says to import it.
    let command = |args: &[&str], dir: &Path, out: Option<&Path>| {
        let mut command = std::process::Command::new(BIN);
        command.args(args).arg(dir);
        command.args(out).output().unwrap()
    };
    let run_config = std::fs::read(run.join("config.json")).unwrap();
    let into_run = command(&["export-hf", "--run"], &run, Some(&run));
    let stderr = String::from_utf8_lossy(&into_run.stderr);
    assert!(!into_run.status.success() && stderr.contains("is an mlm-train run folder"));
    assert_eq!(std::fs::read(run.join("config.json")).unwrap(), run_config);
    let hf_as_run = command(&["eval", "--run"], &hf, None);
    let stderr = String::from_utf8_lossy(&hf_as_run.stderr);
    assert!(
        stderr.contains("is a Hugging Face model folder, not a run")
            && stderr.contains("import-hf")
    );
    let exported = Pretrained::read(&hf).unwrap();
    assert_eq!(exported.config, pretrained.config);
    assert_eq!(
        exported.tokenizer.vocab().unwrap(),
        pretrained.tokenizer.vocab().unwrap()
    );
    let device = flex_device();
    let (before, after) = (
        by_hf_key(&pretrained.load_model(&device).unwrap(), &pretrained),
        by_hf_key(&exported.load_model(&device).unwrap(), &pretrained),
    );
    assert_eq!(before.len(), after.len());
    assert!(
        before.iter().all(|(key, values)| after[key] != *values),
        "every tensor trained"
    );
    hf
}

/// A copy of the fixture checkpoint `family` in `dir`, changed by `change`.
fn broken_copy(family: &str, dir: &Path, change: impl FnOnce(&Path)) -> PathBuf {
    let hf = dir.join("broken");
    std::fs::create_dir_all(&hf).unwrap();
    for entry in std::fs::read_dir(fixture().join(family)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, hf.join(path.file_name().unwrap())).unwrap();
    }
    change(&hf);
    hf
}

/// `config.json` with `field` set to `value`.
fn set_config(hf: &Path, field: &str, value: Value) {
    let path = hf.join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config[field] = value;
    std::fs::write(&path, config.to_string()).unwrap();
}

/// `vocab.txt` with its lines changed by `change`.
fn edit_vocab(hf: &Path, change: impl FnOnce(&mut Vec<String>)) {
    let path = hf.join("vocab.txt");
    let mut lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    change(&mut lines);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
}

/// `model.safetensors` with the tensor `key` dropped, or stored as F16 with `as_f16`.
fn edit_weights(hf: &Path, key: &str, as_f16: bool) {
    let path = hf.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let shape = file.tensor(key).unwrap().shape().to_vec();
    let f16_bytes = vec![0u8; 2 * shape.iter().product::<usize>()];
    let mut tensors = Vec::new();
    for (name, view) in file.tensors() {
        if name != key {
            tensors.push((name, view));
        } else if as_f16 {
            let f16 = TensorView::new(Dtype::F16, shape.clone(), &f16_bytes).unwrap();
            tensors.push((name, f16));
        }
    }
    std::fs::write(&path, safetensors::serialize(tensors, None).unwrap()).unwrap();
}

#[test]
fn a_checkpoint_that_does_not_fit_is_refused_in_one_line_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus_in_vocabulary(tmp.path());
    let bpe = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
        "normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,
        "model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,
        "end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
        "vocab":{"a":0},"merges":[]}}"#;
    let cases: Vec<RefusalCase> = vec![
        (
            "no config.json",
            Box::new(|hf| std::fs::remove_file(hf.join("config.json")).unwrap()),
            &[],
            vec!["config.json", "not a Hugging Face model folder"],
        ),
        (
            "an mlm-train run folder",
            Box::new(|hf| {
                std::fs::remove_file(hf.join("model.safetensors")).unwrap();
                std::fs::create_dir(hf.join("checkpoints")).unwrap();
            }),
            &[],
            vec![
                "is an mlm-train run folder",
                "train --resume",
                "export-hf --run",
            ],
        ),
        (
            "PyTorch weights only",
            Box::new(|hf| {
                std::fs::rename(hf.join("model.safetensors"), hf.join("pytorch_model.bin")).unwrap()
            }),
            &[],
            vec![
                "no model.safetensors (only PyTorch's pytorch_model.bin)",
                "safe_serialization",
            ],
        ),
        (
            "a BERT tokenizer for a RoBERTa",
            Box::new(|hf| set_config(hf, "model_type", "roberta".into())),
            &[],
            vec!["vocab.txt", "WordPiece", "roberta"],
        ),
        (
            "DistilBERT",
            Box::new(|hf| set_config(hf, "model_type", "distilbert".into())),
            &[],
            vec!["model_type", "distilbert", "roberta"],
        ),
        (
            "ReLU",
            Box::new(|hf| set_config(hf, "hidden_act", "relu".into())),
            &[],
            vec!["hidden_act", "relu"],
        ),
        (
            "a smaller vocabulary",
            Box::new(|hf| {
                edit_vocab(hf, |v| {
                    v.pop();
                })
            }),
            &[],
            vec!["45", "44"],
        ),
        (
            "no mask token",
            Box::new(|hf| edit_vocab(hf, |v| v[4] = "[MASKED]".into())),
            &[],
            vec!["[MASK]"],
        ),
        (
            "a BPE tokenizer.json",
            Box::new(move |hf| std::fs::write(hf.join("tokenizer.json"), bpe).unwrap()),
            &[],
            vec!["BPE", "WordPiece"],
        ),
        (
            "a missing tensor",
            Box::new(|hf| edit_weights(hf, "cls.predictions.bias", false)),
            &[],
            vec!["cls.predictions.bias", "missing"],
        ),
        (
            "an F16 tensor",
            Box::new(|hf| edit_weights(hf, "bert.embeddings.LayerNorm.bias", true)),
            &[],
            vec!["bert.embeddings.LayerNorm.bias", "F16"],
        ),
        (
            "max_seq_len above the positions",
            Box::new(|_| {}),
            &["--max-seq-len", "30"],
            vec!["max_seq_len", "30", "24"],
        ),
        (
            "--vocab-size beside it",
            Box::new(|_| {}),
            &["--vocab-size", "100"],
            vec!["--init-from", "--vocab-size"],
        ),
        (
            "--hidden-size beside it",
            Box::new(|_| {}),
            &["--hidden-size", "64"],
            vec!["--init-from", "--hidden-size"],
        ),
    ];
    assert_refused("bert", tmp.path(), &corpus, cases);
}

/// `xlm_roberta/tokenizer.json` with `change` made to its JSON.
fn edit_tokenizer(hf: &Path, change: impl FnOnce(&mut Value)) {
    let path = hf.join("tokenizer.json");
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    change(&mut json);
    std::fs::write(&path, json.to_string()).unwrap();
}

#[test]
fn an_xlm_roberta_tokenizer_that_cannot_serve_is_refused_in_one_line_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus_in_vocabulary(tmp.path());
    let cases: Vec<RefusalCase> = vec![
        (
            "Unigram pieces without \u{2581}, span masking",
            Box::new(|hf| {
                edit_tokenizer(hf, |json| {
                    for piece in json["model"]["vocab"].as_array_mut().unwrap() {
                        let text = piece[0].as_str().unwrap().replace('\u{2581}', "_");
                        piece[0] = text.into();
                    }
                })
            }),
            &["--masking", "span"],
            vec!["Unigram", "\u{2581}", "--masking token"],
        ),
        (
            "a WordLevel tokenizer",
            Box::new(|hf| {
                edit_tokenizer(hf, |json| {
                    json["model"] = serde_json::json!({
                        "type": "WordLevel", "vocab": {"<unk>": 0}, "unk_token": "<unk>"
                    });
                })
            }),
            &[],
            vec!["WordLevel", "Unigram"],
        ),
        (
            "a smaller embedding",
            Box::new(|hf| set_config(hf, "vocab_size", 300.into())),
            &[],
            vec!["vocab_size", "300", "301"],
        ),
        (
            "a base model without its head",
            Box::new(|hf| {
                let path = hf.join("model.safetensors");
                let bytes = std::fs::read(&path).unwrap();
                let file = SafeTensors::deserialize(&bytes).unwrap();
                let base: Vec<(String, TensorView)> = file
                    .tensors()
                    .into_iter()
                    .filter_map(|(name, view)| Some((name.strip_prefix("roberta.")?.into(), view)))
                    .collect();
                std::fs::write(&path, safetensors::serialize(base, None).unwrap()).unwrap();
            }),
            &[],
            vec![
                "is missing",
                "a base model saved without its masked-LM head",
            ],
        ),
    ];
    assert_refused("xlm_roberta", tmp.path(), &corpus, cases);
}

#[test]
fn a_modernbert_folder_that_cannot_serve_is_refused_in_one_line_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus_in_vocabulary(tmp.path());
    let rope_type = |hf: &Path| {
        let rope = serde_json::json!({
            "full_attention": {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 2.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        });
        set_config(hf, "rope_parameters", rope);
    };
    let cases: Vec<RefusalCase> = vec![
        (
            "an odd local_attention",
            Box::new(|hf| set_config(hf, "local_attention", 5.into())),
            &[],
            vec!["local_attention", "5", "even"],
        ),
        (
            "a window longer than the positions",
            Box::new(|hf| set_config(hf, "local_attention", 30.into())),
            &[],
            vec!["local_attention", "30", "max_position_embeddings (24)"],
        ),
        (
            "scaled rotary positions",
            Box::new(rope_type),
            &[],
            vec![
                "rope_parameters.full_attention.rope_type",
                "yarn",
                "default",
            ],
        ),
        (
            "another activation",
            Box::new(|hf| set_config(hf, "hidden_activation", "silu".into())),
            &[],
            vec!["hidden_activation", "silu", "gelu"],
        ),
        (
            "sequences longer than the positions",
            Box::new(|_| {}),
            &["--max-seq-len", "32"],
            vec!["max_seq_len", "32", "max_position_embeddings = 24"],
        ),
        (
            "a tokenizer without a mask token",
            Box::new(|hf| {
                edit_tokenizer(hf, |json| {
                    let added = json["added_tokens"].as_array_mut().unwrap();
                    added.retain(|token| token["content"] != "[MASK]");
                })
            }),
            &[],
            vec!["[MASK]", "<mask>"],
        ),
        (
            "an architecture beside the checkpoint",
            Box::new(|_| {}),
            &["--architecture", "modernbert"],
            vec!["architecture", "--init-from", "fixes the architecture"],
        ),
        (
            "no Wqkv",
            Box::new(|hf| edit_weights(hf, "model.layers.1.attn.Wqkv.weight", false)),
            &[],
            vec!["model.layers.1.attn.Wqkv.weight", "is missing"],
        ),
        (
            "a Wi of intermediate_size rows",
            Box::new(|hf| resize_weights(hf, "model.layers.2.mlp.Wi.weight", &[32, 16])),
            &[],
            vec!["model.layers.2.mlp.Wi.weight", "[64, 16]", "[32, 16]"],
        ),
    ];
    assert_refused("modernbert", tmp.path(), &corpus, cases);
}

/// `model.safetensors` with the tensor `key` replaced by zeros of `shape`.
fn resize_weights(hf: &Path, key: &str, shape: &[usize]) {
    let path = hf.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let zeros = vec![0u8; 4 * shape.iter().product::<usize>()];
    let tensors: Vec<(String, TensorView)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| match name == key {
            true => (
                name,
                TensorView::new(Dtype::F32, shape.to_vec(), &zeros).unwrap(),
            ),
            false => (name, view),
        })
        .collect();
    std::fs::write(&path, safetensors::serialize(tensors, None).unwrap()).unwrap();
}

/// A refusal case: what it is, how it breaks the fixture, the flags beside it, and what the
/// first line of stderr names.
type RefusalCase<'a> = (&'a str, Box<dyn FnOnce(&Path)>, &'a [&'a str], Vec<&'a str>);

/// Each case's copy of the fixture `family` refused by `train --init-from` on `corpus`: a
/// failure whose first line is an error naming every expected part, and no run folder.
fn assert_refused(family: &str, tmp: &Path, corpus: &Path, cases: Vec<RefusalCase>) {
    for (what, change, flags, expected) in cases {
        let case = tempfile::tempdir_in(tmp).unwrap();
        let hf = broken_copy(family, case.path(), change);
        let run = case.path().join("run");
        let out = train_from(&hf, corpus, &run, flags);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or_default();
        assert!(!out.status.success(), "{what}: accepted");
        assert!(
            expected.iter().all(|e| first.contains(e)),
            "{what}: {stderr}"
        );
        assert!(first.starts_with("error"), "{what}: {stderr}");
        assert!(!run.exists(), "{what}: left {}", run.display());
    }
}

#[test]
fn a_roberta_folder_with_vocab_json_and_merges_txt_reads_as_its_tokenizer_json() {
    let tmp = tempfile::tempdir().unwrap();
    let files = tmp.path().join("roberta");
    std::fs::create_dir_all(&files).unwrap();
    for name in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture().join("roberta").join(name), files.join(name)).unwrap();
    }
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture().join("roberta/tokenizer.json")).unwrap(),
    )
    .unwrap();
    std::fs::write(files.join("vocab.json"), json["model"]["vocab"].to_string()).unwrap();
    let merges: Vec<String> = json["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            format!(
                "{} {}",
                pair[0].as_str().unwrap(),
                pair[1].as_str().unwrap()
            )
        })
        .collect();
    let merges = format!("#version: 0.2\n{}\n", merges.join("\n"));
    std::fs::write(files.join("merges.txt"), merges).unwrap();

    let (theirs, ours) = (
        Pretrained::read(&fixture().join("roberta")).unwrap(),
        Pretrained::read(&files).unwrap(),
    );
    assert_eq!(ours.tokenizer_file, files.join("vocab.json"));
    assert_eq!(
        ours.tokenizer.vocab().unwrap(),
        theirs.tokenizer.vocab().unwrap()
    );
    let text = std::fs::read_to_string(fixture().join("paragraphs.txt")).unwrap();
    let (a, b) = (&theirs.tokenizer, &ours.tokenizer);
    assert_eq!(a.encode(&text).unwrap(), b.encode(&text).unwrap());
    assert_eq!(
        (a.cls_id, a.sep_id, a.pad_id, a.mask_id, &a.special_ids),
        (b.cls_id, b.sep_id, b.pad_id, b.mask_id, &b.special_ids)
    );
}

#[test]
fn a_data_folder_longer_than_the_checkpoints_positions_says_to_prepare_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, data) = (corpus_in_vocabulary(tmp.path()), tmp.path().join("data"));
    let bert = fixture().join("bert");
    let prepare = std::process::Command::new(BIN)
        .args(["prepare", "--max-seq-len", "64", "--corpus"])
        .arg(&corpus)
        .arg("--out")
        .arg(&data)
        .arg("--tokenizer")
        .arg(bert.join("vocab.txt"))
        .output()
        .unwrap();
    succeeded(&prepare);
    let run = tmp.path().join("run");
    let out = std::process::Command::new(BIN)
        .args(["train", "--max-seq-len", "16", "--init-from"])
        .arg(&bert)
        .arg("--data")
        .arg(&data)
        .arg("--run")
        .arg(&run)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && !run.exists(), "{stderr}");
    assert!(
        stderr.contains(
            "built for max_seq_len 64, the run asks for 16: the checkpoint holds \
                         sequences of up to 24: prepare the corpus again with --max-seq-len 16"
        ),
        "{stderr}"
    );
}
