// hello-js: a small wasi:http/proxy 0.2 component in JavaScript, built with
// componentize-js (the StarlingMonkey engine) by build.mjs.
//
// It answers like hello-rust and hello-python, so swan's tests can treat all
// three alike. Every response carries `x-guest-lang: js`.
//
//   GET .../?name=X          200 text/plain "Hello, X! (js)" (name defaults to "world")
//   POST {"a": 1, "b": 2}    200 application/json {"sum":3}; 400 on bad JSON
//   .../headers              200 "x-test=<value of the request's x-test header>"
//   .../env                  200 the environment variable GREETING (swan passes
//                            route settings as environment)
//
// StarlingMonkey has no process.env; the environment comes from the WIT import
// wasi:cli/environment (world servlet-env). Read it per request, not at the
// top level: top-level code runs once at build time (Wizer snapshot).
import { getEnvironment } from 'wasi:cli/environment@0.2.10';

const LANG = 'js';
const TEXT = 'text/plain; charset=utf-8';

addEventListener('fetch', (event) => event.respondWith(handle(event.request)));

async function handle(request) {
  const url = new URL(request.url);
  if (url.pathname.endsWith('/headers')) {
    return reply(200, TEXT, `x-test=${utf8(request.headers.get('x-test') ?? '')}`);
  }
  if (url.pathname.endsWith('/env')) {
    const env = new Map(getEnvironment());
    return reply(200, TEXT, env.get('GREETING') ?? '');
  }
  if (request.method === 'POST') {
    // A body that is not UTF-8 text cannot be JSON: 400, as in the others.
    let text;
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(await request.arrayBuffer());
    } catch {
      return reply(400, TEXT, 'invalid JSON');
    }
    return add(text);
  }
  const name = url.searchParams.get('name') ?? 'world';
  return reply(200, TEXT, `Hello, ${name}! (${LANG})`);
}

// {"a": <int>, "b": <int>} -> {"sum": a+b}, or a 400 with a short text.
function add(text) {
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    return reply(400, TEXT, 'invalid JSON');
  }
  // Safe integers only: past 2^53 a JS number is not the integer sent,
  // and the sum would be wrong.
  if (!Number.isSafeInteger(data?.a) || !Number.isSafeInteger(data?.b)) {
    return reply(400, TEXT, 'expected {"a": <int>, "b": <int>}');
  }
  if (!Number.isSafeInteger(data.a + data.b)) {
    return reply(400, TEXT, 'the sum is past 2^53, where JavaScript numbers stop being exact');
  }
  return reply(200, 'application/json', JSON.stringify({ sum: data.a + data.b }));
}

// A header value arrives as one character per byte (Latin-1): read its
// bytes as the UTF-8 they are, as the Rust and Python versions do.
function utf8(value) {
  const bytes = Uint8Array.from(value, (c) => c.charCodeAt(0) & 0xff);
  return new TextDecoder().decode(bytes);
}

function reply(status, contentType, body) {
  return new Response(body, {
    status,
    headers: { 'content-type': contentType, 'x-guest-lang': LANG },
  });
}
