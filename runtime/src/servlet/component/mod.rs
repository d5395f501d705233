//! Guests that are standard `wasi:http/proxy` 0.2 components (any
//! toolchain: Rust `wasi`/`wstd`, componentize-py, componentize-js, Go and
//! C through wit-bindgen), run with wasmtime's own wasi:http host; and,
//! where a route opts in, `wasi:http/service` 0.3 components (`p3`).
//!
//! - imports: full WASI p2 and p3 (toolchains import `wasi:cli` and
//!   friends beyond the proxy world; no folders and no sockets are given),
//!   `wasi:http` 0.2.x and 0.3.x (outgoing requests go through the route's
//!   outbound rules), and `wasi:config/store@0.2.0-rc.1` (the route's
//!   settings). Anything else is refused at load, naming the import;
//! - exports: `wasi:http/incoming-handler@0.2.x`, or
//!   `wasi:http/handler@0.3.x`;
//! - bodies stream both ways (`body`); a guest that fails mid-stream
//!   aborts its response.

mod body;
mod call;
mod failure;
mod host;
mod keyvalue;
mod linkers;
mod memory;
mod p3;
#[cfg(feature = "p3")]
mod p3_serve;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{Request, Response};
use http_body::Body as HttpBody;
use tokio::sync::oneshot;
use wasmtime::Store;
use wasmtime::component::Component;
use wasmtime_wasi_config::WasiConfigVariables;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::bindings::{Proxy, ProxyPre};
#[cfg(feature = "p3")]
use wasmtime_wasi_http::p3::bindings::{Service, ServicePre};

pub(crate) use body::{BodyVerdict, LimitedBody};
pub(crate) use linkers::Linkers;

use super::LoadError;
use super::deadline::{Deadline, DeadlineExceeded, HOST_CALL_GRACE};
use super::guest::started_within;
use super::guest::{Guest, GuestError, Lent};
use super::info::{CallContext, ServletInfo};
use super::outbound::Outbound;
use crate::body::Body;
use crate::engine::{Engine, Tier};
use crate::request::RequestError;
use crate::store::Stores;
use body::{GuestBody, GuestTask, Outcome};
use call::{AbortOnDrop, Call, HeadRx};
use failure::{leftovers, missing_import};
use host::ComponentHost;
#[cfg(feature = "p3")]
use p3::P3Use;

/// The export every wasi:http 0.2 component has.
pub(crate) const INCOMING_HANDLER: &str = "wasi:http/incoming-handler@0.2.12";

/// Whether `bytes` is a component (rather than a core module).
pub(crate) fn is_component(bytes: &[u8]) -> bool {
    // A component's preamble: magic, then version 0x0d and layer 1.
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [0x0d, 0x00, 0x01, 0x00]
}

/// Which wasi:http world a component serves, linked.
#[derive(Clone)]
enum Pre {
    P2(ProxyPre<ComponentHost>),
    #[cfg(feature = "p3")]
    P3(ServicePre<ComponentHost>),
}

/// An instance's entry point, per world.
enum Handler {
    P2(Proxy),
    #[cfg(feature = "p3")]
    P3(Service),
}

/// A checked, linked component.
#[derive(Clone)]
pub(crate) struct ComponentGuest {
    pre: Pre,
    info: Arc<ServletInfo>,
    engine: Arc<Engine>,
    config: Arc<WasiConfigVariables>,
    outbound: Arc<Outbound>,
    stores: Arc<Stores>,
    /// The exports, for `swan check` and logs.
    pub(crate) exports: Vec<String>,
}

/// A live component instance.
pub(crate) struct ComponentInstance {
    store: Store<ComponentHost>,
    handler: Handler,
}

/// A request as a component takes it: streamed, body under the server's
/// rules.
pub(crate) struct ComponentInput {
    req: Request<wasmtime_wasi_http::p2::body::HyperIncomingBody>,
    verdict: Arc<BodyVerdict>,
    /// The request came over TLS: the guest sees scheme `https`.
    https: bool,
}

impl ComponentInput {
    pub(crate) fn new<B>(
        req: Request<LimitedBody<B>>,
        verdict: Arc<BodyVerdict>,
        https: bool,
    ) -> ComponentInput
    where
        B: HttpBody<Data = bytes::Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        use http_body_util::BodyExt;
        ComponentInput {
            req: req.map(|b| b.boxed_unsync()),
            verdict,
            https,
        }
    }
}

