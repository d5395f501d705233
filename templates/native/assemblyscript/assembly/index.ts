// {{name}}: a swan servlet in AssemblyScript, speaking the native ABI v1
// (guest-sdk/ABI.md) directly: no SDK, no WASI, only `swan` imports.
//
// Try it:
//   curl 'http://127.0.0.1:8080/{{name}}?name=Ada'
//   -> Hello, Ada! GET /{{name}}
//
// Build: npm install && npm run build   (-> {{name}}.wasm)

@external("swan", "request_get")
declare function request_get(part: i32, buf: usize, len: i32): i32;

@external("swan", "response_header")
declare function response_header(name: usize, nameLen: i32, value: usize, valueLen: i32): i32;

@external("swan", "response_write")
declare function response_write(ptr: usize, len: i32): i32;

const METHOD: i32 = 0;
const PATH: i32 = 1;
const QUERY: i32 = 2;

// The ABI version this module speaks.
export function swan_abi_version(): i32 {
  return 1;
}

// Handles one request; 0 means success.
export function swan_handle(): i32 {
  let name = queryParam(requestPart(QUERY), "name");
  if (name === null) name = "world";
  header("content-type", "text/plain; charset=utf-8");
  write("Hello, " + name + "! " + requestPart(METHOD) + " " + requestPart(PATH));
  return 0;
}

// Reads a request part: ask for its length first, then copy it.
function requestPart(part: i32): string {
  const len = request_get(part, 0, 0);
  if (len <= 0) return "";
  const buf = new ArrayBuffer(len);
  request_get(part, changetype<usize>(buf), len);
  return String.UTF8.decode(buf);
}

function header(name: string, value: string): void {
  const n = String.UTF8.encode(name);
  const v = String.UTF8.encode(value);
  response_header(changetype<usize>(n), n.byteLength, changetype<usize>(v), v.byteLength);
}

function write(text: string): void {
  const b = String.UTF8.encode(text);
  response_write(changetype<usize>(b), b.byteLength);
}

// The first value of `key` in a query string, with `+` and `%XX` decoded;
// null when the key is absent.
function queryParam(query: string, key: string): string | null {
  const pairs = query.split("&");
  for (let i = 0; i < pairs.length; i++) {
    const pair = pairs[i];
    const eq = pair.indexOf("=");
    const k = eq < 0 ? pair : pair.substring(0, eq);
    if (k == key) return decode(eq < 0 ? "" : pair.substring(eq + 1));
  }
  return null;
}

function decode(raw: string): string {
  const bytes = String.UTF8.encode(raw);
  const src = Uint8Array.wrap(bytes);
  const out = new Uint8Array(src.length);
  let n = 0;
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c == 0x2b /* + */) {
      out[n++] = 0x20;
    } else if (c == 0x25 /* % */ && i + 2 < src.length && hex(src[i + 1]) >= 0 && hex(src[i + 2]) >= 0) {
      out[n++] = <u8>(hex(src[i + 1]) * 16 + hex(src[i + 2]));
      i += 2;
    } else {
      out[n++] = c;
    }
  }
  return String.UTF8.decode(out.buffer.slice(0, n));
}

function hex(c: u8): i32 {
  if (c >= 0x30 && c <= 0x39) return c - 0x30; // 0-9
  if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10; // a-f
  if (c >= 0x41 && c <= 0x46) return c - 0x41 + 10; // A-F
  return -1;
}

// Replaces the default `env.abort` import: a failed assertion traps.
function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}
