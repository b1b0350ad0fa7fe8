//! Corpus files as they come: text (`.txt`, a file is a document) and JSON lines (`.jsonl`,
//! `.json` or `.ndjson`, a record is a document, its text in one field, as `datasets`'
//! `to_json` writes it), either of them gzip-compressed (`.gz`). A file's kind is its
//! extension in any case (`.JSONL`, `.Txt.GZ`), checked against its first bytes: a JSON array,
//! JSON lines in a `.txt` or gzip in a file not named `.gz` is refused by name, and so is a
//! file of another extension named on the command line (a folder's are skipped, and said).
//! Read one document at a time, in sorted path order.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use crate::error::TrainError;
use crate::files::io;

/// The extensions of text corpus files (in lower case; any case is read).
pub const TEXT_EXTENSIONS: [&str; 1] = ["txt"];

/// The extensions of JSON-lines corpus files (in lower case; any case is read). `.json` is
/// what `datasets`' `to_json("x.json")` writes: JSON lines by default.
pub const JSON_LINES_EXTENSIONS: [&str; 3] = ["jsonl", "json", "ndjson"];

/// Bytes of a file's start read to check its kind.
const SNIFF_BYTES: u64 = 4096;

/// What each kind is, as refusals and warnings say it.
const KINDS: &str = ".txt (a file a document) or .jsonl, .json, .ndjson (JSON lines, a record \
                     a document), either gzipped (.gz)";

/// One file of a corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Where it is.
    pub path: PathBuf,
    /// JSON lines (else plain text).
    pub jsonl: bool,
    /// gzip-compressed.
    pub gzip: bool,
}

impl SourceFile {
    /// The corpus file at `path` if its name ends, in any case, in one of
    /// [`TEXT_EXTENSIONS`] or [`JSON_LINES_EXTENSIONS`], with or without `.gz`.
    pub fn by_name(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?.to_lowercase();
        let (stem, gzip) = match name.strip_suffix(".gz") {
            Some(stem) => (stem, true),
            None => (name.as_str(), false),
        };
        let (_, extension) = stem.rsplit_once('.')?;
        let jsonl = JSON_LINES_EXTENSIONS.contains(&extension);
        (jsonl || TEXT_EXTENSIONS.contains(&extension)).then(|| Self {
            path: path.to_path_buf(),
            jsonl,
            gzip,
        })
    }

    /// Checks that the file's first bytes are of its kind: gzip where (and only where) it
    /// is named so, JSON lines in a JSON-lines file (not one JSON array), none in a text
    /// file. A file that cannot be read is left to the reader, which names the error.
    ///
    /// # Errors
    /// [`TrainError::CorpusFile`] naming the file, what it holds and the way out.
    pub fn check_content(&self) -> Result<(), TrainError> {
        let Ok(mut file) = File::open(&self.path) else {
            return Ok(());
        };
        let mut magic = [0u8; 2];
        if file.read_exact(&mut magic).is_ok() && (magic == [0x1f, 0x8b]) != self.gzip {
            return Err(self.refusal(match self.gzip {
                true => "is named .gz but is not gzip-compressed: take .gz off its name".into(),
                false => "is gzip-compressed: add .gz to its name".into(),
            }));
        }
        let mut start = Vec::new();
        let read = RawDocuments::open(self)
            .ok()
            .map(|reader| reader.take(SNIFF_BYTES).read_to_end(&mut start));
        if !matches!(read, Some(Ok(_))) {
            return Ok(());
        }
        let first_line = start
            .split(|&b| b == b'\n')
            .map(|line| line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line))
            .find(|line| !line.iter().all(u8::is_ascii_whitespace));
        match first_line {
            Some(line) => self.check_first_line(line.trim_ascii()),
            None => Ok(()),
        }
    }

    /// [`check_content`](Self::check_content) of the first line that is not blank, trimmed.
    fn check_first_line(&self, line: &[u8]) -> Result<(), TrainError> {
        let gz = if self.gzip { ".gz" } else { "" };
        if self.jsonl {
            return match line.first() {
                Some(b'{') => Ok(()),
                Some(b'[') => Err(self.refusal(
                    "holds one JSON array, not JSON lines (a record a line): write it with \
                     `to_json(path, lines=True)`, the default of `datasets`"
                        .into(),
                )),
                _ => Err(self.refusal(format!(
                    "is not JSON lines: its first line is not a JSON object (`{{\"text\": …}}`); \
                     name a text file {}.txt{gz}",
                    self.stem()
                ))),
            };
        }
        let is_object = line.first() == Some(&b'{')
            && serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|v| v.is_object());
        match is_object {
            true => Err(self.refusal(format!(
                "holds JSON lines (its first line is a JSON object), not text: name it \
                 {}.jsonl{gz} to read a field of each record",
                self.stem()
            ))),
            false => Ok(()),
        }
    }

    /// The file name less its corpus extensions (`a` of `a.TXT.gz`).
    fn stem(&self) -> String {
        fn cut(name: &str) -> &str {
            name.rsplit_once('.').map_or(name, |(stem, _)| stem)
        }
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        match self.gzip {
            true => cut(cut(&name)).to_string(),
            false => cut(&name).to_string(),
        }
    }

    fn refusal(&self, reason: String) -> TrainError {
        corpus_error(self, None, reason)
    }
}

