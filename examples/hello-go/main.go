// hello-go: a swan servlet in Go, speaking the native ABI v1
// (guest-sdk/ABI.md) directly through //go:wasmimport and //go:wasmexport.
// No third-party modules (the Go module proxy is not needed).
//
//	GET /hello-go?name=Ada  ->  "Hello, Ada! (go)\nGET /hello-go"
//
// Built as a WASI reactor by examples/build-native.sh, or by hand (Go 1.24+):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o hello-go.wasm .
//
// The reactor exports `_initialize`, which swan calls once per instance
// before the first request (it starts the Go runtime); the module also
// imports about a dozen wasi_snapshot_preview1 functions, which swan links.
package main

import (
	"net/url"
	"unsafe"
)

// Imports from module "swan" (ABI.md). Pointers become i32 offsets.

//go:wasmimport swan request_get
func requestGet(part int32, buf unsafe.Pointer, bufLen int32) int32

//go:wasmimport swan response_header
func responseHeader(name unsafe.Pointer, nameLen int32, value unsafe.Pointer, valueLen int32) int32

//go:wasmimport swan response_write
func responseWrite(ptr unsafe.Pointer, len int32) int32

const (
	partMethod = 0
	partPath   = 1
	partQuery  = 2
)

// swanAbiVersion is the ABI version this module speaks.
//
//go:wasmexport swan_abi_version
func swanAbiVersion() int32 { return 1 }

// swanHandle handles one request; 0 means success.
//
//go:wasmexport swan_handle
func swanHandle() int32 {
	name := "world"
	if q, _ := url.ParseQuery(requestPart(partQuery)); q.Has("name") {
		name = q.Get("name")
	}
	header("content-type", "text/plain; charset=utf-8")
	write("Hello, " + name + "! (go)\n" + requestPart(partMethod) + " " + requestPart(partPath))
	return 0
}

// requestPart copies a request part: ask for its length, then copy it.
func requestPart(part int32) string {
	n := requestGet(part, nil, 0)
	if n <= 0 {
		return ""
	}
	buf := make([]byte, n)
	n = min(requestGet(part, unsafe.Pointer(&buf[0]), n), int32(len(buf)))
	return string(buf[:n])
}

func header(name, value string) {
	responseHeader(unsafe.Pointer(unsafe.StringData(name)), int32(len(name)),
		unsafe.Pointer(unsafe.StringData(value)), int32(len(value)))
}

func write(text string) {
	responseWrite(unsafe.Pointer(unsafe.StringData(text)), int32(len(text)))
}

// main is required by package main but never runs in a c-shared reactor.
func main() {}
