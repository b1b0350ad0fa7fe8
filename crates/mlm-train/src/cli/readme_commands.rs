//! Every shell command of the workspace's README, checked: each `mlm-train` command line
//! (through `cargo run`, the built binary, `mpirun` or `srun`) is parsed by the binary's own
//! argument parser, the cargo features it names exist, and the test command is the one CI
//! runs. What each command then does is run by the trainer's tests (`short_run`,
//! `hf_interop`, `minimal_pairs`, `reliability`, `data_parallel`); the Rust snippet is a
//! doctest of the root crate.

use std::path::Path;

use super::args::command;

/// The command lines of the README's ```sh blocks, a line ending in `\` joined to the next.
fn shell_lines(readme: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let (mut in_sh, mut continued) = (false, false);
    for line in readme.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            text if in_sh && !text.is_empty() && !text.starts_with('#') => {
                let (text, next) = match text.strip_suffix('\\') {
                    Some(head) => (head.trim_end(), true),
                    None => (text, false),
                };
                match (continued, lines.last_mut()) {
                    (true, Some(last)) => *last = format!("{last} {text}"),
                    _ => lines.push(text.into()),
                }
                continued = next;
            }
            _ => {}
        }
    }
    lines
}

/// `line` split as a POSIX shell splits words without expansions: spaces separate, double
/// quotes group.
fn words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    assert!(!quoted, "unclosed quote in {line:?}");
    words.extend((!word.is_empty()).then_some(word));
    words
}

/// The arguments after the binary, for a line that runs `mlm-train`; `None` otherwise.
fn mlm_train_args(words: &[String]) -> Option<Vec<String>> {
    if words.starts_with(&["cargo".into(), "run".into()]) {
        let separator = words.iter().position(|w| w == "--")?;
        assert!(
            words.windows(2).any(|w| w == ["-p", "mlm-train"]),
            "{words:?}"
        );
        return Some(words[separator + 1..].to_vec());
    }
    let binary = words.iter().position(|w| w.ends_with("/mlm-train"))?;
    Some(words[binary + 1..].to_vec())
}

/// The features a `cargo` line names with `--features A,B`.
fn features(words: &[String]) -> Vec<String> {
    words
        .windows(2)
        .filter(|w| w[0] == "--features")
        .flat_map(|w| w[1].split(',').map(String::from).collect::<Vec<_>>())
        .collect()
}

#[test]
fn every_command_of_the_readme_parses_and_names_what_exists() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let mut subcommands = Vec::new();
    for line in shell_lines(&readme) {
        let words = words(&line);
        for feature in features(&words) {
            assert!(
                manifest.contains(&format!("\n{feature} = [")),
                "{line}: mlm-train has no feature {feature}"
            );
        }
        if let Some(args) = mlm_train_args(&words) {
            let argv = std::iter::once("mlm-train".to_string()).chain(args.iter().cloned());
            if let Err(e) = command().try_get_matches_from(argv) {
                panic!("{line}: the CLI refuses it:\n{e}");
            }
            subcommands.push(args[0].clone());
        } else if words.starts_with(&["cargo".into(), "test".into()]) {
            assert!(
                ci.lines().any(|l| l.trim() == line),
                "{line}: not what .ci/run runs"
            );
        } else {
            assert!(
                words.starts_with(&["cargo".into(), "build".into()]),
                "{line}: neither mlm-train, cargo build nor CI's cargo test"
            );
        }
    }
    for command in [
        "train",
        "predict",
        "eval",
        "export-hf",
        "import-hf",
        "fetch-corpus",
    ] {
        assert!(
            subcommands.iter().any(|s| s == command),
            "the README shows no `{command}`: {subcommands:?}"
        );
    }
}

#[test]
fn the_shell_splitter_keeps_quoted_words_whole() {
    assert_eq!(
        words(r#"mlm-train predict --run r "The [MASK] sat.""#),
        ["mlm-train", "predict", "--run", "r", "The [MASK] sat."]
    );
}

#[test]
fn a_line_ending_in_a_backslash_goes_on_on_the_next() {
    let readme = "text\n```sh\nmlm-train train \\\n    --run r \\\n    --max-steps 3\nls\n```\n";
    assert_eq!(
        shell_lines(readme),
        ["mlm-train train --run r --max-steps 3", "ls"]
    );
}
