package client

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/openatf/atf/shared/task"
)

// TestListUpTo: short and empty pages with a cursor, as a filtered list gives, are filled up to
// the limit, each call asking only for what is still missing, and the cursor returned is the one
// after the last task; the calls stop at the cursor's end or at maxPages.
func TestListUpTo(t *testing.T) {
	// Pages by cursor: the tasks they hold and the cursor after them.
	pages := map[string]struct {
		ids  []string
		next string
	}{
		"":   {nil, "p1"},
		"p1": {[]string{"a"}, "p2"},
		"p2": {nil, "p3"},
		"p3": {[]string{"b", "c"}, "p4"},
		"p4": {[]string{"d"}, ""},
	}
	var limits []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit, _ := strconv.Atoi(q.Get("limit"))
		limits = append(limits, limit)
		pg := pages[q.Get("cursor")]
		ids, next := pg.ids, pg.next
		if len(ids) > limit { // a full page ends at its last task
			ids, next = ids[:limit], "cut"
		}
		tasks := []task.Task{}
		for _, id := range ids {
			tasks = append(tasks, task.Task{ID: id, Lambda: "l"})
		}
		json.NewEncoder(w).Encode(map[string]any{"tasks": tasks, "next_cursor": next})
	}))
	defer srv.Close()
	c := &Client{Endpoint: srv.URL, HTTP: srv.Client()}

	for _, tc := range []struct {
		limit, maxPages int
		want            []string
		next            string
		limits          []int
	}{
		{2, 10, []string{"a", "b"}, "cut", []int{2, 2, 1, 1}},
		{3, 10, []string{"a", "b", "c"}, "p4", []int{3, 3, 2, 2}},
		{10, 10, []string{"a", "b", "c", "d"}, "", []int{10, 10, 9, 9, 7}},
		{10, 2, []string{"a"}, "p2", []int{10, 10}},
		{10, 0, nil, "p1", []int{10}},
	} {
		limits = nil
		tasks, next, err := c.ListUpTo(t.Context(), task.ListParams{Lambda: "l", Limit: tc.limit}, tc.maxPages)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tk := range tasks {
			got = append(got, tk.ID)
		}
		if !slices.Equal(got, tc.want) || next != tc.next || !slices.Equal(limits, tc.limits) {
			t.Errorf("limit %d, %d pages: got %v, next %q, asked for %v; want %v, %q, %v",
				tc.limit, tc.maxPages, got, next, limits, tc.want, tc.next, tc.limits)
		}
	}
}

// TestBackoffHonoursRetryAfter: a retry waits at least the Retry-After the server asked for, up
// to the cap, and backs off on its own without one.
func TestBackoffHonoursRetryAfter(t *testing.T) {
	for n := 1; n < MaxAttempts; n++ {
		if d := backoff(n, "2"); d < 2*time.Second {
			t.Errorf("try %d after Retry-After 2: waits %s, want at least 2s", n+1, d)
		}
		if d := backoff(n, "3600"); d != maxBackoff {
			t.Errorf("try %d after Retry-After 3600: waits %s, want the cap %s", n+1, d, maxBackoff)
		}
		if d := backoff(n, ""); d <= 0 || d > firstBackoff<<(n-1) {
			t.Errorf("try %d: waits %s, want in (0, %s]", n+1, d, firstBackoff<<(n-1))
		}
	}
}
