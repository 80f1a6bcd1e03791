//! Reading the CLI's input files: a path or `-` for standard input, holding
//! JSON or YAML.

use std::io::{self, ErrorKind, Read};
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

/// The most an input file (or standard input) may hold: 16 MiB, far more
/// than any scenario or case file, and a bound on what `/dev/zero` or an
/// endless pipe given by mistake can take.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;

/// The text of `path`, or of standard input when `path` is `-`, at most
/// [`MAX_INPUT_BYTES`]: a longer input is an error naming it and the cap.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        return read_capped(io::stdin().lock(), MAX_INPUT_BYTES)
            .context("cannot read standard input");
    }
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    read_capped(file, MAX_INPUT_BYTES).with_context(|| format!("cannot read {}", path.display()))
}

/// At most `cap` bytes of UTF-8 text from `reader`; reads one byte past
/// the cap to tell "exactly the cap" from "more".
fn read_capped(reader: impl Read, cap: u64) -> io::Result<String> {
    let mut bytes = Vec::new();
    reader.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).map_or(true, |len| len > cap) {
        return Err(io::Error::new(
            ErrorKind::FileTooLarge,
            format!("larger than the {} MiB cap ({cap} bytes)", cap >> 20),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|err| io::Error::new(ErrorKind::InvalidData, format!("not UTF-8 text: {err}")))
}

/// Parses JSON, or YAML when the text is not JSON.
pub fn parse_json_or_yaml(text: &str) -> anyhow::Result<Value> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(json_err) => serde_yaml_ng::from_str(text)
            .map_err(|yaml_err| anyhow::anyhow!("not JSON ({json_err}) nor YAML ({yaml_err})")),
    }
}

/// [`read_text`] then [`parse_json_or_yaml`], naming the file on error.
pub fn read_json_or_yaml(path: &Path) -> anyhow::Result<Value> {
    let text = read_text(path)?;
    parse_json_or_yaml(&text).with_context(|| format!("cannot parse {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regression_input_was_read_without_a_cap() {
        let at = read_capped(&b"0123456789"[..], 10).expect("at the cap");
        assert_eq!(at, "0123456789");
        let over = read_capped(&b"0123456789x"[..], 10).expect_err("over the cap");
        assert_eq!(over.kind(), ErrorKind::FileTooLarge);
        let endless = read_capped(io::repeat(0), MAX_INPUT_BYTES).expect_err("endless");
        assert_eq!(
            endless.to_string(),
            "larger than the 16 MiB cap (16777216 bytes)"
        );
    }

    #[test]
    fn non_utf8_input_is_refused() {
        let err = read_capped(&[0xff_u8, 0xfe][..], 10).expect_err("not text");
        assert_eq!(err.kind(), ErrorKind::InvalidData);
    }
}
