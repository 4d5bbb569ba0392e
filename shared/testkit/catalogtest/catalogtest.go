// Package catalogtest gives tests a catalog of lambdas that changes while they run, as lambda
// stacks deployed and deleted change the catalog of a deployment.
package catalogtest

import (
	"context"
	"sync"

	"github.com/openatf/atf/shared/task"
)

// Changing is a task.Catalog whose lambdas, or whose failure, a test sets.
type Changing struct {
	mu  sync.Mutex
	ls  task.FixedCatalog
	err error
}

var _ task.Catalog = (*Changing)(nil)

// Set makes ls the catalog's lambdas.
func (c *Changing) Set(ls ...task.Lambda) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ls = ls
}

// Fail makes every call fail with err until it is set to nil.
func (c *Changing) Fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func (c *Changing) get() (task.FixedCatalog, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ls, c.err
}

func (c *Changing) Lambda(ctx context.Context, name string) (task.Lambda, bool, error) {
	ls, err := c.get()
	if err != nil {
		return task.Lambda{}, false, err
	}
	return ls.Lambda(ctx, name)
}

func (c *Changing) Lambdas(ctx context.Context) ([]task.Lambda, error) {
	ls, err := c.get()
	if err != nil {
		return nil, err
	}
	return ls.Lambdas(ctx)
}
