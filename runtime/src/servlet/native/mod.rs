//! Guests speaking swan's native ABI (`guest-sdk/ABI.md`): core modules
//! that import the `swan` functions and, optionally, WASI preview 1.
//!
//! - `check`: compile, check the ABI contract, link, try one instance;
//! - `abi`: the host side of the ABI (linker functions);
//! - `host`: per-instance state (WASI, limits, request, response).

/// Adds host function `$f` to `$linker` as `swan::$name`: an error it
/// returns (a bad pointer...) names the call in the log.
macro_rules! host_fn {
    ($linker:expr, $name:literal, $f:path, ($($arg:ident: $ty:ty),*)) => {
        $linker.func_wrap(
            "swan",
            $name,
            |caller: wasmtime::Caller<'_, Host>, $($arg: $ty),*| {
                $f(caller, $($arg),*)
                    .map_err(|e| e.context(crate::servlet::fault::HostCall($name)))
            },
        )
    };
}

/// [`host_fn`] for a host function that waits (a store, an upstream).
macro_rules! host_fn_async {
    ($linker:expr, $name:literal, $f:path, ($($arg:ident: $ty:ty),*)) => {
        $linker.func_wrap_async(
            "swan",
            $name,
            |caller: wasmtime::Caller<'_, Host>, ($($arg,)*): ($($ty,)*)| {
                Box::new(async move {
                    $f(caller, $($arg),*)
                        .await
                        .map_err(|e| e.context(crate::servlet::fault::HostCall($name)))
                })
            },
        )
    };
}

mod abi;
mod check;
mod fetch;
mod host;
mod kv;
mod memory;

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::Body as HttpBody;
use wasmtime::{Instance, InstancePre, Linker, Store, TypedFunc};

pub use abi::ABI_VERSION;
pub use check::LoadError;
pub(crate) use check::load;

use super::deadline::{Deadline, DeadlineExceeded, HOST_CALL_GRACE};
use super::fault::fault_line;
use super::guest::started_within;
use super::guest::{Guest, GuestError, Lent};
use super::info::{CallContext, ServletInfo};
use super::outbound::Outbound;
use crate::body::Body;
use crate::engine::{Engine, PerTier, Tier};
use crate::request::{BodyPolicy, RequestError, body};
use crate::store::{StoreAccess, Stores};
use host::{Host, RequestData, ResponseData};

/// What native guests may import, per compiler tier.
pub(crate) struct Linkers(PerTier<Linker<Host>>);

impl Linkers {
    /// The `swan` ABI and WASI preview 1, for every engine tier.
    pub(crate) fn new(engine: &Engine) -> wasmtime::Result<Linkers> {
        PerTier::new(engine, |wasmtime_engine| {
            let mut linker = Linker::new(wasmtime_engine);
            abi::add_to_linker(&mut linker)?;
            fetch::add_to_linker(&mut linker)?;
            kv::add_to_linker(&mut linker)?;
            wasmtime_wasi::p1::add_to_linker_async(&mut linker, |h: &mut Host| &mut h.wasi)?;
            Ok(linker)
        })
        .map(Linkers)
    }

    fn get(&self, tier: Tier) -> &Linker<Host> {
        self.0.get(tier)
    }
}

/// A checked, linked native module.
#[derive(Clone)]
pub(crate) struct NativeGuest {
    pre: InstancePre<Host>,
    info: Arc<ServletInfo>,
    engine: Arc<Engine>,
    outbound: Arc<Outbound>,
    stores: Arc<Stores>,
}

/// A live instance of a native module.
pub(crate) struct NativeInstance {
    store: Store<Host>,
    instance: Instance,
    handle: Option<TypedFunc<(), i32>>,
}

/// A request read whole, as the native ABI hands it over.
pub(crate) struct NativeInput {
    parts: http::request::Parts,
    body: Bytes,
}

/// Reads a request whole, as the native ABI hands it over.
pub(crate) async fn read_request<B>(
    req: Request<B>,
    policy: BodyPolicy,
) -> Result<NativeInput, RequestError>
where
    B: HttpBody<Data = Bytes> + Send + Unpin,
{
    let (parts, body) = req.into_parts();
    let body = body::read_whole(&parts.headers, body, policy).await?;
    Ok(NativeInput { parts, body })
}

impl NativeGuest {
    /// Logs a guest's failure; the error the request gets, which says
    /// the same for the status page.
    fn log_fault(&self, what: &str, e: &wasmtime::Error, id: &str) -> RequestError {
        let detail = fault_line(e);
        tracing::warn!(servlet = %self.info.name, request_id = %id, error = %detail, "servlet {what}");
        RequestError::fault(format!("{what}: {detail}"))
    }
}

impl Guest for NativeGuest {
    type Instance = NativeInstance;
    type Input = NativeInput;

