//! Reading the CLI's input files: a path or `-` for standard input, holding
//! JSON or YAML.

use std::io::Read as _;
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

/// The text of `path`, or of standard input when `path` is `-`.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
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
