//! Kubernetes resource quantities (`500m`, `1.5`, `2`, `64Mi`, `1e3`, …).
//!
//! The grammar is Kubernetes' (`k8s.io/apimachinery` `resource.Quantity`):
//! an optional sign, a decimal number (`1`, `1.5`, `1.`, `.5`), then a suffix:
//! decimal SI (`n u m "" k M G T P E`), binary SI (`Ki Mi Gi Ti Pi Ei`) or a
//! decimal exponent (`e3`, `E-2`, `e+6`). Like Kubernetes, a value is exact
//! down to nano units and anything finer is rounded **up** (`0.1n` → `1n`).
//!
//! The two readings kubelet uses are provided: [`Quantity::milli_value`]
//! (`MilliValue`, rounded up: CPU in millicores) and [`Quantity::value`]
//! (`Value`, rounded up: memory in bytes, CPU count).
//!
//! Stricter than Kubernetes, on purpose (a pod spec never contains these,
//! because the API server rejects or rewrites them): a number without any
//! digit (`"."`, `"Mi"`, `"-"`, which Kubernetes reads as 0), negative values
//! (pod validation rejects negative requests), more than 38 significant
//! digits, and values above 2^63−1 units are errors.

use std::fmt;

/// Nano units per unit.
const NANO: u128 = 1_000_000_000;
/// Largest accepted value in nano units: 2^63−1 units (Kubernetes' bound).
const MAX_NANOS: u128 = (i64::MAX as u128) * NANO;
/// 10^38 is the largest power of ten below `u128::MAX`.
const MAX_POW10: u32 = 38;

/// Errors from [`Quantity::parse`]; each names the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error("invalid quantity {text:?}: {reason}")]
    Format { text: String, reason: &'static str },
    #[error("invalid quantity {text:?}: unknown suffix {suffix:?}")]
    Suffix { text: String, suffix: String },
    #[error("invalid quantity {text:?}: negative values are not allowed")]
    Negative { text: String },
    #[error("invalid quantity {text:?}: out of range (at most 2^63-1 units and 38 digits)")]
    OutOfRange { text: String },
}

/// A parsed, non-negative resource quantity. Equality compares values
/// (`"1"` == `"1000m"`); [`fmt::Display`] prints the text it was parsed from.
#[derive(Debug, Clone)]
pub struct Quantity {
    nanos: u128,
    text: String,
}

/// The pieces of a quantity's text, before interpretation.
struct Parts<'a> {
    negative: bool,
    int_digits: &'a str,
    frac_digits: &'a str,
    suffix: &'a str,
}

impl Quantity {
    /// Parses Kubernetes quantity text.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Empty);
        }
        let parts = split(text)?;
        let (pow10, pow2) =
            interpret_suffix(parts.suffix).ok_or_else(|| QuantityError::Suffix {
                text: text.to_owned(),
                suffix: parts.suffix.to_owned(),
            })?;
        let nanos = to_nanos(&parts, pow10, pow2).ok_or_else(|| QuantityError::OutOfRange {
            text: text.to_owned(),
        })?;
        if parts.negative && nanos != 0 {
            return Err(QuantityError::Negative {
                text: text.to_owned(),
            });
        }
        Ok(Self {
            nanos,
            text: text.to_owned(),
        })
    }

    /// Builds a quantity of `units` whole units (e.g. CPUs or bytes).
    #[must_use]
    pub fn from_units(units: u64) -> Self {
        Self {
            nanos: u128::from(units) * NANO,
            text: units.to_string(),
        }
    }

    /// Kubernetes `MilliValue`: thousandths, rounded up (CPU millicores).
    #[must_use]
    pub fn milli_value(&self) -> u128 {
        self.nanos.div_ceil(NANO / 1000)
    }

    /// Kubernetes `Value`: whole units, rounded up (memory bytes, CPUs).
    #[must_use]
    pub fn value(&self) -> u64 {
        // Bounded by MAX_NANOS, so the quotient fits in 63 bits.
        u64::try_from(self.nanos.div_ceil(NANO)).unwrap_or(u64::MAX)
    }

    /// True when the value is zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// kubelet's "integer CPU request" test: `ceil(q) * 1000 == ceil(q * 1000)`
    /// (`"2"`, `"2000m"` are integral; `"1500m"`, `"2.5"`, `"1001m"` are not).
    #[must_use]
    pub fn is_integral(&self) -> bool {
        u128::from(self.value()) * 1000 == self.milli_value()
    }

    /// The text this quantity was parsed from.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The decimal-SI canonical form Kubernetes prints (`Quantity.String()`
    /// of a decimal quantity): the largest suffix that keeps the number
    /// whole (`2000m` → `2`, `1.5` → `1500m`, `1000` → `1k`, `0` → `0`).
    /// kubelet's resize errors show CPU quantities in this form.
    #[must_use]
    pub fn canonical(&self) -> String {
        if self.nanos == 0 {
            return "0".to_owned();
        }
        // (nano units per suffix unit, suffix), largest first.
        const SUFFIXES: [(u128, &str); 10] = [
            (NANO * 1_000_000_000_000_000_000, "E"),
            (NANO * 1_000_000_000_000_000, "P"),
            (NANO * 1_000_000_000_000, "T"),
            (NANO * 1_000_000_000, "G"),
            (NANO * 1_000_000, "M"),
            (NANO * 1_000, "k"),
            (NANO, ""),
            (NANO / 1_000, "m"),
            (NANO / 1_000_000, "u"),
            (1, "n"),
        ];
        SUFFIXES
            .iter()
            .find(|(unit, _)| self.nanos.is_multiple_of(*unit))
            .map_or_else(
                || format!("{}n", self.nanos),
                |(unit, suffix)| format!("{}{suffix}", self.nanos / unit),
            )
    }
}

