// Package callback delivers message-status records to the callback URLs
// an app configures (docs/callbacks.md): it routes each record, by the
// app's settings at that moment, to the delivery queue of its URL,
// batches the records and POSTs them signed (package webhook checks,
// verifies and signs for it), retries failed batches and files the ones
// that keep failing in the dead-letter list.
package callback
