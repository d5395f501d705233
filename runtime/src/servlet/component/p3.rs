//! Which components are wasi:http 0.3 (p3), or otherwise need the
//! component model's concurrency: read from the bytes before compiling, so
//! a route that has not opted in (`wasi_http_p3`), or a build without the
//! `p3` feature, refuses them with the reason. Serving them is
//! `p3_serve`'s.

use wasmparser::{CanonicalFunction, CanonicalOption, Parser, Payload};

/// The export every wasi:http 0.3 component has (any 0.3.x).
pub(crate) const HANDLER: &str = "wasi:http/handler@0.3";

/// What makes a component need wasi 0.3 and the concurrent engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum P3Use {
    /// It exports `wasi:http/handler@0.3.x`: a p3 component.
    Handler,
    /// It imports a WASI 0.3 interface (named).
    Import(String),
    /// Its canonical functions use the async ABI (or another part of the
    /// component model's concurrency).
    AsyncAbi,
}

/// Whether a component needs wasi 0.3 (and the engine with concurrency
/// support), and why; read from its export, import and canonical sections
/// without compiling it (under a millisecond for a 19 MB component).
pub(crate) fn detect(bytes: &[u8]) -> Option<P3Use> {
    let mut found = None;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(Payload::ComponentExportSection(reader))
                if reader
                    .clone()
                    .into_iter()
                    .flatten()
                    .any(|e| e.name.name.starts_with(HANDLER)) =>
            {
                return Some(P3Use::Handler);
            }
            Ok(Payload::ComponentImportSection(reader)) if found.is_none() => {
                if let Some(i) = reader
                    .into_iter()
                    .flatten()
                    .find(|i| i.name.name.contains("@0.3"))
                {
                    found = Some(P3Use::Import(i.name.name.to_owned()));
                }
            }
            Ok(Payload::ComponentCanonicalSection(reader))
                if found.is_none() && uses_concurrency(&reader) =>
            {
                found = Some(P3Use::AsyncAbi);
            }
            _ => {}
        }
    }
    found
}

/// Whether a canonical section uses the component model's concurrency:
/// async functions, streams, futures, tasks.
fn uses_concurrency(reader: &wasmparser::ComponentCanonicalSectionReader<'_>) -> bool {
    reader
        .clone()
        .into_iter()
        .flatten()
        .any(|func| match &func {
            CanonicalFunction::Lift { options, .. } | CanonicalFunction::Lower { options, .. } => {
                options
                    .iter()
                    .any(|o| matches!(o, CanonicalOption::Async | CanonicalOption::Callback(_)))
            }
            CanonicalFunction::ResourceNew { .. }
            | CanonicalFunction::ResourceDrop { .. }
            | CanonicalFunction::ResourceRep { .. } => false,
            _ => true,
        })
}

/// Why a route without `wasi_http_p3` refuses a component that needs it.
pub(super) fn refusal(why: &P3Use) -> String {
    let what = match why {
        P3Use::Handler => "is a wasi:http 0.3 (p3) component".to_owned(),
        P3Use::Import(import) => format!("imports `{import}`, a WASI 0.3 (p3) interface"),
        P3Use::AsyncAbi => {
            "uses the component model's async ABI (streams, futures, async functions)".to_owned()
        }
    };
    // A build without p3 would refuse it next for that: say both at once.
    let build = if cfg!(feature = "p3") {
        ""
    } else {
        ", with a swan built with `--features p3`"
    };
    format!(
        "{what}, which wasmtime 48 calls experimental: set `wasi_http_p3 = true` in its `[[site.route]]` (or in `[site.servlet]` for a servlets folder){build} to serve it"
    )
}

#[cfg(test)]
mod tests {
    use super::{P3Use, detect};

    #[test]
    fn a_sync_component_needs_nothing_and_an_async_lift_or_a_p3_import_does() {
        let sync = wat::parse_str(
            r#"(component
                (core module $m (func (export "f") (result i32) i32.const 1))
                (core instance $i (instantiate $m))
                (func (export "f") (result u32) (canon lift (core func $i "f"))))"#,
        )
        .expect("valid component");
        assert_eq!(detect(&sync), None);
        let with_async = wat::parse_str(include_str!("../../../../tests/guests/async-lift.wat"))
            .expect("valid component");
        assert_eq!(detect(&with_async), Some(P3Use::AsyncAbi));
        let imports_p3 = wat::parse_str(
            r#"(component (import "wasi:clocks/monotonic-clock@0.3.0" (instance)))"#,
        )
        .expect("valid component");
        assert_eq!(
            detect(&imports_p3),
            Some(P3Use::Import(
                "wasi:clocks/monotonic-clock@0.3.0".to_owned()
            ))
        );
        let exports_handler = wat::parse_str(
            r#"(component (import "x" (instance $x)) (export "wasi:http/handler@0.3.0" (instance $x)))"#,
        )
        .expect("valid component");
        assert_eq!(detect(&exports_handler), Some(P3Use::Handler));
        assert_eq!(detect(b"not wasm at all"), None);
    }
}
