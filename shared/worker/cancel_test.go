package worker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/worker"
)

// cancelledContext is a context cancelled as the executor cancels a handler whose task was
// cancelled while it ran, once the program has written "started" to mark.
func cancelledContext(t *testing.T, mark string, grace time.Duration) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	go func() {
		for {
			if b, _ := os.ReadFile(mark); strings.Contains(string(b), "started") {
				cancel(worker.Cancellation{Grace: grace})
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return ctx
}

// TestProgramCancelled: a program whose task is cancelled gets SIGTERM; one that exits on it is
// done, one that goes on (here, into another sleep 60 after its trap) gets SIGKILL after the
// grace. Either way the error says it was cancelled.
func TestProgramCancelled(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		wantMark   string // what the program wrote: its trap shows SIGTERM came first
		wantErr    string
	}{
		{"exits on SIGTERM", `trap 'echo TERM >> "$MARK"; exit 143' TERM; echo started >> "$MARK"; sleep 60 & wait`,
			"started\nTERM\n", "stopped by SIGTERM"},
		{"ignores SIGTERM", `trap 'echo TERM >> "$MARK"' TERM; echo started >> "$MARK"; sleep 60 & wait; sleep 60`,
			"started\nTERM\n", "killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "mark")
			t.Setenv("MARK", mark)
			ctx := cancelledContext(t, mark, 300*time.Millisecond)
			_, err := worker.Program{Path: script(t, "h", tc.body)}.Handle(ctx, sample)
			if err == nil || !errors.Is(err, worker.ErrCancelled) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error that matches ErrCancelled and says %q", err, tc.wantErr)
			}
			if b, _ := os.ReadFile(mark); string(b) != tc.wantMark {
				t.Fatalf("the program wrote %q, want %q", b, tc.wantMark)
			}
		})
	}
}
