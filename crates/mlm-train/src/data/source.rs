//! Corpus files as they come: `.txt` (a file is a document) and JSON lines (`.jsonl`, a
//! record is a document, its text in one field, as `datasets`' `to_json` writes it), either
//! of them gzip-compressed (`.gz`). Read one document at a time, in sorted path order.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use crate::error::TrainError;
use crate::files::io;

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
    /// The corpus file at `path` if its name ends in `.txt`, `.jsonl`, `.txt.gz` or
    /// `.jsonl.gz`.
    fn of(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        let (stem, gzip) = match name.strip_suffix(".gz") {
            Some(stem) => (stem, true),
            None => (name, false),
        };
        let jsonl = stem.ends_with(".jsonl");
        (jsonl || stem.ends_with(".txt")).then(|| Self {
            path: path.to_path_buf(),
            jsonl,
            gzip,
        })
    }
}

/// The corpus files at `path`: the file itself, or every corpus file under the folder,
/// sorted by path.
///
/// # Errors
/// [`TrainError::CorpusNotFound`] for a missing path; [`TrainError::EmptyCorpus`] if no
/// file has a corpus extension; [`TrainError::Io`].
pub fn source_files(path: &Path) -> Result<Vec<SourceFile>, TrainError> {
    if !path.exists() {
        return Err(TrainError::CorpusNotFound(path.to_path_buf()));
    }
    let mut files = Vec::new();
    if path.is_file() {
        // A file named on the command line is read as text unless it says otherwise.
        files.push(SourceFile::of(path).unwrap_or(SourceFile {
            path: path.to_path_buf(),
            jsonl: false,
            gzip: false,
        }));
    } else {
        collect(path, &mut files)?;
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    if files.is_empty() {
        return Err(TrainError::EmptyCorpus(path.to_path_buf()));
    }
    Ok(files)
}

fn collect(dir: &Path, files: &mut Vec<SourceFile>) -> Result<(), TrainError> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.is_dir() {
            collect(&path, files)?;
        } else if let Some(file) = SourceFile::of(&path) {
            files.push(file);
        }
    }
    Ok(())
}

/// A document's raw text and where it came from.
#[derive(Debug, Clone)]
pub struct RawDocument {
    /// Its file.
    pub path: PathBuf,
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
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| corpus_error(file, line, format!("not JSON: {e}")))?;
    match value.get(field) {
        Some(serde_json::Value::String(text)) => Ok(RawDocument {
            path: file.path.clone(),
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
        RawDocuments::new(&files, field)
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
}
