//! A servlet's instances: made ahead of requests, taken one per request,
//! replaced right after, reused only on opt-in (`reuse = N`).
//!
//! - a lock-free queue of ready instances, filled to `prewarm` at load (on
//!   the engine's background thread) and topped up on the worker's own
//!   runtime right after each request, so neither the request nor another
//!   thread (a wake-up and a context switch per request) pays for it;
//! - a semaphore for `max_concurrency`, waited on for `queue_timeout`;
//! - an instance that served `reuse` requests, or failed one, is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;
use http::Response;
use tokio::sync::Semaphore;

use super::guest::{Guest, GuestError};
use super::info::{CallContext, ServletInfo};
use crate::body::Body;
use crate::request::RequestError;

/// The instances of one servlet.
pub(crate) struct InstancePool<G: Guest> {
    guest: G,
    info: Arc<ServletInfo>,
    /// Instances ready to serve (fresh, or kept for reuse).
    ready: ArrayQueue<Pooled<G::Instance>>,
    /// Requests running at once.
    permits: Semaphore,
    /// Refills running right now.
    refilling: AtomicUsize,
}

/// An instance and the requests it served.
struct Pooled<I> {
    instance: I,
    served: u32,
}

impl<G: Guest> InstancePool<G> {
    pub(crate) fn new(guest: G, info: Arc<ServletInfo>) -> Arc<Self> {
        let limits = &info.limits;
        let kept_for_reuse = if limits.reuse > 1 {
            limits.max_concurrency as usize
        } else {
            1
        };
        Arc::new(InstancePool {
            guest,
            ready: ArrayQueue::new((limits.prewarm as usize).max(kept_for_reuse).max(1)),
            permits: Semaphore::new(limits.max_concurrency as usize),
            refilling: AtomicUsize::new(0),
            info,
        })
    }

    /// Instances ready right now.
    pub(crate) fn ready(&self) -> usize {
        self.ready.len()
    }

    /// Fills the ready queue up to `prewarm`, once (at load).
    pub(crate) async fn fill(self: Arc<Self>) {
        while self.ready.len() < self.info.limits.prewarm as usize {
            if !self.add_one().await {
                return;
            }
        }
    }

    /// Makes one instance and queues it; false when that failed or the
    /// queue is full.
    async fn add_one(&self) -> bool {
        match self.guest.instantiate().await {
            Ok(instance) => self
                .ready
                .push(Pooled {
                    instance,
                    served: 0,
                })
                .is_ok(),
            Err(e) => {
                tracing::warn!(servlet = %self.info.name, error = %e, "pre-instantiation failed");
                false
            }
        }
    }

    /// Runs one request in a ready (or new) instance.
    pub(crate) async fn call(
        self: &Arc<Self>,
        input: G::Input,
        ctx: &CallContext<'_>,
    ) -> Result<Response<Body>, RequestError> {
        let limits = &self.info.limits;
        let _permit = match tokio::time::timeout(limits.queue_timeout, self.permits.acquire()).await
        {
            Ok(Ok(p)) => p,
            _ => {
                tracing::warn!(servlet = %self.info.name, request_id = %ctx.id, "no free instance within queue_timeout");
                return Err(RequestError::ServletBusy);
            }
        };
        let mut pooled = match self.ready.pop() {
            Some(p) => p,
            None => match self.guest.instantiate().await {
                Ok(instance) => Pooled {
                    instance,
                    served: 0,
                },
                Err(GuestError::PoolFull) => {
                    tracing::warn!(servlet = %self.info.name, request_id = %ctx.id, "no free instance slot (server.max_instances)");
                    return Err(RequestError::ServletBusy);
                }
                Err(e) => {
                    tracing::warn!(servlet = %self.info.name, request_id = %ctx.id, error = %e, "instantiation failed");
                    return Err(RequestError::ServletFault);
                }
            },
        };
        self.schedule_refill();
        let response = self.guest.handle(&mut pooled.instance, input, ctx).await?;
        pooled.served += 1;
        if pooled.served < limits.reuse {
            let _ = self.ready.push(pooled);
        }
        Ok(response)
    }

    /// Tops the ready queue up after an instance was taken: on this
    /// worker's own runtime, as a separate task that runs once the current
    /// request has its response.
    fn schedule_refill(self: &Arc<Self>) {
        let prewarm = self.info.limits.prewarm as usize;
        if prewarm == 0 || self.ready.len() + self.refilling.load(Ordering::Relaxed) >= prewarm {
            return;
        }
        // `call` runs on a worker's runtime; outside one there is nothing
        // to refill on, and the next request instantiates inline.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.refilling.fetch_add(1, Ordering::Relaxed);
        let pool = self.clone();
        runtime.spawn(async move {
            tokio::task::yield_now().await;
            pool.add_one().await;
            pool.refilling.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