/// Compiles `bytes` (a component) and checks it: every import is one swan
/// provides, and it exports the wasi:http incoming handler. Then one
/// trial instance, under the deadline.
pub(crate) fn load(
    engine: &Arc<Engine>,
    linkers: &Linkers,
    stores: &Arc<Stores>,
    info: Arc<ServletInfo>,
    stats: Arc<crate::servlet::stats::ServletStats>,
    bytes: &[u8],
    tier: Tier,
) -> Result<(ComponentGuest, Tier), LoadError> {
    let file = info.file.clone();
    // A component that needs wasi 0.3 is refused unless the route allows
    // it, and otherwise runs on the engine with concurrency support
    // (Cranelift only): the others skip that support's cost.
    let p3_use = p3::detect(bytes);
    if let Some(why) = &p3_use
        && !info.limits.wasi_http_p3
    {
        return Err(LoadError::Export {
            file,
            problem: p3::refusal(why),
        });
    }
    let (component, tier, wasmtime_engine, linker) = match p3_use {
        None => {
            let (component, tier) = engine.compile::<Component>(tier, bytes);
            (component, tier, engine.wasmtime(tier).0, linkers.get(tier))
        }
        #[cfg(feature = "p3")]
        Some(_) => (
            engine.compile_concurrent::<Component>(bytes),
            Tier::Optimized,
            engine.concurrent(),
            &linkers.concurrent,
        ),
        #[cfg(not(feature = "p3"))]
        Some(_) => {
            return Err(LoadError::Export {
                file,
                problem: "needs wasi 0.3 (p3), and this swan was built without it: build with `--features p3`".to_owned(),
            });
        }
    };
    let component = component.map_err(|e| LoadError::Invalid {
        file: file.clone(),
        reason: format!("{e:#}"),
    })?;
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(wasmtime_engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let pre = linker.instantiate_pre(&component).map_err(|e| {
        let (missing, why) = missing_import(&e);
        LoadError::ComponentImport {
            file: file.clone(),
            missing,
            why,
        }
    })?;
    #[cfg(feature = "p3")]
    let pre = if p3_use == Some(P3Use::Handler) {
        ServicePre::new(pre).map(Pre::P3)
    } else {
        ProxyPre::new(pre).map(Pre::P2)
    };
    #[cfg(not(feature = "p3"))]
    let pre = ProxyPre::new(pre).map(Pre::P2);
    let pre = pre.map_err(|_| LoadError::Export {
        file: file.clone(),
        problem: format!(
            "does not export `{INCOMING_HANDLER}` (exports: {}): not a wasi:http/proxy 0.2 component{}",
            if exports.is_empty() {
                "none".to_owned()
            } else {
                exports.join(", ")
            },
            if info.limits.wasi_http_p3 {
                " (nor a wasi:http/service 0.3 one)"
            } else {
                ""
            }
        ),
    })?;
    let guest = ComponentGuest {
        pre,
        config: Arc::new(
            info.settings
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect(),
        ),
        outbound: Arc::new(Outbound::new(&info, stats)),
        stores: stores.clone(),
        info,
        engine: engine.clone(),
        exports,
    };
    let trial = {
        let (guest, budget) = (guest.clone(), engine.clone());
        engine.run_blocking(async move {
            crate::servlet::guest::trial_instance(&budget, &guest)
                .await
                .map(|_| ())
        })
    };
    match trial {
        Some(Ok(())) => Ok((guest, tier)),
        Some(Err(e)) => Err(LoadError::trial(file, e)),
        None => Err(LoadError::Instantiate {
            file,
            reason: "the engine stopped".to_owned(),
        }),
    }
}

impl Guest for ComponentGuest {
    type Instance = ComponentInstance;
    type Input = ComponentInput;

    async fn instantiate(&self) -> Result<ComponentInstance, GuestError> {
        let ticket = self.engine.instance_ticket().ok_or(GuestError::PoolFull)?;
        let host = ComponentHost::new(
            self.info.clone(),
            self.config.clone(),
            self.outbound.clone(),
            self.stores.clone(),
            ticket,
        );
        let engine = match &self.pre {
            Pre::P2(pre) => pre.engine(),
            #[cfg(feature = "p3")]
            Pre::P3(pre) => pre.engine(),
        };
        let mut store = Store::new(engine, host);
        store.limiter(|h| &mut h.limits);
        // The wall clock, until the response head is out (time waiting
        // for the client's request body excepted). Run time is counted
        // where it is spent, wherever the guest is polled (`handle`).
        store.epoch_deadline_callback(|mut ctx| {
            let host = ctx.data_mut();
            if !host.head_sent.load(Ordering::Relaxed)
                && host.deadline.wall_clock_passed(host.body.waited())
            {
                return Err(DeadlineExceeded.into());
            }
            Ok(host.deadline.at_tick())
        });
        // Coming back from a host call starts a fresh tick: a wait that
        // spanned a tick does not make the callback run at once.
        store.call_hook(|mut ctx, hook| {
            if matches!(hook, wasmtime::CallHook::ReturningFromHost) {
                ctx.set_epoch_deadline(1);
            }
            Ok(())
        });
        store.data_mut().deadline = Deadline::after(self.info.limits.timeout);
        store.set_epoch_deadline(1);
        // A start that waits in a host call is held to the wall clock too.
        let limits = &self.info.limits;
        let start = async {
            match &self.pre {
                Pre::P2(pre) => pre.instantiate_async(&mut store).await.map(Handler::P2),
                #[cfg(feature = "p3")]
                Pre::P3(pre) => pre.instantiate_async(&mut store).await.map(Handler::P3),
            }
        };
        let handler = started_within(limits.timeout, async {
            start.await.map_err(|e| {
                if e.is::<wasmtime::PoolConcurrencyLimitError>() {
                    GuestError::PoolFull
                } else {
                    GuestError::Failed(e)
                }
            })
        })
        .await?;
        Ok(ComponentInstance { store, handler })
    }

    async fn handle<L: Lent<ComponentInstance>>(
        &self,
        mut lease: L,
        input: ComponentInput,
        ctx: &CallContext<'_>,
    ) -> Result<Response<Body>, RequestError> {
        let id = ctx.id.to_string();
        // Answers whose body hyper never sends (nor reads).
        let head_only = input.req.method() == http::Method::HEAD;
        let stats = lease.stats();
        let Some(instance) = lease.instance() else {
            return Err(RequestError::fault("no instance"));
        };
        let head_sent = Arc::new(AtomicBool::new(false));
        let host = instance.store.data_mut();
        host.head_sent = head_sent.clone();
        host.body = input.verdict.clone();
        host.hooks.request_id.clone_from(&id);
        host.deadline = Deadline::after(self.info.limits.timeout);
        host.kv.reset();
        // A p3 guest's event loop runs until its body is sent: it never
        // ends within a first poll, so it starts in its own task.
        let inline = matches!(instance.handler, Handler::P2(_));
        // The request, made into the guest's resources, and where its
        // answer will come from.
        let (call, head_rx) = match &instance.handler {
            Handler::P2(_) => {
                let (resp_tx, resp_rx) = oneshot::channel();
                let mut http = host.http();
                let scheme = if input.https {
                    Scheme::Https
                } else {
                    Scheme::Http
                };
                let req = http
                    .new_incoming_request(scheme, input.req)
                    .map_err(|_| RequestError::BadRequest("no authority"))?;
                let out = http
                    .new_response_outparam(resp_tx)
                    .map_err(|_| RequestError::Internal)?;
                (Call::P2(req, out), HeadRx::P2(resp_rx))
            }
            #[cfg(feature = "p3")]
            Handler::P3(_) => {
                let (head_tx, head_rx) = oneshot::channel();
                let prepared = p3_serve::prepare(host, input.req, input.https)?;
                (Call::P3(prepared, head_tx), HeadRx::P3(head_rx))
            }
        };
        instance.store.set_epoch_deadline(1);
        // The guest's run: its first poll on this task, the rest in a task
        // of its own (`call::start_guest`) that keeps the instance while
        // its response body streams after `handle` returns.
        let (outcome_tx, mut outcome_rx) = oneshot::channel::<Outcome>();
        let task_head_sent = head_sent.clone();
        // A guest that fails after a store was unavailable gives 503.
        let store_down = Arc::new(AtomicBool::new(false));
        let task_store_down = store_down.clone();
        let guest = self.clone();
        let task_id = id.clone();
        let task_body = input.verdict.clone();
        let guest_run = async move {
            let head_sent = task_head_sent;
            let Some(ComponentInstance { store, handler }) = lease.instance() else {
                let _ = outcome_tx.send(Err("no instance".to_owned()));
                return;
            };
            let result = {
                let call = async {
                    match (handler, call) {
                        (Handler::P2(proxy), Call::P2(req, out)) => proxy
                            .wasi_http_incoming_handler()
                            .call_handle(&mut *store, req, out)
                            .await
                            .map(|()| true),
                        #[cfg(feature = "p3")]
                        (Handler::P3(service), Call::P3(prepared, head)) => {
                            p3_serve::run(store, service, prepared, head).await
                        }
                        #[cfg(feature = "p3")]
                        _ => Err(wasmtime::format_err!(
                            "the request was made for another world"
                        )),
                    }
                };
                // Until the response head is out, the request has a wall-clock
                // deadline too (a guest blocked in a host call does not count
                // epoch ticks). Once it streams, the guest's own run time is
                // still capped by its ticks, and a stalled body by the
                // connection's send_timeout.
                // Time spent waiting for the client's request body does not
                // count: the body's own rules (408) bound it.
                let limit = guest.info.limits.timeout + HOST_CALL_GRACE;
                let started = tokio::time::Instant::now();
                let outer = tokio::time::sleep(limit);
                tokio::pin!(call, outer);
                // Run time: the time the task spends being polled, the
                // guest's code and the host calls it makes without
                // waiting, on the coarse clock (a poll that spans one of
                // its ticks counts the tick: right on average, for a
                // load). Waits (the client reading, an upstream, a timer)
                // are between polls and never count. Capped at `timeout`,
                // with or without the wall clock: before, ticks that
                // landed in guest code were counted, which let 2 million
                // one-byte writes run 10 s past a 2 s timeout, and charged
                // a wait that ended in guest code (a returned list).
                let budget_ms = guest.info.limits.timeout.as_millis() as u64;
                let mut run_ms = 0u64;
                let call = std::future::poll_fn(|cx| {
                    let started = crate::clock::now_ms();
                    let polled = call.as_mut().poll(cx);
                    run_ms += crate::clock::now_ms().saturating_sub(started);
                    if polled.is_pending() && run_ms > budget_ms {
                        return std::task::Poll::Ready(Err(DeadlineExceeded.into()));
                    }
                    polled
                });
                tokio::pin!(call);
                let finished = loop {
                    tokio::select! {
                        // The guest first: only a call that waits sets the
                        // deadline timer (the epoch callback holds the
                        // one more poll a fired timer allows to the clock).
                        biased;
                        r = &mut call => break Some(r),
                        () = &mut outer => {
                            let due = started + limit + task_body.waited();
                            if tokio::time::Instant::now() < due {
                                outer.as_mut().reset(due);
                                continue;
                            }
                            break None;
                        }
                    }
                };
                let finished = match finished {
                    Some(r) => Some(r),
                    None if head_sent.load(Ordering::Relaxed) => Some(call.await),
                    None => None,
                };
                match finished {
                    Some(Ok(quiet)) => Ok(quiet),
                    Some(Err(e)) => Err(guest.describe_failure(&e)),
                    None => Err("servlet ran past its deadline".to_owned()),
                }
            };
            // A p3 guest whose tasks were still running when its response
            // was sent (stopped then) is not reused: its work would run on
            // the next request's time, and see it.
            let quiet = matches!(result, Ok(true));
            let result = result.map(|_| ());
            // A guest that returned while still holding its answer (a
            // response outparam it never set, a body it never finished)
            // failed: its body must end as an abort, never as a complete
            // response, and its instance is not given back (it would keep
            // the client waiting on what it holds).
            let left = leftovers(&mut store.data_mut().table);
            let result = result.and_then(|()| match left.unfinished {
                Some(what) => Err(format!("returned without {what}")),
                None => Ok(()),
            });
            store.data_mut().flush_output();
            if store.data().kv.saw_unavailable && result.is_err() {
                task_store_down.store(true, Ordering::Relaxed);
            }
            if let Err(e) = &result {
                tracing::warn!(servlet = %guest.info.name, request_id = %task_id, error = %e, "component failed");
            }
            // The outcome goes out before the instance (and with it the
            // response body's sender) is dropped or given back.
            let ok = result.is_ok();
            let _ = outcome_tx.send(result);
            // A request body still open once the answer is out is held by
            // the guest (a body stream kept in a global is not in the
            // table): the instance goes, as for a kept request.
            if ok && quiet && !left.request && !task_body.still_open() {
                lease.finish();
            }
        };
        let task = call::start_guest(guest_run, inline).await;
        if task.is_none() {
            // The guest is done and its place is free. The other requests
            // ready on this worker run their guests before this answer is
            // sent, so answers go out close together, as they did when
            // every guest ran in a task of its own: sent right after each
            // guest, at 100 connections, they cost 18% of the requests a
            // second (the client, on the same machine, woke once per
            // answer; BENCHMARKS.md, stop 42).
            tokio::task::yield_now().await;
        }
        let abort = GuestTask(task.as_ref().map(|t| t.abort_handle()));
        // Until a response body takes over the task, the guest stops when
        // this future ends without one: an answer refused below, or a
        // client that went away (an HTTP/2 reset drops this future). Its
        // instance and its place come back at once.
        let mut running = AbortOnDrop(abort.clone());
        match head_rx.recv().await {
            Ok(Ok((res, sent))) => {
                // 1xx is not an answer (hyper would send it as the final
                // one), and past 599 there are no classes.
                if !(200..=599).contains(&res.status().as_u16()) {
                    let status = res.status().as_u16();
                    tracing::warn!(servlet = %self.info.name, request_id = %id, status, "component answered with a status that is not a final one");
                    return Err(RequestError::fault(format!(
                        "answered status {status}, not a final one"
                    )));
                }
                let limit = self.info.limits.response_limit(true);
                let declared = crate::request::body::declared_length(res.headers());
                if let (Some(limit), Some(declared)) = (limit, declared)
                    && declared > limit
                {
                    tracing::warn!(servlet = %self.info.name, request_id = %id, declared, limit, "component declared a response body larger than max_response_bytes");
                    return Err(RequestError::fault(format!(
                        "declared a {declared}-byte body, over max_response_bytes ({limit})"
                    )));
                }
                head_sent.store(true, Ordering::Relaxed);
                // A body over the limit, too slow or cut off by the client
                // gets 413, 408 or 400 whatever the guest made of the error
                // it read.
                if let Some(e) = input.verdict.client_error() {
                    return Err(e);
                }
                // A guest that already failed (it set its response, then
                // trapped or ran out of time before the client got a
                // byte): the client gets a 500, not a head that hyper
                // would never send, or an aborted 200.
                let outcome_rx = match outcome_rx.try_recv() {
                    Ok(Err(failure)) => {
                        let store_down = store_down.load(Ordering::Relaxed);
                        return Err(self.no_response(&failure, &input.verdict, store_down, &id));
                    }
                    Ok(Ok(())) => {
                        let (tx, rx) = oneshot::channel();
                        let _ = tx.send(Ok(()));
                        rx
                    }
                    Err(_) => outcome_rx,
                };
                running.disarm();
                let ends = body::Ends {
                    outcome: outcome_rx,
                    task: abort,
                    sent,
                    tally: (stats, id, self.info.clone()),
                };
                let (head, body) = res.into_parts();
                let bodyless = head_only || crate::body::status_has_no_body(head.status);
                let mut body = GuestBody::new(body, ends, limit, declared);
                // Its first bytes already past its own length or the
                // route's limit: nothing has gone out, so a 500.
                if let Some(failure) = (!bodyless).then(|| body.failed_before_any_byte()).flatten()
                {
                    let id = ctx.id.to_string();
                    tracing::warn!(servlet = %self.info.name, request_id = %id, error = %failure, "component failed before its body's first byte");
                    let store_down = store_down.load(Ordering::Relaxed);
                    return Err(self.no_response(&failure, &input.verdict, store_down, &id));
                }
                Ok(http::Response::from_parts(head, Body::stream(body)))
            }
            Ok(Err(code)) => {
                if let Some(task) = task {
                    let _ = task.await;
                }
                Err(self.error_for(&code, &input.verdict, &id))
            }
            Err(_) => {
                // No response was set: the guest trapped, timed out or
                // returned without one.
                let failure = match outcome_rx.await {
                    Ok(Err(e)) => e,
                    Ok(Ok(())) => {
                        // Not logged by the task (the guest returned):
                        // said here, or the 500 would have no line.
                        tracing::warn!(servlet = %self.info.name, request_id = %id, "component failed: returned without setting a response (one whose status or headers the host refused, a status out of range or a header name or value not allowed, is never set)");
                        "returned without setting a response".to_owned()
                    }
                    Err(_) => "the guest task ended".to_owned(),
                };
                let store_down = store_down.load(Ordering::Relaxed);
                Err(self.no_response(&failure, &input.verdict, store_down, &id))
            }
        }
    }
}