/// Splits `text` into sign, number and suffix (the suffix is checked later).
fn split(text: &str) -> Result<Parts<'_>, QuantityError> {
    let format = |reason| QuantityError::Format {
        text: text.to_owned(),
        reason,
    };
    let (negative, rest) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let int_len = digit_run(rest);
    let int_digits = &rest[..int_len];
    let mut rest = &rest[int_len..];
    let mut frac_digits = "";
    if let Some(after_dot) = rest.strip_prefix('.') {
        let frac_len = digit_run(after_dot);
        frac_digits = &after_dot[..frac_len];
        rest = &after_dot[frac_len..];
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(format("the number has no digits"));
    }
    let letters = rest
        .bytes()
        .take_while(|b| b"eEinumkKMGTP".contains(b))
        .count();
    let mut tail = &rest[letters..];
    if let Some(unsigned) = tail.strip_prefix(['+', '-']) {
        tail = unsigned;
    }
    if digit_run(tail) != tail.len() {
        return Err(format("unexpected characters after the number"));
    }
    Ok(Parts {
        negative,
        int_digits,
        frac_digits,
        suffix: rest,
    })
}

fn digit_run(text: &str) -> usize {
    text.bytes().take_while(u8::is_ascii_digit).count()
}

/// Suffix → (power of ten, power of two), or `None` when unknown.
fn interpret_suffix(suffix: &str) -> Option<(i64, u32)> {
    let decimal = match suffix {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(pow10) = decimal {
        return Some((pow10, 0));
    }
    let binary = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(pow2) = binary {
        return Some((0, pow2));
    }
    let exponent = suffix.strip_prefix(['e', 'E'])?;
    let digits = exponent.trim_start_matches(['+', '-']);
    let signs = exponent.len() - digits.len();
    if digits.is_empty() || signs > 1 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Exponents beyond any representable value saturate; to_nanos rejects
    // them (or rounds them up to one nano unit).
    Some((
        exponent
            .parse::<i64>()
            .unwrap_or_else(|_| saturate(exponent)),
        0,
    ))
}

fn saturate(exponent: &str) -> i64 {
    if exponent.starts_with('-') {
        i64::MIN / 2
    } else {
        i64::MAX / 2
    }
}

/// The value in nano units, rounded up; `None` when out of range.
fn to_nanos(parts: &Parts<'_>, pow10: i64, pow2: u32) -> Option<u128> {
    let digits = format!("{}{}", parts.int_digits, parts.frac_digits);
    let significant = digits.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return Some(0);
    }
    let trailing_zeros = i64::try_from(significant.len() - trimmed.len()).ok()?;
    let frac_len = i64::try_from(parts.frac_digits.len()).ok()?;
    let mantissa: u128 = trimmed.parse().ok()?;
    let scaled = mantissa.checked_mul(1u128 << pow2)?;
    // value = scaled * 10^exp10 units = scaled * 10^(exp10 + 9) nanos.
    // Any exponent beyond ±2^40 is out of range (or below one nano) either
    // way; clamping keeps the sum from overflowing for exponents like
    // `E9223372036854775807`, which parse as a valid i64.
    let pow10 = pow10.clamp(-(1 << 40), 1 << 40);
    let shift = pow10 - frac_len + trailing_zeros + 9;
    let nanos = if shift >= 0 {
        let shift = u32::try_from(shift).ok().filter(|s| *s <= MAX_POW10)?;
        scaled.checked_mul(10u128.pow(shift))?
    } else {
        match u32::try_from(-shift).ok().filter(|s| *s <= MAX_POW10) {
            Some(down) => scaled.div_ceil(10u128.pow(down)),
            // Less than one nano unit: Kubernetes rounds up to 1n.
            None => 1,
        }
    };
    (nanos <= MAX_NANOS).then_some(nanos)
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(text: &str) -> Result<Self, QuantityError> {
        Self::parse(text)
    }
}

impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(QuantityVisitor)
    }
}

/// Accepts quantity strings and, for YAML convenience, plain numbers.
struct QuantityVisitor;

impl serde::de::Visitor<'_> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes quantity such as \"500m\", \"2\" or \"64Mi\"")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Quantity, E> {
        Quantity::parse(text).map_err(E::custom)
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Quantity, E> {
        self.visit_str(&value.to_string())
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Quantity, E> {
        self.visit_str(&value.to_string())
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Quantity, E> {
        self.visit_str(&value.to_string())
    }
}

#[cfg(test)]
mod tests;
