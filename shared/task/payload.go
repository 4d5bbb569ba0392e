package task

import (
	"encoding/json"
	"unicode/utf8"
)

// MaxPayloadDepth bounds how deeply a payload or a result may nest arrays and objects: 64
// levels, more than any real document needs. Deeper JSON is refused (ErrInvalid), so no reader of
// a task, a client's decoder included, has to recurse further than this.
const MaxPayloadDepth = 64

// CheckJSON reports why b, a payload or a result (what names it), may not be stored: it is not one
// JSON value, it is not valid UTF-8 (encoding/json keeps a json.RawMessage's bytes as they are,
// so they would be served raw and make the answer invalid JSON), or it nests deeper than
// MaxPayloadDepth. The error is ErrInvalid.
func CheckJSON(what string, b []byte) error {
	if !utf8.Valid(b) {
		return Errorf(ErrInvalid, "%s is not valid UTF-8", what)
	}
	if !json.Valid(b) {
		return Errorf(ErrInvalid, "%s is not valid JSON", what)
	}
	if jsonDeeperThan(b, MaxPayloadDepth) {
		return Errorf(ErrInvalid, "%s nests arrays and objects more than %d levels deep", what, MaxPayloadDepth)
	}
	return nil
}

// jsonDeeperThan reports whether valid JSON b nests arrays and objects more than max levels deep.
func jsonDeeperThan(b []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > max {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}
