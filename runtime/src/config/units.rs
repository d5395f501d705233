//! Sizes ("64 KiB") and durations ("500ms") as swan.toml writes them.

use std::time::Duration;

/// Parses "65536", "64KiB", "64 KiB", "1.5 MB"... into bytes.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let (number, unit) = number_and_unit(s)?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        _ => return None,
    };
    let bytes = number * multiplier as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// Parses "250ms", "10s", "1.5s", "2m", "1h".
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let (number, unit) = number_and_unit(s)?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "s" => number,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        _ => return None,
    };
    // Timeouts are kept in milliseconds: a nonzero duration under one
    // would act as zero (every connection cut at once).
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| *d <= MAX_DURATION && (d.is_zero() || *d >= Duration::from_millis(1)))
}

/// "1.5 MiB" as (1.5, " MiB"): the leading number, and what follows it.
fn number_and_unit(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    Some((number.parse().ok()?, unit))
}

/// The longest duration any key takes (a year): past it, millisecond
/// arithmetic on timeouts would overflow into tiny ones.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_and_without_units() {
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("64 KiB"), Some(65536));
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("2 GB"), Some(2_000_000_000));
        assert_eq!(parse_size("1.5 KiB"), Some(1536));
        assert_eq!(parse_size("ten"), None);
        assert_eq!(parse_size("10 parsecs"), None);
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("0.0001ms"), None);
        assert_eq!(parse_duration("0.5ms"), None);
        assert_eq!(parse_duration("1ms"), Some(Duration::from_millis(1)));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
    }
}
