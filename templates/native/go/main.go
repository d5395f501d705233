// {{name}}: a swan servlet in Go, speaking the native ABI v1
// (guest-sdk/ABI.md) directly through //go:wasmimport and //go:wasmexport.
// Standard library only: no module proxy needed.
//
// Try it:
//
//	curl 'http://127.0.0.1:8080/{{name}}?name=Ada'
//	-> Hello, Ada! GET /{{name}}
//
// Build (Go 1.24 or later; a reactor that swan starts through _initialize):
//
//	GOTOOLCHAIN=local GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o {{name}}.wasm .
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
	write("Hello, " + name + "! " + requestPart(partMethod) + " " + requestPart(partPath))
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
