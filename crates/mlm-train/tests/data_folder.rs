//! Data folders (`mlm-train prepare`, `train --data`): the same command writes the same
//! bytes, an unfinished or damaged folder is never trained on, bad input leaves nothing
//! behind, a run from a folder equals a run from its corpus, and line-by-line sequences
//! are padded without the padding changing any real position's logits.

mod common;

use std::path::Path;

use burn::tensor::{Bool, Int, Tensor, TensorData};
use common::{corpus, flex_device, micro_config, path_arg};
use mlm_train::data::{
    DataFolder, Manifest, PrepareOptions, SubwordTokenizer, prepare_folder, read_corpus,
};
use mlm_train::run::report::read_metrics;
use mlm_train::{TrainConfig, TrainError};

/// The micro config's options: its vocabulary trained on the fixture corpus.
fn options(config: &TrainConfig) -> PrepareOptions {
    config.prepare_options(None)
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn prepare_is_deterministic_atomic_and_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let mut options = options(&micro_config());
    // Small shards: several per split, each of whole documents.
    options.shard_tokens = 2_000;
    let manifest = prepare_folder(&corpus(), &a, &options).unwrap();
    prepare_folder(&corpus(), &b, &options).unwrap();
    assert_eq!(files(&a), files(&b), "a rerun wrote other bytes");
    assert!(manifest.train.shards.len() > 3, "{:?}", manifest.train);
    let data = DataFolder::open(&a).unwrap();
    assert_eq!(data.train.len() as u64, manifest.train.sequences);
    assert_eq!(
        data.unigram_counts.iter().sum::<u64>(),
        manifest.train.tokens
    );
    let last = data.train.sequence(data.train.len() - 1);
    assert_eq!(
        (last[0], *last.last().unwrap()),
        (data.tokenizer.cls_id, data.tokenizer.sep_id)
    );

    // An existing folder is not overwritten.
    let error = prepare_folder(&corpus(), &a, &options).unwrap_err();
    assert!(error.to_string().contains("already exists"), "{error}");
    // What an interrupted prepare leaves (`b.partial`) is not a data folder, and a rerun
    // replaces it.
    let partial = tmp.path().join("c.partial");
    common::copy_dir(&a, &partial);
    std::fs::remove_file(partial.join("manifest.json")).unwrap();
    let error = DataFolder::open(&partial).err().unwrap().to_string();
    assert!(error.contains("not a finished data folder"), "{error}");
    prepare_folder(&corpus(), &tmp.path().join("c"), &options).unwrap();
    assert!(!partial.exists());

    // A shard changed after prepare is refused by name.
    let shard = b.join(&manifest.train.shards[1].tokens.file);
    let mut bytes = std::fs::read(&shard).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&shard, bytes).unwrap();
    let error = DataFolder::open(&b).err().unwrap().to_string();
    assert!(
        error.contains("train-00001.tokens.npy") && error.contains("sha256"),
        "{error}"
    );
}

#[test]
fn bad_corpora_leave_no_folder_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    std::fs::write(corpus.join("a.txt"), "One good sentence. And another one.").unwrap();
    let out = tmp.path().join("out");
    let options = options(&micro_config());
    let prepare = || {
        prepare_folder(&corpus, &out, &options)
            .unwrap_err()
            .to_string()
    };
    std::fs::write(
        corpus.join("b.jsonl"),
        "{\"text\": \"Fine.\"}\n{\"txt\": \"x\"}\n",
    )
    .unwrap();
    let error = prepare();
    assert!(
        error.contains("b.jsonl, line 2: no field `text`"),
        "{error}"
    );
    std::fs::write(corpus.join("b.jsonl"), "").unwrap();
    std::fs::write(corpus.join("c.txt.gz"), b"\x1f\x8b\x08\x00broken").unwrap();
    let error = prepare();
    assert!(error.contains("c.txt.gz"), "{error}");
    std::fs::remove_file(corpus.join("c.txt.gz")).unwrap();
    std::fs::write(corpus.join("a.txt"), "[Applause]\n\nCHAPTER 1.").unwrap();
    let error = prepare();
    assert!(error.contains("holds no text"), "{error}");
    let mut all_held_out = options.clone();
    all_held_out.held_out_every = 1;
    let error = prepare_folder(&corpus, &out, &all_held_out).unwrap_err();
    assert!(error.to_string().contains("at least 2"), "{error}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "only the corpus remains: {left:?}");
}

