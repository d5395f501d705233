//! A wasi:http hello answering like `examples/hello`: a short text with the
//! request path, built as a component for `wasmtime serve`.

use wasi::http::types::{Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam};

struct Hello;

impl wasi::exports::http::incoming_handler::Guest for Hello {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        let text = format!("Hello, world! (from a Rust servlet)\npath: {path}\n");
        let Ok(headers) = Fields::from_list(&[("content-type".to_owned(), b"text/plain; charset=utf-8".to_vec())]) else {
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

wasi::http::proxy::export!(Hello);
