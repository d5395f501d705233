//! Wasm servlets: a loaded module, its pool of ready instances, and running
//! one request in an instance.
//!
//! - `module`: compile and check a `.wasm` (ABI version, imports, exports);
//! - `abi`: the host side of the native ABI (`guest-sdk/ABI.md`);
//! - `host`: per-instance state (WASI, limits, request, response);
//! - `routes`: which servlet answers which path of a site.
//!
//! Every request runs in a fresh instance unless the servlet opts into
//! `reuse = N`. Instances are created ahead of time, so the request path
//! usually only takes one from a lock-free queue: the first `prewarm` on
//! the engine's pre-instantiation thread at load, the replacements on the
//! worker's own runtime right after each request.

pub(crate) mod abi;
pub mod build;
pub(crate) mod host;
mod module;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use tokio::sync::Semaphore;
use wasmtime::{Instance, InstancePre, Store, TypedFunc, UpdateDeadline};

pub use abi::{ABI_VERSION, AbiFault};
pub use module::LoadError;
pub use routes::{Refused, Route, RouteOrigin, Routes};

use crate::body::Body;
use crate::config::ServletLimits;
use crate::engine::{EPOCH_TICK, Engine, Tier};
use host::{Host, RequestData, ResponseData};

/// Extra time, past its own deadline, that a servlet blocked in a host call
/// (which epochs cannot interrupt) gets before its request is abandoned.
const HOST_CALL_GRACE: Duration = Duration::from_millis(500);

static REQUEST_IDS: AtomicU64 = AtomicU64::new(1);

/// What a servlet is: shared by its instances.
#[derive(Debug, Clone)]
pub struct Info {
    /// Name used in logs (the file stem).
    pub name: String,
    /// The `.wasm` file.
    pub file: std::path::PathBuf,
    /// Limits.
    pub limits: ServletLimits,
    /// Static settings, readable through the ABI and as environment.
    pub settings: Vec<(String, String)>,
}

/// A loaded servlet with its instance pool.
pub struct Servlet {
    info: Arc<Info>,
    /// The compiler that made this servlet's code.
    tier: Tier,
    pre: InstancePre<Host>,
    /// Instances ready to serve (fresh, or kept for reuse).
    ready: ArrayQueue<Ready>,
    /// Requests running at once.
    permits: Semaphore,
    /// Refills running on workers right now.
    refilling: AtomicU64,
}

impl std::fmt::Debug for Servlet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servlet")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// An instance ready to serve.
pub(crate) struct Ready {
    pub(crate) store: Store<Host>,
    pub(crate) instance: Instance,
    handle: Option<TypedFunc<(), i32>>,
    served: u32,
}

/// Why a servlet request failed; mapped to a response in one place.
#[derive(Debug, thiserror::Error)]
pub enum ServletError {
    /// No free instance within the queue timeout.
    #[error("no free instance")]
    Busy,
    /// Ran past its deadline.
    #[error("deadline exceeded")]
    Timeout,
    /// Trapped, broke the ABI, or returned an error code.
    #[error("servlet failed: {0}")]
    Fault(String),
}

/// Marker error returned by the epoch callback at the deadline.
#[derive(Debug, thiserror::Error)]
#[error("servlet ran past its deadline")]
struct DeadlineExceeded;

impl Servlet {
    /// Compiles, checks and links `info.file`, and starts keeping
    /// `prewarm` instances ready.
    pub fn load(engine: &Arc<Engine>, info: Info) -> Result<Arc<Servlet>, LoadError> {
        Servlet::load_tier(engine, info, Tier::Optimized)
    }

