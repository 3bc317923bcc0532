// Package errdefs holds the domain's typed errors: a thing that does not
// exist, a request that conflicts with what is stored, and a value that is
// invalid, each naming what it is about. Domain packages return them;
// restapi maps them once, in its error writer, to the HTTP statuses and
// error codes of docs/api.md ("Errors"), and the console recognises them
// with errors.As instead of reading messages.
//
// It imports the standard library only, so every package may use it.
package errdefs
