package sqlitestore

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// TestWriterWaitsForAppTx: the store's writer reads before it writes (a create checks its id is
// free), so a transaction of an app on the same file (CreateTx) that commits in between must not
// fail it: the writer begins immediate, waiting for the app's write lock before it reads. Begun
// deferred, it read a snapshot the app's commit made stale, and its write failed at once with
// SQLITE_BUSY_SNAPSHOT, whatever the busy timeout.
func TestWriterWaitsForAppTx(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := task.Lambda{Name: "shared"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	newTask := func(id string) task.Task {
		tk, err := task.New(task.Spec{ID: id}, l, now, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	app, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	tx, err := app.BeginTx(ctx, nil) // the app holds the file's write lock from here
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := CreateTx(ctx, tx, newTask("app")); err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() { created <- s.Create(ctx, newTask("atf")) }()
	// Give the writer time to begin and, were it deferred, to read: it cannot write before the
	// commit below, whenever it gets there.
	time.Sleep(200 * time.Millisecond)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatalf("the store's create, begun while an app's transaction held the file: %v; want it to wait and succeed", err)
	}
	for _, id := range []string{"app", "atf"} {
		if _, err := s.Get(ctx, "shared", id); err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
	}
}
