// Package idgen generates unique, time-ordered ids (msgid, op_id) that
// every JSON client can hold exactly: positive integers of at most 53 bits
// (≤ 2^53 − 1; docs/api.md, "Ids"). The layout, high bits first:
//
//	41 bits  milliseconds since 2025-01-01 UTC (good until 2094)
//	 7 bits  node id, 0..127 (node_id in cluster mode)
//	 5 bits  sequence within the millisecond, 0..31
//
// A node hands out 32 ids per millisecond (32,000 a second sustained); a
// burst above that borrows the following milliseconds, so ids stay unique
// and increasing and run ahead of the clock until the burst ends.
package idgen