/// The corpus files at a path, and the files of a folder skipped as no corpus kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFiles {
    /// The path read: a file or a folder.
    pub path: PathBuf,
    /// The corpus files, sorted by path.
    pub files: Vec<SourceFile>,
    /// A folder's files of other extensions, sorted (hidden files, `.name`, are not listed).
    pub skipped: Vec<PathBuf>,
}

impl SourceFiles {
    /// A warning naming the number of skipped files and the first three, if any.
    pub fn skipped_warning(&self) -> Option<String> {
        let n = self.skipped.len();
        (n > 0).then(|| {
            format!(
                "skipped {n} file{} of no corpus kind in {}: {} (read are {KINDS})",
                if n == 1 { "" } else { "s" },
                self.path.display(),
                self.skipped_names()
            )
        })
    }

    /// The first three skipped files, relative to the folder, and how many more.
    fn skipped_names(&self) -> String {
        let names: Vec<String> = self
            .skipped
            .iter()
            .take(3)
            .map(|path| path.strip_prefix(&self.path).unwrap_or(path))
            .map(|path| path.display().to_string())
            .collect();
        match self.skipped.len() {
            n if n > 3 => format!("{} and {} more", names.join(", "), n - 3),
            _ => names.join(", "),
        }
    }
}

/// The corpus files at `path`: the file itself, or every corpus file under the folder
/// ([`SourceFile::by_name`]; hidden files and folders left out), sorted by path, each
/// checked ([`SourceFile::check_content`]).
///
/// # Errors
/// [`TrainError::CorpusNotFound`] for a missing path; [`TrainError::CorpusFile`] for a file
/// named of another extension, a folder whose files are all of other extensions, or a file
/// whose content is not of its kind; [`TrainError::EmptyCorpus`] for a folder with no file;
/// [`TrainError::Io`].
pub fn source_files(path: &Path) -> Result<SourceFiles, TrainError> {
    if !path.exists() {
        return Err(TrainError::CorpusNotFound(path.to_path_buf()));
    }
    let mut found = SourceFiles {
        path: path.to_path_buf(),
        files: Vec::new(),
        skipped: Vec::new(),
    };
    if path.is_file() {
        let file = SourceFile::by_name(path).ok_or_else(|| TrainError::CorpusFile {
            path: path.to_path_buf(),
            line: None,
            reason: format!("is of no corpus kind: {KINDS}; rename it if it is one of them"),
        })?;
        found.files.push(file);
    } else {
        collect(path, &mut found)?;
    }
    found.files.sort_by(|a, b| a.path.cmp(&b.path));
    found.skipped.sort();
    if found.files.is_empty() && !found.skipped.is_empty() {
        return Err(TrainError::CorpusFile {
            path: path.to_path_buf(),
            line: None,
            reason: format!(
                "holds no corpus file, only {} of other kinds: {} (read are {KINDS})",
                found.skipped.len(),
                found.skipped_names()
            ),
        });
    }
    if found.files.is_empty() {
        return Err(TrainError::EmptyCorpus(path.to_path_buf()));
    }
    found.files.iter().try_for_each(SourceFile::check_content)?;
    Ok(found)
}

