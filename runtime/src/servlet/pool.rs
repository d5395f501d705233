//! A servlet's instances: made ahead of requests, taken one per request,
//! replaced right after, reused only on opt-in (`reuse = N`).
//!
//! - a lock-free queue of ready instances, filled to `prewarm` at load (on
//!   the engine's background thread) and topped up on the worker's own
//!   runtime right after each request, so neither the request nor another
//!   thread (a wake-up and a context switch per request) pays for it;
//! - a semaphore for `max_concurrency`, waited on for `queue_timeout`;
//! - an instance is lent for one request ([`Lease`]) together with the
//!   request's permit; the guest gives it back when the request is really
//!   over (for a streamed response, when its body ends), and it goes back
//!   to the queue only if it may serve again (`reuse`). An instance that
//!   failed is dropped, never reused;
//! - a spent instance is dropped off the request's path too: tearing it
//!   down (its memory slot reset) waits in [`InstancePool::spent`] until
//!   the response is out, like the refill.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;
use http::Response;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::guest::{Guest, GuestError, Lent};
use super::info::{CallContext, ServletInfo};
use super::stats::ServletStats;
use crate::body::Body;
use crate::engine::{Engine, IdleInstances};
use crate::observe::throttle::Throttle;
use crate::request::RequestError;

/// The instances of one servlet.
pub(crate) struct InstancePool<G: Guest> {
    guest: G,
    /// The instance budget this pool shares with every servlet.
    engine: Arc<Engine>,
    info: Arc<ServletInfo>,
    stats: Arc<ServletStats>,
    /// Instances ready to serve (fresh, or kept for reuse).
    ready: ArrayQueue<Pooled<G::Instance>>,
    /// Requests running at once.
    permits: Arc<Semaphore>,
    /// Refills running right now.
    refilling: AtomicUsize,
    /// Instances done serving, to be dropped once the response is out.
    spent: ArrayQueue<Pooled<G::Instance>>,
    /// Whether a task to drop the spent instances is scheduled.
    reaping: AtomicBool,
    /// 503s are logged at most once a second: a burst any client can
    /// send must not flood the log.
    busy_log: Throttle,
}

/// Spent instances waiting at most to be dropped; past that the request
/// drops its own.
const SPENT_MAX: usize = 64;

/// An instance and the requests it served.
struct Pooled<I> {
    instance: I,
    served: u32,
}

impl<G: Guest> InstancePool<G> {
    pub(crate) fn new(
        engine: &Arc<Engine>,
        guest: G,
        info: Arc<ServletInfo>,
        stats: Arc<ServletStats>,
    ) -> Arc<Self> {
        let limits = &info.limits;
        // Room for the prewarmed instances and, with reuse, for every
        // instance that comes back from a request.
        let kept_for_reuse = if limits.reuse > 1 {
            limits.max_concurrency as usize
        } else {
            0
        };
        let pool = Arc::new(InstancePool {
            guest,
            engine: engine.clone(),
            ready: ArrayQueue::new((limits.prewarm as usize + kept_for_reuse).max(1)),
            permits: Arc::new(Semaphore::new(limits.max_concurrency as usize)),
            refilling: AtomicUsize::new(0),
            spent: ArrayQueue::new(SPENT_MAX),
            reaping: AtomicBool::new(false),
            busy_log: Throttle::new(std::time::Duration::from_secs(1)),
            info,
            stats,
        });
        let idle: std::sync::Weak<dyn IdleInstances> = Arc::downgrade(&pool) as _;
        engine.register_idle(idle);
        pool
    }

    /// The guest this pool makes instances of.
    pub(crate) fn guest(&self) -> &G {
        &self.guest
    }

    /// Instances ready right now.
    pub(crate) fn ready(&self) -> usize {
        self.ready.len()
    }

    /// Requests running right now.
    pub(crate) fn in_use(&self) -> usize {
        (self.info.limits.max_concurrency as usize).saturating_sub(self.permits.available_permits())
    }

    /// Makes an instance, counted.
    async fn instantiate(&self) -> Result<G::Instance, GuestError> {
        let made = self.guest.instantiate().await;
        if made.is_ok() {
            self.stats.instantiated.add(1);
        }
        made
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
        self.reap();
        match self.instantiate().await {
            Ok(instance) => self
                .ready
                .push(Pooled {
                    instance,
                    served: 0,
                })
                .is_ok(),
            // Every slot is taken (other servlets' instances, requests
            // in flight): the next request makes its own.
            Err(GuestError::PoolFull) => false,
            Err(e) => {
                tracing::warn!(servlet = %self.info.name, error = %e, "pre-instantiation failed");
                false
            }
        }
    }

    /// Logs a 503, throttled (`more` counts those left out since).
    fn busy(&self, ctx: &CallContext<'_>, why: &str) {
        match self.busy_log.allow() {
            Some(more) => {
                tracing::warn!(servlet = %self.info.name, request_id = %ctx.id, more, "{why}: 503 (one such line a second at most; `more` were left out since the last)");
            }
            None => tracing::debug!(servlet = %self.info.name, request_id = %ctx.id, "{why}: 503"),
        }
    }

