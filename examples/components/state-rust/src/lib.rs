//! The visit counter and the JSON guestbook of the native examples
//! (`examples/visits`, `examples/guestbook`) as one `wasi:http/proxy`
//! component, on the route's `default` store through `wasi:keyvalue`
//! (0.2.0-draft) and `swan:keyvalue/extras`. Install it under the route
//! names it answers to, `visits.wasm` and `guestbook.wasm`:
//!
//! | request | answer |
//! |---|---|
//! | `GET /visits` | 200, the count after adding one (atomic increment) |
//! | `GET /guestbook` | 200, the entries, oldest first: `[{"id":1,"name":"Ada","message":"hi"}]` |
//! | `POST /guestbook` `{"name": "...", "message": "..."}` | 201, the new entry |
//! | `DELETE /guestbook/ID` | 204, or 404 when there is no such entry |
//! | anything, store unavailable | 503 |

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

use bindings::swan::keyvalue::extras;
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

/// A response: status, content type, body.
type Answer = (u16, &'static str, Vec<u8>);

fn text(status: u16, body: &str) -> Answer {
    (status, "text/plain; charset=utf-8", body.as_bytes().to_vec())
}

fn key(id: u64) -> String {
    format!("entry:{id:012}")
}

/// Largest request body read (a guestbook entry is small).
const MAX_BODY: u64 = 16 * 1024;

fn read_body(request: &IncomingRequest) -> Option<Vec<u8>> {
    let body = request.consume().ok()?;
    let stream = body.stream().ok()?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(4096) {
            Ok(chunk) => {
                bytes.extend_from_slice(&chunk);
                if bytes.len() as u64 > MAX_BODY {
                    return None;
                }
            }
            Err(wasi::io::streams::StreamError::Closed) => break,
            Err(_) => return None,
        }
    }
    drop(stream);
    IncomingBody::finish(body);
    Some(bytes)
}

fn guestbook(
    bucket: &store::Bucket,
    method: &Method,
    id: &str,
    request: &IncomingRequest,
) -> Result<Answer, store::Error> {
    match (method, id) {
        (Method::Get, "") => {
            let mut entries = Vec::new();
            let mut cursor = None;
            loop {
                let page = extras::list_prefix(bucket, "entry:", cursor)?;
                for k in &page.keys {
                    if let Some(bytes) = bucket.get(k)? {
                        if let Ok(entry) = serde_json::from_slice::<Entry>(&bytes) {
                            entries.push(entry);
                        }
                    }
                }
                cursor = page.cursor;
                if cursor.is_none() {
                    break;
                }
            }
            entries.sort_by_key(|e| e.id);
            let json = serde_json::to_vec(&entries).unwrap_or_default();
            Ok((200, "application/json", json))
        }
        (Method::Post, "") => {
            let new = read_body(request).and_then(|b| serde_json::from_slice::<NewEntry>(&b).ok());
            let Some(new) = new else {
                return Ok(text(400, "expected {\"name\": \"...\", \"message\": \"...\"}"));
            };
            if new.name.is_empty() || new.message.is_empty() || new.message.len() > 1000 {
                return Ok(text(400, "name and message must be non-empty, message at most 1000 bytes"));
            }
            let id = atomics::increment(bucket, "next-id", 1)?;
            let entry = Entry {
                id,
                name: new.name,
                message: new.message,
            };
            let json = serde_json::to_vec(&entry).unwrap_or_default();
            bucket.set(&key(id), &json)?;
            Ok((201, "application/json", json))
        }
        (Method::Delete, id) if !id.is_empty() => {
            let Ok(id) = id.parse::<u64>() else {
                return Ok(text(404, "not found"));
            };
            if !bucket.exists(&key(id))? {
                return Ok(text(404, "not found"));
            }
            bucket.delete(&key(id))?;
            Ok((204, "text/plain", Vec::new()))
        }
        (Method::Get | Method::Post, _) => Ok(text(404, "not found")),
        _ => Ok(text(405, "use GET, POST or DELETE")),
    }
}

fn answer(request: &IncomingRequest) -> Answer {
    let full = request.path_with_query().unwrap_or_default();
    let path = full.split('?').next().unwrap_or("");
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let route = parts.next().unwrap_or("");
    let rest = parts.next().unwrap_or("").trim_matches('/');
    let result = store::open("default").and_then(|bucket| match route {
        "visits" => atomics::increment(&bucket, "visits", 1).map(|n| text(200, &n.to_string())),
        "guestbook" => guestbook(&bucket, &request.method(), rest, request),
        _ => Ok(text(404, "install this component as visits.wasm or guestbook.wasm")),
    });
    match result {
        Ok(answer) => answer,
        Err(store::Error::Other(e)) if e.contains("unavailable") => {
            text(503, "the store is unavailable, try again")
        }
        Err(e) => text(500, &format!("store error: {e:?}")),
    }
}

struct State;

impl wasi::exports::http::incoming_handler::Guest for State {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let (status, content_type, body) = answer(&request);
        let Ok(headers) =
            Fields::from_list(&[("content-type".to_owned(), content_type.as_bytes().to_vec())])
        else {
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
