// Package jsonscan holds the scanning rules of devmsg's hand-written JSON
// fast paths: the REST body reader (restapi) and the readers of stored
// records (store/pebble). It finds where a JSON value ends and reads the
// strings that need no decoding, without encoding/json's reflection.
//
// Every rule here agrees with encoding/json: a span a function accepts is
// one that json.Valid accepts, and the text it hands back is what
// json.Unmarshal decodes. What a function does not take (an index of -1,
// ok false) is not an error: the caller hands the input to encoding/json,
// which decides it and words the error. FuzzScan in scan_test.go holds the
// package to that.
//
// The package imports the standard library only, so both callers can use
// it without knowing each other.
package jsonscan
