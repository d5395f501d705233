//! The kv-ops protocol of `kv-ops-native`, through wasi:keyvalue and
//! swan:keyvalue/extras, plus `many` (batch): `?op=many&keys=a,b` →
//! `a=V,b=absent`; `setmany&keys=a,b&value=V`; `delmany&keys=a,b`.

use wasi::http::types::{Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam};

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "swan-tests:kv-ops/kv-ops",
        generate_all,
    });
}

use bindings::swan::keyvalue::extras;
use bindings::wasi::keyvalue::{atomics, batch, store};

fn kind(e: store::Error) -> String {
    let text = match e {
        store::Error::AccessDenied | store::Error::NoSuchStore => "Denied".to_owned(),
        store::Error::Other(s) if s.starts_with("limit") => "Limit".to_owned(),
        store::Error::Other(s) if s.starts_with("not a number") => "NotANumber".to_owned(),
        store::Error::Other(s) if s.contains("unavailable") => "Unavailable".to_owned(),
        store::Error::Other(_) => "Other".to_owned(),
    };
    format!("err:{text}")
}

fn run(query: &[(String, String)]) -> String {
    let q = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let arg = |name: &str| q(name).unwrap_or_default();
    let bucket = match store::open(&q("store").unwrap_or_else(|| "default".to_owned())) {
        Ok(b) => b,
        Err(e) => return kind(e),
    };
    let key = arg("key");
    let keys: Vec<String> = arg("keys").split(',').filter(|k| !k.is_empty()).map(str::to_owned).collect();
    let answer = match arg("op").as_str() {
        "get" => bucket.get(&key).map(|v| match v {
            Some(v) => format!("value:{}", String::from_utf8_lossy(&v)),
            None => "absent".to_owned(),
        }),
        "set" => match arg("ttl").parse::<u64>() {
            Ok(ttl) if ttl > 0 => extras::set_with_ttl(&bucket, &key, arg("value").as_bytes(), ttl),
            _ => bucket.set(&key, arg("value").as_bytes()),
        }
        .map(|()| "ok".to_owned()),
        // wasi:keyvalue's delete does not say whether the key existed.
        "del" => bucket
            .exists(&key)
            .and_then(|had| bucket.delete(&key).map(|()| had.to_string())),
        "has" => bucket.exists(&key).map(|b| b.to_string()),
        "incr" => atomics::increment(&bucket, &key, arg("delta").parse().unwrap_or(1)).map(|n| n.to_string()),
        "cas" => extras::compare_and_swap(
            &bucket,
            &key,
            q("expect").as_deref().map(str::as_bytes),
            arg("new").as_bytes(),
        )
        .map(|b| b.to_string()),
        "list" => extras::list_prefix(&bucket, &arg("prefix"), arg("cursor").parse().ok()).map(|page| {
            format!(
                "cursor={};keys={}",
                page.cursor.map(|c| c.to_string()).unwrap_or_default(),
                page.keys.join(",")
            )
        }),
        "listall" => bucket.list_keys(arg("cursor").parse().ok()).map(|page| {
            format!(
                "cursor={};keys={}",
                page.cursor.map(|c| c.to_string()).unwrap_or_default(),
                page.keys.join(",")
            )
        }),
        "many" => batch::get_many(&bucket, &keys).map(|found| {
            keys.iter()
                .zip(found)
                .map(|(k, v)| match v {
                    Some((_, v)) => format!("{k}={}", String::from_utf8_lossy(&v)),
                    None => format!("{k}=absent"),
                })
                .collect::<Vec<_>>()
                .join(",")
        }),
        "setmany" => {
            let pairs: Vec<(String, Vec<u8>)> = keys.iter().map(|k| (k.clone(), arg("value").into_bytes())).collect();
            batch::set_many(&bucket, &pairs).map(|()| "ok".to_owned())
        }
        "burst" => (0..arg("n").parse::<u32>().unwrap_or(1))
            .try_fold(0, |_, _| atomics::increment(&bucket, &key, 1))
            .map(|n| n.to_string()),
        "delmany" => batch::delete_many(&bucket, &keys).map(|()| "ok".to_owned()),
        _ => return "unknown op".to_owned(),
    };
    answer.unwrap_or_else(kind)
}

struct Ops;

impl wasi::exports::http::incoming_handler::Guest for Ops {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let full = request.path_with_query().unwrap_or_default();
        let query: Vec<(String, String)> = full
            .split_once('?')
            .map(|(_, q)| q)
            .unwrap_or("")
            .split('&')
            .filter_map(|p| p.split_once('=').or(Some((p, ""))))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let text = run(&query);
        let Ok(headers) = Fields::from_list(&[("content-type".to_owned(), b"text/plain".to_vec())]) else {
            return;
        };
        let response = OutgoingResponse::new(headers);
        let Ok(body) = response.body() else { return };
        ResponseOutparam::set(out, Ok(response));
        if let Ok(stream) = body.write() {
            let _ = stream.blocking_write_and_flush(text.as_bytes());
        }
        let _ = OutgoingBody::finish(body, None);
    }
}

wasi::http::proxy::export!(Ops);
