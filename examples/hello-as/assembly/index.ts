// A swan servlet in AssemblyScript, talking to the native ABI directly
// (guest-sdk/ABI.md): no SDK, no WASI, no imports but `swan`.
// `/hello-as/visits` counts visits in the `default` store (the route needs
// `stores = ["default"]`); every other path says hello.

@external("swan", "request_get")
declare function request_get(part: i32, buf: usize, len: i32): i32;

@external("swan", "response_header")
declare function response_header(name: usize, nameLen: i32, value: usize, valueLen: i32): i32;

@external("swan", "response_write")
declare function response_write(ptr: usize, len: i32): i32;

@external("swan", "response_status")
declare function response_status(status: i32): i32;

@external("swan", "kv_open")
declare function kv_open(name: usize, nameLen: i32): i32;

@external("swan", "kv_increment")
declare function kv_increment(handle: i32, key: usize, keyLen: i32, delta: i64, out: usize): i32;

const PATH: i32 = 1;
const QUERY: i32 = 2;

// The ABI version this module was built for.
export function swan_abi_version(): i32 {
  return 1;
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

// Adds one to `hello-as:visits` in the `default` store; the new count, or
// the ABI's negative error code (-2 denied, -3 unavailable, ...).
function countVisit(): i64 {
  const name = String.UTF8.encode("default");
  const store = kv_open(changetype<usize>(name), name.byteLength);
  if (store < 0) return store;
  const key = String.UTF8.encode("hello-as:visits");
  const out = new ArrayBuffer(8);
  const code = kv_increment(store, changetype<usize>(key), key.byteLength, 1, changetype<usize>(out));
  if (code < 0) return code;
  return load<i64>(changetype<usize>(out));
}

export function swan_handle(): i32 {
  header("content-type", "text/plain; charset=utf-8");
  if (requestPart(PATH).endsWith("/visits")) {
    const count = countVisit();
    if (count < 0) {
      // -3: the store is down for now; tell the client to come back.
      response_status(count == -3 ? 503 : 500);
      write("store error " + count.toString() + "\n");
    } else {
      write("visits: " + count.toString() + "\n");
    }
    return 0;
  }
  write("Hello from AssemblyScript!\npath: " + requestPart(PATH) + "\nquery: " + requestPart(QUERY) + "\n");
  return 0;
}

// Replaces the default `env.abort` import: a failed assertion traps.
function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}