/// The files of a data folder less its manifest.
fn shards(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = files(dir);
    files.retain(|(name, _)| name != "manifest.json");
    files
}

/// Each document is prepared once: a JSON-lines file beside its gzipped copy (as a user
/// keeps both) prepares the bytes the file alone does.
#[test]
fn a_document_is_prepared_once() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let records: String = read_corpus(&corpus(), "text")
        .unwrap()
        .iter()
        .map(|d| serde_json::json!({"id": 1, "text": d.sentences.join(" ")}).to_string() + "\n")
        .collect();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gzip.write_all(records.as_bytes()).unwrap();
    let (one, both) = (tmp.path().join("one"), tmp.path().join("both"));
    for dir in [&one, &both] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("a.jsonl"), &records).unwrap();
    }
    std::fs::write(both.join("a.jsonl.gz"), gzip.finish().unwrap()).unwrap();
    let options = options(&micro_config());
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let alone = prepare_folder(&one, &a, &options).unwrap();
    let twice = prepare_folder(&both, &b, &options).unwrap();
    assert_eq!(twice.source_files, 2);
    assert_eq!(
        Manifest {
            source_files: 1,
            ..twice
        },
        alone
    );
    assert_eq!(shards(&a), shards(&b));
}

/// A corpus that would hold nothing out is refused, naming --held-out-every, which `train`
/// takes too.
#[test]
fn an_empty_held_out_split_is_refused_naming_held_out_every() {
    let tmp = tempfile::tempdir().unwrap();
    let options = options(&micro_config());
    let a = tmp.path().join("a");
    prepare_folder(&corpus(), &a, &options).unwrap();
    // Three sentences, one held out in 50: none is.
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).unwrap();
    std::fs::write(
        small.join("a.txt"),
        "One short sentence. Another one here. A third one.",
    )
    .unwrap();
    let out = tmp.path().join("c");
    let error = prepare_folder(&small, &out, &options)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(
            "the held-out split is empty: holding out one document in 50 of the corpus's 3"
        ) && error.contains("hold out more with a smaller --held-out-every"),
        "{error}"
    );
    assert!(!out.exists() && !tmp.path().join("c.partial").exists());
    // `train --held-out-every`: 1 and 50 are refused, 2 prepares (and the run then has
    // fewer sequences than a batch); not beside --data.
    let (run, small, a) = (tmp.path().join("run"), path_arg(&small), path_arg(&a));
    for (flags, expected) in [
        (vec!["--corpus", small], "the held-out split is empty"),
        (
            vec!["--corpus", small, "--held-out-every", "1"],
            "held_out_every = 1 holds out every document",
        ),
        (
            vec!["--corpus", small, "--held-out-every", "2"],
            "the training split has 2 sequences, fewer than one batch of 64",
        ),
        (
            vec!["--data", a, "--held-out-every", "3"],
            "cannot be used with",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlm-train"))
            .args(["train", "--run", path_arg(&run)])
            .args(&flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(expected),
            "{flags:?}: {stderr}"
        );
        assert!(!run.exists(), "{flags:?}");
    }
}

