//! Serving wasi:http 0.3 (p3) components: the `wasi:http/service` world
//! (builds with the `p3` feature, routes with `wasi_http_p3 = true`).
//!
//! A p3 guest runs inside wasmtime's concurrent event loop
//! (`run_concurrent`): its `handle` returns the response, and the guest
//! goes on writing the body's stream in tasks of its own. The loop keeps
//! running until the client has the whole body (or has gone), and for at
//! most [`QUIET_GRACE`] more while the guest's tasks end; then it stops.
//! A guest with tasks still running then (background work it spawned, a
//! task spinning) is stopped there, and its instance is not reused.

use std::future::Future;
use std::pin::Pin;

use http::Request;
use tokio::sync::oneshot;
use wasmtime::Store;
use wasmtime::component::Resource;
use wasmtime_wasi_http::p2::body::HyperIncomingBody;
use wasmtime_wasi_http::p3::bindings::Service;
use wasmtime_wasi_http::p3::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::{WasiHttpView, p3};

use super::body::Head;
use super::failure::GuestCode;
use super::host::ComponentHost;
use crate::request::RequestError;

/// A request made into the guest's resources, with the future that
/// reports how reading its body went.
pub(super) struct Prepared {
    req: Resource<p3::Request>,
    io: Pin<Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>>,
}

/// Makes `req` (origin-form target, Host header present) a p3 request in
/// `host`'s table, with scheme `https` (over TLS) or `http` and the Host as
/// its authority.
pub(super) fn prepare(
    host: &mut ComponentHost,
    req: Request<HyperIncomingBody>,
    https: bool,
) -> Result<Prepared, RequestError> {
    let (mut parts, body) = req.into_parts();
    let authority = parts
        .headers
        .get(http::header::HOST)
        .and_then(|h| http::uri::Authority::try_from(h.as_bytes()).ok())
        .ok_or(RequestError::BadRequest("no usable Host"))?;
    let mut uri = std::mem::take(&mut parts.uri).into_parts();
    uri.scheme = Some(if https {
        http::uri::Scheme::HTTPS
    } else {
        http::uri::Scheme::HTTP
    });
    uri.authority = Some(authority);
    parts.uri =
        http::Uri::from_parts(uri).map_err(|_| RequestError::BadRequest("unusable path"))?;
    let http = host.http();
    let (req, io) = p3::Request::from_http(http.hooks, Request::from_parts(parts, body));
    let req = http.table.push(req).map_err(|_| RequestError::Internal)?;
    Ok(Prepared {
        req,
        io: Box::pin(io),
    })
}

/// How long a guest's tasks have, once its response is sent, to end
/// before the instance is taken for busy.
const QUIET_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs one request to the end of its response body: whether the guest
/// was quiet then (no task of its still running), so that its instance
/// may serve another request.
pub(super) async fn run(
    store: &mut Store<ComponentHost>,
    service: &Service,
    prepared: Prepared,
    head: oneshot::Sender<Head>,
) -> wasmtime::Result<bool> {
    use futures_util::FutureExt;
    let Prepared { req, io } = prepared;
    let (sent_tx, sent_rx) = oneshot::channel::<()>();
    let sent = sent_rx.shared();
    let sent_seen_outside = sent.clone();
    let looping = store.run_concurrent(async move |accessor| -> wasmtime::Result<bool> {
        let answer = service
            .wasi_http_handler()
            .call_handle(accessor, req)
            .await?;
        let res = match answer {
            Ok(res) => res,
            Err(code) => {
                let _ = head.send(Err(guest_code(&code)));
                return Ok(quiet(accessor).await);
            }
        };
        let res = accessor.with(|mut access| {
            let res = access.get().http().table.delete(res)?;
            res.into_http(&mut access, io)
        })?;
        if head.send(Ok((res, Some(sent_tx)))).is_err() {
            return Ok(false);
        }
        // The guest writes its body from here; the loop runs until the
        // body is sent or dropped, then while the guest's tasks end.
        let _ = sent.await;
        Ok(quiet(accessor).await)
    });
    tokio::pin!(looping);
    // wasmtime may not poll the closure while a guest task runs (its
    // `run_concurrent` docs: timeouts belong around the loop, not in it),
    // so the end of the body is watched from here too.
    tokio::select! {
        biased;
        done = &mut looping => done?,
        _ = sent_seen_outside => match tokio::time::timeout(QUIET_GRACE, &mut looping).await {
            Ok(done) => done?,
            Err(_) => Ok(false),
        },
    }
}

/// Whether the guest's tasks end within [`QUIET_GRACE`].
async fn quiet(accessor: &wasmtime::component::Accessor<ComponentHost>) -> bool {
    let ended = std::future::poll_fn(|cx| accessor.poll_no_interesting_tasks(cx));
    tokio::time::timeout(QUIET_GRACE, ended).await.is_ok()
}

/// What a p3 guest's own error code means for the client.
fn guest_code(code: &ErrorCode) -> GuestCode {
    match code {
        ErrorCode::HttpRequestBodySize(_) => GuestCode::BodyTooLarge,
        ErrorCode::ConnectionReadTimeout | ErrorCode::HttpResponseTimeout => GuestCode::Timeout,
        other => GuestCode::Other(format!("{other:?}")),
    }
}