    /// Like [`Servlet::load`], with the given compiler. A module the
    /// baseline compiler cannot handle is compiled by Cranelift instead.
    pub fn load_tier(
        engine: &Arc<Engine>,
        info: Info,
        tier: Tier,
    ) -> Result<Arc<Servlet>, LoadError> {
        let info = Arc::new(info);
        let compiled = match module::load(engine, &info.file, &info, tier) {
            Err(e) if tier == Tier::Baseline => {
                tracing::debug!(servlet = %info.name, error = %e, "baseline compiler refused; using Cranelift");
                module::load(engine, &info.file, &info, Tier::Optimized)?
            }
            other => other?,
        };
        let capacity = (info.limits.prewarm.max(1) as usize).max(if info.limits.reuse > 1 {
            info.limits.max_concurrency as usize
        } else {
            1
        });
        let servlet = Arc::new(Servlet {
            permits: Semaphore::new(info.limits.max_concurrency as usize),
            ready: ArrayQueue::new(capacity),
            refilling: AtomicU64::new(0),
            pre: compiled.pre,
            tier: compiled.tier,
            info,
        });
        if servlet.info.limits.prewarm > 0 {
            engine.spawn_background(fill(servlet.clone()));
        }
        Ok(servlet)
    }

    /// What this servlet is.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The compiler that made this servlet's code.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// Instances currently ready.
    pub fn ready_instances(&self) -> usize {
        self.ready.len()
    }

    /// Runs one request.
    pub async fn call(
        self: &Arc<Self>,
        parts: http::request::Parts,
        body: Bytes,
        path: &str,
        path_info: &str,
        remote: SocketAddr,
    ) -> Result<Response<Body>, ServletError> {
        let limits = &self.info.limits;
        let _permit = match tokio::time::timeout(limits.queue_timeout, self.permits.acquire()).await
        {
            Ok(Ok(p)) => p,
            _ => return Err(ServletError::Busy),
        };
        let mut ready = match self.ready.pop() {
            Some(r) => r,
            None => match instantiate(&self.pre, self.info.clone()).await {
                Ok(r) => r,
                // Every slot of the process-wide pool is taken: the server
                // is busy, not the servlet broken.
                Err(e)
                    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                        .is_some() =>
                {
                    tracing::warn!(servlet = %self.info.name, "no free instance slot (server.max_instances)");
                    return Err(ServletError::Busy);
                }
                Err(e) => return Err(self.fault("instantiation failed", &e)),
            },
        };
        self.schedule_refill();
        let id = REQUEST_IDS.fetch_add(1, Ordering::Relaxed);
        {
            let host = ready.store.data_mut();
            host.request = RequestData {
                method: parts.method.as_str().to_owned(),
                path: path.to_owned(),
                query: parts.uri.query().unwrap_or("").to_owned(),
                path_info: path_info.to_owned(),
                headers: parts.headers,
                body,
                remote_addr: remote.to_string(),
                request_id: format!("{id:x}"),
                headers_text: None,
            };
            host.response = ResponseData::default();
            host.ticks_left = deadline_ticks(limits.timeout);
        }
        ready.store.set_epoch_deadline(1);
        let handle = match ready.handle {
            Some(ref h) => h.clone(),
            None => {
                let h = ready
                    .instance
                    .get_typed_func::<(), i32>(&mut ready.store, "swan_handle")
                    .map_err(|e| self.fault("missing swan_handle", &e))?;
                ready.handle = Some(h.clone());
                h
            }
        };
        let outer = limits.timeout + HOST_CALL_GRACE;
        let result = tokio::time::timeout(outer, handle.call_async(&mut ready.store, ())).await;
        ready.store.data_mut().flush_output();
        let code = match result {
            Err(_) => {
                self.log_timeout();
                return Err(ServletError::Timeout);
            }
            Ok(Err(e)) => {
                if e.downcast_ref::<DeadlineExceeded>().is_some() {
                    self.log_timeout();
                    return Err(ServletError::Timeout);
                }
                if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                    if exit.0 == 0 {
                        0
                    } else {
                        return Err(self.fault("exited", &e));
                    }
                } else {
                    return Err(self.fault("trapped", &e));
                }
            }
            Ok(Ok(code)) => code,
        };
        if code != 0 {
            return Err(ServletError::Fault(format!(
                "{}: swan_handle returned {code}",
                self.info.name
            )))
            .inspect_err(|e| tracing::warn!(servlet = %self.info.name, "{e}"));
        }
        let response = std::mem::take(&mut ready.store.data_mut().response);
        ready.served += 1;
        if ready.served < limits.reuse {
            let host = ready.store.data_mut();
            host.request = RequestData::default();
            let _ = self.ready.push(ready);
        }
        Ok(build_response(response))
    }

    /// Tops the ready queue up after an instance was taken: on this
    /// worker's own runtime, as a separate task that runs once the current
    /// request has its response, so neither the request nor another thread
    /// (a wake-up and a context switch per request) pays for it.
    fn schedule_refill(self: &Arc<Self>) {
        let prewarm = self.info.limits.prewarm as u64;
        if prewarm == 0 {
            return;
        }
        let pending = self.ready.len() as u64 + self.refilling.load(Ordering::Relaxed);
        if pending >= prewarm {
            return;
        }
        // `call` always runs on a worker's runtime; outside one there is
        // nothing to refill on, and the next request instantiates inline.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.refilling.fetch_add(1, Ordering::Relaxed);
        let servlet = self.clone();
        runtime.spawn(async move {
            tokio::task::yield_now().await;
            match instantiate(&servlet.pre, servlet.info.clone()).await {
                Ok(ready) => {
                    let _ = servlet.ready.push(ready);
                }
                Err(e) => tracing::warn!(servlet = %servlet.info.name, error = %format!("{e:#}"), "pre-instantiation failed"),
            }
            servlet.refilling.fetch_sub(1, Ordering::Relaxed);
        });
    }

    fn fault(&self, what: &str, e: &wasmtime::Error) -> ServletError {
        let detail = match e.downcast_ref::<wasmtime::Trap>() {
            Some(trap) => format!("trap: {trap}"),
            None => format!("{e:#}"),
        };
        tracing::warn!(servlet = %self.info.name, error = %detail, "servlet {what}");
        ServletError::Fault(detail)
    }

    fn log_timeout(&self) {
        tracing::warn!(servlet = %self.info.name, timeout = ?self.info.limits.timeout, "servlet stopped at its deadline");
    }
}

