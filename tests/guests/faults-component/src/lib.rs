//! A `wasi:http/proxy` 0.2 component that does what the last segment of
//! its path says (it sees the whole request path, wherever it is routed),
//! so swan's tests can check every limit and fault on components:
//!
//! | path | does |
//! |---|---|
//! | `/ok` | 200 `ok` |
//! | `/count` | 200 with a global counter (1 for a fresh instance) |
//! | `/env` | 200 with `GREETING` from the environment |
//! | `/loop` | spins forever |
//! | `/trap` | traps before answering |
//! | `/oom` | allocates until memory runs out |
//! | `/sleep?ms=N` | blocks in a host call (a WASI clock) for N ms, then 200 |
//! | `/big?n=N` | 200 with N bytes |
//! | `/stream-then-trap?n=N` | sends N KiB, then traps mid-body |
//! | `/stream?n=N` | streams N KiB in 4 KiB writes (the most one blocking write takes), then ends the body |
//! | `/print?n=N` | writes N KiB to stdout, then 200 |
//! | `/upload` | reads the request body as it comes, answers its length |
//! | `/files` | tries to read `/etc/passwd`: 200 `denied` when it cannot |
//! | `/fetch?url=U&bb=MS` | GETs U with outgoing-handler (`bb`: a between-bytes timeout): `STATUS BODY`, `STATUS BODY (body failed)`, or `error: CODE` |
//! | `/no-response` | returns without setting a response |
//! | `/seen` | 200 `SCHEME AUTHORITY X-HOP`: the request as the guest sees it (`-` for an absent header) |
//! | `/header?name=N` | 200 with every value of header N the guest sees, joined by `\|` |
//! | `/status?n=N` | answers with status N (any the host accepts: 100 to 999) |
//! | `/leak-out` | forgets its response outparam (never set, never dropped) and returns |
//! | `/leak-body?n=N` | sets a 200, writes N KiB, forgets the body without finishing it, and returns |
//! | `/host-spin?n=S` | sets a 200, then for S seconds asks the host for 8 MB of random bytes at a time (CPU spent in host calls), writing a byte after each |
//! | `/leak-in` | reads nothing of the request body, forgets the request, its body and the stream, then 200 |
//! | `/tiny?n=S` | sets a 200, then for S seconds writes one byte at a time (CPU in many small host calls) |
//! | `/cl-long` | declares `content-length: 10` and writes 100 bytes |
//! | `/no-content` | answers 204 with a `content-length: 5` header and no body |
//! | `/headers-bomb?n=N` | builds N header sets of 60 KB each and keeps them, then 200 |

use wasi::http::outgoing_handler;
use wasi::http::types::{
    Fields, IncomingRequest, OutgoingBody, OutgoingRequest, OutgoingResponse, RequestOptions,
    ResponseOutparam, Scheme,
};
use wasi::io::streams::StreamError;

static mut COUNT: u32 = 0;

struct Faults;

