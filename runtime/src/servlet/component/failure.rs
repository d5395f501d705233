//! What a component's failure means for the client: its own error codes
//! (either wasi:http version), a trap, a timeout or no response at all, as
//! one [`RequestError`]; what a link error names; and what a guest that
//! returned left unfinished.

use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;

use super::{BodyVerdict, ComponentGuest, DeadlineExceeded};
use crate::request::RequestError;
use crate::servlet::fault::fault_line;

/// What a guest's own error code means, for either wasi:http version.
#[derive(Debug)]
pub(super) enum GuestCode {
    BodyTooLarge,
    Timeout,
    Other(String),
}

impl ComponentGuest {
    /// What the client gets for a guest that failed before its response
    /// was sent.
    pub(super) fn no_response(
        &self,
        failure: &str,
        verdict: &BodyVerdict,
        store_down: bool,
        id: &str,
    ) -> RequestError {
        if let Some(e) = verdict.client_error() {
            return e;
        }
        if store_down {
            return RequestError::StoreUnavailable;
        }
        if failure.contains("deadline") {
            return RequestError::ServletTimeout;
        }
        tracing::debug!(servlet = %self.info.name, request_id = %id, failure, "no response");
        if self.info.development && failure.starts_with("trap") {
            return RequestError::ServletTrapped {
                servlet: self.info.name.clone(),
                detail: failure.into(),
            };
        }
        RequestError::fault(failure.lines().next().unwrap_or_default())
    }

    /// A failure's log text, without the guest's backtrace noise.
    pub(super) fn describe_failure(&self, e: &wasmtime::Error) -> String {
        if e.is::<DeadlineExceeded>() {
            return "servlet ran past its deadline".to_owned();
        }
        if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
            return format!("exited with code {}", exit.0);
        }
        // One line, with the guest's frames (it goes to the log, and in
        // development mode to the client).
        fault_line(e)
    }

    /// What a guest's own error code means for the client.
    pub(super) fn error_for(
        &self,
        code: &GuestCode,
        verdict: &BodyVerdict,
        id: &str,
    ) -> RequestError {
        let detail = match code {
            GuestCode::Other(detail) => detail.as_str(),
            GuestCode::BodyTooLarge => "request body too large",
            GuestCode::Timeout => "timeout",
        };
        tracing::debug!(servlet = %self.info.name, request_id = %id, code = detail, "component answered with an error code");
        if let Some(e) = verdict.client_error() {
            return e;
        }
        match code {
            GuestCode::BodyTooLarge => RequestError::PayloadTooLarge,
            GuestCode::Timeout => RequestError::ServletTimeout,
            GuestCode::Other(_) => {
                // A 500 the operator should see the reason of, as for a trap.
                tracing::warn!(servlet = %self.info.name, request_id = %id, code = detail, "component answered with an error code: 500");
                RequestError::fault(format!("answered the error code {detail}"))
            }
        }
    }
}

/// The packages whose interfaces swan links for components.
const PROVIDED: [&str; 10] = [
    "wasi:io",
    "wasi:clocks",
    "wasi:random",
    "wasi:cli",
    "wasi:filesystem",
    "wasi:sockets",
    "wasi:http",
    "wasi:config",
    "wasi:keyvalue",
    "swan:keyvalue",
];

/// The import a link error names, and why it does not link. wasmtime
/// says "component imports instance `wasi:foo/bar@1.0.0`, but a matching
/// implementation was not found in the linker" (or "function",
/// "resource"...), with the cause below it when swan has the interface but
/// not what the component asks of it (a function it lacks, a wrong type).
pub(super) fn missing_import(e: &wasmtime::Error) -> (String, String) {
    let text = e.to_string();
    let named = text.find("imports ").and_then(|at| {
        let after = &text[at..];
        let start = after.find('`')? + 1;
        let len = after[start..].find('`')?;
        Some(after[start..start + len].to_owned())
    });
    // wasmtime gives a cause either way ("instance export `f` has the
    // wrong type"): it is worth saying only for an interface swan has.
    let provided = named.as_deref().is_some_and(|name| {
        let package = name.split('/').next().unwrap_or_default();
        PROVIDED.contains(&package) && (name.contains("@0.2") || name.contains("@0.3"))
    });
    let causes: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
    let why = if provided && !causes.is_empty() {
        format!(
            "which does not match what swan provides: {}",
            causes.join(": ")
        )
    } else {
        "which swan does not provide to components".to_owned()
    };
    match named {
        Some(name) => (name, why),
        None => (format!("{e:#}"), why),
    }
}

/// What a p2 guest's own error code means.
pub(super) fn p2_code(code: &ErrorCode) -> GuestCode {
    match code {
        ErrorCode::HttpRequestBodySize(_) => GuestCode::BodyTooLarge,
        ErrorCode::ConnectionReadTimeout | ErrorCode::HttpResponseTimeout => GuestCode::Timeout,
        other => GuestCode::Other(format!("{other:?}")),
    }
}

/// What a guest that returned still holds (its table is scanned once).
pub(super) struct Leftovers {
    /// Of its answer: a response outparam it never set, or an outgoing
    /// body it never finished. Once `handle` returns no guest code runs
    /// again, so neither can ever complete; wasi:http would end such a
    /// body as if it were complete when the store goes.
    pub(super) unfinished: Option<&'static str>,
    /// Of its request: the request or its body, which keep the client's
    /// connection waiting for the body to be read (and would let the next
    /// request in this instance read it). Such an instance is not reused.
    pub(super) request: bool,
}

pub(super) fn leftovers(table: &mut wasmtime::component::ResourceTable) -> Leftovers {
    use wasmtime_wasi_http::p2::body::{HostFutureTrailers, HostIncomingBody, HostOutgoingBody};
    use wasmtime_wasi_http::p2::types::{HostIncomingRequest, HostResponseOutparam};
    let mut found = Leftovers {
        unfinished: None,
        request: false,
    };
    for entry in table.iter_mut() {
        if entry.is::<HostResponseOutparam>() {
            found.unfinished = Some("setting its response");
        } else if entry.is::<HostOutgoingBody>() {
            found.unfinished = found.unfinished.or(Some("finishing an outgoing body"));
        } else if entry.is::<HostIncomingRequest>()
            || entry.is::<HostIncomingBody>()
            || entry.is::<HostFutureTrailers>()
            || holds_p3_request(&*entry)
        {
            found.request = true;
        }
    }
    found
}

/// A p3 guest's request, kept past its answer (in a global, say).
#[cfg(feature = "p3")]
fn holds_p3_request(entry: &(dyn std::any::Any + Send)) -> bool {
    entry.is::<wasmtime_wasi_http::p3::Request>()
}

#[cfg(not(feature = "p3"))]
fn holds_p3_request(_: &(dyn std::any::Any + Send)) -> bool {
    false
}
