package sqlitestore

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriterBeginsImmediate: the store's writer takes the file's write lock when it begins a
// transaction, before it reads (a create checks its id is free). An app's transaction on the same
// file (CreateTx) that committed between the writer's read and its write would otherwise fail the
// write at once with SQLITE_BUSY, whatever the busy timeout (begun deferred, the writer read a
// snapshot the commit made stale). Begun immediate, the writer waits for the app's lock instead:
// here, an app that asks for the lock while the writer's transaction is open is refused.
func TestWriterBeginsImmediate(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "atf.db")
	s := open(t, path)
	defer s.Close()
	tx, err := s.w.BeginTx(ctx, nil) // as the group writer begins
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	app, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	appTx, err := app.BeginTx(ctx, nil)
	if err == nil {
		appTx.Rollback()
		t.Fatal("an app began a write transaction while the store's writer had one open; want the writer to hold the lock from its begin")
	}
	if !strings.Contains(err.Error(), "SQLITE_BUSY") {
		t.Fatalf("an app's begin while the writer's transaction is open: %v; want SQLITE_BUSY", err)
	}
}
