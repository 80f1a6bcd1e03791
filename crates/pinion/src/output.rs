//! The one output convention of every command that prints data:
//! `-o/--output table|wide|json|yaml`, and the helpers that render it
//! (aligned columns, JSON, YAML, times as local dates and ages).
//!
//! The old spellings (`--format table|text|json`) keep working for one
//! release, with a deprecation note on standard error.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// What a command prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns for people (the default).
    Table,
    /// The table with every column (where a command has more to show).
    Wide,
    /// JSON (pretty; line-oriented commands print one object per line).
    Json,
    /// YAML (one document per object).
    Yaml,
}

/// The deprecated `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LegacyFormat {
    Table,
    Text,
    Json,
    /// `pinion state inspect --format effective`, now `--effective`.
    Effective,
}

/// The output options; flatten into a command's `Args`.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// Output format [default: table; `pinion alloc FILE`'s cases: json,
    /// one object per line].
    #[arg(short = 'o', long = "output", value_enum, global = true)]
    output: Option<Output>,
    /// Deprecated: use -o/--output (`text` is `table`).
    #[arg(long = "format", value_enum, hide = true, global = true)]
    format: Option<LegacyFormat>,
}

impl OutputArgs {
    /// Whether the deprecated `--format effective` was given.
    pub fn legacy_effective(&self) -> bool {
        self.format == Some(LegacyFormat::Effective)
    }

    /// The chosen format, `table` when none was given; a deprecated
    /// `--format` wins (with a note on standard error) so that old scripts
    /// keep their output.
    pub fn output(&self) -> Output {
        self.output_or(Output::Table)
    }

    /// [`OutputArgs::output`] for a command whose default is `default`
    /// (a machine form such as `pinion alloc FILE`, which prints JSON lines).
    pub fn output_or(&self, default: Output) -> Output {
        match self.format {
            None => self.output.unwrap_or(default),
            Some(LegacyFormat::Effective) => {
                eprintln!(
                    "pinion: warning: --format effective is deprecated and will be removed in \
                     the next release; use --effective (pinion state inspect)"
                );
                Output::Json
            }
            Some(legacy) => {
                let (old, new) = match legacy {
                    LegacyFormat::Table => ("table", Output::Table),
                    LegacyFormat::Text => ("text", Output::Table),
                    LegacyFormat::Json | LegacyFormat::Effective => ("json", Output::Json),
                };
                let name = match new {
                    Output::Json => "json",
                    _ => "table",
                };
                eprintln!(
                    "pinion: warning: --format {old} is deprecated and will be removed in the \
                     next release; use -o {name} (or --output {name})"
                );
                new
            }
        }
    }
}

/// `value` as pretty JSON with a final newline.
pub fn json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(text)
}

/// `value` as one YAML document (starting with `---`).
pub fn yaml<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    let text = serde_yaml_ng::to_string(value)?;
    Ok(format!("---\n{text}"))
}

/// One object of a line-oriented command, given as its compact JSON line,
/// as `output` wants it: that line for `json`, a YAML document for `yaml`
/// (`None` for the table formats, which the command renders itself).
pub fn object_line(output: Output, json_line: &str) -> anyhow::Result<Option<String>> {
    Ok(match output {
        Output::Json => Some(format!("{json_line}\n")),
        Output::Yaml => Some(yaml(&serde_json::from_str::<serde_json::Value>(
            json_line,
        )?)?),
        Output::Table | Output::Wide => None,
    })
}

/// `value` in `output`, or the text `table` makes of it for `table`/`wide`
/// (`wide` tells the table to show every column).
pub fn render<T: Serialize + ?Sized>(
    output: Output,
    value: &T,
    table: impl FnOnce(&T, bool) -> String,
) -> anyhow::Result<String> {
    match output {
        Output::Table => Ok(table(value, false)),
        Output::Wide => Ok(table(value, true)),
        Output::Json => json(value),
        Output::Yaml => yaml(value),
    }
}

