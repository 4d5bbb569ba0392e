package task

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func nested(depth int, inner string) string {
	return strings.Repeat(`{"a":[`, depth/2) + strings.Repeat("[", depth%2) + inner + strings.Repeat("]", depth%2) + strings.Repeat(`]}`, depth/2)
}

// TestPayloadChecks: a payload nested up to MaxPayloadDepth is stored; a deeper one, or one that
// is not valid UTF-8 (which a json.RawMessage would keep raw and serve as invalid JSON), is
// refused as ErrInvalid. Brackets inside strings do not count.
func TestPayloadChecks(t *testing.T) {
	l, c := Lambda{Name: "l"}.WithDefaults(), Config{}.WithDefaults()
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		payload string
		ok      bool
	}{
		{nested(MaxPayloadDepth, `1`), true},
		{nested(MaxPayloadDepth, `"[[[[{{{{\"[[{{"`), true},
		{nested(MaxPayloadDepth+1, `1`), false},
		{nested(MaxPayloadDepth, `[]`), false},
		{"\"\xff\"", false},
		{"{\"k\xc3\":1}", false},
		{`"ok ✓"`, true},
	} {
		tk, err := New(Spec{Payload: json.RawMessage(tc.payload)}, l, now, c)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("payload %.80q: got %v, want ok=%v or ErrInvalid", tc.payload, err, tc.ok)
		}
		if err == nil && string(tk.Payload) != tc.payload {
			t.Errorf("payload %.80q stored as %.80q", tc.payload, tk.Payload)
		}
	}
}

// TestSucceedChecksResult: a result that CheckJSON refuses ends the task as a fatal failure that
// says why, as one over the size limit does: stored, it would be served as invalid or deep JSON.
func TestSucceedChecksResult(t *testing.T) {
	c := Config{}.WithDefaults()
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	running := Task{ID: "t", Lambda: "l", Status: StatusProcessing, Lease: "L", Attempts: 1, MaxAttempts: 3}
	for result, why := range map[string]string{
		nested(MaxPayloadDepth+1, `1`): "levels deep",
		"\"\xfe\"":                     "UTF-8",
		`{"a":`:                        "not valid JSON",
	} {
		got, err := Succeed(running, "L", json.RawMessage(result), now, c)
		if err != nil || got.Status != StatusFatalFailure || got.Result != nil || !strings.Contains(got.Error, "result") || !strings.Contains(got.Error, why) {
			t.Errorf("result %.40q: %s %q %q, %v; want a fatal failure naming %q", result, got.Status, got.Result, got.Error, err, why)
		}
	}
	if got, err := Succeed(running, "L", json.RawMessage(nested(MaxPayloadDepth, `"✓"`)), now, c); err != nil || got.Status != StatusSuccess {
		t.Errorf("a result at the depth limit: %s, %v", got.Status, err)
	}
}

// TestEcho: input quoted in an error is cut to MaxEchoBytes, at a character boundary.
func TestEcho(t *testing.T) {
	if got := Echo("short"); got != "short" {
		t.Errorf("Echo(short) = %q", got)
	}
	for _, s := range []string{strings.Repeat("x", 1<<20), strings.Repeat("é", 100), strings.Repeat("\xff", 100)} {
		got := Echo(s)
		cut := strings.TrimSuffix(got, "…")
		if len(cut) > MaxEchoBytes || cut == got || !strings.HasPrefix(s, cut) || utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Errorf("Echo(%.20q…) = %q", s, got)
		}
	}
	// The id a path carries, however long, comes back short.
	if err := ValidateID("id", strings.Repeat("\xff", 1<<20)); err == nil || len(err.Error()) > 4*MaxEchoBytes+200 {
		t.Errorf("an error quoting a 1 MiB id is %d bytes", len(err.Error()))
	}
}
