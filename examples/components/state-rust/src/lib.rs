//! The visit counter and the JSON guestbook of the native examples
//! (`examples/visits`, `examples/guestbook`) as one `wasi:http/proxy`
//! component, on the route's `default` store through `wasi:keyvalue`
//! (0.2.0-draft). Install it under the route
//! names it answers to, `visits.wasm` and `guestbook.wasm`:
//!
//! | request | answer |
//! |---|---|
//! | `GET /visits` | 200, the count after adding one (atomic increment; HEAD adds nothing) |
//! | `GET /guestbook[?after=ID]` | 200, at most 100 entries with IDs above `after` (default 0), oldest first: `[{"id":1,"name":"Ada","message":"hi"}]`; `Link: <...?after=N>; rel="next"` when there are more |
//! | `HEAD /guestbook` | the same head, no body |
//! | `POST /guestbook` `{"name": "...", "message": "..."}` | 201, the new entry (name 1 to 100 characters, message 1 to 1,000); 413 past 16 KiB |
//! | `DELETE /guestbook/ID` | 204, or 404 when there is no such entry |
//! | anything, store unavailable | 503 with `Retry-After` |
//!
//! A guestbook page reads one window of IDs: at most 101 store operations
//! a request however long the book grows.

use serde::{Deserialize, Serialize};
use wasi::http::types::{
    Fields, IncomingBody, IncomingRequest, Method, OutgoingBody, OutgoingResponse,
    ResponseOutparam,
};

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "swan-examples:state/state",
        generate_all,
    });
}

use bindings::wasi::keyvalue::{atomics, store};

#[derive(Serialize, Deserialize)]
struct Entry {
    id: u64,
    name: String,
    message: String,
}

#[derive(Deserialize)]
struct NewEntry {
    name: String,
    message: String,
}

/// A response: status, content type, body, and one more header.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    header: Option<(&'static str, String)>,
}

fn text(status: u16, body: &str) -> Answer {
    reply(status, "text/plain; charset=utf-8", body.as_bytes().to_vec())
}

fn reply(status: u16, content_type: &'static str, body: Vec<u8>) -> Answer {
    Answer {
        status,
        content_type,
        body,
        header: None,
    }
}

impl Answer {
    fn with(mut self, name: &'static str, value: String) -> Answer {
        self.header = Some((name, value));
        self
    }
}

/// Entries a page holds.
const PAGE: u64 = 100;
/// Longest name, in characters.
const MAX_NAME: usize = 100;
/// Longest message, in characters.
const MAX_MESSAGE: usize = 1000;

fn key(id: u64) -> String {
    format!("entry:{id:012}")
}

/// Largest request body read (a guestbook entry is small).
const MAX_BODY: u64 = 16 * 1024;

/// The request body; `Err(413)` past [`MAX_BODY`], `Err(400)` when it
/// cannot be read.
fn read_body(request: &IncomingRequest) -> Result<Vec<u8>, u16> {
    let body = request.consume().map_err(|()| 400u16)?;
    let stream = body.stream().map_err(|()| 400u16)?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(4096) {
            Ok(chunk) => {
                bytes.extend_from_slice(&chunk);
                if bytes.len() as u64 > MAX_BODY {
                    return Err(413);
                }
            }
            Err(wasi::io::streams::StreamError::Closed) => break,
            Err(_) => return Err(400),
        }
    }
    drop(stream);
    IncomingBody::finish(body);
    Ok(bytes)
}