fn collect(dir: &Path, found: &mut SourceFiles) -> Result<(), TrainError> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with('.'))
        {
            continue;
        }
        if path.is_dir() {
            collect(&path, found)?;
        } else if let Some(file) = SourceFile::by_name(&path) {
            found.files.push(file);
        } else {
            found.skipped.push(path);
        }
    }
    Ok(())
}

/// A document's raw text and where it came from.
#[derive(Debug, Clone)]
pub struct RawDocument {
    /// Its file.
    pub path: PathBuf,
    /// Its 1-based line, for a JSON-lines record.
    pub line: Option<usize>,
    /// The text, not yet cleaned.
    pub text: String,
}

/// The documents of `files`, in order, read one at a time (a `.txt` file is read whole).
pub struct RawDocuments<'a> {
    files: std::slice::Iter<'a, SourceFile>,
    text_field: &'a str,
    /// The JSON-lines file being read, with its next line's number.
    lines: Option<(&'a SourceFile, Box<dyn BufRead + 'a>, usize)>,
}

impl<'a> RawDocuments<'a> {
    /// Reads `files`, taking each JSON record's text from `text_field`.
    pub fn new(files: &'a [SourceFile], text_field: &'a str) -> Self {
        Self {
            files: files.iter(),
            text_field,
            lines: None,
        }
    }

    fn open(file: &SourceFile) -> Result<Box<dyn Read>, TrainError> {
        let raw = File::open(&file.path).map_err(io(&file.path))?;
        Ok(match file.gzip {
            true => Box::new(MultiGzDecoder::new(raw)),
            false => Box::new(raw),
        })
    }

    /// The next record of the JSON-lines file being read, if it has one left.
    fn next_record(&mut self) -> Option<Result<RawDocument, TrainError>> {
        let (file, reader, line) = self.lines.as_mut()?;
        let mut bytes = Vec::new();
        loop {
            bytes.clear();
            let at = Some(*line);
            *line += 1;
            match reader.read_until(b'\n', &mut bytes) {
                Ok(0) => {
                    self.lines = None;
                    return None;
                }
                Ok(_) if bytes.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(_) => return Some(record(file, at, &bytes, self.text_field)),
                Err(e) => return Some(Err(corpus_error(file, at, e.to_string()))),
            }
        }
    }
}

impl Iterator for RawDocuments<'_> {
    type Item = Result<RawDocument, TrainError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(record) = self.next_record() {
                return Some(record);
            }
            let file = self.files.next()?;
            let mut reader = match Self::open(file) {
                Ok(reader) => reader,
                Err(e) => return Some(Err(e)),
            };
            if file.jsonl {
                self.lines = Some((file, Box::new(BufReader::new(reader)), 1));
                continue;
            }
            let mut bytes = Vec::new();
            return Some(match reader.read_to_end(&mut bytes) {
                Err(e) => Err(corpus_error(file, None, e.to_string())),
                Ok(_) => text(file, None, bytes).map(|text| RawDocument {
                    path: file.path.clone(),
                    line: None,
                    text,
                }),
            });
        }
    }
}

