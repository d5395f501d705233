//! Keeps each of swan's own log lines one line: whatever a field carries
//! (a file name, a module's import names, an error from a guest's code),
//! a line feed or another control byte inside a line is written escaped,
//! so no text can end a line and start one that looks like swan's.

use std::borrow::Cow;

/// `line` (one formatted log event, ending with its line feed) with the
/// control bytes inside it escaped as `\n`, `\r` or `\xNN` (tab kept; ESC
/// kept when `ansi`, the formatter's colours), and the Unicode line and
/// paragraph separators (U+2028, U+2029) and the bidirectional overrides
/// and isolates (U+202A–U+202E, U+2066–U+2069, which make a viewer show a
/// line's text in another order) as `\u{2028}`. Borrowed, with no copy,
/// when there is nothing to escape.
pub fn one_line(line: &[u8], ansi: bool) -> Cow<'_, [u8]> {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let plain = |i: usize, b: u8| match b {
        b'\t' => true,
        0x1b => ansi,
        0..0x20 | 0x7f => false,
        0xe2 => special(body, i).is_none(),
        _ => true,
    };
    if body.iter().enumerate().all(|(i, &b)| plain(i, b)) {
        return Cow::Borrowed(line);
    }
    let mut out = Vec::with_capacity(line.len() + 16);
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if plain(i, b) {
            out.push(b);
        } else if let Some(c) = special(body, i) {
            out.extend_from_slice(format!("\\u{{{:x}}}", u32::from(c)).as_bytes());
            i += 2;
        } else {
            match b {
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            }
        }
        i += 1;
    }
    if body.len() < line.len() {
        out.push(b'\n');
    }
    Cow::Owned(out)
}

/// Whether `c`, shown raw, breaks a line (U+2028, U+2029) or makes a
/// viewer show the line's text in another order (the bidirectional
/// overrides and isolates, U+202A–U+202E and U+2066–U+2069): what every
/// log line escapes besides control characters.
pub fn breaks_or_reorders(c: char) -> bool {
    matches!(c, '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The character starting at `i` (a 0xE2 lead byte) if it is one that
/// [`breaks_or_reorders`] a line.
fn special(body: &[u8], i: usize) -> Option<char> {
    let c = std::str::from_utf8(body.get(i..i + 3)?)
        .ok()?
        .chars()
        .next()?;
    breaks_or_reorders(c).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn a_line_with_nothing_to_escape_is_not_copied() {
        let line = b"2026-12-03T00:00:00Z  INFO servlet loaded servlet=hello \xc3\xa9\t\n";
        assert!(matches!(
            one_line(line, false),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn text_inside_a_line_cannot_start_another() {
        let forged = "ERROR servlet refused: imports `x\n2026-12-03T00:00:00Z  INFO forged\r\u{2028}\u{1b}[2J\u{7f}`\n";
        let out = one_line(forged.as_bytes(), false);
        let out = String::from_utf8(out.into_owned()).expect("utf-8");
        assert_eq!(
            out,
            "ERROR servlet refused: imports `x\\n2026-12-03T00:00:00Z  INFO forged\\r\\u{2028}\\x1b[2J\\x7f`\n"
        );
        assert_eq!(out.matches('\n').count(), 1);
    }

    #[test]
    fn colours_pass_when_the_formatter_makes_them() {
        let line = b"\x1b[32m INFO\x1b[0m ok\n";
        assert_eq!(&one_line(line, true)[..], &line[..]);
        assert_eq!(&one_line(line, false)[..], b"\\x1b[32m INFO\\x1b[0m ok\n");
    }

    #[test]
    fn bidirectional_overrides_are_escaped() {
        let line = "site=a\u{202e}b \u{2066}c\u{2069} \u{202a}\n";
        assert_eq!(
            &one_line(line.as_bytes(), false)[..],
            b"site=a\\u{202e}b \\u{2066}c\\u{2069} \\u{202a}\n"
        );
    }

    #[test]
    fn a_lone_e2_byte_is_left_alone() {
        // Other characters starting with 0xE2 (arrows, quotes) pass.
        let line = "a \u{2192} b \u{201c}q\u{201d}\n";
        assert_eq!(&one_line(line.as_bytes(), false)[..], line.as_bytes());
    }
}