fn guestbook(
    bucket: &store::Bucket,
    method: &Method,
    id: &str,
    request: &IncomingRequest,
) -> Result<Answer, store::Error> {
    match (method, id) {
        (Method::Get | Method::Head, "") => {
            let after = match query(request, "after") {
                None => 0,
                Some(n) => match n.parse::<u64>() {
                    Ok(n) => n,
                    Err(_) => return Ok(text(400, "after must be an entry ID (0 or more)")),
                },
            };
            // The last ID given out (a read: the counter is decimal text).
            let last: u64 = bucket
                .get("next-id")?
                .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
                .unwrap_or(0);
            let end = last.min(after.saturating_add(PAGE));
            let mut entries = Vec::new();
            for id in after.saturating_add(1)..=end {
                if let Some(bytes) = bucket.get(&key(id))? {
                    if let Ok(entry) = serde_json::from_slice::<Entry>(&bytes) {
                        entries.push(entry);
                    }
                }
            }
            let json = serde_json::to_vec(&entries).unwrap_or_default();
            let page = reply(200, "application/json", json);
            Ok(if end < last {
                page.with("link", format!("</guestbook?after={end}>; rel=\"next\""))
            } else {
                page
            })
        }
        (Method::Post, "") => {
            let new = match read_body(request) {
                Ok(body) => serde_json::from_slice::<NewEntry>(&body).ok(),
                Err(413) => return Ok(text(413, "at most 16 KiB")),
                Err(_) => None,
            };
            let Some(new) = new else {
                return Ok(text(400, "expected {\"name\": \"...\", \"message\": \"...\"}"));
            };
            if !(1..=MAX_NAME).contains(&new.name.chars().count())
                || !(1..=MAX_MESSAGE).contains(&new.message.chars().count())
            {
                return Ok(text(400, "name must have 1 to 100 characters, message 1 to 1000"));
            }
            let id = atomics::increment(bucket, "next-id", 1)?;
            let entry = Entry {
                id,
                name: new.name,
                message: new.message,
            };
            let json = serde_json::to_vec(&entry).unwrap_or_default();
            bucket.set(&key(id), &json)?;
            Ok(reply(201, "application/json", json))
        }
        (Method::Delete, id) if !id.is_empty() => {
            let Ok(id) = id.parse::<u64>() else {
                return Ok(text(404, "not found"));
            };
            // Two clients deleting one entry at once may both see it here:
            // wasi:keyvalue's delete does not say whether the key was
            // there (the native example's `kv_delete` does).
            if !bucket.exists(&key(id))? {
                return Ok(text(404, "not found"));
            }
            bucket.delete(&key(id))?;
            Ok(reply(204, "text/plain", Vec::new()))
        }
        (Method::Get | Method::Head | Method::Post, _) => Ok(text(404, "not found")),
        _ => Ok(text(405, "use GET, HEAD, POST or DELETE")
            .with("allow", "GET, HEAD, POST, DELETE".to_owned())),
    }
}

/// The first value of query parameter `name` (no percent-decoding: the
/// values this example reads are digits).
fn query(request: &IncomingRequest, name: &str) -> Option<String> {
    let full = request.path_with_query()?;
    let (_, query) = full.split_once('?')?;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| v.to_owned())
    })
}

fn answer(request: &IncomingRequest) -> Answer {
    let full = request.path_with_query().unwrap_or_default();
    let path = full.split('?').next().unwrap_or("");
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let route = parts.next().unwrap_or("");
    let rest = parts.next().unwrap_or("").trim_matches('/');
    let result = store::open("default").and_then(|bucket| match route {
        // HEAD is safe: it reads the count (decimal text), adding nothing.
        "visits" if matches!(request.method(), Method::Head) => bucket.get("visits").map(|v| {
            let n: u64 = v
                .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
                .unwrap_or(0);
            text(200, &n.to_string())
        }),
        "visits" => atomics::increment(&bucket, "visits", 1).map(|n| text(200, &n.to_string())),
        "guestbook" => guestbook(&bucket, &request.method(), rest, request),
        _ => Ok(text(404, "install this component as visits.wasm or guestbook.wasm")),
    });
    match result {
        Ok(answer) => answer,
        Err(store::Error::Other(e)) if e.contains("unavailable") => {
            text(503, "the store is unavailable, try again").with("retry-after", "1".to_owned())
        }
        Err(e) => text(500, &format!("store error: {e:?}")),
    }
}

struct State;

impl wasi::exports::http::incoming_handler::Guest for State {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let Answer {
            status,
            content_type,
            body,
            header,
        } = answer(&request);
        let mut fields = vec![("content-type".to_owned(), content_type.as_bytes().to_vec())];
        if let Some((name, value)) = header {
            fields.push((name.to_owned(), value.into_bytes()));
        }
        let Ok(headers) = Fields::from_list(&fields) else {
            return;
        };
        let response = OutgoingResponse::new(headers);
        let _ = response.set_status_code(status);
        let Ok(out_body) = response.body() else { return };
        ResponseOutparam::set(out, Ok(response));
        if let Ok(stream) = out_body.write() {
            for chunk in body.chunks(4096) {
                if stream.blocking_write_and_flush(chunk).is_err() {
                    break;
                }
            }
        }
        let _ = OutgoingBody::finish(out_body, None);
    }
}

wasi::http::proxy::export!(State);
