//! Settings as JSON: a partial file over the defaults (`--config`), and the `config.json` of
//! a run, earlier runs' included.

use std::path::Path;

use super::{DEFAULT_LOG_EVERY, TrainConfig, WeightDecayOn};
use crate::data::Masking;
use crate::error::{ConfigError, TrainError};
use crate::files::read_json;

/// The model's settings a continued run (`init_from`) may change: its dropout. The rest is
/// the checkpoint's architecture.
const CONTINUED_MODEL_KEYS: [&str; 2] = ["hidden_dropout_prob", "attention_probs_dropout_prob"];

/// `defaults` with the fields that the JSON file at `path` gives replaced, at any depth
/// (`{"max_steps": 300, "model": {"hidden_size": 256}}` changes those two settings only).
/// Under `defaults.init_from` the model, tokenizer and vocabulary are the checkpoint's
/// ([`TrainConfig::continue_from`]): the file may change the model's dropout, nothing else
/// of them, unless it is a run's whole `config.json` (then they give way to the
/// checkpoint's).
///
/// # Errors
/// [`ConfigError::UnknownField`] / [`ConfigError::File`] naming `path` for a field that
/// `TrainConfig` does not have or a value of the wrong type; [`ConfigError::Path`] naming
/// `path` and the key for a key the checkpoint fixes under `init_from`;
/// [`TrainError::Json`] naming `path` for a file that is not JSON; [`TrainError::Io`] if it
/// cannot be read.
pub fn config_with_overrides(
    path: &Path,
    defaults: &TrainConfig,
) -> Result<TrainConfig, TrainError> {
    let mut overrides: serde_json::Value = read_json(path)?;
    let mut value = serde_json::to_value(defaults).expect("a TrainConfig is JSON");
    if defaults.init_from.is_some() {
        continued_overrides(path, &mut overrides, &value["model"])?;
    }
    merge(&mut value, overrides, "").map_err(|field| ConfigError::UnknownField {
        path: path.to_path_buf(),
        field,
    })?;
    config_from_json(value, path)
}

/// Copies `overrides` into `base`; `at` is `base`'s dotted name, for errors. Returns the
/// dotted name of a key that `base` does not have.
fn merge(
    base: &mut serde_json::Value,
    overrides: serde_json::Value,
    at: &str,
) -> Result<(), String> {
    match (base, overrides) {
        (serde_json::Value::Object(base), serde_json::Value::Object(overrides)) => {
            for (key, value) in overrides {
                let name = match at {
                    "" => key.clone(),
                    _ => format!("{at}.{key}"),
                };
                let Some(slot) = base.get_mut(&key) else {
                    return Err(name);
                };
                merge(slot, value, &name)?;
            }
            Ok(())
        }
        (base, value) => {
            *base = value;
            Ok(())
        }
    }
}

/// The keys of a continued run's settings that its checkpoint fixes, besides the model's.
const CHECKPOINT_KEYS: [&str; 3] = ["init_from", "tokenizer", "vocab_size"];

/// `overrides` of a continued run (`init_from`), whose checkpoint fixes the tokenizer, the
/// vocabulary and the model but its dropout (as `train --init-from` refuses `--tokenizer`,
/// `--vocab-size` and `--hidden-size`). A file that names one of them is refused by name;
/// a run's whole `config.json` (every key of `model`, as `defaults_model` has them) keeps
/// its other settings, and its model, tokenizer and vocabulary give way to the
/// checkpoint's, as a line on stderr says.
///
/// # Errors
/// [`ConfigError::Path`] naming `path` and the first such key.
fn continued_overrides(
    path: &Path,
    overrides: &mut serde_json::Value,
    defaults_model: &serde_json::Value,
) -> Result<(), ConfigError> {
    let Some(fields) = overrides.as_object_mut() else {
        return Ok(());
    };
    let model = fields.get("model").and_then(serde_json::Value::as_object);
    let whole = match (model, defaults_model.as_object()) {
        (Some(model), Some(keys)) => keys.keys().all(|key| model.contains_key(key)),
        _ => false,
    };
    if whole {
        for key in CHECKPOINT_KEYS.into_iter().chain(["model"]) {
            fields.remove(key);
        }
        eprintln!(
            "note: {} is a whole configuration; with --init-from its model, tokenizer and \
             vocab_size are the checkpoint's",
            path.display()
        );
        return Ok(());
    }
    let model_keys = model
        .into_iter()
        .flat_map(|model| model.keys())
        .filter(|key| !CONTINUED_MODEL_KEYS.contains(&key.as_str()))
        .map(|key| format!("model.{key}"));
    let top = CHECKPOINT_KEYS
        .into_iter()
        .filter(|key| fields.contains_key(*key))
        .map(String::from);
    match top.chain(model_keys).next() {
        None => Ok(()),
        Some(key) => Err(ConfigError::path(
            path,
            format!(
                "sets {key}, but with --init-from the checkpoint fixes it: leave it out (of \
                 the model, only its dropout, {}, may be changed)",
                CONTINUED_MODEL_KEYS.join(" and ")
            ),
        )),
    }
}