    async fn instantiate(&self) -> Result<NativeInstance, GuestError> {
        let ticket = self.engine.instance_ticket().ok_or(GuestError::PoolFull)?;
        let mut store = Store::new(
            self.pre.module().engine(),
            Host::new(
                self.info.clone(),
                self.outbound.clone(),
                StoreAccess::new(self.stores.clone(), &self.info.limits.stores),
                ticket,
            ),
        );
        store.limiter(|h| &mut h.limits);
        store.epoch_deadline_callback(|mut ctx| {
            let deadline = &mut ctx.data_mut().deadline;
            if deadline.passed() {
                return Err(DeadlineExceeded.into());
            }
            Ok(deadline.at_tick())
        });
        // Start functions and `_initialize` run under the same deadline as
        // a request, and the same wall clock for a host call that waits.
        store.data_mut().deadline = Deadline::after(self.info.limits.timeout);
        store.set_epoch_deadline(1);
        let limits = &self.info.limits;
        let start = async {
            let instance = match self.pre.instantiate_async(&mut store).await {
                Ok(i) => i,
                Err(e) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                    return Err(GuestError::PoolFull);
                }
                Err(e) => return Err(GuestError::Failed(e)),
            };
            if let Ok(init) = instance.get_typed_func::<(), ()>(&mut store, "_initialize") {
                init.call_async(&mut store, ())
                    .await
                    .map_err(GuestError::Failed)?;
            }
            Ok(instance)
        };
        let instance = started_within(limits.timeout, start).await?;
        Ok(NativeInstance {
            store,
            instance,
            handle: None,
        })
    }

    async fn handle<L: Lent<NativeInstance>>(
        &self,
        mut lease: L,
        input: NativeInput,
        ctx: &CallContext<'_>,
    ) -> Result<Response<Body>, RequestError> {
        let Some(ready) = lease.instance() else {
            return Err(RequestError::fault("no instance"));
        };
        let (response, exited) = self.run(ready, input, ctx).await?;
        if exited {
            // `proc_exit(0)` unwound the guest partway (its stack pointer,
            // locks, atexit handlers): answered, but never reused.
            drop(lease);
        } else {
            lease.finish();
        }
        Ok(response)
    }
}

impl NativeGuest {
    async fn run(
        &self,
        ready: &mut NativeInstance,
        input: NativeInput,
        ctx: &CallContext<'_>,
    ) -> Result<(Response<Body>, bool), RequestError> {
        let limits = &self.info.limits;
        let id = ctx.id.to_string();
        {
            let host = ready.store.data_mut();
            let parts = input.parts;
            host.request = RequestData {
                method: parts.method.as_str().to_owned(),
                path: ctx.path.to_owned(),
                query: parts.uri.query().unwrap_or("").to_owned(),
                path_info: ctx.path_info.to_owned(),
                headers: parts.headers,
                body: input.body,
                remote_addr: ctx.remote.to_string(),
                request_id: id.clone(),
                headers_text: None,
            };
            host.response = ResponseData::default();
            host.deadline = Deadline::after(limits.timeout);
            host.kv.reset();
            // Store handles last as long as the instance (ABI.md): a
            // reused instance may keep one from an earlier request.
        }
        ready.store.set_epoch_deadline(1);
        let handle = match &ready.handle {
            Some(h) => h.clone(),
            None => {
                let h = ready
                    .instance
                    .get_typed_func::<(), i32>(&mut ready.store, "swan_handle")
                    .map_err(|e| self.log_fault("has no swan_handle", &e, &id))?;
                ready.handle = Some(h.clone());
                h
            }
        };
        let outer = limits.timeout + HOST_CALL_GRACE;
        let result = tokio::time::timeout(outer, handle.call_async(&mut ready.store, ())).await;
        ready.store.data_mut().flush_output();
        let timed_out = || {
            tracing::warn!(servlet = %self.info.name, request_id = %id, timeout = ?limits.timeout, "servlet stopped at its deadline");
            RequestError::ServletTimeout
        };
        // A servlet that fails after a store was unavailable gives 503.
        let store_down = ready.store.data().kv.saw_unavailable;
        let fault = |e: RequestError| {
            if store_down && matches!(e, RequestError::ServletFault(_)) {
                RequestError::StoreUnavailable
            } else {
                e
            }
        };
        let mut exited = false;
        let code = match result {
            Err(_) => return Err(timed_out()),
            Ok(Err(e)) if e.is::<DeadlineExceeded>() => return Err(timed_out()),
            Ok(Err(e)) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                Some(exit) if exit.0 == 0 => {
                    exited = true;
                    0
                }
                Some(_) => return Err(fault(self.log_fault("exited", &e, &id))),
                None => {
                    let failed = self.log_fault("trapped", &e, &id);
                    if self.info.development {
                        return Err(RequestError::ServletTrapped {
                            servlet: self.info.name.clone(),
                            detail: format!("{e:?}").into(),
                        });
                    }
                    return Err(fault(failed));
                }
            },
            Ok(Ok(code)) => code,
        };
        if code != 0 {
            tracing::warn!(servlet = %self.info.name, request_id = %id, code, "swan_handle reported failure");
            return Err(fault(RequestError::fault(format!(
                "swan_handle returned {code}"
            ))));
        }
        let host = ready.store.data_mut();
        let response = std::mem::take(&mut host.response);
        host.request = RequestData::default();
        host.fetched = host::Fetched::default();
        Ok((build_response(response), exited))
    }
}

fn build_response(data: ResponseData) -> Response<Body> {
    let mut res = Response::new(Body::full(data.body.freeze()));
    *res.status_mut() = data.status;
    *res.headers_mut() = data.headers;
    // A 304's headers update the stored response's: no made-up type.
    let bodiless = matches!(
        res.status(),
        StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
    );
    if !res.headers().contains_key(header::CONTENT_TYPE) && !bodiless {
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    res
}
