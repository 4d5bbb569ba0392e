package task

import (
	"fmt"
	"unicode/utf8"
)

// MaxErrorBytes caps the error text a task keeps. A handler's error can be anything, a panic's
// stack or a whole log; stored uncapped it could outgrow an item of the task store (a DynamoDB
// item is at most 400 KB), so the failure could not be recorded and the task would run again as
// if its worker were lost. The error travels with the task's state, which every later transition
// of a retried task rewrites, so the cap also bounds what they cost (docs/capacity.md).
const MaxErrorBytes = 4 << 10

// TruncateError returns msg if it is at most MaxErrorBytes long. A longer one is cut at a UTF-8
// character boundary and ends with a marker that gives the original length; the result is at
// most MaxErrorBytes.
func TruncateError(msg string) string {
	if len(msg) <= MaxErrorBytes {
		return msg
	}
	marker := fmt.Sprintf("… [truncated from %d bytes]", len(msg))
	keep := MaxErrorBytes - len(marker)
	for keep > 0 && !utf8.RuneStart(msg[keep]) {
		keep--
	}
	return msg[:keep] + marker
}

// MaxEchoBytes bounds how much of a client's input an error message quotes back: an id, a name,
// a path or a value is cut to this many bytes, so an error answer stays small whatever was sent.
const MaxEchoBytes = 64

// Echo returns s to be quoted in an error message: s itself if it is at most MaxEchoBytes long,
// else its first MaxEchoBytes bytes, cut at a UTF-8 character boundary, and "…". Every message
// that quotes input quotes it through Echo.
func Echo(s string) string {
	if len(s) <= MaxEchoBytes {
		return s
	}
	keep := MaxEchoBytes
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + "…"
}