impl wasi::exports::http::incoming_handler::Guest for Faults {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let full = request.path_with_query().unwrap_or_default();
        let (path, query) = full.split_once('?').unwrap_or((&full, ""));
        let path = format!("/{}", path.rsplit('/').next().unwrap_or(""));
        let n = || param(query, "n").and_then(|v| v.parse::<usize>().ok()).unwrap_or(1);
        match path.as_str() {
            "/ok" => respond(out, 200, b"ok"),
            "/count" => {
                // SAFETY: a component instance runs one request at a time.
                #[allow(static_mut_refs)]
                let count = unsafe {
                    COUNT += 1;
                    COUNT
                };
                respond(out, 200, count.to_string().as_bytes())
            }
            "/env" => respond(out, 200, std::env::var("GREETING").unwrap_or_default().as_bytes()),
            "/loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "/trap" => std::process::abort(),
            "/oom" => {
                let mut held = Vec::new();
                loop {
                    held.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&held);
                }
            }
            "/sleep" => {
                let ms = param(query, "ms").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                wasi::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
                respond(out, 200, b"slept")
            }
            "/big" => respond(out, 200, &vec![b'b'; n()]),
            "/stream-then-trap" => {
                let Some(body) = start(out, 200) else { return };
                let stream = body.write().expect("stream");
                for _ in 0..n() {
                    let _ = stream.blocking_write_and_flush(&[b's'; 1024]);
                }
                std::process::abort()
            }
            "/stream" => {
                let Some(body) = start(out, 200) else { return };
                let Ok(stream) = body.write() else { return };
                let chunk = [b's'; 4096];
                for _ in 0..n().div_ceil(4) {
                    if stream.blocking_write_and_flush(&chunk).is_err() {
                        return;
                    }
                }
                drop(stream);
                let _ = OutgoingBody::finish(body, None);
            }
            "/print" => {
                let line = "p".repeat(1023);
                for _ in 0..n() {
                    println!("{line}");
                }
                respond(out, 200, b"printed")
            }
            "/upload" => {
                let len = read_len(&request);
                respond(out, 200, len.to_string().as_bytes())
            }
            "/files" => {
                let answer = match std::fs::read("/etc/passwd") {
                    Ok(_) => "read".to_owned(),
                    Err(_) => "denied".to_owned(),
                };
                respond(out, 200, answer.as_bytes())
            }
            "/fetch" => {
                let url = param(query, "url").unwrap_or_default();
                let between = param(query, "bb").and_then(|v| v.parse::<u64>().ok());
                let answer = fetch(&url, between);
                respond(out, 200, answer.as_bytes())
            }
            "/no-response" => {}
            "/leak-out" => std::mem::forget(out),
            "/leak-body" => {
                let Some(body) = start(out, 200) else { return };
                let Ok(stream) = body.write() else { return };
                for _ in 0..n() {
                    let _ = stream.blocking_write_and_flush(&[b'l'; 1024]);
                }
                std::mem::forget(stream);
                std::mem::forget(body);
            }
            "/host-spin" => {
                let Some(body) = start(out, 200) else { return };
                let Ok(stream) = body.write() else { return };
                let until = wasi::clocks::monotonic_clock::now() + n() as u64 * 1_000_000_000;
                while wasi::clocks::monotonic_clock::now() < until {
                    std::hint::black_box(wasi::random::random::get_random_bytes(1_000_000));
                    if stream.blocking_write_and_flush(b"r").is_err() {
                        return;
                    }
                }
                drop(stream);
                let _ = OutgoingBody::finish(body, None);
            }
            "/random" => {
                let bytes = wasi::random::random::get_random_bytes(n() as u64);
                respond(out, 200, bytes.len().to_string().as_bytes())
            }
            "/leak-in" => {
                let Ok(body) = request.consume() else { return };
                let Ok(stream) = body.stream() else { return };
                std::mem::forget(stream);
                std::mem::forget(body);
                std::mem::forget(request);
                respond(out, 200, b"leaked")
            }
            "/tiny" => {
                let Some(body) = start(out, 200) else { return };
                let Ok(stream) = body.write() else { return };
                let until = wasi::clocks::monotonic_clock::now() + n() as u64 * 1_000_000_000;
                while wasi::clocks::monotonic_clock::now() < until {
                    if stream.blocking_write_and_flush(b"x").is_err() {
                        return;
                    }
                }
                drop(stream);
                let _ = OutgoingBody::finish(body, None);
            }
            "/cl-long" => {
                let Ok(headers) =
                    Fields::from_list(&[("content-length".to_owned(), b"10".to_vec())])
                else {
                    return;
                };
                let response = OutgoingResponse::new(headers);
                let Ok(body) = response.body() else { return };
                ResponseOutparam::set(out, Ok(response));
                if let Ok(stream) = body.write() {
                    let _ = stream.write(&[b'c'; 100]);
                    let _ = stream.flush();
                    drop(stream);
                }
                let _ = OutgoingBody::finish(body, None);
            }
            "/no-content" => {
                let Ok(headers) =
                    Fields::from_list(&[("content-length".to_owned(), b"5".to_vec())])
                else {
                    return;
                };
                let response = OutgoingResponse::new(headers);
                let _ = response.set_status_code(204);
                let Ok(body) = response.body() else { return };
                ResponseOutparam::set(out, Ok(response));
                let _ = OutgoingBody::finish(body, None);
            }
            "/headers-bomb" => {
                let value = vec![b'h'; 60_000];
                let mut held = Vec::new();
                for _ in 0..n() {
                    let fields = Fields::new();
                    if fields.append("x-big", &value).is_err() {
                        break;
                    }
                    held.push(fields);
                }
                respond(out, 200, held.len().to_string().as_bytes())
            }
            "/seen" => {
                let scheme = match request.scheme() {
                    Some(Scheme::Http) => "http".to_owned(),
                    Some(Scheme::Https) => "https".to_owned(),
                    Some(Scheme::Other(s)) => s,
                    None => "-".to_owned(),
                };
                let authority = request.authority().unwrap_or_else(|| "-".to_owned());
                let hop = request.headers().get("x-hop");
                let hop = hop
                    .first()
                    .map_or("-".to_owned(), |v| String::from_utf8_lossy(v).into_owned());
                respond(out, 200, format!("{scheme} {authority} {hop}").as_bytes())
            }
            "/header" => {
                // Every value of the header `name`, joined by `|`.
                let name = param(query, "name").unwrap_or_default();
                let values: Vec<String> = request
                    .headers()
                    .get(&name)
                    .iter()
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .collect();
                respond(out, 200, values.join("|").as_bytes())
            }
            "/status" => {
                let status = u16::try_from(n()).unwrap_or(500);
                respond(out, status, b"status")
            }
            _ => respond(out, 404, b"no such fault"),
        }
    }
}

