//! A small JSON guestbook on the route's `default` store:
//!
//! | request | answer |
//! |---|---|
//! | `GET /guestbook` | 200, the entries, oldest first: `[{"id":1,"name":"Ada","message":"hi"}]` |
//! | `POST /guestbook` `{"name": "...", "message": "..."}` | 201, the new entry |
//! | `DELETE /guestbook/ID` | 204, or 404 when there is no such entry |
//!
//! Entries live at `entry:ID` (IDs from an atomic counter, zero-padded so
//! keys list in order).

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
        ("GET", "") => {
            let mut entries = Vec::new();
            let mut cursor = None;
            loop {
                let page = store.list("entry:", cursor)?;
                for k in &page.keys {
                    if let Some(bytes) = store.get(k)? {
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
            Ok(Response::json(serde_json::to_string(&entries).unwrap_or_default()))
        }
        ("POST", "") => {
            let Ok(new) = serde_json::from_slice::<NewEntry>(req.body()) else {
                return Ok(Response::bad_request("expected {\"name\": \"...\", \"message\": \"...\"}"));
            };
            if new.name.is_empty() || new.message.is_empty() || new.message.len() > 1000 {
                return Ok(Response::bad_request("name and message must be non-empty, message at most 1000 bytes"));
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
        ("GET" | "POST", _) => Ok(Response::not_found()),
        _ => Ok(Response::method_not_allowed("GET, POST, DELETE")),
    }
}

swan_guest::servlet!(guestbook);
