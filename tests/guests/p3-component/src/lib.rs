//! A `wasi:http/service` 0.3 (p3) component that does what the last
//! segment of its path says, so swan's tests can check a p3 route like a
//! p2 one:
//!
//! | path | does |
//! |---|---|
//! | `/ok` | 200 `ok` |
//! | `/count` | 200 with a global counter (1 for a fresh instance) |
//! | `/env` | 200 with `GREETING` from the environment |
//! | `/echo?...` | 200 JSON: method, path with query, authority, the `x-echo` header, the body's length and first bytes |
//! | `/loop` | spins forever |
//! | `/trap` | traps before answering |
//! | `/oom` | allocates until memory runs out |
//! | `/sleep?ms=N` | waits N ms on the WASI clock, then 200 |
//! | `/stream?n=N` | streams N KiB in 4 KiB writes, then ends the body |
//! | `/stream-then-trap?n=N` | sends N KiB, then traps mid-body |
//! | `/upload` | reads the request body as it comes, answers its length |
//! | `/error` | answers the error code `internal-error` |
//! | `/fetch?url=U` | GETs U with `wasi:http/client`: `STATUS BODY`, or `error: CODE` |
//! | `/stash` | keeps its request (unread) in a global, then 200 `stashed` |
//! | `/peek` | the kept request's `x-secret` header and body, or `nothing` |
//! | `/bg-loop` | answers `done` whole, then spins in a task of its own |
//! | `/stash-body` | keeps its request body's stream (unread) in a global, then 200 `stashed` |
//! | `/peek-body` | what is left of the kept body stream, or `nothing` |
//! | `/print` | writes a line to stdout, then 200 |

use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response, Scheme};
use wasip3::wit_bindgen::StreamResult;
use wasip3::{wit_bindgen, wit_future, wit_stream};

static mut COUNT: u32 = 0;

thread_local! {
    /// A request `/stash` kept past its answer.
    static STASH: std::cell::RefCell<Option<Request>> = const { std::cell::RefCell::new(None) };
    /// A request body stream `/stash-body` kept past its answer.
    static STASHED_BODY: std::cell::RefCell<Option<wit_bindgen::StreamReader<u8>>> =
        const { std::cell::RefCell::new(None) };
}

struct P3;

wasip3::http::service::export!(P3);

impl wasip3::exports::http::handler::Guest for P3 {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let full = request.get_path_with_query().unwrap_or_default();
        let (path, query) = full.split_once('?').unwrap_or((&full, ""));
        let name = path.rsplit('/').next().unwrap_or("").to_owned();
        let n = param(query, "n").and_then(|v| v.parse::<usize>().ok()).unwrap_or(1);
        match name.as_str() {
            "ok" => respond(200, b"ok".to_vec()),
            "stash" => {
                STASH.with(|s| *s.borrow_mut() = Some(request));
                respond(200, b"stashed".to_vec())
            }
            "peek" => match STASH.with(|s| s.borrow_mut().take()) {
                Some(kept) => {
                    let secret = kept
                        .get_headers()
                        .get("x-secret")
                        .first()
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                        .unwrap_or_default();
                    let body = read_all(kept).await.unwrap_or_default();
                    let text = format!("kept {secret} {}", String::from_utf8_lossy(&body));
                    respond(200, text.into_bytes())
                }
                None => respond(200, b"nothing".to_vec()),
            },
            "stash-body" => {
                let (_result_tx, result_rx) = wit_future::new(|| Ok(()));
                let (stream, _trailers) = Request::consume_body(request, result_rx);
                STASHED_BODY.with(|s| *s.borrow_mut() = Some(stream));
                respond(200, b"stashed".to_vec())
            }
            "peek-body" => match STASHED_BODY.with(|s| s.borrow_mut().take()) {
                Some(mut stream) => {
                    let (_, chunk) = stream.read(Vec::with_capacity(16 << 10)).await;
                    respond(200, chunk)
                }
                None => respond(200, b"nothing".to_vec()),
            },
            "bg-loop" => {
                let (mut tx, response) = start(200, "text/plain; charset=utf-8")?;
                wit_bindgen::spawn_local(async move {
                    let _ = tx.write_all(b"done".to_vec()).await;
                    drop(tx);
                    let mut x: u64 = 0;
                    loop {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                });
                Ok(response)
            }
            "count" => {
                // SAFETY: an instance runs one request at a time.
                #[allow(static_mut_refs)]
                let count = unsafe {
                    COUNT += 1;
                    COUNT
                };
                respond(200, count.to_string().into_bytes())
            }
            "env" => respond(200, std::env::var("GREETING").unwrap_or_default().into_bytes()),
            "echo" => {
                let method = match request.get_method() {
                    Method::Get => "GET".to_owned(),
                    Method::Post => "POST".to_owned(),
                    Method::Put => "PUT".to_owned(),
                    other => format!("{other:?}"),
                };
                let authority = request.get_authority().unwrap_or_default();
                let echo = request
                    .get_headers()
                    .get("x-echo")
                    .first()
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                let body = read_all(request).await?;
                let head = String::from_utf8_lossy(&body[..body.len().min(64)]).into_owned();
                let json = format!(
                    "{{\"method\":{},\"path\":{},\"authority\":{},\"x-echo\":{},\"body_len\":{},\"body\":{}}}",
                    quote(&method),
                    quote(&full),
                    quote(&authority),
                    quote(&echo),
                    body.len(),
                    quote(&head)
                );
                respond_with(200, "application/json", json.into_bytes())
            }
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "trap" => std::process::abort(),
            "oom" => {
                let mut held = Vec::new();
                loop {
                    held.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&held);
                }
            }
            "sleep" => {
                let ms = param(query, "ms").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
                respond(200, b"slept".to_vec())
            }
            "stream" => stream(n, false),
            "stream-then-trap" => stream(n, true),
            "upload" => {
                let body = read_all(request).await?;
                respond(200, body.len().to_string().into_bytes())
            }
            "error" => Err(ErrorCode::InternalError(Some("asked to fail".to_owned()))),
            "fetch" => {
                let url = param(query, "url").unwrap_or_default();
                let answer = fetch(&url).await;
                respond(200, answer.into_bytes())
            }
            "print" => {
                println!("hello from p3");
                respond(200, b"printed".to_vec())
            }
            _ => respond(404, b"no such fault".to_vec()),
        }
    }
}

