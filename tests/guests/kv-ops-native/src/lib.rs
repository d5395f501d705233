//! One store operation per request, named by the query (the same protocol as
//! `kv-ops-component`):
//!
//! `?store=S&op=OP&key=K&value=V&ttl=MS&expect=E&new=N&prefix=P&cursor=C&delta=D`
//!
//! Answers: `get` → `value:V` or `absent`; `set` → `ok`; `del`, `has`,
//! `cas` → `true`/`false`; `incr`, `burst` (`n` increments) → the new number; `list` →
//! `cursor=C;keys=a,b`; any failure → `err:KIND`.

use swan_guest::kv::{Error, Store};
use swan_guest::{Request, Response};

fn kind(e: Error) -> String {
    format!("err:{e:?}")
}

fn ops(req: Request) -> Response {
    let q = |name: &str| req.query(name).unwrap_or_default();
    let store = match Store::open(&req.query("store").unwrap_or_else(|| "default".to_owned())) {
        Ok(s) => s,
        Err(e) => return Response::text(kind(e)),
    };
    let key = q("key");
    let answer = match q("op").as_str() {
        "get" => store.get(&key).map(|v| match v {
            Some(v) => format!("value:{}", String::from_utf8_lossy(&v)),
            None => "absent".to_owned(),
        }),
        "set" => {
            let ttl = q("ttl").parse::<u64>().ok().filter(|t| *t > 0);
            store
                .set(&key, q("value").as_bytes(), ttl.map(std::time::Duration::from_millis))
                .map(|()| "ok".to_owned())
        }
        "del" => store.delete(&key).map(|b| b.to_string()),
        "has" => store.exists(&key).map(|b| b.to_string()),
        "incr" => store
            .increment(&key, q("delta").parse().unwrap_or(1))
            .map(|n| n.to_string()),
        "cas" => {
            let expect = req.query("expect");
            store
                .compare_and_swap(&key, expect.as_deref().map(str::as_bytes), q("new").as_bytes())
                .map(|b| b.to_string())
        }
        "list" => store
            .list(&q("prefix"), q("cursor").parse().ok())
            .map(|page| {
                format!(
                    "cursor={};keys={}",
                    page.cursor.map(|c| c.to_string()).unwrap_or_default(),
                    page.keys.join(",")
                )
            }),
        // `n` increments of `key` in this one request (the per-request
        // operation limit).
        "burst" => (0..q("n").parse::<u32>().unwrap_or(1))
            .try_fold(0, |_, _| store.increment(&key, 1))
            .map(|n| n.to_string()),
        _ => return Response::bad_request("unknown op"),
    };
    Response::text(answer.unwrap_or_else(kind))
}

swan_guest::servlet!(ops);
