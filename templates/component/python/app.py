"""{{name}}: a swan servlet as a wasi:http/proxy 0.2 component in Python.

Try it:
  curl 'http://127.0.0.1:8080/{{name}}?name=Ada'
  -> Hello, Ada! GET /{{name}}

Build (componentize-py 0.25.1; about 30 s, an 18 MB component):
  componentize-py -d wit -w servlet componentize app -o {{name}}.wasm
"""

from urllib.parse import parse_qs, urlsplit

from componentize_py_types import Ok
from wit_world import exports
from wit_world.imports.types import (
    Fields,
    IncomingRequest,
    Method,
    Method_Other,
    OutgoingBody,
    OutgoingResponse,
    ResponseOutparam,
)


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: IncomingRequest, response_out: ResponseOutparam) -> None:
        url = urlsplit(request.path_with_query() or "/")
        names = parse_qs(url.query, keep_blank_values=True).get("name")
        name = names[0] if names else "world"
        body = f"Hello, {name}! {method_name(request.method())} {url.path}"
        respond(response_out, 200, body.encode())


def method_name(method: Method) -> str:
    """`Method_Get` -> "GET"; an `other` method is its own text."""
    if isinstance(method, Method_Other):
        return method.value
    return type(method).__name__.removeprefix("Method_").upper()


def respond(response_out: ResponseOutparam, status: int, data: bytes) -> None:
    """Sends a whole text/plain response."""
    headers = Fields.from_list([("content-type", b"text/plain; charset=utf-8")])
    response = OutgoingResponse(headers)
    response.set_status_code(status)
    body = response.body()
    ResponseOutparam.set(response_out, Ok(response))
    # The output stream must be dropped (end of `with`) before the body is finished.
    with body.write() as stream:
        for i in range(0, len(data), 4096):  # at most 4096 bytes per call
            stream.blocking_write_and_flush(data[i : i + 4096])
    OutgoingBody.finish(body, None)