/// A table: a header and rows of cells, printed in aligned columns (two
/// spaces between, no trailing blanks). Columns named in `right` are
/// right-aligned (numbers).
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; a name ending in `>` is right-aligned
    /// (the `>` is not printed).
    pub fn new(columns: &[&'static str]) -> Self {
        Self {
            header: columns.iter().map(|c| c.trim_end_matches('>')).collect(),
            right: columns.iter().map(|c| c.ends_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing and empty cells print as `-`).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The aligned text, one line per row after the header.
    pub fn render(&self) -> String {
        let cell = |row: &[String], i: usize| -> String {
            match row.get(i) {
                Some(c) if !c.is_empty() => c.clone(),
                _ => "-".to_string(),
            }
        };
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, width) in widths.iter_mut().enumerate() {
                *width = (*width).max(cell(row, i).chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.header.iter().map(ToString::to_string).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let text = if std::ptr::eq(row, &header) {
                    row[i].clone()
                } else {
                    cell(row, i)
                };
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = width - text.chars().count();
                if self.right[i] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(&text);
                } else {
                    line.push_str(&text);
                    line.push_str(&" ".repeat(pad));
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }
}

/// Where "now" and the local time zone come from when times are printed:
/// the system's, or fixed ones in tests.
#[derive(Debug, Clone)]
pub struct Clock {
    pub now: SystemTime,
    pub zone: jiff::tz::TimeZone,
}

impl Clock {
    /// This machine's time and time zone.
    pub fn system() -> Self {
        Self {
            now: SystemTime::now(),
            zone: jiff::tz::TimeZone::system(),
        }
    }

    /// A time given as seconds since the epoch, for people: the local date
    /// and time and its age, e.g. `2026-11-28 01:02:03 +01:00 (12 s ago)`.
    pub fn time(&self, epoch_seconds: u64) -> String {
        let then = UNIX_EPOCH + Duration::from_secs(epoch_seconds);
        let date = i64::try_from(epoch_seconds)
            .ok()
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
            .map_or_else(
                || format!("{epoch_seconds} s after 1970"),
                |ts| {
                    ts.to_zoned(self.zone.clone())
                        .strftime("%Y-%m-%d %H:%M:%S %:z")
                        .to_string()
                },
            );
        let age = match self.now.duration_since(then) {
            Ok(age) => format!("{} ago", duration(age)),
            Err(ahead) => format!("in {}", duration(ahead.duration())),
        };
        format!("{date} ({age})")
    }
}

/// A duration for people, in its largest whole unit: `12 s`, `5 min`,
/// `3 h`, `2 d`.
pub fn duration(span: Duration) -> String {
    let s = span.as_secs();
    match s {
        0..120 => format!("{s} s"),
        120..7_200 => format!("{} min", s / 60),
        7_200..172_800 => format!("{} h", s / 3_600),
        _ => format!("{} d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_numbers_align_right() {
        let mut table = Table::new(&["NAME", "SIZE>", "NOTE"]);
        table.row(vec!["a".into(), "1".into(), String::new()]);
        table.row(vec!["longer".into(), "12".into(), "x".into()]);
        assert_eq!(
            table.render(),
            "NAME    SIZE  NOTE\na          1  -\nlonger    12  x\n"
        );
    }

    #[test]
    fn times_print_as_local_dates_and_ages_never_epochs() {
        let clock = Clock {
            now: UNIX_EPOCH + Duration::from_secs(1_795_821_409),
            zone: jiff::tz::TimeZone::UTC,
        };
        let text = clock.time(1_795_821_397);
        assert_eq!(text, "2026-11-27 23:16:37 +00:00 (12 s ago)");
        let later = clock.time(1_795_821_397 + 600);
        assert!(later.ends_with("(in 9 min)"), "{later}");
    }

    #[test]
    fn durations_use_their_largest_whole_unit() {
        let cases = [
            (0, "0 s"),
            (119, "119 s"),
            (600, "10 min"),
            (7_200, "2 h"),
            (200_000, "2 d"),
        ];
        for (seconds, want) in cases {
            assert_eq!(duration(Duration::from_secs(seconds)), want);
        }
    }
}