/// One JSON line's text field.
fn record(
    file: &SourceFile,
    line: Option<usize>,
    bytes: &[u8],
    field: &str,
) -> Result<RawDocument, TrainError> {
    let text = text(file, line, bytes.to_vec())?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        let why = "a JSON-lines file holds one whole JSON record a line";
        corpus_error(file, line, format!("not JSON: {e} ({why})"))
    })?;
    match value.get(field) {
        Some(serde_json::Value::String(text)) => Ok(RawDocument {
            path: file.path.clone(),
            line,
            text: text.clone(),
        }),
        Some(_) => Err(corpus_error(
            file,
            line,
            format!("the field `{field}` is not a string (choose another with --text-field)"),
        )),
        None => Err(corpus_error(
            file,
            line,
            format!("no field `{field}` (choose another with --text-field)"),
        )),
    }
}

/// `bytes` as UTF-8 text, less a byte-order mark at the start of a file.
fn text(file: &SourceFile, line: Option<usize>, bytes: Vec<u8>) -> Result<String, TrainError> {
    let text = String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        match line {
            None if !file.gzip => TrainError::NotUtf8 {
                path: file.path.clone(),
                offset,
            },
            _ => {
                let of = match line {
                    Some(_) => "the line",
                    None => "the decompressed text",
                };
                corpus_error(
                    file,
                    line,
                    format!("not UTF-8 text (invalid byte at offset {offset} of {of})"),
                )
            }
        }
    })?;
    Ok(match (line, text.strip_prefix('\u{feff}')) {
        (None | Some(1), Some(rest)) => rest.to_string(),
        _ => text,
    })
}