/// The `TrainConfig` that `value`, read from the file at `path`, describes.
///
/// # Errors
/// [`ConfigError::File`] naming `path` and the field for a value of the wrong type or a
/// missing field (`max_steps: invalid type: string "20", expected usize`).
pub fn config_from_json(value: serde_json::Value, path: &Path) -> Result<TrainConfig, TrainError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        TrainError::Config(ConfigError::File {
            path: path.to_path_buf(),
            field,
            reason: e.into_inner().to_string(),
        })
    })
}

/// The settings of a run's `config.json` at `path`, whose JSON is `value`. A run made
/// before a setting existed was made without it, and reads as it was made: a model flag
/// (`sinusoidal_positions`, `local_attention_init`) as `false`, the BERT family with
/// positions from 0; one process; no data folder nor checkpoint; packed sequences of the
/// `text` field; token masking; decay on every parameter; and `log_every` at its default (it
/// changes when metrics are read, never what they are). The masking rates of a run made
/// before the replacement shares existed read as BERT's ([`mlm_core::MaskRates`]'s serde
/// default).
///
/// # Errors
/// As [`config_from_json`].
pub fn saved_config(mut value: serde_json::Value, path: &Path) -> Result<TrainConfig, TrainError> {
    if let Some(model) = value.get_mut("model").and_then(|m| m.as_object_mut()) {
        for flag in ["sinusoidal_positions", "local_attention_init"] {
            model.entry(flag).or_insert(false.into());
        }
        model.entry("family").or_insert("bert".into());
        model.entry("position_offset").or_insert(0.into());
    }
    if let Some(config) = value.as_object_mut() {
        config.entry("world_size").or_insert(1.into());
        config.entry("line_by_line").or_insert(false.into());
        config.entry("text_field").or_insert("text".into());
        config
            .entry("log_every")
            .or_insert(DEFAULT_LOG_EVERY.into());
        config
            .entry("masking")
            .or_insert(Masking::Token.to_string().into());
        config
            .entry("weight_decay_on")
            .or_insert(WeightDecayOn::All.to_string().into());
    }
    config_from_json(value, path)
}

#[cfg(test)]
mod tests {
    use mlm_core::MaskRates;

    use super::*;

    #[test]
    fn a_config_from_before_time_budgets_reads_as_a_run_by_step_count() {
        let mut value = serde_json::to_value(TrainConfig::new("corpus".into())).unwrap();
        value
            .as_object_mut()
            .unwrap()
            .remove("time_budget_seconds")
            .unwrap();
        let config = config_from_json(value, Path::new("config.json")).unwrap();
        assert_eq!(config.time_budget_seconds, None);
    }

