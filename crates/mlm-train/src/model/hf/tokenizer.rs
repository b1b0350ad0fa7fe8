//! The tokenizer files of a Hugging Face folder.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::data::{SPECIAL_TOKENS, SubwordTokenizer, TokenizerKind};
use crate::error::TrainError;
use crate::files::{write_atomic, write_json};

/// Writes the tokenizer as transformers reads it: `tokenizer.json` (fast tokenizer),
/// `tokenizer_config.json` and `special_tokens_map.json`; for WordPiece also `vocab.txt`
/// (one token per line, in id order), for byte-level BPE and Unigram RoBERTa's and XLM-R's
/// roles (`bos_token`, `eos_token`).
///
/// # Errors
/// [`TrainError::Tokenizer`] if the vocabulary cannot be listed; [`TrainError::Io`] /
/// [`TrainError::Json`] naming the file that could not be written.
pub fn save_tokenizer(
    tokenizer: &SubwordTokenizer,
    model_max_length: usize,
    dir: &Path,
) -> Result<(), TrainError> {
    tokenizer.save(&dir.join("tokenizer.json"))?;
    let [pad, unk, cls, sep, mask] = tokenizer.special_tokens;
    let mut specials = json!({
        "pad_token": pad, "unk_token": unk, "cls_token": cls, "sep_token": sep, "mask_token": mask,
    });
    let class = match tokenizer.kind {
        TokenizerKind::WordPiece => {
            let mut vocab = tokenizer.vocab()?.join("\n");
            vocab.push('\n');
            write_atomic(&dir.join("vocab.txt"), vocab.as_bytes())?;
            "BertTokenizer"
        }
        // ModernBERT's byte-level BPE with BERT's specials: the fast tokenizer of the file.
        _ if tokenizer.special_tokens == SPECIAL_TOKENS => "PreTrainedTokenizerFast",
        TokenizerKind::ByteLevelBpe | TokenizerKind::Unigram => {
            specials["bos_token"] = json!(cls);
            specials["eos_token"] = json!(sep);
            match tokenizer.kind {
                TokenizerKind::Unigram => "XLMRobertaTokenizer",
                _ => "RobertaTokenizer",
            }
        }
    };
    write_json(&dir.join("special_tokens_map.json"), &specials)?;
    specials["tokenizer_class"] = json!(class);
    match tokenizer.kind {
        TokenizerKind::WordPiece => specials["do_lower_case"] = json!(true),
        TokenizerKind::ByteLevelBpe => specials["add_prefix_space"] = json!(false),
        TokenizerKind::Unigram => {}
    }
    specials["model_max_length"] = json!(model_max_length);
    write_json(&dir.join("tokenizer_config.json"), &specials)
}

/// The tokenizer file of a Hugging Face folder: its `tokenizer.json`, else BERT's
/// `vocab.txt`, else RoBERTa's `vocab.json` (read with the `merges.txt` beside it).
///
/// # Errors
/// [`TrainError::Tokenizer`] if the folder has none of them.
pub fn tokenizer_file(dir: &Path) -> Result<PathBuf, TrainError> {
    ["tokenizer.json", "vocab.txt", "vocab.json"]
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| TrainError::Tokenizer {
            path: dir.to_path_buf(),
            reason: match dir.join("sentencepiece.bpe.model").is_file() {
                true => {
                    "holds XLM-R's sentencepiece.bpe.model but no tokenizer.json: write \
                         one with transformers, \
                         `AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)` (its fast \
                         tokenizer)"
                }
                false => {
                    "holds no tokenizer.json, vocab.txt (BERT) nor vocab.json + \
                          merges.txt (RoBERTa); a run needs its tokenizer"
                }
            }
            .into(),
        })
}
