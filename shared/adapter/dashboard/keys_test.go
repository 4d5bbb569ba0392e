package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/openatf/atf/shared/store/sqlitestore"
	"github.com/openatf/atf/shared/task"
)

// listCounter counts the List calls of a store and the page sizes they asked for.
type listCounter struct {
	task.Store
	lists []task.ListParams
}

func (s *listCounter) List(ctx context.Context, p task.ListParams) ([]task.Task, string, error) {
	s.lists = append(s.lists, p)
	return s.Store.List(ctx, p)
}

// keysStore returns a store with waiting tasks of echo: noisy of key "noisy", then one each of
// keys q0..q(quiet-1), then one without a key; and running ones: two of "noisy", one of "q0".
func keysStore(t *testing.T, noisy, quiet int) *listCounter {
	t.Helper()
	store, err := sqlitestore.Open(filepath.Join(t.TempDir(), "atf.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lambda, cfg := task.Lambda{Name: "echo"}.WithDefaults(), task.Config{}.WithDefaults()
	now := time.Now().UTC()
	var batch []task.Task
	add := func(id, key string, running bool) {
		tk, err := task.New(task.Spec{ID: id, Key: key}, lambda, now, cfg)
		if err == nil && running {
			if tk, err = task.Enqueue(tk, now, cfg); err == nil {
				tk, err = task.Claim(tk, "lease-"+id, now, cfg)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Microsecond) // creation order is the order added
		if batch = append(batch, tk); len(batch) == task.MaxBatch {
			flush(t, store, &batch)
		}
	}
	for i := range noisy {
		add(fmt.Sprintf("noisy-%d", i), "noisy", false)
	}
	for i := range quiet {
		add(fmt.Sprintf("quiet-%d", i), fmt.Sprintf("q%d", i), false)
	}
	add("keyless", "", false)
	add("run-noisy-1", "noisy", true)
	add("run-noisy-2", "noisy", true)
	add("run-q0", "q0", true)
	flush(t, store, &batch)
	return &listCounter{Store: store}
}

func flush(t *testing.T, store task.Store, batch *[]task.Task) {
	t.Helper()
	if len(*batch) == 0 {
		return
	}
	if err := store.CreateBatch(t.Context(), *batch); err != nil {
		t.Fatal(err)
	}
	*batch = nil
}

func getKeys(t *testing.T, k *Keys, lambda string) (int, KeysJSON) {
	t.Helper()
	rec := httptest.NewRecorder()
	k.ServeHTTP(rec, httptest.NewRequest("GET", KeysPath+"?lambda="+lambda, nil))
	var got KeysJSON
	if rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
	}
	return rec.Code, got
}

// TestKeys: the waiting and running tasks of a lambda by key, the most first, tasks without a
// key under the empty key, all of them when one page holds them.
func TestKeys(t *testing.T) {
	store := keysStore(t, 20, 12)
	code, got := getKeys(t, NewKeys(store, []string{"echo"}), "echo")
	if code != 200 {
		t.Fatalf("GET: %d", code)
	}
	w := got.Waiting
	if w.Read != 33 || !w.Complete || w.Keys != 14 || !slices.Equal(w.Statuses, task.Waiting) {
		t.Errorf("waiting: read %d, complete %v, %d keys, of %v; want all 33 tasks, 14 keys, of %v", w.Read, w.Complete, w.Keys, w.Statuses, task.Waiting)
	}
	// the most first, then by key: noisy, then "" (no key), q0, q1, q10, q11, q2...: 10 in all
	want := []KeyCountJSON{{"noisy", 20}, {"", 1}, {"q0", 1}, {"q1", 1}, {"q10", 1}, {"q11", 1}, {"q2", 1}, {"q3", 1}, {"q4", 1}, {"q5", 1}}
	if !slices.Equal(w.Top, want) {
		t.Errorf("waiting top: %v, want %v", w.Top, want)
	}
	r := got.Running
	if r.Read != 3 || !r.Complete || r.Keys != 2 || !slices.Equal(r.Top, []KeyCountJSON{{"noisy", 2}, {"q0", 1}}) {
		t.Errorf("running: %+v, want noisy 2 and q0 1 of 3 tasks", r)
	}
	if code, _ := getKeys(t, NewKeys(store, []string{"echo"}), "other"); code != 404 {
		t.Errorf("GET an unknown lambda: %d, want 404", code)
	}
}

// TestKeysBoundedRead: a backlog larger than a page costs one List per status set, of KeysRead
// tasks, and the answer says the counts are of the first tasks only.
func TestKeysBoundedRead(t *testing.T) {
	store := keysStore(t, KeysRead+100, 3)
	_, got := getKeys(t, NewKeys(store, []string{"echo"}), "echo")
	if len(store.lists) != 2 {
		t.Fatalf("%d Lists, want one per status set: %+v", len(store.lists), store.lists)
	}
	for _, p := range store.lists {
		if p.Limit != KeysRead || p.Cursor != "" {
			t.Errorf("List %+v, want the first page of %d", p, KeysRead)
		}
	}
	w := got.Waiting
	if w.Read != KeysRead || w.Complete || !slices.Equal(w.Top, []KeyCountJSON{{"noisy", KeysRead}}) {
		t.Errorf("waiting: %+v, want the first %d tasks, all noisy, and not complete", w, KeysRead)
	}
	if r := got.Running; r.Read != 3 || !r.Complete {
		t.Errorf("running: %+v, want its 3 tasks", r)
	}
}
