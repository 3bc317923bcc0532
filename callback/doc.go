// Package callback delivers message-status records to the callback URLs
// an app configures (DESIGN.md section 4, interface spec section 6): it
// checks and verifies those URLs with the echostr handshake, batches and
// signs the records, retries failed batches and files the ones that keep
// failing in the dead-letter list.
package callback
