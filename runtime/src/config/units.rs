//! Sizes ("64 KiB") and durations ("500ms") as swan.toml writes them.

use std::time::Duration;

/// Parses "65536", "64KiB", "64 KiB", "1.5 MB"... into bytes.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let (number, unit) = number_and_unit(s)?;
    let written = unit.trim();
    let multiplier: u64 = match written.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => {
            return Err(format!(
                "has the unknown unit {written:?} (units: B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)"
            ));
        }
    };
    let bytes = number * multiplier as f64;
    if bytes.is_finite() && bytes < u64::MAX as f64 {
        Ok(bytes as u64)
    } else {
        Err("is out of range (at most 16 EiB)".to_owned())
    }
}

/// Parses "250ms", "10s", "1.5s", "2m", "1h", "1d".
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = number_and_unit(s)?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "s" => number,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86_400.0,
        "" => return Err("has no unit (units: ms, s, m or min, h, d)".to_owned()),
        other => {
            return Err(format!(
                "has the unknown unit {other:?} (units: ms, s, m or min, h, d)"
            ));
        }
    };
    // Timeouts are kept in milliseconds: a nonzero duration under one
    // would act as zero (every connection cut at once).
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if d.is_zero() || (d >= Duration::from_millis(1) && d <= MAX_DURATION) => Ok(d),
        Ok(d) if d < Duration::from_millis(1) => {
            Err("is shorter than 1ms (the shortest duration that is not 0)".to_owned())
        }
        _ => Err("is out of range (at most a year: \"365d\" or \"8760h\")".to_owned()),
    }
}

/// "1.5 MiB" as (1.5, " MiB"): the leading number, and what follows it.
fn number_and_unit(s: &str) -> Result<(f64, &str), String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number = number.parse().map_err(|_| {
        if s.starts_with('-') {
            "is negative".to_owned()
        } else {
            "does not start with a number".to_owned()
        }
    })?;
    Ok((number, unit))
}

/// The longest duration any key takes (a year): past it, millisecond
/// arithmetic on timeouts would overflow into tiny ones.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_and_without_units() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64 KiB"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2 GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert!(parse_size("ten").is_err());
        assert!(parse_size("10 parsecs").is_err());
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("0.0001ms").is_err());
        assert!(parse_duration("0.5ms").is_err());
        assert_eq!(parse_duration("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("365d"), Ok(MAX_DURATION));
    }

    #[test]
    fn a_value_that_does_not_parse_says_why() {
        let why = |r: Result<Duration, String>| r.err().unwrap_or_default();
        assert!(why(parse_duration("366d")).contains("out of range"));
        assert!(why(parse_duration("10 parsecs")).contains("unknown unit \"parsecs\""));
        assert!(why(parse_duration("10")).contains("no unit"));
        assert!(why(parse_duration("-1s")).contains("negative"));
        assert!(why(parse_duration("0.5ms")).contains("shorter than 1ms"));
        assert!(why(parse_duration("1e9 h")).contains("unknown unit"));
        assert_eq!(parse_size("1 TiB"), Ok(1 << 40));
        assert!(
            parse_size("1 EiB")
                .err()
                .unwrap_or_default()
                .contains("units: B, KB")
        );
        assert!(
            parse_size("99999999 TB")
                .err()
                .unwrap_or_default()
                .contains("out of range")
        );
    }
}
