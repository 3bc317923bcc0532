// Package message accepts messages for devices, keeps each message's state
// and builds its status records (DESIGN.md section 4).
package message
