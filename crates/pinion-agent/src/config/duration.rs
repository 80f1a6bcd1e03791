//! Go's `time.ParseDuration` subset kubelet config files use: a sequence of
//! decimal numbers with units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`
//! (`10s`, `1m30s`, `1.5h`, `500ms`). Negative durations are refused.

use std::time::Duration;

const UNITS: [(&str, f64); 7] = [
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
];

/// Parses a Go duration; the error says what was wrong.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty duration".to_string());
    }
    let mut rest = text;
    let mut seconds = 0.0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        if number.is_empty() || number == "." {
            return Err(format!("expected a number at {rest:?}"));
        }
        let value: f64 = number
            .parse()
            .map_err(|_| format!("bad number {number:?}"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(|| {
                if unit.is_empty() {
                    format!("missing unit after {number:?} (use ns, us, ms, s, m or h)")
                } else {
                    format!("unknown unit {unit:?} (use ns, us, ms, s, m or h)")
                }
            })?;
        seconds += value * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(seconds).map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let cases = [
            ("10s", Duration::from_secs(10)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1.5h", Duration::from_secs(5400)),
            ("0", Duration::ZERO),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_durations_say_why() {
        for (text, want) in [
            ("", "empty duration"),
            ("10", "missing unit"),
            ("10x", "unknown unit \"x\""),
            ("-1s", "expected a number"),
            ("s", "expected a number"),
        ] {
            let err = parse_go_duration(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
