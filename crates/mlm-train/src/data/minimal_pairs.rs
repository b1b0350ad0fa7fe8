//! Minimal-pair suites: a grammatical and an ungrammatical sentence that differ in one point,
//! grouped in paradigms, one file each, in Zorro's or BLiMP's format.
//!
//! - Zorro (Huebner et al. 2021, CoNLL), `.txt`: pairs of consecutive lines, the **odd**
//!   line (1st, 3rd, …) ungrammatical, the **even** line grammatical.
//! - BLiMP (Warstadt et al. 2020, TACL), `.jsonl`: one JSON object per line with the fields
//!   `sentence_good` and `sentence_bad`.
//!
//! A path is one such file or a folder of them, read in file-name order; a paradigm is named
//! by its file's stem.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::TrainError;

/// One sentence and the 1-based line of its file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentence {
    /// The text, as written in the file.
    pub text: String,
    /// Its line.
    pub line: usize,
}

/// A grammatical sentence and its ungrammatical twin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinimalPair {
    /// The grammatical one.
    pub good: Sentence,
    /// The ungrammatical one.
    pub bad: Sentence,
}

/// The pairs of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paradigm {
    /// The file's stem, e.g. `agreement_subject_verb-across_relative_clause`.
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// Its pairs, in file order.
    pub pairs: Vec<MinimalPair>,
}

/// The paradigms at `path`: one `.txt` (Zorro) or `.jsonl` (BLiMP) file, or a folder of them
/// (other files in the folder are ignored).
///
/// # Errors
/// [`TrainError::MinimalPairs`] naming the file (and line) for a missing path, a folder
/// without suite files, a file in neither format, an empty file or an empty sentence, a
/// Zorro file with an odd number of lines, or a BLiMP line that is not JSON with both
/// fields; [`TrainError::Io`] if a file cannot be read.
pub fn read_minimal_pairs(path: &Path) -> Result<Vec<Paradigm>, TrainError> {
    if path.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(crate::files::io(path))? {
            let file = entry.map_err(crate::files::io(path))?.path();
            if file.is_file() && Format::of(&file).is_some() {
                files.push(file);
            }
        }
        if files.is_empty() {
            return Err(fault(
                path,
                None,
                "a folder without .txt (Zorro) or .jsonl (BLiMP) files",
            ));
        }
        files.sort();
        files.iter().map(|file| read_paradigm(file)).collect()
    } else if path.is_file() {
        Ok(vec![read_paradigm(path)?])
    } else {
        Err(fault(path, None, "no such file or folder"))
    }
}

/// The two formats, told by the file's extension.
#[derive(Debug, Clone, Copy)]
enum Format {
    Zorro,
    Blimp,
}

impl Format {
    fn of(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "txt" => Some(Self::Zorro),
            "jsonl" => Some(Self::Blimp),
            _ => None,
        }
    }
}

fn read_paradigm(path: &Path) -> Result<Paradigm, TrainError> {
    let format = Format::of(path)
        .ok_or_else(|| fault(path, None, "neither a Zorro .txt nor a BLiMP .jsonl file"))?;
    let text = std::fs::read_to_string(path).map_err(crate::files::io(path))?;
    let pairs = match format {
        Format::Zorro => zorro_pairs(path, &text)?,
        Format::Blimp => blimp_pairs(path, &text)?,
    };
    if pairs.is_empty() {
        return Err(fault(path, None, "no minimal pairs in it (an empty file)"));
    }
    Ok(Paradigm {
        name: path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
        path: path.to_path_buf(),
        pairs,
    })
}

/// Odd line ungrammatical, even line grammatical.
fn zorro_pairs(path: &Path, text: &str) -> Result<Vec<MinimalPair>, TrainError> {
    let lines: Vec<Sentence> = text
        .lines()
        .enumerate()
        .map(|(i, line)| sentence(path, line.trim(), i + 1))
        .collect::<Result<_, _>>()?;
    if lines.len() % 2 == 1 {
        return Err(fault(
            path,
            Some(lines.len()),
            "an odd number of lines: a Zorro file holds pairs of lines (ungrammatical, then \
             grammatical), and this last one has no twin",
        ));
    }
    Ok(lines
        .chunks_exact(2)
        .map(|pair| MinimalPair {
            bad: pair[0].clone(),
            good: pair[1].clone(),
        })
        .collect())
}

/// One `{"sentence_good": …, "sentence_bad": …}` object per non-blank line.
fn blimp_pairs(path: &Path, text: &str) -> Result<Vec<MinimalPair>, TrainError> {
    #[derive(Deserialize)]
    struct Line {
        sentence_good: String,
        sentence_bad: String,
    }
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let parsed: Line = serde_json::from_str(line).map_err(|e| {
                // serde_json counts lines within the one line it was given: keep the column.
                let what = e.to_string();
                let what = what.split(" at line ").next().unwrap_or_default();
                let reason = format!(
                    "not a BLiMP line, a JSON object with the strings sentence_good and \
                     sentence_bad ({what}, column {})",
                    e.column()
                );
                fault(path, Some(i + 1), &reason)
            })?;
            Ok(MinimalPair {
                good: sentence(path, parsed.sentence_good.trim(), i + 1)?,
                bad: sentence(path, parsed.sentence_bad.trim(), i + 1)?,
            })
        })
        .collect()
}

fn sentence(path: &Path, text: &str, line: usize) -> Result<Sentence, TrainError> {
    if text.is_empty() {
        return Err(fault(path, Some(line), "an empty sentence"));
    }
    Ok(Sentence {
        text: text.to_string(),
        line,
    })
}

fn fault(path: &Path, line: Option<usize>, reason: &str) -> TrainError {
    TrainError::MinimalPairs {
        path: path.to_path_buf(),
        line,
        reason: reason.to_string(),
    }
}
