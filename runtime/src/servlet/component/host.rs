//! The per-instance state of a component: WASI (p2), wasi:http, wasi:config,
//! store limits, the deadline counter, captured output, and the hooks that
//! decide what outbound HTTP may do.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use wasmtime::StoreLimitsBuilder;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_config::{WasiConfig, WasiConfigVariables};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::engine::InstanceTicket;
use crate::servlet::deadline::Deadline;
use crate::servlet::info::ServletInfo;
use crate::servlet::outbound::{Outbound, OutboundHooks};
use crate::servlet::output::GuestOutput;
use crate::store::{StoreAccess, Stores};

/// Core instances one component may hold (a component is several core
/// modules linked together: the program, the WASI adapter, shims).
pub(crate) const MAX_CORE_INSTANCES: usize = 64;
/// Linear memories one component may hold.
pub(crate) const MAX_MEMORIES: usize = 8;
/// Tables one component may hold.
pub(crate) const MAX_TABLES: usize = 16;
/// Resources (streams, requests, fields...) one component may hold at
/// once. With the header set limit below and the outgoing body chunk
/// (`outbound::OUTGOING_BODY_CHUNK`), this bounds the memory the host holds
/// for a guest beyond its own `max_memory`: 10,000 outgoing bodies of 2 MiB
/// of buffers each let one request hold 2 GiB under a 32 MiB cap.
const MAX_RESOURCES: usize = 1_024;

/// Everything a component's store carries.
pub(crate) struct ComponentHost {
    pub(crate) table: ResourceTable,
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) hooks: OutboundHooks,
    pub(crate) config: Arc<WasiConfigVariables>,
    /// The key-value stores the route may open, counted per request.
    pub(crate) kv: StoreAccess,
    pub(crate) limits: super::memory::ComponentLimits,
    pub(crate) info: Arc<ServletInfo>,
    /// When the current request (or instantiation) must stop.
    pub(crate) deadline: Deadline,
    /// Whether the current response's head is out: from then on only run
    /// time counts against the deadline.
    pub(crate) head_sent: Arc<AtomicBool>,
    /// The current request's body: how long the guest waited for it.
    pub(crate) body: Arc<super::BodyVerdict>,
    pub(crate) stdout: GuestOutput,
    pub(crate) stderr: GuestOutput,
    _ticket: InstanceTicket,
}

impl ComponentHost {
    pub(crate) fn new(
        info: Arc<ServletInfo>,
        config: Arc<WasiConfigVariables>,
        outbound: Arc<Outbound>,
        stores: Arc<Stores>,
        ticket: InstanceTicket,
    ) -> ComponentHost {
        let stdout = GuestOutput::default();
        let stderr = GuestOutput::default();
        // No preopened folders, no sockets (deny-all by default), only the
        // servlet's settings as environment.
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .envs(&info.settings)
            .max_random_size(crate::servlet::guest::MAX_RANDOM_BYTES)
            .build();
        let max_memory = info.limits.max_memory as usize;
        let each = StoreLimitsBuilder::new()
            .memory_size(max_memory)
            .instances(MAX_CORE_INSTANCES)
            .memories(MAX_MEMORIES)
            .tables(MAX_TABLES)
            .trap_on_grow_failure(true)
            .build();
        // `max_memory` holds for all of the component's memories together.
        let limits = super::memory::ComponentLimits::new(each, max_memory);
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        ComponentHost {
            table,
            wasi,
            http: {
                let mut http = WasiHttpCtx::new();
                http.set_field_size_limit(crate::servlet::guest::HEADER_SET_LIMIT);
                http
            },
            hooks: OutboundHooks::new(outbound),
            kv: StoreAccess::new(stores, &info.limits.stores),
            config,
            limits,
            info,
            deadline: Deadline::default(),
            head_sent: Arc::default(),
            body: Arc::default(),
            stdout,
            stderr,
            _ticket: ticket,
        }
    }

    /// Logs what the guest printed during this request.
    pub(crate) fn flush_output(&mut self) {
        // The request's id is kept once, by the hooks (outbound requests
        // log it too).
        let (name, id) = (&self.info.name, &self.hooks.request_id);
        self.stdout.log(name, id, "stdout");
        self.stderr.log(name, id, "stderr");
    }

    /// wasi:keyvalue view.
    pub(crate) fn keyvalue(&mut self) -> super::keyvalue::KeyValue<'_> {
        super::keyvalue::KeyValue {
            access: &mut self.kv,
            table: &mut self.table,
        }
    }

    /// wasi:config/store view.
    pub(crate) fn config(&mut self) -> WasiConfig<'_> {
        WasiConfig::from(&*self.config)
    }
}

/// An instance dropped mid-request (its client left, its deadline passed)
/// still logs what its guest printed.
impl Drop for ComponentHost {
    fn drop(&mut self) {
        self.flush_output();
    }
}

impl WasiView for ComponentHost {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for ComponentHost {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}
