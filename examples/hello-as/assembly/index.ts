// A swan servlet in AssemblyScript, talking to the native ABI directly
// (guest-sdk/ABI.md): no SDK, no WASI, no imports but `swan`.

@external("swan", "request_get")
declare function request_get(part: i32, buf: usize, len: i32): i32;

@external("swan", "response_header")
declare function response_header(name: usize, nameLen: i32, value: usize, valueLen: i32): i32;

@external("swan", "response_write")
declare function response_write(ptr: usize, len: i32): i32;

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

export function swan_handle(): i32 {
  header("content-type", "text/plain; charset=utf-8");
  write("Hello from AssemblyScript!\npath: " + requestPart(PATH) + "\nquery: " + requestPart(QUERY) + "\n");
  return 0;
}

// Replaces the default `env.abort` import: a failed assertion traps.
function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}
