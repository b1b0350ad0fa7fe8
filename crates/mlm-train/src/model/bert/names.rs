//! The Hugging Face names of BERT-architecture checkpoints: `modeling_bert.py`'s
//! `BertForMaskedLM` and `modeling_roberta.py`'s `RobertaForMaskedLM`, whose encoders are
//! the same under other prefixes.

use crate::model::BertConfig;
use crate::model::family::ModelFamily;
use crate::model::hf::{HfName, NameTable};

/// The Hugging Face names of one family's parameters outside the encoder layers' shared
/// pattern.
struct FamilyKeys {
    /// The encoder's prefix: `bert`, `roberta`.
    base: &'static str,
    /// The MLM head's transform dense layer.
    dense: &'static str,
    /// The MLM head's transform LayerNorm.
    layer_norm: &'static str,
    /// The MLM head's output bias.
    bias: &'static str,
    /// The tied decoder's weight and bias, which a file may store as copies.
    decoder: &'static str,
}

/// `modeling_bert.py`'s `BertForMaskedLM`, `modeling_roberta.py`'s `RobertaForMaskedLM` and
/// `modeling_xlm_roberta.py`'s `XLMRobertaForMaskedLM` (RoBERTa's names).
fn family_keys(family: ModelFamily) -> FamilyKeys {
    match family {
        ModelFamily::Bert => FamilyKeys {
            base: "bert",
            dense: "cls.predictions.transform.dense",
            layer_norm: "cls.predictions.transform.LayerNorm",
            bias: "cls.predictions.bias",
            decoder: "cls.predictions.decoder",
        },
        ModelFamily::Roberta | ModelFamily::XlmRoberta => FamilyKeys {
            base: "roberta",
            dense: "lm_head.dense",
            layer_norm: "lm_head.layer_norm",
            bias: "lm_head.bias",
            decoder: "lm_head.decoder",
        },
        ModelFamily::ModernBert => {
            unreachable!("ModernBERT is not computed by BERT's architecture")
        }
    }
}

/// Keys (prefixes) of a `family` checkpoint that a masked-LM model does not use: the pooler
/// and next-sentence head of a pretraining checkpoint, and the buffers of position and
/// segment ids.
pub fn ignored_prefixes(family: ModelFamily) -> Vec<String> {
    let base = family_keys(family).base;
    [
        "pooler.",
        "embeddings.position_ids",
        "embeddings.token_type_ids",
    ]
    .iter()
    .map(|key| format!("{base}.{key}"))
    .chain(["cls.seq_relationship.".to_string()])
    .collect()
}

/// The tied copies a `family` checkpoint may store (the decoder's weight and bias), each
/// with the key it is tied to.
pub fn tied_copies(family: ModelFamily) -> [(String, String); 2] {
    let keys = family_keys(family);
    [
        (
            format!("{}.weight", keys.decoder),
            format!("{}.embeddings.word_embeddings.weight", keys.base),
        ),
        (format!("{}.bias", keys.decoder), keys.bias.to_string()),
    ]
}

/// Encoder layer `i`: self-attention (query, key, value, output), its LayerNorm, the
/// feed-forward of width `ff` and its LayerNorm.
fn encoder_layer(t: &mut NameTable, base: &str, i: usize, d: usize, ff: usize) {
    let hf = format!("{base}.encoder.layer.{i}");
    let ours = format!("layers.{i}");
    for projection in ["query", "key", "value"] {
        t.linear(
            &format!("{hf}.attention.self.{projection}"),
            &format!("{ours}.attention.self_attention.{projection}"),
            d,
            d,
        );
    }
    t.linear(
        &format!("{hf}.attention.output.dense"),
        &format!("{ours}.attention.output.dense"),
        d,
        d,
    );
    t.layer_norm(
        &format!("{hf}.attention.output.LayerNorm"),
        &format!("{ours}.attention.output.layer_norm"),
        d,
    );
    t.linear(
        &format!("{hf}.intermediate.dense"),
        &format!("{ours}.intermediate"),
        d,
        ff,
    );
    t.linear(
        &format!("{hf}.output.dense"),
        &format!("{ours}.output.dense"),
        ff,
        d,
    );
    t.layer_norm(
        &format!("{hf}.output.LayerNorm"),
        &format!("{ours}.output.layer_norm"),
        d,
    );
}

/// Every parameter of a [`BertForMaskedLm`](crate::model::BertForMaskedLm) of `config`'s
/// sizes, with its key in `config.family`'s checkpoint (`BertForMaskedLM`,
/// `RobertaForMaskedLM`): embeddings, each layer, the head (source: transformers'
/// `modeling_bert.py`, `modeling_roberta.py`; the tied decoder is not a parameter of its own).
pub fn names(config: &BertConfig) -> Vec<HfName> {
    let (v, d, ff) = (
        config.vocab_size,
        config.hidden_size,
        config.intermediate_size,
    );
    let keys = family_keys(config.family);
    let mut t = NameTable::default();
    for (name, rows) in [
        ("word_embeddings", v),
        ("position_embeddings", config.max_position_embeddings),
        ("token_type_embeddings", config.type_vocab_size),
    ] {
        t.tensor(
            &format!("{}.embeddings.{name}.weight", keys.base),
            &format!("embeddings.{name}.weight"),
            &[rows, d],
            false,
        );
    }
    let embeddings_norm = format!("{}.embeddings.LayerNorm", keys.base);
    t.layer_norm(&embeddings_norm, "embeddings.layer_norm", d);
    for i in 0..config.num_hidden_layers {
        encoder_layer(&mut t, keys.base, i, d, ff);
    }
    t.linear(keys.dense, "head.transform.dense", d, d);
    t.layer_norm(keys.layer_norm, "head.transform.layer_norm", d);
    t.tensor(keys.bias, "head.bias", &[v], false);
    t.0
}
