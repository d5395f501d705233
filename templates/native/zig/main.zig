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

/// Handles one request; 0 means success. Request parts live in fixed stack
/// buffers and longer ones are cut short; use std.heap.wasm_allocator and
/// the full length request_get returns when that matters.
export fn swan_handle() i32 {
    var method_buf: [16]u8 = undefined;
    var path_buf: [1024]u8 = undefined;
    var query_buf: [2048]u8 = undefined;
    var name_buf: [512]u8 = undefined;
    const method = part(METHOD, &method_buf);
    const path = part(PATH, &path_buf);
    const name = queryParam(part(QUERY, &query_buf), "name", &name_buf) orelse "world";

    header("content-type", "text/plain; charset=utf-8");
    write("Hello, ");
    write(name);
    write("! ");
    write(method);
    write(" ");
    write(path);
    return 0;
}

/// A request part, cut to fit `buf` (request_get returns the full length).
fn part(which: i32, buf: []u8) []const u8 {
    const n = request_get(which, buf.ptr, @intCast(buf.len));
    if (n <= 0) return buf[0..0];
    return buf[0..@min(@as(usize, @intCast(n)), buf.len)];
}

fn header(name: []const u8, value: []const u8) void {
    _ = response_header(name.ptr, @intCast(name.len), value.ptr, @intCast(value.len));
}

fn write(bytes: []const u8) void {
    _ = response_write(bytes.ptr, @intCast(bytes.len));
}

/// The first value of `key` in a query string, with `+` and `%XX` decoded
/// into `out` (cut to fit), or null if the key is absent.
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
