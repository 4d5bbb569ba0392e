package sqlitestore

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// TestStorageFull: writes to a store with no room left fail with task.ErrStorageFull, which the
// API answers with its own code, and succeed again once there is room. A page limit on the
// writer's connection stands in for a full disk: SQLite answers both with SQLITE_FULL.
func TestStorageFull(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "atf.db"))
	defer s.Close()
	var pages int
	if err := s.w.QueryRowContext(t.Context(), `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	setMaxPages := func(n int) {
		t.Helper()
		if _, err := s.w.ExecContext(t.Context(), `PRAGMA max_page_count = `+strconv.Itoa(n)); err != nil {
			t.Fatal(err)
		}
	}
	setMaxPages(pages + 4)
	l := task.Lambda{Name: "full"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	create := func() error {
		tk, err := task.New(task.Spec{Payload: []byte(`"` + strings.Repeat("x", 8<<10) + `"`)}, l, time.Now(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s.Create(t.Context(), tk)
	}
	var full error
	for range 100 {
		if full = create(); full != nil {
			break
		}
	}
	if !errors.Is(full, task.ErrStorageFull) {
		t.Fatalf("a create into a full store: %v, want task.ErrStorageFull", full)
	}
	if err := s.SetGate(t.Context(), task.Gate{Lambda: "full", Collection: strings.Repeat("c", 64<<10), Mode: task.GatePause}); !errors.Is(err, task.ErrStorageFull) {
		t.Errorf("a gate into a full store: %v, want task.ErrStorageFull", err)
	}
	setMaxPages(1 << 30)
	if err := create(); err != nil {
		t.Errorf("a create once there is room again: %v", err)
	}
}
