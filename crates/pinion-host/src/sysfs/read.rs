//! File helpers for sysfs. Every error names the file it came from; a file
//! that does not exist is `Ok(None)`, never an error, because which files a
//! kernel exposes varies by version and architecture.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use pinion_core::CpuSet;

use super::DiscoveryError;
use crate::bounded_read::{read_text, ReadError, MAX_ATTRIBUTE};

/// Builds a [`DiscoveryError::Malformed`] for `path`.
pub(crate) fn malformed(path: &Path, reason: impl Into<String>) -> DiscoveryError {
    DiscoveryError::Malformed {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The file's text, or `None` when it does not exist. Anything but a
/// regular file (a FIFO, a device, a directory) is a read error; a file
/// over [`MAX_ATTRIBUTE`] bytes (sysfs attributes are at most a page) or
/// not UTF-8 is malformed.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, DiscoveryError> {
    match read_text(path, MAX_ATTRIBUTE) {
        Ok(text) => Ok(Some(text)),
        Err(ReadError::Io(err)) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(ReadError::Io(source)) => Err(DiscoveryError::Read {
            path: path.to_path_buf(),
            source,
        }),
        Err(err) => Err(malformed(path, err.to_string())),
    }
}

/// The file's text without surrounding whitespace and NUL bytes (some
/// captures carry a trailing NUL), or `None` when absent.
pub(crate) fn read_trimmed(path: &Path) -> Result<Option<String>, DiscoveryError> {
    Ok(read_optional(path)?.map(|text| trim(&text).to_string()))
}

fn trim(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\0')
}

/// A cpulist file (`0-3,8`), or `None` when absent.
pub(crate) fn read_list(path: &Path) -> Result<Option<CpuSet>, DiscoveryError> {
    let Some(text) = read_trimmed(path)? else {
        return Ok(None);
    };
    CpuSet::parse_list(&text)
        .map(Some)
        .map_err(|err| malformed(path, err.to_string()))
}

/// A hex mask file (`00000000,0000000f`), or `None` when absent.
pub(crate) fn read_mask(path: &Path) -> Result<Option<CpuSet>, DiscoveryError> {
    let Some(text) = read_trimmed(path)? else {
        return Ok(None);
    };
    CpuSet::parse_mask(&text)
        .map(Some)
        .map_err(|err| malformed(path, err.to_string()))
}

/// `dir/<list>` as a cpulist when present, else `dir/<mask>` as a hex mask
/// (older and ppc kernels only have the mask form), else `None`.
pub(crate) fn read_list_or_mask(
    dir: &Path,
    list: &str,
    mask: &str,
) -> Result<Option<CpuSet>, DiscoveryError> {
    match read_list(&dir.join(list))? {
        Some(set) => Ok(Some(set)),
        None => read_mask(&dir.join(mask)),
    }
}

/// A CPU list that the kernel may print as empty, a NUL byte, or `(null)`
/// padded with spaces (`nohz_full` when the feature is off). All of those,
/// and a missing file, are the empty set.
pub(crate) fn read_optional_list(path: &Path) -> Result<CpuSet, DiscoveryError> {
    let Some(text) = read_trimmed(path)? else {
        return Ok(CpuSet::new());
    };
    if text.is_empty() || text == "(null)" {
        return Ok(CpuSet::new());
    }
    CpuSet::parse_list(&text).map_err(|err| malformed(path, err.to_string()))
}

/// A decimal integer file (may be negative, e.g. `-1`), or `None` when absent.
pub(crate) fn read_int(path: &Path) -> Result<Option<i64>, DiscoveryError> {
    let Some(text) = read_trimmed(path)? else {
        return Ok(None);
    };
    text.parse::<i64>()
        .map(Some)
        .map_err(|_| malformed(path, format!("{text:?} is not an integer")))
}

/// An id file where `-1` (or a missing file) means "not reported".
/// Other negative values and values beyond `u32` are malformed.
pub(crate) fn read_id(path: &Path) -> Result<Option<u32>, DiscoveryError> {
    match read_int(path)? {
        None | Some(-1) => Ok(None),
        Some(value) => u32::try_from(value)
            .map(Some)
            .map_err(|_| malformed(path, format!("id {value} is out of range"))),
    }
}

/// The numbers `N` of the entries named `<prefix>N` in `dir` (e.g. `cpu12`,
/// `node3`, `index0`), ascending; `None` when `dir` does not exist.
pub(crate) fn numbered_entries(
    dir: &Path,
    prefix: &str,
) -> Result<Option<Vec<u32>>, DiscoveryError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(DiscoveryError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut numbers = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DiscoveryError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        let Some(digits) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(number) = digits.parse::<u32>() {
                numbers.push(number);
            }
        }
    }
    numbers.sort_unstable();
    Ok(Some(numbers))
}