    /// The settings that a run made before the schedules existed reads as (the schedules
    /// it had): the linear learning rate, a fixed masking rate.
    const UNSCHEDULED: [(&str, &str); 5] = [
        ("lr_schedule", r#""linear""#),
        ("lr_decay_fraction", "0.1"),
        ("lr_decay_shape", r#""one_minus_sqrt""#),
        ("mlm_probability_final", "null"),
        ("mlm_probability_schedule", r#""linear""#),
    ];

    /// The rates sit at the top level of `config.json`, flattened, as before they were one
    /// struct: a 0.2 run's and a 0.3 run's files, as the code before wrote them
    /// (`tests/fixtures/earlier_runs`), read back to their rates and write back the same
    /// JSON with the schedules they had ([`UNSCHEDULED`]); a file from before the
    /// replacement shares existed reads as 80/10/10.
    #[test]
    fn config_files_of_earlier_runs_read_their_masking_rates() {
        let earlier = [
            (
                include_str!("../../tests/fixtures/earlier_runs/mlm-0.2/config.json"),
                MaskRates::bert(0.2),
            ),
            (
                include_str!("../../tests/fixtures/earlier_runs/mlm-0.3/config.json"),
                MaskRates {
                    mlm_probability: 0.3,
                    mask_replace_prob: 1.0,
                    random_replace_prob: 0.0,
                },
            ),
        ];
        for (file, rates) in earlier {
            let value: serde_json::Value = serde_json::from_str(file).unwrap();
            let read = saved_config(value.clone(), Path::new("config.json")).unwrap();
            assert_eq!(read.mask_rates, rates);
            let mut written = serde_json::to_value(&read).unwrap();
            for (key, default) in UNSCHEDULED {
                let was = written.as_object_mut().unwrap().remove(key);
                assert_eq!(was.unwrap().to_string(), default, "{key}");
            }
            assert_eq!(written, value, "written back alike");
        }
        let mut old = serde_json::to_value(TrainConfig::new("corpus".into())).unwrap();
        let fields = old.as_object_mut().unwrap();
        fields.insert("mlm_probability".into(), 0.2.into());
        fields.remove("mask_replace_prob");
        fields.remove("random_replace_prob");
        let read = saved_config(old, Path::new("config.json")).unwrap();
        assert_eq!(read.mask_rates, MaskRates::bert(0.2));
    }

    /// The schedules' settings round-trip through `config.json`, and a schedule that does
    /// not exist is refused naming the field and the schedules that do.
    #[test]
    fn schedules_round_trip_and_an_unknown_one_is_named() {
        use crate::config::{LrSchedule, ScheduleShape};
        let scheduled = TrainConfig::new("corpus".into())
            .with_lr_schedule(LrSchedule::WarmupStableDecay)
            .with_lr_decay_fraction(0.2)
            .with_lr_decay_shape(ScheduleShape::Cosine)
            .with_mlm_probability(0.3)
            .with_mlm_probability_final(Some(0.15))
            .with_mlm_probability_schedule(ScheduleShape::Cosine);
        let value = serde_json::to_value(&scheduled).unwrap();
        assert_eq!(value["lr_schedule"], "warmup_stable_decay");
        assert_eq!(value["mlm_probability_final"], 0.15);
        let read = saved_config(value.clone(), Path::new("config.json")).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), value);
        for (key, bad, expected) in [
            (
                "mlm_probability_schedule",
                "exponential",
                "`linear`, `cosine`",
            ),
            ("lr_schedule", "cosine", "`linear` or `warmup_stable_decay`"),
            ("lr_decay_shape", "1-sqrt", "`one_minus_sqrt`"),
        ] {
            let mut value = value.clone();
            value[key] = bad.into();
            let error = saved_config(value, Path::new("config.json"))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("config.json")
                    && error.contains(key)
                    && error.contains(&format!("unknown variant `{bad}`"))
                    && error.contains(expected),
                "{error}"
            );
        }
    }

    /// Under `init_from` the checkpoint fixes the model, the tokenizer and the vocabulary:
    /// `--config` may change the model's dropout (honoured), nothing else of them (refused by
    /// name, as the flags are), and any other setting.
    #[test]
    fn a_continued_run_takes_only_dropout_of_the_model_from_a_config_file() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("continued.json");
        let continued = TrainConfig::new("corpus".into()).with_init_from(Some("ckpt".into()));
        let read = |json: &str| {
            std::fs::write(&file, json).unwrap();
            config_with_overrides(&file, &continued)
        };
        let config = read(r#"{"model": {"hidden_dropout_prob": 0.2}, "max_steps": 50}"#).unwrap();
        assert_eq!((config.model.dropout(), config.max_steps), (0.2, 50));
        for (json, key) in [
            (r#"{"model": {"hidden_size": 256}}"#, "model.hidden_size"),
            (r#"{"tokenizer": "other.json"}"#, "tokenizer"),
            (r#"{"vocab_size": 100}"#, "vocab_size"),
        ] {
            let error = read(json).unwrap_err().to_string();
            assert!(
                error.contains(&format!("sets {key}, but with --init-from the checkpoint"))
                    && error.contains("continued.json"),
                "{error}"
            );
        }
        // A run's whole config.json: its other settings, the checkpoint's model.
        let mut whole = TrainConfig::new("corpus".into()).with_max_steps(70);
        *whole.model.hidden_size_mut() = 256;
        let config = read(&serde_json::to_string(&whole).unwrap()).unwrap();
        assert_eq!(config.max_steps, 70);
        assert_eq!(config.model, continued.model, "the checkpoint's model");
        assert_eq!(config.init_from, continued.init_from);
        let scratch = TrainConfig::new("corpus".into());
        std::fs::write(&file, r#"{"model": {"hidden_size": 256}}"#).unwrap();
        let config = config_with_overrides(&file, &scratch).unwrap();
        assert_eq!(config.model.hidden_size(), 256);
    }
}
