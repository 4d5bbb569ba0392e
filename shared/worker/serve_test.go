package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

// A result that cannot be written out is not a success: the executor would record an empty one.
func TestServeResultNotWrittenAsksForRetry(t *testing.T) {
	h := HandlerFunc(func(context.Context, Task) (json.RawMessage, error) { return json.RawMessage(`{"ok":true}`), nil })
	var stderr bytes.Buffer
	code := serve(context.Background(), h, strings.NewReader(`{}`), failingWriter{}, &stderr, func(string) string { return "" })
	if code != ExitRetry {
		t.Fatalf("exit code %d, want %d (ExitRetry); stderr %q", code, ExitRetry, stderr.String())
	}
	if !strings.Contains(stderr.String(), "stdout closed") {
		t.Errorf("stderr %q does not say why", stderr.String())
	}
}
