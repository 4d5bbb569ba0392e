package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/openatf/atf/shared/task"
)

// KeysPath is the endpoint of the dashboard's Keys page (Keys), which only atf dev serves.
const KeysPath = "/v1/dashboard/keys"

const (
	// KeysRead is the page size of the one List that Keys reads per status set: what a request
	// costs is bounded by it (and the page's read budget), never by the backlog.
	KeysRead = 500
	// TopKeys is how many keys Keys answers per status set, the most tasks first.
	TopKeys = 10
	// keysTimeout bounds a request's reads.
	keysTimeout = 10 * time.Second
)

// Keys counts a lambda's waiting tasks (task.Waiting) and running ones (task.Running) by key
// (Task.Key), from one page of List each: the first KeysRead tasks at most, in creation order.
type Keys struct {
	store   task.Store
	lambdas map[string]bool
}

// NewKeys returns the Keys of the lambdas named, read from store.
func NewKeys(store task.Store, lambdas []string) *Keys {
	k := &Keys{store: store, lambdas: map[string]bool{}}
	for _, l := range lambdas {
		k.lambdas[l] = true
	}
	return k
}

// KeyCountJSON is one key's tasks; Key is empty for tasks without a key.
type KeyCountJSON struct {
	Key   string `json:"key"`
	Tasks int    `json:"tasks"`
}

// KeyCountsJSON counts the tasks of one page of List by key.
type KeyCountsJSON struct {
	Statuses []task.Status `json:"statuses"`
	// Read is how many tasks the page held, the first in creation order; Complete, whether they
	// were all of them (the list had no next page).
	Read     int  `json:"read"`
	Complete bool `json:"complete"`
	// Keys is how many keys the page held; Top, the TopKeys of them with the most tasks (then by
	// key).
	Keys int            `json:"keys"`
	Top  []KeyCountJSON `json:"top"`
}

// KeysJSON is the answer of GET KeysPath.
type KeysJSON struct {
	Lambda  string        `json:"lambda"`
	Waiting KeyCountsJSON `json:"waiting"`
	Running KeyCountsJSON `json:"running"`
}

// Count reads the lambda's keys: two pages of List.
func (k *Keys) Count(ctx context.Context, lambda string) (KeysJSON, error) {
	out := KeysJSON{Lambda: lambda}
	var err error
	if out.Waiting, err = k.count(ctx, lambda, task.Waiting); err != nil {
		return KeysJSON{}, err
	}
	if out.Running, err = k.count(ctx, lambda, task.Running); err != nil {
		return KeysJSON{}, err
	}
	return out, nil
}

func (k *Keys) count(ctx context.Context, lambda string, statuses []task.Status) (KeyCountsJSON, error) {
	tasks, next, err := k.store.List(ctx, task.ListParams{Lambda: lambda, Statuses: statuses, Limit: KeysRead})
	if err != nil {
		return KeyCountsJSON{}, err
	}
	byKey := map[string]int{}
	for _, t := range tasks {
		byKey[t.Key]++
	}
	out := KeyCountsJSON{Statuses: statuses, Read: len(tasks), Complete: next == "", Keys: len(byKey), Top: make([]KeyCountJSON, 0, len(byKey))}
	for key, n := range byKey {
		out.Top = append(out.Top, KeyCountJSON{Key: key, Tasks: n})
	}
	slices.SortFunc(out.Top, func(a, b KeyCountJSON) int {
		return cmp.Or(cmp.Compare(b.Tasks, a.Tasks), strings.Compare(a.Key, b.Key))
	})
	out.Top = out.Top[:min(len(out.Top), TopKeys)]
	return out, nil
}

// ServeHTTP answers GET KeysPath?lambda=NAME: KeysJSON, 404 for a lambda it does not know.
func (k *Keys) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	lambda := r.URL.Query().Get("lambda")
	if !k.lambdas[lambda] {
		writeError(w, http.StatusNotFound, "not_found", "no lambda "+task.Echo(lambda))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), keysTimeout)
	defer cancel()
	out, err := k.Count(ctx, lambda)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "reading the tasks: "+err.Error())
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}
