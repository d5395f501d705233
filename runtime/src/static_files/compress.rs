//! Load-time compression and `Accept-Encoding` negotiation.

use std::io::Write;

use http::HeaderValue;

/// Files smaller than this are not worth compressing.
pub(crate) const MIN_COMPRESS_BYTES: usize = 512;
/// A compressed variant is kept only if it is at most this share of the
/// original (per mille): smaller savings are not worth a `Vary` split.
const KEEP_RATIO_PER_MILLE: usize = 900;
/// Brotli quality: 11 is the smallest output but about ten times slower to
/// produce; 9 keeps start-up and reloads quick at a few percent more bytes.
const BROTLI_QUALITY: u32 = 9;
const BROTLI_WINDOW: u32 = 22;

/// A content coding swan can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// `br`
    Brotli,
    /// `gzip`
    Gzip,
}

impl Encoding {
    /// The `Content-Encoding` header value.
    pub(crate) fn header_value(self) -> HeaderValue {
        match self {
            Encoding::Brotli => HeaderValue::from_static("br"),
            Encoding::Gzip => HeaderValue::from_static("gzip"),
        }
    }

    /// The file-name suffix of a precompressed sibling.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Encoding::Brotli => "br",
            Encoding::Gzip => "gz",
        }
    }
}

/// Whether a Content-Type is worth compressing.
pub(crate) fn is_compressible(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || matches!(
            essence,
            "application/javascript"
                | "application/json"
                | "application/manifest+json"
                | "application/xml"
                | "application/xhtml+xml"
                | "application/rss+xml"
                | "application/atom+xml"
                | "application/wasm"
                | "image/svg+xml"
                | "image/x-icon"
                | "image/vnd.microsoft.icon"
                | "font/ttf"
                | "font/otf"
                | "application/x-font-ttf"
        )
}

/// Compresses `data`; `None` when the result would not save enough.
pub(crate) fn compress(data: &[u8], encoding: Encoding) -> Option<Vec<u8>> {
    if data.len() < MIN_COMPRESS_BYTES {
        return None;
    }
    let out = match encoding {
        Encoding::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 2),
                flate2::Compression::best(),
            );
            enc.write_all(data).ok()?;
            enc.finish().ok()?
        }
        Encoding::Brotli => {
            let mut out = Vec::with_capacity(data.len() / 2);
            {
                let mut enc = brotli::CompressorWriter::new(
                    &mut out,
                    16 << 10,
                    BROTLI_QUALITY,
                    BROTLI_WINDOW,
                );
                enc.write_all(data).ok()?;
                enc.flush().ok()?;
            }
            out
        }
    };
    worth_keeping(data.len(), out.len()).then_some(out)
}

/// Whether a compressed variant of `compressed` bytes is worth serving in
/// place of `original` bytes.
pub(crate) fn worth_keeping(original: usize, compressed: usize) -> bool {
    compressed * 1000 <= original * KEEP_RATIO_PER_MILLE
}

/// Which codings the client accepts, from its `Accept-Encoding` header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// `br`'s q-value in thousandths (0: not acceptable).
    pub brotli: u16,
    /// `gzip`'s (or `x-gzip`'s).
    pub gzip: u16,
}

impl Accepted {
    /// Parses `Accept-Encoding`, all its field lines as one list (RFC 9110
    /// §5.3), without allocating. A coding not named takes `*`'s q-value;
    /// a malformed q-value is 0.
    pub(crate) fn parse<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Accepted {
        let (mut br, mut gz, mut star) = (None, None, None);
        for line in lines {
            let Ok(value) = std::str::from_utf8(line) else {
                continue;
            };
            for item in value.split(',') {
                let mut parts = item.split(';');
                let coding = parts.next().unwrap_or("").trim();
                let mut q = 1000;
                for param in parts {
                    let param = param.trim();
                    if let Some(value) = param
                        .strip_prefix("q=")
                        .or_else(|| param.strip_prefix("Q="))
                    {
                        q = value
                            .trim()
                            .parse::<f32>()
                            .ok()
                            .filter(|q| (0.0..=1.0).contains(q))
                            .map_or(0, |q| (q * 1000.0).round() as u16);
                    }
                }
                if coding.eq_ignore_ascii_case("br") {
                    br = Some(q);
                } else if coding.eq_ignore_ascii_case("gzip")
                    || coding.eq_ignore_ascii_case("x-gzip")
                {
                    gz = Some(q);
                } else if coding == "*" {
                    star = Some(q);
                }
            }
        }
        Accepted {
            brotli: br.or(star).unwrap_or(0),
            gzip: gz.or(star).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_honours_q_values_star_and_every_field_line() {
        let q = |lines: &[&str]| {
            let a = Accepted::parse(lines.iter().map(|l| l.as_bytes()));
            (a.brotli, a.gzip)
        };
        assert_eq!(q(&["gzip, deflate, br"]), (1000, 1000));
        assert_eq!(q(&["br;q=0, gzip;q=0.5"]), (0, 500));
        assert_eq!(q(&["*"]), (1000, 1000));
        assert_eq!(q(&["*;q=0, gzip"]), (0, 1000));
        assert_eq!(q(&["identity"]), (0, 0));
        assert_eq!(q(&["gzip;q=1.0, br;q=0.5"]), (500, 1000));
        assert_eq!(q(&["*", "br;q=0"]), (0, 1000));
        assert_eq!(q(&["br;q=2", "gzip;q=x"]), (0, 0));
        assert_eq!(q(&[]), (0, 0));
    }

    #[test]
    fn compression_round_trips_and_skips_small_or_random_data() {
        let text = "swan serves static files from memory. ".repeat(100);
        let gz = compress(text.as_bytes(), Encoding::Gzip).expect("gzip");
        let mut out = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out)
            .expect("gunzip");
        assert_eq!(out, text);
        let br = compress(text.as_bytes(), Encoding::Brotli).expect("brotli");
        let mut out = Vec::new();
        brotli::BrotliDecompress(&mut &br[..], &mut out).expect("unbrotli");
        assert_eq!(out, text.as_bytes());
        assert!(compress(b"tiny", Encoding::Gzip).is_none());
        assert!(is_compressible("text/html; charset=utf-8"));
        assert!(!is_compressible("image/png"));
    }
}
