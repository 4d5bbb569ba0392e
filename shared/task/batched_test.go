package task_test

import (
	"context"
	"testing"

	"github.com/openatf/atf/shared/task"
)

// plainStore writes one update at a time; batchStore many in one commit.
type plainStore struct{ task.Store }

type batchStore struct{ task.Store }

func (batchStore) UpdateMany(context.Context, []task.Versioned) []error { return nil }

// wrapper is a store that passes UpdateMany through, as those that publish events do.
type wrapper struct{ task.Store }

func (w wrapper) UpdateMany(ctx context.Context, ws []task.Versioned) []error {
	return task.UpdateMany(ctx, w.Store, ws)
}
func (w wrapper) Unwrap() task.Store { return w.Store }

func TestBatched(t *testing.T) {
	for _, c := range []struct {
		name string
		s    task.Store
		want bool
	}{
		{"plain", plainStore{}, false},
		{"batch", batchStore{}, true},
		{"wrapped batch", wrapper{wrapper{batchStore{}}}, true},
		{"wrapped plain", wrapper{plainStore{}}, false},
		{"batch over a wrapped plain", wrapper{wrapper{plainStore{}}}, false},
	} {
		if got := task.Batched(c.s); got != c.want {
			t.Errorf("%s: Batched = %v, want %v", c.name, got, c.want)
		}
	}
}
