// {{name}}: a swan servlet as a wasi:http/proxy 0.2 component in JavaScript
// (componentize-js, the StarlingMonkey engine: a fetch-event handler).
//
// Try it:
//   curl 'http://127.0.0.1:8080/{{name}}?name=Ada'
//   -> Hello, Ada! GET /{{name}}
//
// Build: npm ci && npm run build   (-> {{name}}.wasm, about 13 MB)
// Top-level code runs once, at build time (a Wizer snapshot); do per-request
// work inside the handler.

addEventListener('fetch', (event) => event.respondWith(handle(event.request)));

async function handle(request) {
  const url = new URL(request.url);
  const name = url.searchParams.get('name') ?? 'world';
  return new Response(`Hello, ${name}! ${request.method} ${url.pathname}`, {
    headers: { 'content-type': 'text/plain; charset=utf-8' },
  });
}
