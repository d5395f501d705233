"""hello-python: a small wasi:http/proxy 0.2 component (componentize-py).

It answers like hello-rust and hello-js, so swan's tests can treat all three
alike. Every response carries ``x-guest-lang: python``.

  GET .../?name=X              200 text/plain  "Hello, X! (python)" (name defaults to "world")
  POST {"a": 1, "b": 2}        200 application/json {"sum":3}; 400 on bad JSON
  .../headers                  200 "x-test=<value of the request's x-test header>"
  .../env                      200 the environment variable GREETING (swan passes
                               route settings as environment)

Built by examples/build-components.sh, or by hand:
  componentize-py -d ../wit -w servlet componentize app -o hello-python.wasm
"""

import json
import os
from urllib.parse import parse_qs, urlsplit

from wit_world import exports
from wit_world.imports.streams import StreamError_Closed
from wit_world.imports.types import (
    Fields,
    IncomingRequest,
    Method_Post,
    OutgoingBody,
    OutgoingResponse,
    ResponseOutparam,
)
from componentize_py_types import Err, Ok

LANG = "python"
TEXT = "text/plain; charset=utf-8"


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: IncomingRequest, response_out: ResponseOutparam) -> None:
        url = urlsplit(request.path_with_query() or "/")
        if url.path.endswith("/headers"):
            values = request.headers().get("x-test")
            value = values[0].decode("utf-8", "replace") if values else ""
            status, content_type, body = 200, TEXT, f"x-test={value}"
        elif url.path.endswith("/env"):
            status, content_type, body = 200, TEXT, os.environ.get("GREETING", "")
        elif isinstance(request.method(), Method_Post):
            status, content_type, body = add(read_body(request))
        else:
            # A blank `?name=` is a name, as in the Rust and JS versions.
            name = parse_qs(url.query, keep_blank_values=True).get("name", ["world"])[0]
            status, content_type, body = 200, TEXT, f"Hello, {name}! ({LANG})"
        respond(response_out, status, content_type, body.encode())


# Brackets past which a body cannot be {"a": <int>, "b": <int>}: deeper
# nesting would exhaust the wasm stack inside CPython's JSON parser (a
# trap, 500) before its own recursion check answers.
MAX_BRACKETS = 64
# The integers the Rust version takes (i64).
INT_RANGE = range(-(2**63), 2**63)


def add(body: bytes) -> tuple[int, str, str]:
    """{"a": <int>, "b": <int>} -> {"sum": a+b}, or a 400 with a short text."""
    if body.count(b"[") + body.count(b"{") > MAX_BRACKETS:
        return 400, TEXT, 'expected {"a": <int>, "b": <int>}'
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return 400, TEXT, "invalid JSON"
    a, b = (data.get(k) if isinstance(data, dict) else None for k in ("a", "b"))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v in INT_RANGE for v in (a, b)):
        return 400, TEXT, 'expected {"a": <int>, "b": <int>}'
    return 200, "application/json", json.dumps({"sum": a + b}, separators=(",", ":"))


def read_body(request: IncomingRequest) -> bytes:
    """Reads the whole request body (the echo bodies are small)."""
    chunks = []
    with request.consume() as body:
        with body.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(64 * 1024))
                except Err as e:
                    if isinstance(e.value, StreamError_Closed):
                        break
                    raise
    return b"".join(chunks)


def respond(response_out: ResponseOutparam, status: int, content_type: str, data: bytes) -> None:
    headers = Fields.from_list(
        [("content-type", content_type.encode()), ("x-guest-lang", LANG.encode())]
    )
    response = OutgoingResponse(headers)
    response.set_status_code(status)
    body = response.body()
    ResponseOutparam.set(response_out, Ok(response))
    # The output stream must be dropped (end of `with`) before the body is finished.
    with body.write() as stream:
        for i in range(0, len(data), 4096):  # at most 4096 bytes per call
            stream.blocking_write_and_flush(data[i : i + 4096])
    OutgoingBody.finish(body, None)
