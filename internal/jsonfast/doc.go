// Package jsonfast is devmsg's one JSON fast path: the rules of the
// hand-written JSON code that the REST body reader and command answers
// (restapi), the readers and writers of stored records (store/pebble),
// the batch answers (message), the device payloads (delivery, command)
// and the device's command replies (command) share, where encoding/json's
// reflection costs too much. It finds where a JSON value ends, reads the
// strings that need no decoding, and appends strings and raw values as
// json.Marshal would.
//
// Every rule here agrees with encoding/json: a span a function accepts is
// one that json.Valid accepts, the text it hands back is what
// json.Unmarshal decodes, and what it appends is what json.Marshal
// writes. What a function does not take (an index of -1, ok false) is not
// an error: the caller hands the input to encoding/json, which decides it
// and words the error. FuzzScan in scan_test.go and
// TestAppendStringMatchesMarshal hold the package to that.
//
// The package imports the standard library only, so every caller can use
// it without knowing the others.
package jsonfast