#[test]
fn a_run_from_a_data_folder_equals_a_run_from_its_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let config = micro_config().with_max_steps(10).with_eval_every(5);
    let device = flex_device();
    mlm_train::train(
        config.clone(),
        &tmp.path().join("corpus-run"),
        &device,
        "flex",
    )
    .unwrap();
    let folder = tmp.path().join("data");
    prepare_folder(&corpus(), &folder, &options(&config)).unwrap();
    // A run from a folder reads no corpus.
    let mut from_folder = config.clone().with_data(Some(folder.clone()));
    from_folder.corpus = "no-such-corpus".into();
    mlm_train::train(
        from_folder.clone(),
        &tmp.path().join("data-run"),
        &device,
        "flex",
    )
    .unwrap();
    let losses = |run: &str| -> Vec<(usize, String, f64)> {
        read_metrics(&tmp.path().join(run).join("metrics.csv"))
            .unwrap()
            .into_iter()
            .map(|row| (row.step, row.split, row.loss))
            .collect()
    };
    assert_eq!(losses("corpus-run"), losses("data-run"));
    assert!(
        !tmp.path().join("data-run/data").exists(),
        "the folder was not copied"
    );

    // A folder cut at another length, or made with another vocabulary, is refused before
    // anything is written.
    let run = tmp.path().join("refused");
    let longer = from_folder.clone().with_max_seq_len(48);
    let error = mlm_train::train(longer, &run, &device, "flex").unwrap_err();
    assert!(
        matches!(error, TrainError::DataFolder { .. })
            && error
                .to_string()
                .contains("built for max_seq_len 32, the run asks for 48"),
        "{error}"
    );
    let other = tmp.path().join("other.json");
    let sentences = ["a completely different little vocabulary"; 3];
    SubwordTokenizer::train(sentences.into_iter(), 40)
        .unwrap()
        .save(&other)
        .unwrap();
    let error = mlm_train::train(
        from_folder.with_tokenizer(Some(other)),
        &run,
        &device,
        "flex",
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("made with another tokenizer than --tokenizer"),
        "{error}"
    );
    assert!(!run.exists());
}

#[test]
fn line_by_line_pads_one_sentence_per_sequence_and_padding_changes_no_logit() {
    let tmp = tempfile::tempdir().unwrap();
    let config = micro_config().with_max_seq_len(64).with_line_by_line(true);
    let folder = tmp.path().join("lines");
    let manifest = prepare_folder(&corpus(), &folder, &options(&config)).unwrap();
    assert!(manifest.line_by_line);
    let data = DataFolder::open(&folder).unwrap();
    // One sequence per sentence, or several where a sentence is longer than 62 tokens.
    let expected: usize = read_corpus(&corpus(), "text")
        .unwrap()
        .iter()
        .flat_map(|d| &d.sentences)
        .map(|s| data.tokenizer.encode(s).unwrap().len().div_ceil(62))
        .sum();
    assert_eq!(data.train.len() + data.held_out.len(), expected);
    let lengths: Vec<usize> = (0..data.train.len())
        .map(|i| data.train.sequence(i).len())
        .collect();
    assert!(lengths.iter().any(|&n| n < 10) && lengths.iter().any(|&n| n > 30));

    // A short sequence padded beside a long one: its logits at every real position are
    // those it has alone.
    let device = burn::tensor::Device::flex();
    let mut model_config = config.model.clone();
    *model_config.max_position_embeddings_mut() = 64;
    *model_config.vocab_size_mut() = data.tokenizer.vocab_size();
    let model = model_config.init_seeded(3, &device);
    let model = model.as_bert().expect("a BERT");
    let short = data
        .train
        .sequence(lengths.iter().position(|&n| n < 10).unwrap());
    let long = data
        .train
        .sequence(lengths.iter().position(|&n| n > 30).unwrap());
    let ids = |rows: &[&Vec<u32>], seq: usize| {
        let mut ids = vec![i64::from(data.tokenizer.pad_id); rows.len() * seq];
        let mut padding = vec![true; rows.len() * seq];
        for (b, row) in rows.iter().enumerate() {
            for (s, &id) in row.iter().enumerate() {
                ids[b * seq + s] = i64::from(id);
                padding[b * seq + s] = false;
            }
        }
        let shape = [rows.len(), seq];
        (
            Tensor::<2, Int>::from_data(TensorData::new(ids, shape), &device),
            Tensor::<2, Int>::zeros(shape, &device),
            Tensor::<2, Bool>::from_data(TensorData::new(padding, shape), &device),
        )
    };
    let (input, segments, padding) = ids(&[&short], short.len());
    let alone = model.forward(input, segments, padding).unwrap();
    let (input, segments, padding) = ids(&[&short, &long], long.len());
    let padded = model.forward(input, segments, padding).unwrap();
    let vocab = data.tokenizer.vocab_size();
    let padded_short = padded.slice([0..1, 0..short.len(), 0..vocab]);
    let max_diff: f32 = (padded_short - alone).abs().max().into_scalar();
    assert!(max_diff < 1e-5, "padding changed a logit by {max_diff}");
}
