//! A visit counter: every request adds one to `visits` in the route's
//! `default` store, atomically, and answers the new count (HEAD, which is
//! safe, counts nothing: its head is GET's). Route it with
//! `stores = ["default"]`; on Redis, every swan process counts together.

use swan_guest::kv::{Error, Store};
use swan_guest::{Request, Response};

fn visits(req: Request) -> Response {
    let count = Store::open("default").and_then(|store| {
        if req.method() == "HEAD" {
            // A read (the count is stored as decimal text), not a write.
            let stored = store.get("visits")?;
            Ok(stored
                .and_then(|v| std::str::from_utf8(&v).ok()?.parse().ok())
                .unwrap_or(0))
        } else {
            store.increment("visits", 1)
        }
    });
    match count {
        Ok(n) => Response::text(format!("{n}")),
        // Redis down: say so; swan would answer 503 for us if we failed.
        Err(Error::Unavailable) => Response::text("the store is unavailable, try again")
            .with_status(503)
            .header("retry-after", "1"),
        Err(e) => Response::text(format!("store error: {e}")).with_status(500),
    }
}

swan_guest::servlet!(visits);