/// A response whose body `body` is written by a task of its own.
fn respond(status: u16, body: Vec<u8>) -> Result<Response, ErrorCode> {
    respond_with(status, "text/plain; charset=utf-8", body)
}

fn respond_with(status: u16, content_type: &str, body: Vec<u8>) -> Result<Response, ErrorCode> {
    let (mut tx, response) = start(status, content_type)?;
    wit_bindgen::spawn_local(async move {
        let _ = tx.write_all(body).await;
    });
    Ok(response)
}

/// A response and the writer of its body. The body ends cleanly when the
/// writer is dropped (the trailers future then resolves `ok(none)`).
fn start(
    status: u16,
    content_type: &str,
) -> Result<(wit_bindgen::StreamWriter<u8>, Response), ErrorCode> {
    let headers = Fields::from_list(&[("content-type".to_owned(), content_type.as_bytes().to_vec())])
        .map_err(|e| ErrorCode::InternalError(Some(format!("{e:?}"))))?;
    let (tx, rx) = wit_stream::new();
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    drop(trailers_tx);
    let (response, _) = Response::new(headers, Some(rx), trailers_rx);
    response
        .set_status_code(status)
        .map_err(|()| ErrorCode::InternalError(Some("bad status".to_owned())))?;
    Ok((tx, response))
}

fn stream(kib: usize, trap: bool) -> Result<Response, ErrorCode> {
    let (mut tx, response) = start(200, "text/plain")?;
    wit_bindgen::spawn_local(async move {
        for _ in 0..kib.div_ceil(4) {
            if !tx.write_all(vec![b's'; 4096]).await.is_empty() {
                return;
            }
        }
        if trap {
            std::process::abort();
        }
    });
    Ok(response)
}

async fn read_all(request: Request) -> Result<Vec<u8>, ErrorCode> {
    let (_result_tx, result_rx) = wit_future::new(|| Ok(()));
    let (mut stream, trailers) = Request::consume_body(request, result_rx);
    let mut body = Vec::new();
    loop {
        let (result, chunk) = stream.read(Vec::with_capacity(16 << 10)).await;
        body.extend_from_slice(&chunk);
        match result {
            StreamResult::Complete(_) => {}
            StreamResult::Dropped | StreamResult::Cancelled => break,
        }
    }
    // The host tells how the body ended: too large, too slow, or whole.
    trailers.await?;
    Ok(body)
}

async fn fetch(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "error: bad url".to_owned();
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    drop(trailers_tx);
    let (request, _) = Request::new(Fields::new(), None, trailers_rx, None);
    let _ = request.set_scheme(Some(&match scheme {
        "https" => Scheme::Https,
        _ => Scheme::Http,
    }));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    match wasip3::http::client::send(request).await {
        Ok(response) => {
            let status = response.get_status_code();
            let (_result_tx, result_rx) = wit_future::new(|| Ok(()));
            let (mut stream, _trailers) = Response::consume_body(response, result_rx);
            let mut body = Vec::new();
            loop {
                let (result, chunk) = stream.read(Vec::with_capacity(16 << 10)).await;
                body.extend_from_slice(&chunk);
                if !matches!(result, StreamResult::Complete(_)) {
                    break;
                }
            }
            format!("{status} {}", String::from_utf8_lossy(&body))
        }
        Err(code) => format!("error: {code:?}"),
    }
}

fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| v.replace("%3A", ":").replace("%2F", "/"))
    })
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
