//! A minimal-pair suite (`--minimal-pairs`) read before anything is trained or loaded, and
//! scored on a run's newest checkpoint (`eval`, and `train` once it has finished).

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use crate::backend::BackendKind;
use crate::cli::args::MinimalPairsArgs;
use crate::data::{Paradigm, read_minimal_pairs};
use crate::error::TrainError;
use crate::eval::grammar::{MinimalPairsScore, Scoring, ScoringOptions, score_minimal_pairs};
use crate::run::TrainedRun;

/// A minimal-pair suite, read before anything is trained or loaded.
pub(crate) struct Suite {
    path: PathBuf,
    paradigms: Vec<Paradigm>,
    max_pairs: Option<usize>,
    scoring: Scoring,
}

impl MinimalPairsArgs {
    /// The suite if one is given.
    pub(crate) fn read(&self) -> Result<Option<Suite>, TrainError> {
        let Some(path) = &self.minimal_pairs else {
            return Ok(None);
        };
        Ok(Some(Suite {
            path: path.clone(),
            paradigms: read_minimal_pairs(path)?,
            max_pairs: self.max_pairs.map(NonZeroUsize::get),
            scoring: self.scoring,
        }))
    }
}

impl Suite {
    /// The newest checkpoint of the run in `run` scored on this suite, its table printed.
    pub(crate) fn score(
        &self,
        run: &Path,
        backend: BackendKind,
    ) -> Result<MinimalPairsScore, TrainError> {
        let device = backend.plain_device()?;
        let trained = TrainedRun::load(run, &device)?;
        let score = score_minimal_pairs(
            &trained.model,
            &trained.tokenizer,
            &self.path,
            &self.paradigms,
            &ScoringOptions {
                max_pairs: self.max_pairs,
                scoring: self.scoring,
                unigram: trained.unigram_scorer()?.as_ref(),
            },
            &device,
        )?;
        println!("{}", score.table());
        println!(
            "minimal pairs {}: scored {} sentences by {} in {:.0} s",
            self.path.display(),
            2 * score.pairs,
            self.scoring,
            score.seconds
        );
        Ok(score)
    }
}