    /// Runs one request in a ready (or new) instance.
    pub(crate) async fn call(
        self: &Arc<Self>,
        input: G::Input,
        ctx: &CallContext<'_>,
    ) -> Result<Response<Body>, RequestError> {
        let limits = &self.info.limits;
        let permits = self.permits.clone();
        let permit = match tokio::time::timeout(limits.queue_timeout, permits.acquire_owned()).await
        {
            Ok(Ok(p)) => p,
            _ => {
                self.busy(ctx, "no free instance within queue_timeout");
                return Err(RequestError::ServletBusy);
            }
        };
        let pooled = match self.ready.pop() {
            Some(p) => p,
            None => {
                // Spent instances hold slots of `server.max_instances`;
                // so do other servlets' idle ones, which give way.
                self.reap();
                let mut made = self.instantiate().await;
                if matches!(made, Err(GuestError::PoolFull))
                    && self.engine.release_idle(Arc::as_ptr(self).cast())
                {
                    made = self.instantiate().await;
                }
                match made {
                    Ok(instance) => Pooled {
                        instance,
                        served: 0,
                    },
                    Err(GuestError::PoolFull) => {
                        self.busy(ctx, "no free instance slot (server.max_instances)");
                        return Err(RequestError::ServletBusy);
                    }
                    Err(e) => {
                        tracing::warn!(servlet = %self.info.name, request_id = %ctx.id, error = %e, "instantiation failed");
                        return Err(match e {
                            GuestError::TimedOut(_) => RequestError::ServletTimeout,
                            _ => RequestError::fault(format!("instantiation failed: {e}")),
                        });
                    }
                }
            }
        };
        // An instance that will come back (reuse) needs no replacement.
        if pooled.served + 1 >= limits.reuse {
            self.schedule_refill();
        }
        let lease = Lease {
            pool: self.clone(),
            pooled: Some(pooled),
            _permit: permit,
        };
        self.guest.handle(lease, input, ctx).await
    }

    /// Drops a spent instance after the current request's response is
    /// out: on this worker's runtime, from a task scheduled once for
    /// however many are waiting.
    fn retire(self: &Arc<Self>, spent: Pooled<G::Instance>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(spent);
            return;
        };
        if let Err(spent) = self.spent.push(spent) {
            drop(spent);
            return;
        }
        if !self.reaping.swap(true, Ordering::AcqRel) {
            let pool = self.clone();
            runtime.spawn(async move {
                after_the_response().await;
                pool.reaping.store(false, Ordering::Release);
                pool.reap();
            });
        }
    }

    /// Drops every spent instance waiting.
    fn reap(&self) {
        while let Some(spent) = self.spent.pop() {
            drop(spent);
        }
    }

    /// Tops the ready queue up after an instance was taken: on this
    /// worker's own runtime, as a separate task that runs once the current
    /// request has its response. Usually that is one instance; after a
    /// time when every slot of `server.max_instances` was taken (refills
    /// then give up), the queue is short by more, and the task fills it
    /// back to `prewarm`, yielding between instances.
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
            // Other refills running (this one is counted too) will add
            // one each.
            let full = |pool: &InstancePool<G>| {
                pool.ready.len() + pool.refilling.load(Ordering::Relaxed) > prewarm
            };
            after_the_response().await;
            // Usually one instance, and no second yield.
            while !full(&pool) && pool.add_one().await && !full(&pool) {
                tokio::task::yield_now().await;
            }
            pool.refilling.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Lets the request that scheduled this task send its response first, as
/// far as turns of the worker's queue of tasks can: two, since a component
/// whose guest answered within its first poll yields once itself before
/// its answer is sent (`component::handle`). Not a guarantee: at one
/// connection the teardown was still seen before the next request's send.
/// Measured with one turn: 0.63 of the build before at one connection;
/// with two, 1.05 (BENCHMARKS.md, stop 42).
async fn after_the_response() {
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
}

impl<G: Guest> IdleInstances for InstancePool<G> {
    fn idle(&self) -> usize {
        self.ready.len()
    }

    fn drop_idle(&self) -> bool {
        self.ready.pop().is_some()
    }
}

/// One instance lent for one request, with the request's concurrency
/// permit. [`Lease::finish`] after a success gives the instance back (if it
/// may serve again); dropping the lease otherwise discards the instance.
pub(crate) struct Lease<G: Guest> {
    pool: Arc<InstancePool<G>>,
    pooled: Option<Pooled<G::Instance>>,
    _permit: OwnedSemaphorePermit,
}

impl<G: Guest> Lent<G::Instance> for Lease<G> {
    fn instance(&mut self) -> Option<&mut G::Instance> {
        self.pooled.as_mut().map(|p| &mut p.instance)
    }

    fn stats(&self) -> Arc<ServletStats> {
        self.pool.stats.clone()
    }

    /// The request succeeded: the instance goes back to the ready queue if
    /// it may serve another request.
    fn finish(mut self) {
        if let Some(mut pooled) = self.pooled.take() {
            pooled.served += 1;
            if pooled.served < self.pool.info.limits.reuse {
                if let Err(full) = self.pool.ready.push(pooled) {
                    self.pool.retire(full);
                }
            } else {
                self.pool.retire(pooled);
            }
        }
    }
}
