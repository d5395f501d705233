//! The native ABI's host functions, driven by generated modules:
//! - wasm-smith modules that import the `swan` functions, loaded like a
//!   dropped-in servlet (their start functions call the ABI with no
//!   request in flight);
//! - servlets whose `swan_handle` makes a fuzzed sequence of ABI calls with
//!   fuzzed pointers, lengths and bytes, against a fuzzed request.
//!
//! Whatever a module does, loading gives a servlet or a refusal, a call
//! gives a response or a RequestError, and the host never panics.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use swan::config::{ServerConfig, ServletLimits};
use swan::engine::Tier;
use swan::request::{BodyPolicy, RequestId};
use swan::servlet::{CallContext, Loader, ServletInfo};

const IMPORTS: &str = r#"(module
  (import "swan" "request_get" (func (param i32 i32 i32) (result i32)))
  (import "swan" "request_header" (func (param i32 i32 i32 i32) (result i32)))
  (import "swan" "setting" (func (param i32 i32 i32 i32) (result i32)))
  (import "swan" "response_status" (func (param i32) (result i32)))
  (import "swan" "response_header" (func (param i32 i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func (param i32 i32) (result i32)))
  (import "swan" "log" (func (param i32 i32 i32))))"#;

const EXPORTS: &str = r#"(module
  (memory (export "memory") 1 4)
  (func (export "swan_abi_version") (result i32) unreachable)
  (func (export "swan_handle") (result i32) unreachable))"#;

#[derive(Debug, Arbitrary)]
enum Call {
    Get(i32, i32, i32),
    Header(i32, i32, i32, i32),
    Setting(i32, i32, i32, i32),
    Status(i32),
    SetHeader(i32, i32, i32, i32),
    Write(i32, i32),
    Log(i32, i32, i32),
}

#[derive(Debug, Arbitrary)]
struct Handled {
    data: Vec<u8>,
    calls: Vec<Call>,
    result: i32,
    path: String,
    header_name: String,
    header_value: Vec<u8>,
    body: Vec<u8>,
}

fn loader() -> &'static Arc<Loader> {
    static LOADER: OnceLock<Arc<Loader>> = OnceLock::new();
    LOADER.get_or_init(|| {
        let mut server = ServerConfig::defaults();
        server.max_instances = 16;
        Loader::new(&server, Default::default()).expect("engine")
    })
}

fn info(file: std::path::PathBuf) -> ServletInfo {
    ServletInfo {
        name: "fuzz".to_owned(),
        file,
        limits: ServletLimits {
            max_memory: 4 << 16,
            timeout: Duration::from_millis(200),
            max_response_bytes: 1 << 16,
            prewarm: 0,
            ..ServletLimits::default()
        },
        settings: vec![("K".to_owned(), "v".to_owned())],
        development: false,
    }
}

fn wat_for(h: &Handled) -> String {
    let data: String = h.data.iter().take(4096).map(|b| format!("\\{b:02x}")).collect();
    let mut body = String::new();
    for call in h.calls.iter().take(64) {
        body.push_str(&match call {
            Call::Get(a, b, c) => format!("(drop (call $get (i32.const {a}) (i32.const {b}) (i32.const {c})))\n"),
            Call::Header(a, b, c, d) => format!("(drop (call $header (i32.const {a}) (i32.const {b}) (i32.const {c}) (i32.const {d})))\n"),
            Call::Setting(a, b, c, d) => format!("(drop (call $setting (i32.const {a}) (i32.const {b}) (i32.const {c}) (i32.const {d})))\n"),
            Call::Status(a) => format!("(drop (call $status (i32.const {a})))\n"),
            Call::SetHeader(a, b, c, d) => format!("(drop (call $set_header (i32.const {a}) (i32.const {b}) (i32.const {c}) (i32.const {d})))\n"),
            Call::Write(a, b) => format!("(drop (call $write (i32.const {a}) (i32.const {b})))\n"),
            Call::Log(a, b, c) => format!("(call $log (i32.const {a}) (i32.const {b}) (i32.const {c}))\n"),
        });
    }
    format!(
        r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "request_header" (func $header (param i32 i32 i32 i32) (result i32)))
  (import "swan" "setting" (func $setting (param i32 i32 i32 i32) (result i32)))
  (import "swan" "response_status" (func $status (param i32) (result i32)))
  (import "swan" "response_header" (func $set_header (param i32 i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (import "swan" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{data}")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32)
    {body}
    i32.const {result}))"#,
        result = h.result
    )
}

fn run(bytes: &[u8], request: Option<&Handled>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("fuzz.wasm");
    std::fs::write(&file, bytes).expect("write");
    let Ok(servlet) = loader().load_servlet(info(file), Tier::Baseline) else {
        return;
    };
    let Some(h) = request else { return };
    let mut req = http::Request::builder().uri("/fuzz");
    if let (Ok(name), Ok(value)) = (
        http::HeaderName::from_bytes(h.header_name.as_bytes()),
        http::HeaderValue::from_bytes(&h.header_value),
    ) {
        req = req.header(name, value);
    }
    let Ok(req) = req.body(http_body_util::Full::new(bytes::Bytes::from(h.body.clone()))) else {
        return;
    };
    let path = format!("/{}", h.path.replace(|c: char| !c.is_ascii_alphanumeric(), ""));
    let ctx = CallContext {
        path: &path,
        path_info: "",
        remote: SocketAddr::from(([127, 0, 0, 1], 9)),
        id: RequestId::next(),
        body: BodyPolicy {
            max_bytes: 1 << 16,
            timeout: Duration::from_secs(1),
            min_rate: 0,
        },
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _ = rt.block_on(servlet.call(req, ctx));
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let mut u = Unstructured::new(rest);
    if which % 2 == 0 {
        let mut config = wasm_smith::Config::default();
        config.available_imports = Some(wat::parse_str(IMPORTS).expect("imports"));
        config.exports = Some(wat::parse_str(EXPORTS).expect("exports"));
        config.max_memory32_bytes = 4 << 16;
        config.memory64_enabled = false;
        config.max_funcs = 8;
        let Ok(module) = wasm_smith::Module::new(config, &mut u) else { return };
        run(&module.to_bytes(), None);
    } else {
        let Ok(h) = Handled::arbitrary(&mut u) else { return };
        let Ok(bytes) = wat::parse_str(wat_for(&h)) else { return };
        run(&bytes, Some(&h));
    }
});
