//! {{name}}: a swan servlet in Zig, speaking the native ABI v1
//! (guest-sdk/ABI.md) directly: no SDK, no WASI, no libc, only `swan` imports.
//!
//! Try it:
//!   curl 'http://127.0.0.1:8080/{{name}}?name=Ada'
//!   -> Hello, Ada! GET /{{name}}
//!
//! Build (Zig 0.17.1, PyPI `ziglang`; `zig` works the same as `python -m ziglang`):
//!   python -m ziglang build-exe main.zig -target wasm32-freestanding -fno-entry \
//!       --export=swan_abi_version --export=swan_handle -O ReleaseSmall -femit-bin={{name}}.wasm

const std = @import("std");

// Imports from module "swan" (ABI.md): pointers and lengths are i32 offsets.
extern "swan" fn request_get(part: i32, buf: [*]u8, buf_len: i32) i32;
extern "swan" fn response_header(name: [*]const u8, name_len: i32, value: [*]const u8, value_len: i32) i32;
extern "swan" fn response_write(ptr: [*]const u8, len: i32) i32;

const METHOD = 0;
const PATH = 1;
const QUERY = 2;

/// The ABI version this module speaks.
export fn swan_abi_version() i32 {
    return 1;
}

/// Handles one request; 0 means success. Each request part is read whole,
/// into memory of its own (freed before the next request, which matters
/// when swan reuses an instance), however long it is.
export fn swan_handle() i32 {
    const a = std.heap.wasm_allocator;
    const method = part(a, METHOD) orelse return 1;
    defer a.free(method);
    const path = part(a, PATH) orelse return 1;
    defer a.free(path);
    const query = part(a, QUERY) orelse return 1;
    defer a.free(query);
    // A decoded value is never longer than the query it came from.
    const name_buf = a.alloc(u8, query.len) catch return 1;
    defer a.free(name_buf);
    const name = queryParam(query, "name", name_buf) orelse "world";

    header("content-type", "text/plain; charset=utf-8");
    write("Hello, ");
    write(name);
    write("! ");
    write(method);
    write(" ");
    write(path);
    return 0;
}

/// A request part, whole: request_get with no room returns its length.
fn part(a: std.mem.Allocator, which: i32) ?[]u8 {
    var none: [0]u8 = undefined;
    const n = request_get(which, &none, 0);
    const len: usize = if (n > 0) @intCast(n) else 0;
    const buf = a.alloc(u8, len) catch return null;
    if (len > 0) _ = request_get(which, buf.ptr, @intCast(len));
    return buf;
}

fn header(name: []const u8, value: []const u8) void {
    _ = response_header(name.ptr, @intCast(name.len), value.ptr, @intCast(value.len));
}

fn write(bytes: []const u8) void {
    _ = response_write(bytes.ptr, @intCast(bytes.len));
}

/// The first value of `key` in a query string, with `+` and `%XX` decoded
/// into `out` (as long as the query), or null if the key is absent.
fn queryParam(query: []const u8, key: []const u8, out: []u8) ?[]const u8 {
    var pairs = std.mem.splitScalar(u8, query, '&');
    while (pairs.next()) |pair| {
        const eq = std.mem.indexOfScalar(u8, pair, '=') orelse pair.len;
        if (std.mem.eql(u8, pair[0..eq], key)) {
            return decode(if (eq < pair.len) pair[eq + 1 ..] else "", out);
        }
    }
    return null;
}

fn decode(raw: []const u8, out: []u8) []const u8 {
    var i: usize = 0;
    var n: usize = 0;
    while (i < raw.len and n < out.len) : (n += 1) {
        if (raw[i] == '+') {
            out[n] = ' ';
            i += 1;
        } else if (raw[i] == '%' and i + 2 < raw.len and hex(raw[i + 1]) != null and hex(raw[i + 2]) != null) {
            out[n] = hex(raw[i + 1]).? * 16 + hex(raw[i + 2]).?;
            i += 3;
        } else {
            out[n] = raw[i];
            i += 1;
        }
    }
    return out[0..n];
}

fn hex(c: u8) ?u8 {
    return std.fmt.charToDigit(c, 16) catch null;
}
