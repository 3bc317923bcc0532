// Package apitypes declares the request and response bodies of devmsg's
// REST API (docs/api.md) once, as Go types with their JSON tags: the API
// (package restapi) builds its answers with them, and the web console
// (package console), which calls the API in-process, reads them and
// writes its requests with them. The two faces never import each other;
// both import this package, which imports only the standard library.
//
// A type's field order is its order on the wire. Where the API wrote a
// body as a map, whose keys encoding/json sorts, the type's fields are in
// key order, so that the bytes stay what clients have always read.
// Answers the API writes with a hand-rolled encoder (the send, broadcast
// and batch answers, the error body, the health answers) are checked
// against these types by restapi's tests.
//
// A request type marks its optional fields with omitempty and, where a
// zero or empty value means something (ttl 0, types []), with a pointer:
// a field left nil is left out of the body, which the API takes as
// unchanged or as its default.
package apitypes