/// Epoch ticks in `timeout`, at least one.
fn deadline_ticks(timeout: Duration) -> u64 {
    (timeout.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64
}

/// A new store and instance, with limits and the deadline callback set.
pub(crate) async fn instantiate(
    pre: &InstancePre<Host>,
    info: Arc<Info>,
) -> wasmtime::Result<Ready> {
    let mut store = Store::new(pre.module().engine(), Host::new(info));
    store.limiter(|h| &mut h.limits);
    store.epoch_deadline_callback(|mut ctx| {
        let host = ctx.data_mut();
        if host.ticks_left == 0 {
            return Err(DeadlineExceeded.into());
        }
        host.ticks_left -= 1;
        // Yield to the worker's other tasks at every tick.
        Ok(UpdateDeadline::Yield(1))
    });
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = pre.instantiate_async(&mut store).await?;
    if let Ok(init) = instance.get_typed_func::<(), ()>(&mut store, "_initialize") {
        store.data_mut().ticks_left = deadline_ticks(store.data().info.limits.timeout);
        store.set_epoch_deadline(1);
        init.call_async(&mut store, ()).await?;
    }
    Ok(Ready {
        store,
        instance,
        handle: None,
        served: 0,
    })
}

/// Fills a newly loaded servlet's ready queue up to `prewarm`, once.
async fn fill(servlet: Arc<Servlet>) {
    while servlet.ready.len() < servlet.info.limits.prewarm as usize {
        match instantiate(&servlet.pre, servlet.info.clone()).await {
            Ok(ready) => {
                if servlet.ready.push(ready).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(servlet = %servlet.info.name, error = %format!("{e:#}"), "pre-instantiation failed");
                return;
            }
        }
    }
}

fn build_response(data: ResponseData) -> Response<Body> {
    let mut res = Response::new(Body::full(data.body.freeze()));
    *res.status_mut() = data.status;
    *res.headers_mut() = data.headers;
    if !res.headers().contains_key(header::CONTENT_TYPE) && res.status() != StatusCode::NO_CONTENT {
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    res
}
