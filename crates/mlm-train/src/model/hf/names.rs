//! The table of names, one row per parameter: its Hugging Face key, Burn path and PyTorch
//! shape. Each architecture builds its families' tables ([`Architecture::names`]); import
//! and export read them.

use crate::model::ModelConfig;
use crate::model::family::{Architecture, ModelFamily};

/// One parameter in both namings.
#[derive(Debug, Clone, PartialEq)]
pub struct HfName {
    /// The Hugging Face key, e.g. `bert.encoder.layer.0.attention.self.query.weight`.
    pub hf_key: String,
    /// The path in our model (Burn's module path), e.g. `layers.0.attention.self_attention.query.weight`.
    pub burn_path: String,
    /// The shape in the Hugging Face file (PyTorch layout).
    pub shape: Vec<usize>,
    /// Whether Burn stores the transpose (`Linear` weights: PyTorch `[out, in]`, Burn `[in, out]`).
    pub transposed: bool,
}

impl HfName {
    /// The shape Burn stores.
    pub fn burn_shape(&self) -> Vec<usize> {
        if self.transposed {
            self.shape.iter().rev().copied().collect()
        } else {
            self.shape.clone()
        }
    }
}

/// Builds a family's table of names, one block (tensor, `Linear`, `LayerNorm`) at a time.
#[derive(Default)]
pub struct NameTable(pub Vec<HfName>);

impl NameTable {
    /// One tensor: its Hugging Face key, Burn path, PyTorch shape and whether Burn stores
    /// it transposed.
    pub fn tensor(&mut self, hf_key: &str, burn_path: &str, shape: &[usize], transposed: bool) {
        self.0.push(HfName {
            hf_key: hf_key.into(),
            burn_path: burn_path.into(),
            shape: shape.to_vec(),
            transposed,
        });
    }

    /// PyTorch `weight [out, in]` and `bias [out]`.
    pub fn linear(&mut self, hf: &str, ours: &str, d_in: usize, d_out: usize) {
        self.linear_with_bias(hf, ours, d_in, d_out, true);
    }

    /// PyTorch `weight [out, in]`, and `bias [out]` if the layer has one.
    pub fn linear_with_bias(
        &mut self,
        hf: &str,
        ours: &str,
        d_in: usize,
        d_out: usize,
        bias: bool,
    ) {
        self.tensor(
            &format!("{hf}.weight"),
            &format!("{ours}.weight"),
            &[d_out, d_in],
            true,
        );
        if bias {
            self.tensor(
                &format!("{hf}.bias"),
                &format!("{ours}.bias"),
                &[d_out],
                false,
            );
        }
    }

    /// PyTorch `weight`/`bias` are Burn's `gamma`/`beta`.
    pub fn layer_norm(&mut self, hf: &str, ours: &str, d: usize) {
        self.layer_norm_with_bias(hf, ours, d, true);
    }

    /// PyTorch `weight` (Burn's `gamma`), and `bias` (`beta`) if the LayerNorm has one.
    pub fn layer_norm_with_bias(&mut self, hf: &str, ours: &str, d: usize, bias: bool) {
        self.tensor(
            &format!("{hf}.weight"),
            &format!("{ours}.gamma"),
            &[d],
            false,
        );
        if bias {
            self.tensor(&format!("{hf}.bias"), &format!("{ours}.beta"), &[d], false);
        }
    }
}

/// Every parameter of a model of `config` with its key in `config.family`'s checkpoints, by
/// the family's architecture ([`Architecture::names`]).
pub fn names(config: &ModelConfig) -> Vec<HfName> {
    Architecture::names(config)
}

/// Keys (prefixes) of a `family` checkpoint that a masked-LM model does not use.
pub fn ignored_prefixes(family: ModelFamily) -> Vec<String> {
    architecture(family).ignored_prefixes(family)
}

/// The tied copies a `family` checkpoint may store, each with the key it is tied to.
pub fn tied_copies(family: ModelFamily) -> Vec<(String, String)> {
    architecture(family).tied_copies(family)
}

fn architecture(family: ModelFamily) -> Architecture {
    family.spec().architecture
}
