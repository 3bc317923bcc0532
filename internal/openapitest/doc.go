// Package openapitest checks HTTP exchanges in tests against docs/openapi.yaml,
// so the document cannot drift from what the server accepts and sends.
//
// Tests send invalid requests on purpose, so a request that breaks the
// document is not an error by itself; it is one when the server accepts it
// (answers 2xx), because then the document and the server disagree about
// what is valid. Likewise a request the document accepts must not be
// answered 400 with code 1002 (a required field missing): the document
// would be missing a "required". Responses are always checked in full:
// the status must be documented for the operation, documented headers must
// match (Retry-After on 429, for example), and the body must match its
// schema. Security requirements are not checked.
package openapitest