fn corpus_error(file: &SourceFile, line: Option<usize>, reason: String) -> TrainError {
    TrainError::CorpusFile {
        path: file.path.clone(),
        line,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn read_all(path: &Path, field: &str) -> Result<Vec<String>, TrainError> {
        let files = source_files(path)?;
        RawDocuments::new(&files.files, field)
            .map(|d| d.map(|d| d.text))
            .collect()
    }

    #[test]
    fn text_json_lines_and_gzip_read_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.txt"), "Plain text.").unwrap();
        std::fs::write(
            dir.path().join("a.jsonl"),
            // A byte-order mark, a blank line and Windows line ends.
            "\u{feff}{\"text\": \"One.\"}\r\n\n{\"text\": \"Two.\", \"id\": 2}\r\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("c.jsonl.gz"),
            gzip(b"{\"body\": \"Zipped.\"}\n"),
        )
        .unwrap();
        std::fs::write(dir.path().join("d.txt.gz"), gzip(b"Zipped text.")).unwrap();
        std::fs::write(dir.path().join("skip.csv"), "not, a, corpus").unwrap();
        let error = read_all(dir.path(), "text").unwrap_err().to_string();
        assert!(
            error.contains("c.jsonl.gz, line 1: no field `text`"),
            "{error}"
        );
        std::fs::remove_file(dir.path().join("c.jsonl.gz")).unwrap();
        assert_eq!(
            read_all(dir.path(), "text").unwrap(),
            ["One.", "Two.", "Plain text.", "Zipped text."]
        );
        // The .csv is skipped, and said; a hidden file is not.
        std::fs::write(dir.path().join(".notes.txt"), "Hidden.").unwrap();
        let found = source_files(dir.path()).unwrap();
        assert_eq!(found.skipped, [dir.path().join("skip.csv")]);
        assert_eq!(
            found.skipped_warning().unwrap(),
            format!(
                "skipped 1 file of no corpus kind in {}: skip.csv (read are {KINDS})",
                dir.path().display()
            )
        );
    }

    /// What reading `name` (written with `bytes`) refuses, as its message less the path.
    fn refusal(dir: &Path, name: &str, bytes: &[u8]) -> String {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let message = read_all(&path, "text").unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        let prefix = format!("corpus file {}: ", path.display());
        message
            .strip_prefix(&prefix)
            .unwrap_or(&message)
            .to_string()
    }

    #[test]
    fn kinds_go_by_extension_in_any_case_checked_against_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let records = b"{\"id\": 0, \"text\": \"After all.\"}\n{\"text\": \"Then.\"}\n";
        // JSON lines as .JSONL, .json (datasets' `to_json("x.json")`) and gzipped .NDJSON.GZ;
        // text as .Txt.
        let corpus = dir.path().join("corpus");
        std::fs::create_dir(&corpus).unwrap();
        std::fs::write(corpus.join("a.JSONL"), records).unwrap();
        std::fs::write(corpus.join("b.json"), records).unwrap();
        std::fs::write(corpus.join("c.NDJSON.GZ"), gzip(records)).unwrap();
        std::fs::write(corpus.join("d.Txt"), "Plain.").unwrap();
        let texts = ["After all.", "Then."];
        let expected: Vec<&str> = [&texts[..], &texts, &texts, &["Plain."]].concat();
        assert_eq!(read_all(&corpus, "text").unwrap(), expected);

        let kinds = format!("is of no corpus kind: {KINDS}; rename it if it is one of them");
        let refused = |name: &str, bytes: &[u8]| refusal(dir.path(), name, bytes);
        assert_eq!(refused("x.csv", records), kinds);
        assert_eq!(refused("x", b"Plain."), kinds);
        assert_eq!(
            refused("x.txt", records),
            "holds JSON lines (its first line is a JSON object), not text: name it x.jsonl to \
             read a field of each record"
        );
        assert_eq!(
            refused("x.TXT.gz", &gzip(records)),
            "holds JSON lines (its first line is a JSON object), not text: name it x.jsonl.gz \
             to read a field of each record"
        );
        assert!(refused("x.json", b"[{\"text\": \"a\"}]").starts_with("holds one JSON array"));
        assert_eq!(
            refused("x.json", b"\n  Plain text.\n"),
            "is not JSON lines: its first line is not a JSON object (`{\"text\": …}`); name a \
             text file x.txt"
        );
        assert_eq!(
            refused("x.txt", &gzip(b"Plain.")),
            "is gzip-compressed: add .gz to its name"
        );
        // A folder of other files only is refused with their names.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.md"), "Notes.").unwrap();
        let message = read_all(&other, "text").unwrap_err().to_string();
        assert_eq!(
            message,
            format!(
                "corpus file {}: holds no corpus file, only 1 of other kinds: notes.md (read \
                 are {KINDS})",
                other.display()
            )
        );
    }

    #[test]
    fn bad_input_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let case = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            read_all(&path, "text").unwrap_err().to_string()
        };
        let message = case("a.jsonl", b"{\"text\": \"ok\"}\n{\"text\": oops}\n");
        assert!(message.contains("a.jsonl, line 2: not JSON"), "{message}");
        let message = case("b.jsonl", b"{\"text\": 3}\n");
        assert!(
            message.contains("line 1: the field `text` is not a string"),
            "{message}"
        );
        let message = case("c.jsonl", b"{\"text\": \"\xff\"}\n");
        assert!(message.contains("c.jsonl, line 1: not UTF-8"), "{message}");
        let message = case("d.txt", b"ok \xff");
        assert!(
            message.contains("d.txt is not UTF-8 text (invalid byte at offset 3)"),
            "{message}"
        );
        let mut corrupt = gzip(b"some text that is long enough to be compressed");
        corrupt.truncate(corrupt.len() - 12);
        let message = case("e.txt.gz", &corrupt);
        assert!(
            message.starts_with("corpus file ") && message.contains("e.txt.gz"),
            "{message}"
        );
        let message = case("f.txt.gz", b"not gzip at all");
        assert!(message.contains("f.txt.gz"), "{message}");
    }

    /// One file of a generated corpus folder: JSON lines or text, an extension variant and
    /// its case, gzipped or not, its documents, a twin of the other compression, and
    /// JSON lines misnamed as text.
    #[derive(Debug, Clone)]
    struct GeneratedFile {
        jsonl: bool,
        extension: usize,
        case: usize,
        gzip: bool,
        documents: usize,
        twin: bool,
        misnamed: bool,
    }

    fn generated_file() -> impl proptest::strategy::Strategy<Value = GeneratedFile> {
        use proptest::prelude::*;
        (
            any::<bool>(),
            0..3usize,
            0..4usize,
            any::<bool>(),
            1..4usize,
            any::<bool>(),
            proptest::bool::weighted(0.1),
        )
            .prop_map(
                |(jsonl, extension, case, gzip, documents, twin, misnamed)| GeneratedFile {
                    jsonl,
                    extension,
                    case,
                    gzip,
                    documents,
                    twin,
                    misnamed,
                },
            )
    }

    impl GeneratedFile {
        /// Its name: `f{i}` and its extensions, in one of four cases.
        fn name(&self, i: usize, gzip: bool) -> String {
            let extension = match (self.jsonl && !self.misnamed, self.extension) {
                (true, e) => JSON_LINES_EXTENSIONS[e],
                (false, _) => "txt",
            };
            let extension = format!("{extension}{}", if gzip { ".gz" } else { "" });
            let extension = match self.case {
                0 => extension,
                1 => extension.to_uppercase(),
                2 => extension[..1].to_uppercase() + &extension[1..],
                _ => extension.replace('s', "S").replace('t', "T"),
            };
            format!("f{i}.{extension}")
        }

        /// Writes it (and its twin) into `dir` with `texts`; returns the texts it holds.
        fn write(&self, dir: &Path, i: usize, texts: &[String]) -> Vec<String> {
            let texts = match self.jsonl {
                true => texts.to_vec(),
                false => texts[..1].to_vec(),
            };
            let bytes = match self.jsonl {
                true => texts
                    .iter()
                    .map(|text| format!("{{\"id\": 7, \"text\": \"{text}\"}}\n"))
                    .collect::<String>(),
                false => texts[0].clone(),
            };
            for gzipped in [self.gzip, !self.gzip]
                .into_iter()
                .take(1 + usize::from(self.twin))
            {
                let contents = match gzipped {
                    true => gzip(bytes.as_bytes()),
                    false => bytes.clone().into_bytes(),
                };
                std::fs::write(dir.join(self.name(i, gzipped)), contents).unwrap();
            }
            texts
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Any mix of `.txt`, `.jsonl`, `.json`, `.ndjson`, gzipped or not, in any case, a
        /// file beside its twin of the other compression, a document repeated in another
        /// file: each document is read once. JSON lines named `.txt` are refused, by name.
        #[test]
        fn any_mix_of_kinds_reads_each_document_once_or_is_refused(
            files in proptest::collection::vec(generated_file(), 1..6),
            repeat in proptest::prelude::any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let (mut unique, mut next) = (Vec::new(), 0);
            for (i, file) in files.iter().enumerate() {
                let texts: Vec<String> = (next..next + file.documents)
                    .map(|d| format!("Document {d} says word{d}."))
                    .collect();
                next += file.documents;
                unique.extend(file.write(dir.path(), i, &texts));
            }
            if repeat {
                std::fs::write(dir.path().join("zz-copy.txt"), &unique[0]).unwrap();
            }
            let misnamed: Vec<String> = files
                .iter()
                .enumerate()
                .filter(|(_, file)| file.jsonl && file.misnamed)
                .flat_map(|(i, file)| [file.name(i, file.gzip), file.name(i, !file.gzip)])
                .collect();
            match crate::data::read_corpus(dir.path(), "text") {
                Ok(documents) => {
                    proptest::prop_assert!(misnamed.is_empty(), "{misnamed:?} read");
                    let mut read: Vec<String> =
                        documents.into_iter().map(|d| d.sentences.join(" ")).collect();
                    read.sort();
                    unique.sort();
                    proptest::prop_assert_eq!(read, unique);
                }
                Err(TrainError::CorpusFile { path, reason, .. }) => {
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    proptest::prop_assert!(misnamed.contains(&name), "{name}: {reason}");
                    proptest::prop_assert!(reason.starts_with("holds JSON lines"), "{reason}");
                }
                Err(e) => proptest::prop_assert!(false, "{e}"),
            }
        }
    }
}
