package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// An app writes its order and the task that ships it in one transaction of its own: the task
// exists if and only if the order does. atf's store, open on the same file, runs it.
func ExampleCreateTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "atf-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "atf.db")
	store, err := sqlitestore.Open(path) // as atf dev opens it
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	app, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()
	if _, err := app.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}

	// The lambda's settings and the task config are those of the registry atf dev runs.
	ship, err := task.New(task.Spec{ID: "ship-order-42", Payload: []byte(`{"order":42}`)},
		task.Lambda{Name: "ship"}.WithDefaults(), time.Now().UTC(), task.Config{}.WithDefaults())
	if err != nil {
		log.Fatal(err)
	}
	tx, err := app.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('42')`); err != nil {
		log.Fatal(err)
	}
	if err := sqlitestore.CreateTx(ctx, tx, ship); err != nil {
		log.Fatal(err) // task.ErrExists for a replayed id: roll back, or go on without the task
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	got, err := store.Get(ctx, "ship", "ship-order-42")
	fmt.Println(got.Status, err)
	// Output: new <nil>
}
