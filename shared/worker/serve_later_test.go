package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMainSaysLater: a Go handler built as a program (Main) says Snooze and RetryAfter as
// a program does, so the process that runs it reads them back alike.
func TestMainSaysLater(t *testing.T) {
	for _, tc := range []struct {
		err    error
		stdout string
	}{
		{Snooze(90 * time.Second), `{"snooze":"1m30s"}`},
		{RetryAfter(time.Hour, errors.New("busy")), `{"retry_after":"1h0m0s"}`},
	} {
		var stdout, stderr bytes.Buffer
		code := serve(context.Background(), HandlerFunc(func(context.Context, Task) (json.RawMessage, error) {
			return nil, tc.err
		}), strings.NewReader(`{}`), &stdout, &stderr, func(string) string { return "" })
		if code != ExitRetry || stdout.String() != tc.stdout {
			t.Errorf("%v: exit %d, stdout %q; want %d, %q", tc.err, code, stdout.String(), ExitRetry, tc.stdout)
		}
		want, _ := LaterOf(tc.err)
		if got, ok := LaterOf(laterOf(stdout.Bytes(), errors.New(stderr.String()))); !ok || got.Delay != want.Delay || got.Counted != want.Counted {
			t.Errorf("%v read back as %+v, %v; want %+v", tc.err, got, ok, want)
		}
	}
}
