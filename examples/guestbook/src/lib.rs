//! A small JSON guestbook on the route's `default` store:
//!
//! | request | answer |
//! |---|---|
//! | `GET /guestbook[?after=ID]` | 200, at most 100 entries with IDs above `after` (default 0), oldest first: `[{"id":1,"name":"Ada","message":"hi"}]`; `Link: <...?after=N>; rel="next"` when there are more |
//! | `HEAD /guestbook` | the same head, no body |
//! | `POST /guestbook` `{"name": "...", "message": "..."}` | 201, the new entry (name 1 to 100 characters, message 1 to 1,000) |
//! | `DELETE /guestbook/ID` | 204, or 404 when there is no such entry |
//!
//! Entries live at `entry:ID` (IDs from an atomic counter, zero-padded so
//! keys list in order). A page reads one window of IDs, so a request costs
//! at most 101 store operations however long the book grows.

use serde::{Deserialize, Serialize};
use swan_guest::kv::{Error, Store};
use swan_guest::{Request, Response};

#[derive(Serialize, Deserialize)]
struct Entry {
    id: i64,
    name: String,
    message: String,
}

#[derive(Deserialize)]
struct NewEntry {
    name: String,
    message: String,
}

/// Entries a page holds.
const PAGE: i64 = 100;
/// Longest name, in characters.
const MAX_NAME: usize = 100;
/// Longest message, in characters.
const MAX_MESSAGE: usize = 1000;

fn key(id: i64) -> String {
    format!("entry:{id:012}")
}

fn guestbook(req: Request) -> Response {
    match run(&req) {
        Ok(res) => res,
        Err(Error::Unavailable) => Response::text("the store is unavailable, try again")
            .with_status(503)
            .header("retry-after", "1"),
        Err(e) => Response::text(format!("store error: {e}")).with_status(500),
    }
}

fn run(req: &Request) -> Result<Response, Error> {
    let store = Store::open("default")?;
    let id = req.path_info().trim_matches('/');
    match (req.method(), id) {
        ("GET" | "HEAD", "") => {
            let after = match req.query("after") {
                None => 0,
                Some(n) => match n.parse::<i64>() {
                    Ok(n) if n >= 0 => n,
                    _ => return Ok(Response::bad_request("after must be an entry ID (0 or more)")),
                },
            };
            // The last ID given out (a read: the counter is decimal text).
            let last: i64 = store
                .get("next-id")?
                .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
                .unwrap_or(0);
            let end = last.min(after.saturating_add(PAGE));
            let mut entries = Vec::new();
            for id in after.saturating_add(1)..=end {
                if let Some(bytes) = store.get(&key(id))? {
                    if let Ok(entry) = serde_json::from_slice::<Entry>(&bytes) {
                        entries.push(entry);
                    }
                }
            }
            let mut res = Response::json(serde_json::to_string(&entries).unwrap_or_default());
            if end < last {
                res = res.header("link", &format!("<{}?after={end}>; rel=\"next\"", req.path()));
            }
            Ok(res)
        }
        ("POST", "") => {
            let Ok(new) = serde_json::from_slice::<NewEntry>(req.body()) else {
                return Ok(Response::bad_request("expected {\"name\": \"...\", \"message\": \"...\"}"));
            };
            if !(1..=MAX_NAME).contains(&new.name.chars().count())
                || !(1..=MAX_MESSAGE).contains(&new.message.chars().count())
            {
                return Ok(Response::bad_request("name must have 1 to 100 characters, message 1 to 1000"));
            }
            let id = store.increment("next-id", 1)?;
            let entry = Entry {
                id,
                name: new.name,
                message: new.message,
            };
            let json = serde_json::to_string(&entry).unwrap_or_default();
            store.set(&key(id), json.as_bytes(), None)?;
            Ok(Response::json(json).with_status(201))
        }
        ("DELETE", id) if !id.is_empty() => {
            let Ok(id) = id.parse::<i64>() else {
                return Ok(Response::not_found());
            };
            if store.delete(&key(id))? {
                Ok(Response::status(204))
            } else {
                Ok(Response::not_found())
            }
        }
        ("GET" | "HEAD" | "POST", _) => Ok(Response::not_found()),
        _ => Ok(Response::method_not_allowed("GET, HEAD, POST, DELETE")),
    }
}

swan_guest::servlet!(guestbook);
