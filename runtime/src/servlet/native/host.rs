//! The per-instance host state: WASI context, store limits, the request
//! being served and the response being built.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use wasmtime::{Memory, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::engine::InstanceTicket;
use crate::servlet::deadline::Deadline;
use crate::servlet::info::ServletInfo;
use crate::servlet::outbound::Outbound;
use crate::servlet::output::GuestOutput;
use crate::store::{Store, StoreAccess};

/// A response fetched by `http_send`, kept for `http_response_get`.
#[derive(Debug, Default)]
pub(crate) struct Fetched {
    /// `name: value\n` lines.
    pub(crate) headers: Bytes,
    pub(crate) body: Bytes,
}

/// The request as a servlet sees it.
#[derive(Debug, Default)]
pub(crate) struct RequestData {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: String,
    pub(crate) path_info: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) remote_addr: String,
    pub(crate) request_id: String,
    /// `headers` as "name: value\n" lines, made on first use.
    pub(crate) headers_text: Option<Bytes>,
}

/// The response a servlet builds.
#[derive(Debug)]
pub(crate) struct ResponseData {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    /// What the headers weigh, counted as HTTP/2 counts a header list.
    pub(crate) header_bytes: usize,
    pub(crate) body: BytesMut,
}

impl Default for ResponseData {
    fn default() -> Self {
        ResponseData {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            header_bytes: 0,
            body: BytesMut::new(),
        }
    }
}

/// Everything a store carries.
pub(crate) struct Host {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) limits: StoreLimits,
    pub(crate) info: Arc<ServletInfo>,
    pub(crate) memory: Option<Memory>,
    pub(crate) request: RequestData,
    pub(crate) response: ResponseData,
    /// What this servlet may reach over HTTP.
    pub(crate) outbound: Arc<Outbound>,
    /// The last response `http_send` fetched in this request.
    pub(crate) fetched: Fetched,
    /// The key-value stores the route may open, counted per request.
    pub(crate) kv: StoreAccess,
    /// Stores opened in this request, by handle.
    pub(crate) kv_open: Vec<Arc<Store>>,
    /// When the current request (or instantiation) must stop.
    pub(crate) deadline: Deadline,
    stdout: GuestOutput,
    stderr: GuestOutput,
    /// Bytes the guest logged in this request (`log`), and those dropped
    /// past [`OUTPUT_CAPTURE_BYTES`](crate::servlet::output::OUTPUT_CAPTURE_BYTES).
    pub(crate) logged: usize,
    pub(crate) log_dropped: usize,
    /// This instance's place in the process-wide instance budget.
    _ticket: InstanceTicket,
}

impl Host {
    pub(crate) fn new(
        info: Arc<ServletInfo>,
        outbound: Arc<Outbound>,
        kv: StoreAccess,
        ticket: InstanceTicket,
    ) -> Host {
        let stdout = GuestOutput::default();
        let stderr = GuestOutput::default();
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .envs(&info.settings)
            .max_random_size(crate::servlet::guest::MAX_RANDOM_BYTES);
        let limits = StoreLimitsBuilder::new()
            .memory_size(info.limits.max_memory as usize)
            .instances(1)
            .memories(1)
            .tables(4)
            .trap_on_grow_failure(true)
            .build();
        Host {
            wasi: wasi.build_p1(),
            limits,
            info,
            memory: None,
            request: RequestData::default(),
            response: ResponseData::default(),
            outbound,
            fetched: Fetched::default(),
            kv,
            kv_open: Vec::new(),
            deadline: Deadline::default(),
            stdout,
            stderr,
            logged: 0,
            log_dropped: 0,
            _ticket: ticket,
        }
    }

    /// Logs what the servlet printed during this request, a line per
    /// event, tagged with the servlet and the request.
    pub(crate) fn flush_output(&mut self) {
        let (name, id) = (&self.info.name, &self.request.request_id);
        self.stdout.log(name, id, "stdout");
        self.stderr.log(name, id, "stderr");
        self.logged = 0;
        let dropped = std::mem::take(&mut self.log_dropped);
        if dropped > 0 {
            tracing::warn!(servlet = %name, request_id = %id, dropped, "log calls past the per-request cap were dropped");
        }
    }
}

/// An instance dropped mid-request (its client left, its deadline passed)
/// still logs what its guest printed.
impl Drop for Host {
    fn drop(&mut self) {
        self.flush_output();
    }
}