wasi::http::proxy::export!(Faults);

fn start(out: ResponseOutparam, status: u16) -> Option<OutgoingBody> {
    let headers = Fields::from_list(&[(
        "content-type".to_owned(),
        b"text/plain; charset=utf-8".to_vec(),
    )])
    .ok()?;
    let response = OutgoingResponse::new(headers);
    response.set_status_code(status).ok()?;
    let body = response.body().ok()?;
    ResponseOutparam::set(out, Ok(response));
    Some(body)
}

fn respond(out: ResponseOutparam, status: u16, bytes: &[u8]) {
    let Some(body) = start(out, status) else { return };
    if let Ok(stream) = body.write() {
        for chunk in bytes.chunks(4096) {
            if stream.blocking_write_and_flush(chunk).is_err() {
                return;
            }
        }
    }
    let _ = OutgoingBody::finish(body, None);
}

fn read_len(request: &IncomingRequest) -> usize {
    let mut total = 0;
    let Ok(body) = request.consume() else { return 0 };
    if let Ok(stream) = body.stream() {
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => total += chunk.len(),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(_)) => return usize::MAX,
            }
        }
    }
    total
}

fn fetch(url: &str, between_bytes_ms: Option<u64>) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some(("https", r)) => (Scheme::Https, r),
        Some(("http", r)) => (Scheme::Http, r),
        _ => return "error: bad url".to_owned(),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_scheme(Some(&scheme));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let options = between_bytes_ms.map(|ms| {
        let options = RequestOptions::new();
        let _ = options.set_between_bytes_timeout(Some(ms * 1_000_000));
        options
    });
    let future = match outgoing_handler::handle(request, options) {
        Ok(f) => f,
        Err(e) => return format!("error: {e:?}"),
    };
    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(r))) => r,
        Some(Ok(Err(e))) => return format!("error: {e:?}"),
        _ => return "error: no response".to_owned(),
    };
    let status = response.status();
    let mut text = Vec::new();
    if let Ok(body) = response.consume() {
        if let Ok(stream) = body.stream() {
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => text.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(_)) => {
                        return format!("{status} {} (body failed)", String::from_utf8_lossy(&text));
                    }
                }
            }
        }
    }
    format!("{status} {}", String::from_utf8_lossy(&text))
}

fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.replace("%3A", ":").replace("%2F", "/"))
    })
}
