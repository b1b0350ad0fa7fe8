//! The tokenizer files of a Hugging Face folder.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::data::{SPECIAL_TOKENS, WordPieceTokenizer};
use crate::error::TrainError;
use crate::files::{write_atomic, write_json};

/// Writes the tokenizer as transformers reads it: `tokenizer.json` (fast tokenizer),
/// `vocab.txt` (one token per line, in id order), `tokenizer_config.json` and
/// `special_tokens_map.json`.
///
/// # Errors
/// [`TrainError::Tokenizer`] if the vocabulary cannot be listed; [`TrainError::Io`] /
/// [`TrainError::Json`] naming the file that could not be written.
pub fn save_tokenizer(
    tokenizer: &WordPieceTokenizer,
    model_max_length: usize,
    dir: &Path,
) -> Result<(), TrainError> {
    tokenizer.save(&dir.join("tokenizer.json"))?;
    let mut vocab = tokenizer.vocab()?.join("\n");
    vocab.push('\n');
    write_atomic(&dir.join("vocab.txt"), vocab.as_bytes())?;
    let [pad, unk, cls, sep, mask] = SPECIAL_TOKENS;
    let mut specials = json!({
        "pad_token": pad, "unk_token": unk, "cls_token": cls, "sep_token": sep, "mask_token": mask,
    });
    write_json(&dir.join("special_tokens_map.json"), &specials)?;
    specials["tokenizer_class"] = json!("BertTokenizer");
    specials["do_lower_case"] = json!(true);
    specials["model_max_length"] = json!(model_max_length);
    write_json(&dir.join("tokenizer_config.json"), &specials)
}

/// The tokenizer file of a Hugging Face folder: its `tokenizer.json`, else its `vocab.txt`.
///
/// # Errors
/// [`TrainError::Tokenizer`] if the folder has neither.
pub fn tokenizer_file(dir: &Path) -> Result<PathBuf, TrainError> {
    ["tokenizer.json", "vocab.txt"]
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| TrainError::Tokenizer {
            path: dir.to_path_buf(),
            reason: "holds neither tokenizer.json nor vocab.txt; a run needs its tokenizer".into(),
        })
}
