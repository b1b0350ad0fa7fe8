//! The Hugging Face names of `ModernBertForMaskedLM` checkpoints (transformers'
//! `modeling_modernbert.py`).

use super::config::ModernBertConfig;
use crate::model::hf::{HfName, NameTable};

/// The tied decoder's weight, which a file may store as a copy of the token embeddings.
const DECODER_WEIGHT: &str = "decoder.weight";
/// The token embeddings.
const TOK_EMBEDDINGS: &str = "model.embeddings.tok_embeddings.weight";

/// Keys (prefixes) of a checkpoint that a masked-LM model does not use: none (rotary
/// frequencies are not stored).
pub fn ignored_prefixes() -> Vec<String> {
    Vec::new()
}

/// The tied copy a checkpoint may store: the decoder's weight, tied to the token embeddings.
pub fn tied_copies() -> Vec<(String, String)> {
    vec![(DECODER_WEIGHT.into(), TOK_EMBEDDINGS.into())]
}

/// Every parameter of a [`ModernBertForMaskedLm`](super::ModernBertForMaskedLm) of
/// `config`'s sizes with its Hugging Face key: embeddings, each layer (no `attn_norm` in
/// layer 0), the final norm, the head and the decoder's bias; biases only where the config
/// has them.
pub fn names(config: &ModernBertConfig) -> Vec<HfName> {
    let (v, d, ff) = (
        config.vocab_size,
        config.hidden_size,
        config.intermediate_size,
    );
    let norm_bias = config.norm_bias;
    let mut t = NameTable::default();
    t.tensor(
        TOK_EMBEDDINGS,
        "embeddings.tok_embeddings.weight",
        &[v, d],
        false,
    );
    t.layer_norm_with_bias("model.embeddings.norm", "embeddings.norm", d, norm_bias);
    for i in 0..config.num_hidden_layers {
        let (hf, ours) = (format!("model.layers.{i}"), format!("layers.{i}"));
        let norm = |t: &mut NameTable, name: &str| {
            t.layer_norm_with_bias(
                &format!("{hf}.{name}"),
                &format!("{ours}.{name}"),
                d,
                norm_bias,
            );
        };
        let linear = |t: &mut NameTable, (hf_name, ours_name): (&str, &str), d_in, d_out, bias| {
            let (hf, ours) = (format!("{hf}.{hf_name}"), format!("{ours}.{ours_name}"));
            t.linear_with_bias(&hf, &ours, d_in, d_out, bias);
        };
        if i > 0 {
            norm(&mut t, "attn_norm");
        }
        linear(
            &mut t,
            ("attn.Wqkv", "attn.wqkv"),
            d,
            3 * d,
            config.attention_bias,
        );
        linear(&mut t, ("attn.Wo", "attn.wo"), d, d, config.attention_bias);
        norm(&mut t, "mlp_norm");
        linear(&mut t, ("mlp.Wi", "mlp.wi"), d, 2 * ff, config.mlp_bias);
        linear(&mut t, ("mlp.Wo", "mlp.wo"), ff, d, config.mlp_bias);
    }
    t.layer_norm_with_bias("model.final_norm", "final_norm", d, norm_bias);
    t.linear_with_bias(
        "head.dense",
        "head.transform.dense",
        d,
        d,
        config.classifier_bias,
    );
    t.layer_norm_with_bias("head.norm", "head.transform.layer_norm", d, norm_bias);
    t.tensor("decoder.bias", "head.bias", &[v], false);
    t.0
}
