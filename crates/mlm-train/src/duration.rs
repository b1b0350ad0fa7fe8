//! Durations as people write them: `--time-budget 5m` in, `2m 5s` out.

use thiserror::Error;

/// A `--time-budget` that is no positive duration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("time budget {text:?}: {reason}")]
pub struct TimeBudgetError {
    /// The text as given.
    pub text: String,
    /// Why it cannot be used.
    pub reason: String,
}

/// Seconds in a duration written as people write it: `90s`, `5m`, `1h30m`, `1h 30min`
/// (humantime's units, from `ms` to `d`).
///
/// # Errors
/// [`TimeBudgetError`] for text that is no duration (`5`, `five minutes`) or a zero
/// one, which would train nothing.
pub fn parse_time_budget(text: &str) -> Result<f64, TimeBudgetError> {
    let bad = |reason: String| TimeBudgetError {
        text: text.into(),
        reason,
    };
    if text.trim_start().starts_with('-') {
        return Err(bad(
            "a negative duration; give a positive one, e.g. 90s, 5m or 1h30m".into(),
        ));
    }
    let duration = humantime::parse_duration(text.trim())
        .map_err(|e| bad(format!("not a duration ({e}); write e.g. 90s, 5m or 1h30m")))?;
    if duration.is_zero() {
        return Err(bad(
            "a run of no time trains nothing; give a positive duration, e.g. 90s, 5m or 1h30m"
                .into(),
        ));
    }
    Ok(duration.as_secs_f64())
}

/// `seconds` as people write a duration, to the second (to the millisecond below 10 s):
/// `2m 5s`, `1h 30m`, `3s 120ms`.
pub fn human_duration(seconds: f64) -> String {
    let millis = (seconds.max(0.0) * 1e3).round() as u64;
    let millis = if millis >= 10_000 {
        (millis + 500) / 1000 * 1000
    } else {
        millis
    };
    humantime::format_duration(std::time::Duration::from_millis(millis)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_budgets_are_read_as_people_write_durations() {
        for (text, seconds) in [
            ("90s", 90.0),
            ("5m", 300.0),
            ("1h30m", 5400.0),
            ("1h 30min", 5400.0),
            (" 2m ", 120.0),
            ("1500ms", 1.5),
        ] {
            assert_eq!(parse_time_budget(text).unwrap(), seconds, "{text}");
        }
    }

    #[test]
    fn a_time_budget_that_is_no_positive_duration_is_refused_in_plain_words() {
        for (text, words) in [
            ("5", "not a duration"),
            ("five minutes", "not a duration"),
            ("-5m", "negative"),
            (" -90s", "negative"),
            ("", "not a duration"),
            ("5 parsecs", "not a duration"),
            ("0s", "trains nothing"),
            ("0h0m", "trains nothing"),
        ] {
            match parse_time_budget(text) {
                Err(e) => {
                    let message = e.to_string();
                    assert!(message.contains(words), "{text:?}: {message}");
                    assert!(
                        message.contains("5m"),
                        "{text:?} gives no example: {message}"
                    );
                }
                Ok(seconds) => panic!("{text:?}: {seconds}"),
            }
        }
    }

    #[test]
    fn durations_are_shown_to_the_second() {
        assert_eq!(human_duration(300.0), "5m");
        assert_eq!(human_duration(121.4), "2m 1s");
        assert_eq!(human_duration(5400.0), "1h 30m");
        assert_eq!(human_duration(3.12), "3s 120ms");
    }
}
